"""The cluster description record: which tasks a multi-worker job has, and this process's place in it.

`ClusterInfo` is what `keras_gpu.core.cluster.resolve_cluster`
returns from TF_CONFIG, SLURM or an explicit host list, and what the
strategies, callbacks and writers read: the chief, the rank, the number of
training processes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from keras_gpu.core.topology import visible_gpu_count

__all__ = ["TASK_TYPES", "TRAINING_TASK_TYPES", "ClusterInfo"]

TASK_TYPES = ("chief", "worker", "evaluator", "ps")
"""The task types a cluster description may name."""

TRAINING_TASK_TYPES = ("chief", "worker")
"""The task types that train (the others watch or serve)."""


@dataclass(frozen=True)
class ClusterInfo:
    """A validated cluster description and this process's place in it.

    Attributes:
        source: Where it came from: `"tf_config"`, `"slurm"`, `"explicit"`,
            `"strategy"` (read back from a strategy by `task_info`), or
            `"local"` when no cluster is configured (a single process).
        cluster: Task type to the tuple of its `host:port` addresses.
        task_type: This process's task type (`"chief"`, `"worker"`, ...).
        task_index: This process's index within its task type.
        rpc_layer: The RPC protocol, `"grpc"` unless the source says otherwise.

    Examples:
        The second worker of a cluster with a chief:

        >>> from keras_gpu import ClusterInfo
        >>> cluster = {"chief": ("node0:2222",), "worker": ("node1:2222", "node2:2222")}
        >>> info = ClusterInfo("explicit", cluster, task_type="worker", task_index=1)
        >>> info.num_workers, info.is_chief, info.worker_index, info.address
        (3, False, 2, 'node2:2222')
        >>> info.tf_config()["task"]
        {'type': 'worker', 'index': 1}
    """

    source: str
    cluster: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    task_type: str = "worker"
    task_index: int = 0
    rpc_layer: str = "grpc"

    @property
    def num_workers(self) -> int:
        """Number of processes that train: chief plus workers (1 when local)."""
        if not self.cluster:
            return 1
        return sum(len(self.cluster.get(t, ())) for t in TRAINING_TASK_TYPES)

    @property
    def is_multi_worker(self) -> bool:
        """Whether more than one process trains together."""
        return self.num_workers > 1

    @property
    def is_chief(self) -> bool:
        """Whether this process is the chief.

        The chief is the `"chief"` task when the cluster has one, otherwise
        worker 0. An evaluator or parameter server is never the chief.
        """
        if not self.cluster:
            return True
        if "chief" in self.cluster:
            return self.task_type == "chief"
        return self.task_type == "worker" and self.task_index == 0

    @property
    def worker_index(self) -> int | None:
        """This process's rank among the training processes.

        The chief (when there is one) is rank 0 and workers follow it. `None`
        for a task that does not train (evaluator, ps).
        """
        if self.task_type == "chief":
            return 0
        if self.task_type == "worker":
            return self.task_index + (1 if self.cluster.get("chief") else 0)
        return None

    @property
    def address(self) -> str | None:
        """This task's own `host:port`, or `None` when the cluster does not list it (local, or an outside evaluator)."""
        addresses = self.cluster.get(self.task_type, ())
        if 0 <= self.task_index < len(addresses):
            return addresses[self.task_index]
        return None

    def tf_config(self) -> dict[str, Any]:
        """The equivalent TF_CONFIG dictionary."""
        return {
            "cluster": {k: list(v) for k, v in self.cluster.items()},
            "task": {"type": self.task_type, "index": self.task_index},
        }

    def cluster_resolver(self, num_gpus: int | None = None):
        """A `tf.distribute.cluster_resolver.SimpleClusterResolver` for this cluster.

        Args:
            num_gpus: GPUs this process trains on. `None` counts the visible
                GPUs (logical ones where a GPU is split) without initialising
                TensorFlow, which a multi-worker strategy needs to be created
                first. `MultiWorkerMirroredStrategy` takes its local devices
                from this number; without it, it would train on the CPU.
        """
        import tensorflow as tf

        if num_gpus is None:
            num_gpus = visible_gpu_count()
        elif not isinstance(num_gpus, int) or isinstance(num_gpus, bool) or num_gpus < 0:
            raise ValueError(f"`num_gpus` must be a non-negative int or None. Received: num_gpus={num_gpus!r}")
        return tf.distribute.cluster_resolver.SimpleClusterResolver(
            tf.train.ClusterSpec({k: list(v) for k, v in self.cluster.items()}),
            task_type=self.task_type,
            task_id=self.task_index,
            rpc_layer=self.rpc_layer,
            num_accelerators={"GPU": num_gpus} if num_gpus else None,
        )

    def describe(self) -> str:
        """A one-line human description, for logs and `keras-gpu env`."""
        if not self.is_multi_worker:
            return f"single process (source: {self.source})"
        role = "chief" if self.is_chief else "not chief"
        return (
            f"{self.num_workers} workers from {self.source}; this process is "
            f"{self.task_type}:{self.task_index} (rank {self.worker_index}, {role})"
        )
