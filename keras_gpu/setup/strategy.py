"""`make_strategy()`: one call that picks and builds the right `tf.distribute` strategy.

The decision is a pure function, :func:`plan_strategy`, so that it can be shown
without building anything (`keras-gpu env` prints it). :func:`make_strategy`
validates every argument through it, then builds the strategy the plan names
and logs one INFO line saying what it built and why.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from keras_gpu.core.backend import require_tensorflow, selected
from keras_gpu.core.checks import check_choice
from keras_gpu.core.cluster import (
    SOURCES,
    ClusterInfo,
    check_cluster_agreement,
    resolve_cluster,
)
from keras_gpu.core.log import log_once, logger
from keras_gpu.core.tf_private import (
    configure_coordination_service,
    coordination_service_config,
    has_kernel,
    runtime_initialized,
)
from keras_gpu.core.topology import visible_gpu_count
from keras_gpu.setup.cluster_peers import (
    explain_taken_port,
    report_refused,
    report_unlisted,
    startup_guard,
)

if TYPE_CHECKING:  # pragma: no cover
    import tensorflow as tf

__all__ = [
    "KINDS",
    "CROSS_DEVICE_OPS",
    "COMMUNICATIONS",
    "DEFAULT_STARTUP_TIMEOUT",
    "LocalDevices",
    "StrategyPlan",
    "plan_strategy",
    "make_strategy",
]

KINDS = ("auto", "default", "one_device", "mirrored", "multiworker")
"""Accepted values of `kind`."""

CROSS_DEVICE_OPS = ("auto", "nccl", "hierarchical_copy", "reduce_to_one_device")
"""Accepted values of `cross_device_ops` (the gradient all-reduce of a mirrored strategy)."""

COMMUNICATIONS = ("auto", "ring", "nccl")
"""Accepted values of `communication` (the collective implementation of a multi-worker strategy)."""

DEFAULT_STARTUP_TIMEOUT = 600.0
"""Seconds a multi-worker strategy waits for every task of its cluster when `startup_timeout` is `None`."""

_MAX_TIMEOUT = 7 * 24 * 3600.0  # one week; larger values overflow TensorFlow's millisecond deadlines
_LOCAL_KINDS = ("default", "one_device", "mirrored")
_DEVICE = re.compile(r"^(?:/job:localhost)?(?:/replica:0)?(?:/task:0)?(?:/?device:|/)?(CPU|GPU):(\d+)$", re.IGNORECASE)


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


def plan_strategy(
    kind: str = "auto",
    *,
    devices: Sequence[str] | None = None,
    cross_device_ops: str = "auto",
    communication: str = "auto",
    collective_timeout: float | None = None,
    startup_timeout: float | None = None,
    cluster_source: str = "auto",
    cluster: Mapping[str, Sequence[str]] | Sequence[str] | None = None,
    task_index: int | None = None,
    task_type: str = "worker",
    slurm_port_base: int = 8888,
    slurm_gpus_per_task: int | None = None,
    slurm_assign_gpus: bool = False,
    local_devices: LocalDevices | None = None,
    environ: Mapping[str, str] | None = None,
) -> StrategyPlan:
    """Decide which strategy :func:`make_strategy` builds, without building it.

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
        local_devices: The local devices to decide with (`None`: detect).
        environ: The environment to read (default `os.environ`).

    Returns:
        The :class:`StrategyPlan`.

    Raises:
        ValueError: An argument has a bad value, arguments contradict each
            other, a device does not exist, or the cluster is malformed.
        TypeError: An argument has the wrong type.
    """
    require_tensorflow("keras_gpu.plan_strategy()")
    check_choice("kind", kind, KINDS)
    check_choice("cross_device_ops", cross_device_ops, CROSS_DEVICE_OPS)
    check_choice("communication", communication, COMMUNICATIONS)
    check_choice("cluster_source", cluster_source, SOURCES)
    collective_timeout = _check_timeout("collective_timeout", collective_timeout)
    startup_timeout = _check_timeout("startup_timeout", startup_timeout)
    wanted = _normalize_devices(devices)
    if local_devices is not None and not isinstance(local_devices, LocalDevices):
        raise TypeError(f"`local_devices` must be a LocalDevices or None. Received: local_devices={local_devices!r}")
    _check_combinations(
        kind, wanted, cross_device_ops, communication, collective_timeout, startup_timeout, cluster_source, cluster, task_index
    )

    info = resolve_cluster(
        cluster_source,
        cluster=cluster,
        task_index=task_index,
        task_type=task_type,
        slurm_port_base=slurm_port_base,
        slurm_gpus_per_task=slurm_gpus_per_task,
        slurm_assign_gpus=slurm_assign_gpus,
        environ=environ,
    )
    if "ps" in info.cluster:
        raise ValueError(
            "The cluster has 'ps' (parameter server) tasks, which MultiWorkerMirroredStrategy does not "
            "support; use tf.distribute.experimental.ParameterServerStrategy for such a cluster, or "
            f"remove the 'ps' entry. Received: cluster={ {k: list(v) for k, v in info.cluster.items()} !r}"
        )
    trains_together = info.is_multi_worker and info.task_type != "evaluator"

    if kind == "multiworker" or (kind == "auto" and trains_together):
        if wanted is not None:
            raise ValueError(
                "`devices` cannot be chosen for a multi-worker strategy: each worker trains on all its "
                f"visible GPUs (or its CPU). Limit them with CUDA_VISIBLE_DEVICES. Received: devices={devices!r}"
            )
        plan = _plan_multiworker(kind, info, communication, collective_timeout, cross_device_ops, local_devices)
        return replace(plan, startup_timeout=DEFAULT_STARTUP_TIMEOUT if startup_timeout is None else startup_timeout)

    notes: list[str] = []
    if trains_together:
        notes.append(
            f"The cluster from {info.source} has {info.num_workers} training tasks, but kind={kind!r} "
            "trains this process alone; use kind='multiworker' (or 'auto') to train together."
        )
    if kind == "default":
        return StrategyPlan("default", (), None, None, None, "kind='default' was asked for", info, tuple(notes))

    ld = LocalDevices.detect() if local_devices is None else local_devices
    available = (*ld.gpus, *ld.cpus)
    if wanted is not None:
        missing = [d for d in wanted if d not in available]
        if missing:
            raise ValueError(
                f"`devices` names devices this process does not have: {missing}. Available logical devices: "
                f"{list(available)}. Received: devices={devices!r}"
            )

    if kind == "auto":
        kind, chosen, reason = _auto_local(ld, wanted)
        if info.task_type == "evaluator" and info.is_multi_worker:
            reason = f"this process is the evaluator of a {info.num_workers}-worker cluster, so it runs alone; {reason}"
        ignored = _ignored_options(kind, cross_device_ops, communication, collective_timeout, startup_timeout)
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
        return StrategyPlan("mirrored", tuple(chosen), cdo, None, None, reason, info, tuple(notes))
    if cross_device_ops == "nccl" and not ld.gpus:
        raise ValueError(
            "cross_device_ops='nccl' needs GPUs, and this process has none. Use cross_device_ops='auto' or "
            "'reduce_to_one_device'. Received: cross_device_ops='nccl'"
        )
    if kind == "one_device":
        return StrategyPlan("one_device", tuple(chosen), None, None, None, reason, info, tuple(notes))
    return StrategyPlan("default", (), None, None, None, reason, info, tuple(notes))


def make_strategy(
    kind: str = "auto",
    *,
    devices: Sequence[str] | None = None,
    cross_device_ops: str = "auto",
    communication: str = "auto",
    collective_timeout: float | None = None,
    startup_timeout: float | None = None,
    cluster_source: str = "auto",
    cluster: Mapping[str, Sequence[str]] | Sequence[str] | None = None,
    task_index: int | None = None,
    task_type: str = "worker",
    slurm_port_base: int = 8888,
    slurm_gpus_per_task: int | None = None,
) -> tf.distribute.Strategy:
    """Build the `tf.distribute.Strategy` for this process and log why in one INFO line.

    See :func:`plan_strategy` for the arguments and for what `kind="auto"`
    picks. Every argument is validated before anything is created.

    - `"mirrored"` always gets an explicit cross-device all-reduce (never
      TensorFlow's collective default), which keeps `steps_per_execution > 1`
      working (keras-team/keras#19246).
    - `"multiworker"` returns a
      `keras_gpu.setup.keras_compat.KerasMultiWorkerMirroredStrategy`, a
      `tf.distribute.MultiWorkerMirroredStrategy` that Keras 3 `fit`,
      `evaluate` and `predict` can use (keras-team/keras#20585), with any
      `steps_per_execution` (keras-team/keras#19246). Right after creation,
      every task compares its cluster with the coordination leader's
      (`keras_gpu.core.cluster.check_cluster_agreement`). Explicit and
      SLURM clusters are passed through a `SimpleClusterResolver`;
      TF_CONFIG is read but never written. Under SLURM each task's
      `CUDA_VISIBLE_DEVICES` is narrowed to its own GPUs. Create it before
      TensorFlow runs anything in the process. With a single-task cluster or
      no cluster, `kind="multiworker"` is allowed and trains alone.

    Creating a multi-worker strategy never waits forever. Before TensorFlow
    starts this task's server, its port is checked, so a port held by
    another process fails at once and by name. TensorFlow's registration of
    the cluster's tasks is bounded by `startup_timeout`; when it runs out, the
    error lists the tasks that never came up. Without these guards TensorFlow
    2.21 waits indefinitely in the constructor for a peer that never starts,
    and reports a taken port only as `Could not start gRPC server`.

    On Keras' JAX backend it returns a `keras_gpu.setup.jax_strategy.JaxStrategy`
    instead, with `scope()` and `num_replicas_in_sync`, for the same cluster
    (see that module).

    Returns:
        A `tf.distribute.Strategy` (a `JaxStrategy` on JAX).

    Raises:
        ValueError: Bad or contradictory arguments, missing devices, or a
            malformed cluster (raised before any peer is contacted).
        TypeError: An argument has the wrong type.
        RuntimeError: A multi-worker strategy was asked for after
            TensorFlow's runtime was initialised in this process; this task's
            port is taken; some tasks of the cluster did not start within
            `startup_timeout`; the tasks' cluster descriptions disagree; or
            the default strategy was asked for inside another strategy's scope.
    """
    arguments = dict(locals())
    if selected() != "tensorflow":  # JAX: a keras.distribution over the same cluster; others: one clear error
        from keras_gpu.setup import jax_strategy

        return jax_strategy.make_strategy(**arguments)
    require_tensorflow("keras_gpu.make_strategy()")
    # A task missing from its own cluster description tells the leader before it fails (keras_gpu.setup.cluster_peers).
    plan = report_unlisted(plan_strategy)(
        kind,
        devices=devices,
        cross_device_ops=cross_device_ops,
        communication=communication,
        collective_timeout=collective_timeout,
        startup_timeout=startup_timeout,
        cluster_source=cluster_source,
        cluster=cluster,
        task_index=task_index,
        task_type=task_type,
        slurm_port_base=slurm_port_base,
        slurm_gpus_per_task=slurm_gpus_per_task,
    )
    if plan.kind == "multiworker" and plan.cluster.source == "slurm":
        # Resolved again, now letting TensorFlow's resolver narrow CUDA_VISIBLE_DEVICES
        # to this task's GPUs; the first pass validated everything without side effects.
        plan = replace(
            plan,
            cluster=resolve_cluster(
                "slurm",
                slurm_port_base=slurm_port_base,
                slurm_gpus_per_task=slurm_gpus_per_task,
                slurm_assign_gpus=True,
            ),
        )
    strategy = _build(plan)
    for note in plan.notes:
        logger.warning(note)
    prefix = "auto chose " if kind == "auto" else ""
    logger.info("make_strategy: %s%s", prefix, plan.describe())
    if plan.kind in ("mirrored", "multiworker"):
        from keras_gpu.setup.keras_compat import warn_steps_per_execution

        warn_steps_per_execution(strategy, None)
    return strategy


def _build(plan: StrategyPlan) -> tf.distribute.Strategy:
    import tensorflow as tf

    if plan.kind == "default":
        if tf.distribute.has_strategy():
            raise RuntimeError(
                "make_strategy('default') was called inside another strategy's scope, where the default "
                "strategy is not reachable; call it outside `with strategy.scope():`."
            )
        return tf.distribute.get_strategy()
    if plan.kind == "one_device":
        return tf.distribute.OneDeviceStrategy(plan.devices[0])
    if plan.kind == "mirrored":
        # Always an explicit cross-device ops object, never TensorFlow's collective default,
        # which breaks Keras 3 with steps_per_execution > 1 (keras-team/keras#19246).
        ops = {
            "nccl": tf.distribute.NcclAllReduce,
            "hierarchical_copy": tf.distribute.HierarchicalCopyAllReduce,
            "reduce_to_one_device": tf.distribute.ReductionToOneDevice,
        }[plan.cross_device_ops]
        return tf.distribute.MirroredStrategy(devices=list(plan.devices), cross_device_ops=ops())
    return _build_multiworker(plan)


def _build_multiworker(plan: StrategyPlan) -> tf.distribute.Strategy:
    import tensorflow as tf

    from keras_gpu.setup.keras_compat import KerasMultiWorkerMirroredStrategy

    if runtime_initialized():
        raise RuntimeError(_LATE_MULTIWORKER)
    num_gpus = visible_gpu_count()
    if plan.communication == "nccl" and num_gpus == 0:
        raise ValueError(
            "communication='nccl' needs GPUs, and this process sees none. Use communication='auto' or 'ring'. "
            "Received: communication='nccl'"
        )
    implementation = {
        "auto": tf.distribute.experimental.CommunicationImplementation.AUTO,
        "ring": tf.distribute.experimental.CommunicationImplementation.RING,
        "nccl": tf.distribute.experimental.CommunicationImplementation.NCCL,
    }[plan.communication]
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=implementation, timeout_seconds=plan.collective_timeout
    )
    info = plan.cluster
    resolver = info.cluster_resolver(num_gpus=num_gpus) if info.cluster else None
    if info.cluster:
        _check_own_port(info)
        _bound_registration(info, plan.startup_timeout or DEFAULT_STARTUP_TIMEOUT)
    # A peer that shows the tasks disagree on the cluster ends the wait below at once (keras_gpu.setup.cluster_peers).
    with startup_guard(info, plan.startup_timeout or DEFAULT_STARTUP_TIMEOUT):
        try:
            strategy = KerasMultiWorkerMirroredStrategy(cluster_resolver=resolver, communication_options=options)
        except RuntimeError as exc:
            if "startup" not in str(exc):
                raise
            raise RuntimeError(_LATE_MULTIWORKER) from exc
        except tf.errors.InvalidArgumentError as exc:
            if "Unexpected task registered" not in str(exc):
                raise
            report_refused(info)
            raise RuntimeError(_unknown_task_message(info, str(exc))) from exc
        except tf.errors.UnknownError as exc:
            if "gRPC server" not in str(exc):
                raise
            why = "TensorFlow could not start its gRPC server there"
            raise RuntimeError(explain_taken_port(info) or _port_in_use_message(info, why)) from exc
        except (tf.errors.DeadlineExceededError, tf.errors.UnavailableError) as exc:
            raise RuntimeError(
                _startup_failure_message(info, plan.startup_timeout or DEFAULT_STARTUP_TIMEOUT, str(exc))
            ) from exc
    if info.cluster:
        check_cluster_agreement(info, min(plan.startup_timeout or DEFAULT_STARTUP_TIMEOUT, 60.0))
    return strategy


def _unknown_task_message(info: ClusterInfo, detail: str) -> str:
    """The coordination leader refused this task: their cluster descriptions differ."""
    spec = {job: list(addresses) for job, addresses in info.cluster.items() if job in ("chief", "worker")}
    leader = "chief:0" if spec.get("chief") else "worker:0"
    address = (spec.get("chief") or spec.get("worker") or ["?"])[0]
    return (
        f"make_strategy: the tasks disagree on the cluster: the coordination leader at {address} does not know this "
        f"task ({info.task_type}:{info.task_index}), so its cluster description differs from this one "
        f"({info.source}: {spec}), e.g. a 'chief' in one and not the other, or different worker lists. The process "
        f"at {address} is {leader} here. Give every task the same cluster (TF_CONFIG's 'cluster' must be "
        f"identical; only its 'task' differs). TensorFlow said: {detail.strip().splitlines()[0]}"
    )


_LATE_MULTIWORKER = (
    "A multi-worker strategy must be created before TensorFlow runs anything in this process "
    "(before creating tensors or models, or listing logical devices). Call "
    "keras_gpu.make_strategy() near the top of the program, right after configure_devices()."
)


# --- startup guard -------------------------------------------------------------------------------------------------
#
# Checked on TensorFlow 2.21 (CPU) with two loopback workers:
# - A peer that never starts: the coordination leader (worker 0 or the chief)
#   waits inside the MultiWorkerMirroredStrategy constructor indefinitely;
#   `cluster_register_timeout_in_ms` alone does not bound it. With
#   `cluster_register_with_barrier` as well, it raises DeadlineExceededError
#   after the timeout, naming the missing tasks. A non-leader task whose leader
#   never starts raises DeadlineExceededError about 5 s after the same timeout.
# - A peer that starts late, within the timeout: the cluster forms normally.
# - A taken port: TensorFlow binds `0.0.0.0:PORT` (without SO_REUSEPORT: a
#   second socket cannot share it) and raises `UnknownError: Could not start
#   gRPC server`, without naming the port or the task.


def _check_own_port(info: ClusterInfo) -> None:
    """Raise `RuntimeError` when this task's port cannot be bound the way TensorFlow binds it."""
    import errno
    import socket

    address = info.address
    if address is None:
        return
    port = int(address.rsplit(":", 1)[1])
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC does: TIME_WAIT is no conflict
        try:
            probe.bind(("0.0.0.0", port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                why = "it is already in use by another process"
                raise RuntimeError(explain_taken_port(info) or _port_in_use_message(info, why)) from None
            raise RuntimeError(
                f"make_strategy: cannot listen on port {address} for {info.task_type}:{info.task_index}: "
                f"{exc.strerror or exc}. Give this task another port in the cluster description."
            ) from None


def _port_in_use_message(info: ClusterInfo, why: str) -> str:
    return (
        f"make_strategy: port {info.address} for {info.task_type}:{info.task_index} cannot be used: {why}. "
        "Stop the process that holds it (often a worker left over from an earlier run; see `ss -ltnp`) or give "
        f"this task another port in the cluster description ({info.source})."
    )


def _bound_registration(info: ClusterInfo, timeout: float) -> None:
    """Configure TensorFlow's coordination service the way the strategy would, plus a registration deadline.

    `MultiWorkerMirroredStrategy` leaves an already configured coordination
    service alone, so this adds only `cluster_register_timeout_in_ms` and
    `cluster_register_with_barrier` to what its constructor would set.
    """
    import tensorflow as tf

    if info.task_type not in ("chief", "worker") or coordination_service_config() is not None:
        return
    spec = tf.train.ClusterSpec({k: list(v) for k, v in info.cluster.items()})
    jobs = [job for job in ("chief", "worker") if job in spec.jobs]
    config = configure_coordination_service(spec, jobs, timeout)
    if "cluster_register_with_barrier" in config.DESCRIPTOR.fields_by_name:
        config.cluster_register_with_barrier = True
    else:  # pragma: no cover - older TensorFlow
        log_once(
            logging.WARNING,
            "startup_timeout_leader",
            "This TensorFlow cannot bound the coordination leader's wait for its peers; `startup_timeout` "
            "applies to the other tasks only.",
        )


def _startup_failure_message(info: ClusterInfo, timeout: float, detail: str) -> str:
    """Name the tasks that did not come up: from TensorFlow's message, else those whose port does not answer."""
    me = (info.task_type, info.task_index)
    timed_out = detail.partition("timed out task names:")[2]
    named = {(job, int(index)) for job, index in re.findall(r"/job:(\w+)/replica:\d+/task:(\d+)", timed_out)}
    tasks = [(job, i, a) for job, addresses in info.cluster.items() for i, a in enumerate(addresses) if (job, i) != me]
    missing = [t for t in tasks if (t[0], t[1]) in named]
    if not missing:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(32, max(1, len(tasks)))) as pool:
            answers = list(pool.map(_answers, [t[2] for t in tasks]))
        missing = [t for t, up in zip(tasks, answers) if not up]
    first = detail.strip().splitlines()[0] if detail.strip() else "no detail"
    running = []
    if missing and named:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(32, len(missing))) as pool:
            answers = list(pool.map(_answers, [t[2] for t in missing]))
        running = [t for t, up in zip(missing, answers) if up]
        missing = [t for t, up in zip(missing, answers) if not up]
    if running:
        listed = ", ".join(f"{job}:{i} ({address})" for job, i, address in running)
        what = (
            f"a process answers at the address of {listed} but never registered as that task: the tasks disagree "
            "on the cluster (e.g. a 'chief' in one TF_CONFIG and not the other, or different worker lists), so "
            "give every task the same cluster"
        )
        if missing:
            what += "; these tasks never came up: " + ", ".join(f"{job}:{i} ({address})" for job, i, address in missing)
    elif missing:
        listed = ", ".join(f"{job}:{i} ({address})" for job, i, address in missing)
        what = f"these tasks never came up: {listed}"
    else:
        what = "every task answers on its port, but the cluster did not form (are they all from the same job?)"
    return (
        f"make_strategy: the cluster from {info.source} did not come up within startup_timeout={timeout:g}s; {what}. "
        "Start every task of the cluster, check their addresses, or raise `startup_timeout`. "
        f"TensorFlow said: {first}"
    )


def _answers(address: str, timeout: float = 1.0) -> bool:
    """Whether `host:port` accepts a TCP connection within `timeout` seconds."""
    import socket

    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def _plan_multiworker(
    kind: str,
    info: ClusterInfo,
    communication: str,
    collective_timeout: float | None,
    cross_device_ops: str,
    local_devices: LocalDevices | None,
) -> StrategyPlan:
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
    return StrategyPlan("multiworker", (), None, communication, collective_timeout, reason, info)


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


def _ignored_options(
    kind: str,
    cross_device_ops: str,
    communication: str,
    collective_timeout: float | None,
    startup_timeout: float | None,
) -> str:
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


def _check_combinations(
    kind: str,
    wanted: tuple[str, ...] | None,
    cross_device_ops: str,
    communication: str,
    collective_timeout: float | None,
    startup_timeout: float | None,
    cluster_source: str,
    cluster: Any,
    task_index: Any,
) -> None:
    if wanted is not None and kind == "default":
        raise ValueError(f"`devices` does not apply to kind='default'. Received: devices={list(wanted)!r}")
    if wanted is not None and kind == "one_device" and len(wanted) != 1:
        raise ValueError(
            "kind='one_device' needs exactly one device; use kind='mirrored' for several. "
            f"Received: devices={list(wanted)!r}"
        )
    if kind in ("default", "one_device") and cross_device_ops != "auto":
        raise ValueError(
            f"`cross_device_ops` applies to kind='mirrored' only. Received: kind={kind!r}, "
            f"cross_device_ops={cross_device_ops!r}"
        )
    if kind in _LOCAL_KINDS:
        if communication != "auto" or collective_timeout is not None or startup_timeout is not None:
            raise ValueError(
                "`communication`, `collective_timeout` and `startup_timeout` apply to kind='multiworker' (or 'auto') "
                f"only. Received: kind={kind!r}, communication={communication!r}, "
                f"collective_timeout={collective_timeout!r}, startup_timeout={startup_timeout!r}"
            )
        if cluster_source != "auto" or cluster is not None or task_index is not None:
            raise ValueError(
                "`cluster_source`, `cluster` and `task_index` apply to kind='multiworker' (or 'auto') only. "
                f"Received: kind={kind!r}, cluster_source={cluster_source!r}, cluster={cluster!r}, "
                f"task_index={task_index!r}"
            )


def _check_timeout(name: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"`{name}` must be a number of seconds or None. Received: {name}={value!r}")
    default = "for no timeout" if name == "collective_timeout" else f"for the default of {DEFAULT_STARTUP_TIMEOUT:g} s"
    try:
        seconds = float(value)
    except OverflowError:  # an int too large for a float
        seconds = math.inf
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(
            f"`{name}` must be a positive, finite number of seconds (or None {default}). Received: {name}={value!r}"
        )
    if seconds > _MAX_TIMEOUT:
        raise ValueError(
            f"`{name}` must be at most {_MAX_TIMEOUT:g} seconds (one week); pass None {default}. "
            f"Received: {name}={value!r}"
        )
    return seconds


def _normalize_devices(devices: Any) -> tuple[str, ...] | None:
    if devices is None:
        return None
    if isinstance(devices, (str, bytes)) or not isinstance(devices, Sequence):
        raise TypeError(f"`devices` must be a list of device names such as ['GPU:0', 'GPU:1']. Received: devices={devices!r}")
    if not devices:
        raise ValueError("`devices` must name at least one device, or be None to use them all. Received: devices=[]")
    out = []
    for device in devices:
        match = _DEVICE.match(device) if isinstance(device, str) else None
        if match is None:
            raise ValueError(
                f"`devices` entries must be local device names like 'GPU:0', '/gpu:1' or '/device:CPU:0'. "
                f"Received: {device!r} in devices={devices!r}"
            )
        out.append(f"/device:{match.group(1).upper()}:{int(match.group(2))}")
    if len(set(out)) != len(out):
        raise ValueError(f"`devices` lists a device twice. Received: devices={devices!r}")
    return tuple(out)
