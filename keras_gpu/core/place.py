"""`is_chief` and `worker_index`: this process's place in the job, on the Keras backend in use.

On TensorFlow the place comes from the strategy's cluster
(`keras_gpu.core.cluster.task_info`); on JAX and PyTorch from the backend's
process group (`keras_gpu.core.backend.task_info`), without TensorFlow. The
strategy `make_strategy()` returns on JAX carries its own `ClusterInfo`.
"""

from __future__ import annotations

from typing import Any

from keras_gpu.core import backend, cluster
from keras_gpu.core.cluster_info import ClusterInfo

__all__ = ["is_chief", "worker_index"]


def is_chief(strategy: Any = None) -> bool:
    """Whether this process is the chief: the one that writes shared artefacts.

    True for a single process, for the `"chief"` task, and for worker 0 of a
    cluster without a chief task.

    Args:
        strategy: The strategy whose cluster to read: a
            `tf.distribute.Strategy` (its cluster resolver; without a
            multi-worker one, TF_CONFIG), what `make_strategy` returns on JAX,
            or `None` for the strategy in scope (on JAX and PyTorch: the
            process group, process 0 being the chief).

    Returns:
        Whether this process is the chief.

    Examples:
        A process with no TF_CONFIG and no multi-worker strategy is the chief;
        the second worker of a cluster is not:

        >>> import keras_gpu
        >>> keras_gpu.is_chief()
        True
        >>> workers = ["node0:12345", "node1:12345"]
        >>> keras_gpu.resolve_cluster(cluster=workers, task_index=1).is_chief
        False
    """
    return _place(strategy).is_chief


def worker_index(strategy: Any = None) -> int:
    """This process's rank among the training processes (0 when single or chief).

    Args:
        strategy: As for `is_chief`.

    Returns:
        The rank: the chief first (when there is one), then the workers in
        order; 0 for a single process.

    Examples:
        A single process is rank 0; with a chief, worker 0 is rank 1:

        >>> import keras_gpu
        >>> keras_gpu.worker_index()
        0
        >>> cluster = {"chief": ["node0:2222"], "worker": ["node1:2222"]}
        >>> keras_gpu.resolve_cluster(cluster=cluster, task_index=0).worker_index
        1
    """
    index = _place(strategy).worker_index
    return 0 if index is None else index


def _place(strategy: Any) -> ClusterInfo:
    """This process's place for `is_chief` and `worker_index`, on the backend in use.

    A strategy with a `ClusterInfo` of its own (what `make_strategy` returns
    on JAX) gives it; with no strategy on JAX or PyTorch, the backend's
    process group does (`keras_gpu.core.backend.task_info`), so TensorFlow
    is not needed there.
    """
    own = getattr(strategy, "cluster", None)
    if isinstance(own, ClusterInfo):
        return own
    if strategy is None:
        if backend.selected() != "tensorflow":
            return backend.task_info(None)
    return cluster.task_info(strategy)
