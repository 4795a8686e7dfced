"""The benchmark workloads: model, data, replicas and `fit` settings, identical across variants.

Each configuration is named `<model>-<replicas>`:

* `mlp`: a tiny MLP, 32 -> 64 (ReLU) -> 10, batch 64, SGD: steps of about
  1 ms on a 2-core CPU, where any per-step cost shows.
* `cnn`: a small CNN on 32x32x3 inputs (Conv 16 -> MaxPool -> Conv 32 ->
  global average pool -> Dense 10), batch 32, SGD.

With 2 replicas, the one physical CPU is split into two logical CPUs and
the model is built under `tf.distribute.MirroredStrategy` over them (the batch
is the global batch). That has to happen before TensorFlow initialises, so
each configuration runs in its own process (:mod:`benchmarks._worker`).

`mlp-2w` is the MLP in a two-worker job on 127.0.0.1: two processes, one
replica each, under `keras_gpu.make_strategy("multiworker")` from the
`TF_CONFIG` the benchmark gives each (batch 64 is the global batch). Every
worker runs the same runs in the same order, as any multi-worker job must.
`mlp-2w-jax` is the same job on Keras' JAX backend: the same `TF_CONFIG`
makes `keras_gpu.make_strategy("multiworker")` join the two processes with
`jax.distributed` (CPU collectives over gloo), and nothing on its path
imports TensorFlow, so it runs in an environment without it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["CONFIGS", "DEFAULT_CONFIGS", "Workload", "build_model", "fit_input", "make_data", "setup_replicas", "workload"]


@dataclass(frozen=True)
class Workload:
    """One benchmark configuration.

    Attributes:
        name: `<model>-<replicas>`, e.g. `mlp-1`.
        model: `"mlp"` or `"cnn"`.
        replicas: Number of replicas (logical CPUs, or GPUs when present).
        batch_size: Global batch size.
        steps_per_epoch: Steps per epoch at scale 1.
        workers: Processes of the job (one replica each when more than one).
        input: `"arrays"` (NumPy arrays, `batch_size=`) or `"tfdata"` (a
            `tf.data.Dataset.from_tensor_slices(...).batch(batch_size)`: its
            batch dimension is dynamic, so ThroughputLogger counts samples
            with Keras' own count).
        backend: Keras' backend in the measuring processes: `"tensorflow"`
            or `"jax"` (multi-worker only).
    """

    name: str
    model: str
    replicas: int
    batch_size: int
    steps_per_epoch: int
    workers: int = 1
    input: str = "arrays"
    backend: str = "tensorflow"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


CONFIGS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload("mlp-1", "mlp", 1, 64, 400),
        Workload("mlp-1-tfdata", "mlp", 1, 64, 400, input="tfdata"),
        Workload("mlp-2", "mlp", 2, 64, 100),
        Workload("cnn-1", "cnn", 1, 32, 100),
        Workload("cnn-2", "cnn", 2, 32, 24),
        Workload("mlp-2w", "mlp", 1, 64, 200, workers=2),
        Workload("mlp-2w-jax", "mlp", 1, 64, 200, workers=2, backend="jax"),
    )
}
"""The configurations, by name. Steps per epoch aim at epochs of roughly 0.4 s on 2 CPU cores."""

DEFAULT_CONFIGS = tuple(name for name, w in CONFIGS.items() if w.backend == "tensorflow")
"""What runs without `--configs`: the TensorFlow configurations (`mlp-2w-jax` needs JAX, and is asked for by name)."""


def workload(name: str) -> Workload:
    """The configuration called `name` (see :data:`CONFIGS`)."""
    try:
        return CONFIGS[name]
    except KeyError:
        raise ValueError(f"Unknown configuration. Expected one of {sorted(CONFIGS)}. Received: config={name!r}") from None


def setup_replicas(replicas: int, workers: int = 1) -> Any:
    """Create the devices for `replicas` replicas and return the distribution strategy.

    With `workers > 1` the process is one worker of a multi-worker job
    described by its `TF_CONFIG`: the strategy is keras-gpu's multi-worker one
    (on the JAX backend a `JaxStrategy` over the joined processes; TensorFlow
    is not imported then).

    Must run before TensorFlow initialises its devices. With enough GPUs,
    replicas use the first `replicas` GPUs; with one GPU, it is split into
    `replicas` logical GPUs; without, the CPU is split into `replicas` logical
    devices. One replica uses TensorFlow's default strategy (on the first GPU
    if there is one).
    """
    if workers > 1:
        import keras_gpu

        return keras_gpu.make_strategy("multiworker")
    import tensorflow as tf

    if replicas == 1:
        return tf.distribute.get_strategy()
    gpus = tf.config.list_physical_devices("GPU")
    if len(gpus) >= replicas:
        return tf.distribute.MirroredStrategy([f"/gpu:{i}" for i in range(replicas)])
    if gpus:  # one GPU: split it into `replicas` logical GPUs of 2 GiB each
        config = [tf.config.LogicalDeviceConfiguration(memory_limit=2048)] * replicas
        tf.config.set_logical_device_configuration(gpus[0], config)
        return tf.distribute.MirroredStrategy([f"/gpu:{i}" for i in range(replicas)])
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * replicas)
    return tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(replicas)])


def build_model(kind: str, strategy: Any, seed: int = 0) -> Any:
    """A freshly initialised, compiled model of `kind`, built under `strategy` with `seed`."""
    import keras

    keras.utils.set_random_seed(seed)
    with strategy.scope():
        if kind == "mlp":
            layers = [keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)]
        elif kind == "cnn":
            layers = [
                keras.Input((32, 32, 3)),
                keras.layers.Conv2D(16, 3, activation="relu"),
                keras.layers.MaxPooling2D(),
                keras.layers.Conv2D(32, 3, activation="relu"),
                keras.layers.GlobalAveragePooling2D(),
                keras.layers.Dense(10),
            ]
        else:
            raise ValueError(f"`kind` must be 'mlp' or 'cnn'. Received: kind={kind!r}")
        model = keras.Sequential(layers, name=f"bench_{kind}")
        model.compile(
            optimizer=keras.optimizers.SGD(0.01),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
    return model


def make_data(kind: str, samples: int, seed: int = 0) -> tuple[Any, Any]:
    """Random inputs and integer labels for `samples` samples, as NumPy arrays."""
    import numpy as np

    rng = np.random.default_rng(seed)
    shape = (32,) if kind == "mlp" else (32, 32, 3)
    x = rng.standard_normal((samples, *shape), dtype=np.float32)
    y = rng.integers(0, 10, size=samples).astype("int32")
    return x, y


def fit_input(w: Workload, x: Any, y: Any) -> dict[str, Any]:
    """The data arguments of `fit` for `w`: the arrays with `batch_size=`, or a batched `tf.data` dataset."""
    if w.input == "tfdata":
        import tensorflow as tf

        return {"x": tf.data.Dataset.from_tensor_slices((x, y)).batch(w.batch_size)}
    return {"x": x, "y": y, "batch_size": w.batch_size}
