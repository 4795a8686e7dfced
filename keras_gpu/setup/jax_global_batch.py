"""Global batches across JAX processes: every process reads the whole global batch and trains on its share.

Keras 3 on JAX, in a multi-process job, expects each process to feed only
its own rows of every global batch (`DataParallel(auto_shard_dataset=False)`),
or a `tf.data.Dataset` it can shard (which needs TensorFlow). On TensorFlow's
multi-worker strategy, by contrast, `model.fit(x, y, batch_size=GLOBAL)` with
the same full arrays in every worker trains on global batches of `GLOBAL`
samples. `GlobalBatchDataParallel` gives JAX that meaning, so one
script runs unchanged on both:

- Input: every process reads the same global batch (the same data in the same
  order: Keras shuffles arrays with NumPy's global generator, which
  `keras.distribution.initialize` seeds alike in every process). Each batch
  becomes one global `jax.Array` through `jax.make_array_from_process_local_data`
  with `global_shape` equal to the batch's own shape, the case JAX documents
  as "the local data is the actual target array": each device keeps its
  slice, nothing is sent between processes. Keras itself passes no
  `global_shape` (it treats each process's batch as its share), so its
  `distribute_data_input` is wrapped; the wrapper acts only while a
  `GlobalBatchDataParallel` is Keras' distribution.
- `predict` (and `predict_on_batch`): each step's outputs are sharded over
  all processes, and Keras' final `np.concatenate` cannot read the shards of
  other processes ("Fetching value for `jax.Array` that spans non-addressable
  devices"). The predict function Keras builds is wrapped to replicate each
  step's outputs on every device (one compiled all-gather, dispatched
  asynchronously like the step), so every process returns the whole result.

Every global batch must split evenly over all replicas (JAX shards no
uneven arrays): a batch that does not raises a `ValueError` naming the sizes.
Reading every global batch in every process costs each process the whole
input pipeline; for an expensive `PyDataset`, that work is repeated per process.

Importing this module imports Keras and JAX; `install` changes nothing
until a `GlobalBatchDataParallel` is in force.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import keras

from keras_gpu.core import keras_private

__all__ = ["GlobalBatchDataParallel", "install"]

_MARK = "_keras_gpu_global_batch"


class GlobalBatchDataParallel(keras.distribution.DataParallel):
    """`keras.distribution.DataParallel` where `batch_size` is the global batch of all processes.

    Built with `auto_shard_dataset=False`: no input is sharded by Keras;
    every process feeds the whole global batch and keeps its own rows (see
    the module docstring). In a single process it is plain `DataParallel`.

    Args:
        devices: The `jax.Device`s of the mesh (all processes' for a
            multi-process job), in replica order.
    """

    def __init__(self, devices: list[Any]) -> None:
        super().__init__(devices=devices, auto_shard_dataset=False)
        install()


def install() -> None:
    """Wrap Keras' JAX input distribution and predict function once per process (idempotent)."""
    keras_private.wrap_jax_data_input(_global_data_input)
    keras_private.wrap_jax_predict_function(_replicated_predict)


def _global_data_input(original: Any) -> Any:
    """Keras' `distribute_data_input`, taking each batch as the global batch while the distribution is ours."""
    return functools.partial(_distribute_data_input, original)


def _replicated_predict(function: Any) -> Any:
    """Keras' predict function, replicating its outputs while the distribution is ours."""
    distribution = _global_distribution()
    if distribution is not None and not getattr(function, _MARK, False):
        return _replicating(function, distribution)
    return function


def _global_distribution() -> GlobalBatchDataParallel | None:
    """The distribution in force when it is a multi-process `GlobalBatchDataParallel`, else None."""
    distribution = keras.distribution.distribution()
    if isinstance(distribution, GlobalBatchDataParallel) and distribution.num_processes > 1:
        return distribution
    return None


def _distribute_data_input(original: Any, per_process_batch: Any, layout: Any, batch_dim_name: Any) -> Any:
    distribution = _global_distribution()
    if distribution is None:
        return original(per_process_batch, layout, batch_dim_name)
    sharding = layout.backend_layout if isinstance(layout, keras.distribution.TensorLayout) else layout
    shape = tuple(per_process_batch.shape)
    replicas = distribution.num_model_replicas
    if not shape or shape[0] % replicas:
        rows = shape[0] if shape else 0
        raise ValueError(
            f"A global batch of {rows} samples does not split evenly over the {replicas} replicas of this "
            f"{distribution.num_processes}-process job (JAX shards no uneven arrays). Use a `batch_size` that is a "
            f"multiple of {replicas}, and a number of samples that is one too (or drop the remainder, e.g. "
            f"x[: len(x) // {replicas} * {replicas}]). Received: batch of shape {shape}"
        )
    return jax.make_array_from_process_local_data(sharding, per_process_batch, global_shape=shape)


def _replicating(function: Any, distribution: GlobalBatchDataParallel) -> Any:
    """`function` (Keras' predict step), with its outputs replicated on every device of the mesh."""
    from jax.sharding import NamedSharding, PartitionSpec

    replicate = jax.jit(lambda outputs: outputs, out_shardings=NamedSharding(distribution.device_mesh.backend_mesh, PartitionSpec()))

    @functools.wraps(function)
    def step(state: Any, iterator: Any) -> Any:
        outputs, state = function(state, iterator)
        return replicate(outputs), state

    setattr(step, _MARK, True)
    return step
