"""Which strategy `make_strategy()` builds, decided without building anything.

`plan_strategy` is a pure function of its arguments, the cluster and
the local devices, so that the decision can be shown (`keras-gpu env` prints
it) and tested without TensorFlow's runtime. It returns a
`StrategyPlan`: the kind, its devices and options, and the reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from keras_gpu.core.backend import require_tensorflow
from keras_gpu.core.cluster import ClusterInfo
from keras_gpu.core.tf_private import has_kernel
from keras_gpu.setup.strategy_options import (
    DEFAULT_STARTUP_TIMEOUT,
    StrategyOptions,
    keyword_arguments,
    strategy_signature,
)

__all__ = ["LocalDevices", "StrategyPlan", "plan_from_options", "plan_strategy"]


@dataclass(frozen=True)
class LocalDevices:
    """The logical devices of this process, as the strategy decision sees them.

    Attributes:
        gpus: Logical GPU names, e.g. `("/device:GPU:0", "/device:GPU:1")`.
        cpus: Logical CPU names; more than one when the CPU was split.
        physical_gpus: Physical GPUs behind `gpus`; fewer than `len(gpus)`
            when a GPU was split into logical GPUs. `None` means `len(gpus)`.
        nccl: Whether this TensorFlow build has NCCL all-reduce kernels.
    """

    gpus: tuple[str, ...] = ()
    cpus: tuple[str, ...] = ("/device:CPU:0",)
    physical_gpus: int | None = None
    nccl: bool = True

    @classmethod
    def detect(cls) -> LocalDevices:
        """List this process's logical devices.

        This initialises TensorFlow's runtime context: afterwards, logical
        devices can no longer be configured and a multi-worker strategy can no
        longer be created in this process.
        """
        import tensorflow as tf
        gpus = tuple(d.name for d in tf.config.list_logical_devices("GPU"))
        cpus = tuple(d.name for d in tf.config.list_logical_devices("CPU"))
        physical = len(tf.config.get_visible_devices("GPU"))
        nccl = has_kernel("NcclAllReduce")
        return cls(gpus=gpus, cpus=cpus, physical_gpus=physical, nccl=nccl)

    @property
    def split_gpus(self) -> bool:
        """Whether some physical GPU was split into several logical GPUs."""
        return self.physical_gpus is not None and len(self.gpus) > self.physical_gpus


@dataclass(frozen=True)
class StrategyPlan:
    """Which strategy to build, on which devices, and why.

    Attributes:
        kind: `"default"`, `"one_device"`, `"mirrored"` or `"multiworker"`.
        devices: The local devices the strategy replicates over, as
            `/device:TYPE:N`. Empty for `"default"` and for `"multiworker"`,
            which trains on all of each worker's visible GPUs, else its CPU.
        cross_device_ops: The mirrored all-reduce (`"nccl"`,
            `"hierarchical_copy"` or `"reduce_to_one_device"`), else `None`.
        communication: The multi-worker collective implementation (`"auto"`,
            `"ring"` or `"nccl"`), else `None`.
        collective_timeout: Multi-worker collective timeout in seconds, or `None`.
        reason: Why this kind was chosen, in words.
        cluster: The resolved cluster (single local process when none).
        notes: Things the caller should be warned about, e.g. a cluster that
            a local kind ignores.
        startup_timeout: For `"multiworker"`: seconds to wait for every task
            of the cluster to start, else `None`.

    Examples:
        >>> import keras_gpu
        >>> from keras_gpu.setup.strategy import LocalDevices
        >>> cpus = LocalDevices(cpus=("/device:CPU:0", "/device:CPU:1"))
        >>> plan = keras_gpu.plan_strategy(local_devices=cpus)
        >>> plan.kind, plan.devices
        ('mirrored', ('/device:CPU:0', '/device:CPU:1'))
        >>> plan.reason
        'no GPU is visible and the CPU is split into 2 logical devices'
    """

    kind: str
    devices: tuple[str, ...]
    cross_device_ops: str | None
    communication: str | None
    collective_timeout: float | None
    reason: str
    cluster: ClusterInfo
    notes: tuple[str, ...] = field(default_factory=tuple)
    startup_timeout: float | None = None

    def describe(self) -> str:
        """One line: the strategy, its devices and options, and the reason."""
        if self.kind == "default":
            what = "default strategy"
        elif self.kind == "one_device":
            what = f"one_device on {self.devices[0]}"
        elif self.kind == "mirrored":
            what = f"mirrored over {len(self.devices)} devices ({', '.join(self.devices)}), {self.cross_device_ops}"
        else:
            timeout = "" if self.collective_timeout is None else f", timeout {self.collective_timeout:g}s"
            what = f"multiworker ({self.cluster.describe()}; communication {self.communication}{timeout})"
        return f"{what}: {self.reason}"


def plan_strategy(kind: str = "auto", *, local_devices: LocalDevices | None = None, **options: Any) -> StrategyPlan:
    """Decide which strategy `make_strategy` builds, without building it.

    `kind="auto"` picks, in order:

    1. `"multiworker"` when the cluster (TF_CONFIG, a multi-task SLURM step,
       or `cluster=`) has more than one training task;
    2. `"mirrored"` over all logical GPUs when there are two or more;
    3. `"one_device"` when there is exactly one GPU;
    4. `"mirrored"` over the logical CPUs when the CPU was split;
    5. otherwise the default strategy.

    With `devices`, `"auto"` picks `"one_device"` for one device and
    `"mirrored"` for several. Options that do not apply to the kind `"auto"`
    picks are ignored, and the reason says so.

    When `local_devices` is `None` and the decision needs the local devices
    (any kind but `"multiworker"` and `"default"`), this lists TensorFlow's
    logical devices, which initialises TensorFlow's runtime context: logical
    devices can no longer be configured afterwards. Pass `local_devices` to
    decide without touching TensorFlow.

    Args:
        kind: One of `KINDS`.
        local_devices: The local devices to decide with, a
            `keras_gpu.setup.strategy.LocalDevices` (importable from there,
            not from `keras_gpu`: only this what-if argument takes it), or
            `None` to detect them.
        **options: The keywords below, declared once by `StrategyOptions`
            (the function's `__signature__` lists them with their defaults).

    Keyword Args:
        devices: For `"one_device"` (exactly one) or `"mirrored"`: device
            names such as `"GPU:0"` or `"/device:CPU:1"`. Must exist.
        cross_device_ops: For `"mirrored"`, one of `CROSS_DEVICE_OPS`.
            `"auto"` is NCCL over physical GPUs, otherwise
            `"reduce_to_one_device"`. `"nccl"` needs GPUs only.
        communication: For `"multiworker"`, one of `COMMUNICATIONS`.
        collective_timeout: For `"multiworker"`: seconds after which a
            collective that waits on a peer fails, or `None` for no timeout.
            TensorFlow's coordination service still reports a crashed peer
            after its heartbeat timeout (about 10 s) without it, but not a
            peer that is alive and stuck (in Python, or in its input
            pipeline): set this, or run under `keras-gpu launch
            --hang-timeout` with the `keras_gpu.Heartbeat` callback, which
            watches finished batches instead of collectives.
        startup_timeout: For `"multiworker"`: seconds to wait, while the
            strategy is created, for every task of the cluster to start and
            register. `None` means `DEFAULT_STARTUP_TIMEOUT` (600 s); the
            wait is never unbounded. Tasks other than the coordination leader
            (worker 0 or the chief) give up a few seconds later than the
            leader, after TensorFlow's own RPC deadline.
        cluster_source: Where the cluster comes from: one of
            `keras_gpu.core.cluster.SOURCES`.
        cluster: For `cluster_source="explicit"` (or `"auto"`):
            `{"worker": ["host:port", ...]}` or the list of worker addresses.
        task_index: With `cluster`: this process's index within `task_type`.
        task_type: With `cluster`: this process's task type.
        slurm_port_base: For SLURM: the first port on each node.
        slurm_gpus_per_task: For SLURM: GPUs per task (`None`: detect).
        slurm_assign_gpus: For SLURM: set `CUDA_VISIBLE_DEVICES` per task.
        environ: The environment to read (default `os.environ`).

    Returns:
        The `StrategyPlan`.

    Raises:
        ValueError: An argument has a bad value, arguments contradict each
            other, a device does not exist, or the cluster is malformed.
        TypeError: An argument has the wrong type.

    Examples:
        With the cluster and the local devices given, nothing is detected and
        TensorFlow's runtime is not started (`LocalDevices` describes a
        machine; it comes from `keras_gpu.setup.strategy`):

        >>> import keras_gpu
        >>> from keras_gpu.setup.strategy import LocalDevices
        >>> gpus = LocalDevices(gpus=("/device:GPU:0", "/device:GPU:1"))
        >>> plan = keras_gpu.plan_strategy(local_devices=gpus)
        >>> plan.kind, plan.cross_device_ops
        ('mirrored', 'nccl')
        >>> plan = keras_gpu.plan_strategy(cluster=["node0:12345", "node1:12345"], task_index=0)
        >>> print(plan.describe())
        multiworker (2 workers from explicit; this process is worker:0 (rank 0, chief); ...
    """
    require_tensorflow("keras_gpu.plan_strategy()")
    keywords = keyword_arguments("plan_strategy", kind, options, internal=True, extra=("local_devices",))
    if local_devices is not None and not isinstance(local_devices, LocalDevices):
        raise TypeError(f"`local_devices` must be a LocalDevices or None. Received: local_devices={local_devices!r}")
    return plan_from_options(StrategyOptions.from_keywords(keywords), local_devices)


def plan_from_options(options: StrategyOptions, local_devices: LocalDevices | None = None) -> StrategyPlan:
    """The `StrategyPlan` for checked options: what `plan_strategy` returns for their keywords.

    Resolves the cluster, and lists the local devices when the decision
    needs them and `local_devices` is `None` (see `plan_strategy`).

    Raises:
        ValueError: The cluster is malformed or has `ps` tasks, a device does
            not exist, or an option does not fit the kind chosen.
    """
    info = options.where.resolve()
    if "ps" in info.cluster:
        raise ValueError(
            "The cluster has 'ps' (parameter server) tasks, which MultiWorkerMirroredStrategy does not "
            "support; use tf.distribute.experimental.ParameterServerStrategy for such a cluster, or "
            f"remove the 'ps' entry. Received: cluster={ {k: list(v) for k, v in info.cluster.items()} !r}"
        )
    trains_together = info.is_multi_worker and info.task_type != "evaluator"
    if options.kind == "multiworker" or (options.kind == "auto" and trains_together):
        if options.wanted is not None:
            raise ValueError(
                "`devices` cannot be chosen for a multi-worker strategy: each worker trains on all its "
                f"visible GPUs (or its CPU). Limit them with CUDA_VISIBLE_DEVICES. Received: devices={options.devices!r}"
            )
        return _plan_multiworker(options, info, local_devices)
    notes: tuple[str, ...] = ()
    if trains_together:
        note = (
            f"The cluster from {info.source} has {info.num_workers} training tasks, but kind={options.kind!r} "
            "trains this process alone; use kind='multiworker' (or 'auto') to train together."
        )
        notes = (note,)
    if options.kind == "default":
        return StrategyPlan("default", (), None, None, None, "kind='default' was asked for", info, notes)
    return _plan_local(options, info, notes, LocalDevices.detect() if local_devices is None else local_devices)


def _plan_local(options: StrategyOptions, info: ClusterInfo, notes: tuple[str, ...], ld: LocalDevices) -> StrategyPlan:
    """The plan for a kind that trains this process alone, on `ld`'s devices."""
    wanted, cross_device_ops = options.wanted, options.cross_device_ops
    available = (*ld.gpus, *ld.cpus)
    if wanted is not None:
        missing = [d for d in wanted if d not in available]
        if missing:
            raise ValueError(
                f"`devices` names devices this process does not have: {missing}. Available logical devices: "
                f"{list(available)}. Received: devices={options.devices!r}"
            )
    kind = options.kind
    if kind == "auto":
        kind, chosen, reason = _auto_local(ld, wanted)
        if info.task_type == "evaluator" and info.is_multi_worker:
            reason = f"this process is the evaluator of a {info.num_workers}-worker cluster, so it runs alone; {reason}"
        ignored = _ignored_options(kind, options)
        if ignored:
            reason = f"{reason} ({ignored})"
    elif kind == "one_device":
        chosen = wanted if wanted is not None else ((ld.gpus or ld.cpus)[0],)
        reason = "kind='one_device' was asked for"
    else:  # mirrored
        chosen = wanted if wanted is not None else (ld.gpus or ld.cpus)
        reason = "kind='mirrored' was asked for"

    if kind == "mirrored":
        cdo = _resolve_cross_device_ops(cross_device_ops, chosen, ld)
        return StrategyPlan("mirrored", tuple(chosen), cdo, None, None, reason, info, notes)
    if cross_device_ops == "nccl" and not ld.gpus:
        raise ValueError(
            "cross_device_ops='nccl' needs GPUs, and this process has none. Use cross_device_ops='auto' or "
            "'reduce_to_one_device'. Received: cross_device_ops='nccl'"
        )
    if kind == "one_device":
        return StrategyPlan("one_device", tuple(chosen), None, None, None, reason, info, notes)
    return StrategyPlan("default", (), None, None, None, reason, info, notes)


def _plan_multiworker(options: StrategyOptions, info: ClusterInfo, local_devices: LocalDevices | None) -> StrategyPlan:
    kind, cross_device_ops, communication = options.kind, options.cross_device_ops, options.communication
    if info.task_type == "evaluator":
        raise ValueError(
            "kind='multiworker' was asked for, but this process is the cluster's evaluator, which does not "
            "train; use kind='auto' (or a local kind) for the evaluator."
        )
    if cross_device_ops != "auto" and kind == "multiworker":
        raise ValueError(
            "`cross_device_ops` applies to kind='mirrored'; a multi-worker strategy takes `communication` "
            f"instead. Received: cross_device_ops={cross_device_ops!r}"
        )
    if communication == "nccl" and local_devices is not None and not local_devices.gpus:
        raise ValueError(
            "communication='nccl' needs GPUs, and this process has none. Use communication='auto' or 'ring'. "
            "Received: communication='nccl'"
        )
    if kind == "auto":
        reason = f"{info.source} describes {info.num_workers} training tasks"
        if cross_device_ops != "auto":
            reason += f" (cross_device_ops={cross_device_ops!r} ignored: it applies to mirrored)"
    elif info.is_multi_worker:
        reason = "kind='multiworker' was asked for"
    elif info.cluster:
        reason = f"kind='multiworker' was asked for; the cluster from {info.source} has a single task, which trains alone"
    else:
        reason = "kind='multiworker' was asked for; no cluster is configured, so this process trains alone"
    startup = DEFAULT_STARTUP_TIMEOUT if options.startup_timeout is None else options.startup_timeout
    return StrategyPlan("multiworker", (), None, communication, options.collective_timeout, reason, info, (), startup)


def _auto_local(ld: LocalDevices, wanted: tuple[str, ...] | None) -> tuple[str, tuple[str, ...], str]:
    if wanted is not None:
        if len(wanted) == 1:
            return "one_device", wanted, "one device was given"
        return "mirrored", wanted, f"{len(wanted)} devices were given"
    if len(ld.gpus) >= 2:
        return "mirrored", ld.gpus, f"{len(ld.gpus)} GPUs are visible"
    if len(ld.gpus) == 1:
        return "one_device", ld.gpus, "exactly one GPU is visible"
    if len(ld.cpus) > 1:
        return "mirrored", ld.cpus, f"no GPU is visible and the CPU is split into {len(ld.cpus)} logical devices"
    return "default", (), "no GPU is visible and the CPU is not split"


def _ignored_options(kind: str, options: StrategyOptions) -> str:
    cross_device_ops, communication = options.cross_device_ops, options.communication
    collective_timeout, startup_timeout = options.collective_timeout, options.startup_timeout
    ignored = []
    if kind != "mirrored" and cross_device_ops != "auto":
        ignored.append(f"cross_device_ops={cross_device_ops!r}")
    if communication != "auto":
        ignored.append(f"communication={communication!r}")
    if collective_timeout is not None:
        ignored.append(f"collective_timeout={collective_timeout!r}")
    if startup_timeout is not None:
        ignored.append(f"startup_timeout={startup_timeout!r}")
    if not ignored:
        return ""
    return f"{', '.join(ignored)} ignored: not applicable to {kind}"


def _resolve_cross_device_ops(requested: str, devices: Sequence[str], ld: LocalDevices) -> str:
    gpu_only = all(":GPU:" in d for d in devices)
    if requested == "nccl":
        if not gpu_only:
            raise ValueError(
                "cross_device_ops='nccl' needs GPUs only, but the mirrored devices include "
                f"{[d for d in devices if ':GPU:' not in d]}. Use cross_device_ops='auto' or 'reduce_to_one_device'. "
                "Received: cross_device_ops='nccl'"
            )
        if not ld.nccl:
            raise ValueError(
                "cross_device_ops='nccl' needs NCCL, which this TensorFlow build lacks. Use "
                "cross_device_ops='hierarchical_copy' or 'reduce_to_one_device'. Received: cross_device_ops='nccl'"
            )
        return "nccl"
    if requested != "auto":
        return requested
    if gpu_only and ld.nccl and not ld.split_gpus:
        return "nccl"
    return "reduce_to_one_device"


plan_strategy.__signature__ = strategy_signature(  # type: ignore[attr-defined]
    plan_strategy, internal=True, extra=("local_devices",)
)
