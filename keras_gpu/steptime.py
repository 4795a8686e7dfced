"""Where a training step's time goes, measured from a profiler trace.

Plain Python over an XSpace (see :mod:`keras_gpu.xspace`), as TensorFlow's and
JAX's profilers write it. :func:`analyze`
takes the trace of a few training steps and the wall time they took, and
splits each step's time into four parts that add up to it:

* **input**: the step waited for the input pipeline (`tf.data` `GetNext`
  calls, `IteratorGetNext` ops) while no device computed or communicated;
* **compute**: at least one replica device ran a model op (or kernel);
* **communication**: a cross-replica or cross-worker reduction or transfer
  ran (`_Send`/`_Recv`, collectives, NCCL, device-to-device and host-device
  copies) while no device computed; a multi-worker collective counts from its
  start to its end, so the time a worker waits for a slower peer is here;
* **other**: the rest: host-side overhead (Python, callbacks, launching
  work) and idle time.

Each instant of the traced window counts once, in the first of compute,
communication, input that is active then, so the parts never add up to more
than the step. Per replica, compute and communication are the busy time of
that replica's ops, attributed by where they really ran: on GPUs by the
device's own timeline (`/device:GPU:k` planes), on CPU devices by the
replica's name scope (`replica_k/`, and `update_k/` for the variable updates
a mirrored strategy runs on replica k). Ops outside any replica scope count for
replica 0: they are its model ops and the cross-replica work (summing
gradients, aggregating metrics) that a mirrored strategy runs on its first
device.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from keras_gpu import xspace

__all__ = ["ReplicaTime", "StepTime", "analyze", "classify_op", "slow_replica", "verdict"]

#: Op types that move data between replicas, devices or workers.
COMMUNICATION_OPS = frozenset(
    {
        "_Send", "_Recv", "_HostSend", "_HostRecv", "Send", "Recv",
        "NcclAllReduce", "NcclReduce", "NcclBroadcast",
        "CollectiveReduce", "CollectiveReduceV2", "CollectiveReduceV3", "CollectiveReduceScatterV2",
        "CollectiveGather", "CollectiveGatherV2", "CollectiveBcastSend", "CollectiveBcastRecv",
        "CollectiveBcastSendV2", "CollectiveBcastRecvV2", "CollectiveAllToAllV2", "CollectiveAllToAllV3",
        "CollectiveAssignGroupV2",
    }
)
#: Op types that wait for the input pipeline.
INPUT_OPS = frozenset(
    {
        "IteratorGetNext", "IteratorGetNextSync", "IteratorGetNextAsOptional",
        "MultiDeviceIteratorGetNextFromShard", "OptionalGetValue", "OptionalHasValue",
    }
)
#: Op types that do no work of the model (bookkeeping of the executor).
_IGNORED_OPS = frozenset({"NoOp", "_Arg", "_Retval", "MultiDeviceIteratorFromStringHandle", "OptionalFromValue"})

_HOST_PLANE = "/host:CPU"
_GPU_PLANE = re.compile(r"^/device:GPU:(\d+)$")
_REPLICA_SCOPE = re.compile(r"(?:^|/)replica_(\d+)(?:/|$)")
_UPDATE_SCOPE = re.compile(r"(?:^|/)update_(\d+)(?:_\d+)?(?:/|$)")
_GPU_COMMUNICATION = re.compile(r"(?i)^(nccl|memcpy|memset.*p2p)|all_?reduce|all_?gather|reduce_?scatter|collective")
_INPUT_ACTIVITY = re.compile(r"^Iterator.*::DoCompute$|^IteratorGetNext")
# JAX on the CPU: XLA runs each compiled step on the PjRt client's threads; the
# Python tracer names the step's `next(iterator)` call on the data.
_XLA_CPU_LINE = re.compile(r"^(tf_)?XLAPjRtCpuClient")
_PYTHON_NEXT = "$builtins next"
# The backend's step function as the Python thread calls it: Keras' TensorFlow
# trainer (`one_step_on_iterator`, `multi_step_on_iterator`) and JAX's jitted step.
_STEP_FUNCTION = re.compile(r"^(one|multi)_step_on_(iterator|data)$|^PjitFunction\(.*step")
# Multi-worker collectives run asynchronously: their op event on a compute line
# is only the launch. The exchange itself, waiting for the slowest peer
# included, is on the `collective_ops` lines and in the executor's activities.
_COLLECTIVE_ACTIVITY = re.compile(r"^(Base)?CollectiveExecutor::")


@dataclass(frozen=True)
class ReplicaTime:
    """One replica's busy seconds per step.

    Attributes:
        compute_sec: Seconds per step its device ran model ops.
        communication_sec: Seconds per step its reductions and transfers ran.
    """

    compute_sec: float
    communication_sec: float


@dataclass(frozen=True)
class StepTime:
    """The measured breakdown of the traced steps, in seconds per step.

    `input_sec + compute_sec + communication_sec + other_sec == step_sec`.

    Attributes:
        steps: Training steps in the trace.
        step_sec: Wall time per step.
        input_sec: Waiting for input while nothing else ran.
        compute_sec: At least one replica device computing.
        communication_sec: Reductions and transfers while no device computed.
        other_sec: Host-side overhead and idle time.
        replicas: Per local replica (in replica order), its own busy time.
        source: `"gpu"` when device timelines were read, else `"host"`.
        host_sec: The part of `other_sec` outside the backend's step function:
            Python between steps (Keras' loop, callbacks). Where the trace
            names no step function, all of `other_sec`.
    """

    steps: int
    step_sec: float
    input_sec: float
    compute_sec: float
    communication_sec: float
    other_sec: float
    replicas: tuple[ReplicaTime, ...]
    source: str
    host_sec: float = 0.0

    @property
    def busy_sec(self) -> float:
        """Seconds per step this worker worked rather than waited for peers or the device runtime.

        Input, compute, and host time outside the step function; communication
        (where waiting for a slower worker lands) and the idle gaps inside the
        step function are left out.
        """
        return self.input_sec + self.compute_sec + self.host_sec

    def share(self, part: str) -> float:
        """A part's share of the step, 0..1 (`part` is `"input"`, `"compute"`, ...)."""
        value = getattr(self, f"{part}_sec")
        return value / self.step_sec if self.step_sec > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        """A JSON-serialisable copy."""
        fields = ("steps", "step_sec", "input_sec", "compute_sec", "communication_sec", "other_sec", "host_sec", "source")
        out = {k: getattr(self, k) for k in fields}
        out["replicas"] = [{"compute_sec": r.compute_sec, "communication_sec": r.communication_sec} for r in self.replicas]
        return out


def classify_op(name: str) -> tuple[str, str] | None:
    """`(kind, op path)` of an op event named `path/to/op:OpType`; `None` for events that are not ops.

    `kind` is `"compute"`, `"communication"` or `"input"`; bookkeeping ops of
    the executor are `None` too.
    """
    if ":" not in name or "::" in name:
        return None
    path, _, op_type = name.rpartition(":")
    if not path or not op_type or " " in op_type or op_type in _IGNORED_OPS:
        return None
    if op_type in COMMUNICATION_OPS:
        return "communication", path
    if op_type in INPUT_OPS or op_type.startswith("IteratorGetNext"):
        return "input", path
    return "compute", path


def _replica_of(path: str, num_replicas: int) -> int:
    """The local replica an op ran for, from its name scope (0 outside any)."""
    for scope in (_REPLICA_SCOPE, _UPDATE_SCOPE):
        match = scope.search(path)
        if match:
            index = int(match.group(1))
            return index if index < num_replicas else 0
    return 0


def _union_length(intervals: Iterable[tuple[int, int]]) -> int:
    """Total length covered by half-open intervals."""
    total, end = 0, None
    start = 0
    for a, b in sorted(intervals):
        if b <= a:
            continue
        if end is None or a > end:
            if end is not None:
                total += end - start
            start, end = a, b
        elif b > end:
            end = b
    if end is not None:
        total += end - start
    return total


def analyze(
    space: Any,
    *,
    steps: int,
    wall_sec: float,
    num_replicas: int = 1,
    gpu_replicas: Mapping[int, int] | None = None,
) -> StepTime:
    """The step-time breakdown of a trace of `steps` training steps that took `wall_sec`.

    Args:
        space: An XSpace message (:func:`keras_gpu.xspace.load`).
        steps: Training steps the trace covers.
        wall_sec: Their wall time, measured by the caller around the trace.
        num_replicas: This worker's replicas.
        gpu_replicas: For GPU traces, `{gpu index: local replica index}`;
            by default GPU k runs replica k.

    Raises:
        ValueError: For `steps < 1`, `wall_sec <= 0`, or a trace without a
            host plane.
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"`steps` must be a positive integer. Received: steps={steps!r}")
    if not wall_sec > 0:
        raise ValueError(f"`wall_sec` must be a positive number of seconds. Received: wall_sec={wall_sec!r}")
    by_name = xspace.planes(space)
    host = by_name.get(_HOST_PLANE)
    if host is None:
        raise ValueError(f"The trace has no {_HOST_PLANE} plane. Received planes: {sorted(by_name)}")
    kinds: dict[str, list[tuple[int, int]]] = {"compute": [], "communication": [], "input": []}
    replicas = [{"compute": [], "communication": []} for _ in range(max(1, num_replicas))]
    gpu_planes = {int(m.group(1)): p for n, p in by_name.items() if (m := _GPU_PLANE.match(n))}
    gpu_events = {k: list(xspace.events(p)) for k, p in gpu_planes.items()}
    on_gpu = any(gpu_events.values())
    functions: list[tuple[int, int]] = []
    for event in xspace.events(host):
        span = (event.start_ps, event.end_ps)
        if event.line.startswith("python") and _STEP_FUNCTION.match(event.name):
            functions.append(span)
        if event.line.startswith("tf_data_iterator_get_next") and _INPUT_ACTIVITY.match(event.name):
            kinds["input"].append(span)
            continue
        if _XLA_CPU_LINE.match(event.line):
            if not on_gpu:
                kinds["compute"].append(span)
                replicas[0]["compute"].append(span)
            continue
        if event.name == _PYTHON_NEXT and event.line.startswith("python"):
            kinds["input"].append(span)
            continue
        if event.line.startswith("collective_ops") or _COLLECTIVE_ACTIVITY.match(event.name):
            # The collective executor's own threads, and its parameter exchange
            # with the group leader over RPC: all of it is communication.
            if not on_gpu and not event.name.startswith("Threadpool"):
                op = classify_op(event.name)
                kinds["communication"].append(span)
                replicas[_replica_of(op[1], len(replicas)) if op else 0]["communication"].append(span)
            continue
        if not event.line.startswith("tf_Compute"):
            continue
        op = classify_op(event.name)
        if op is None:
            continue
        kind, path = op
        if kind == "input":
            kinds["input"].append(span)
        elif not on_gpu:  # on GPUs, host op events are launches; the devices' timelines hold the work
            kinds[kind].append(span)
            replicas[_replica_of(path, len(replicas))][kind].append(span)
    mapping = dict(gpu_replicas or {})
    for gpu, evts in gpu_events.items():
        replica = mapping.get(gpu, gpu)
        for event in evts:
            kind = "communication" if _GPU_COMMUNICATION.search(event.name) else "compute"
            span = (event.start_ps, event.end_ps)
            kinds[kind].append(span)
            if 0 <= replica < len(replicas):
                replicas[replica][kind].append(span)
    compute = _union_length(kinds["compute"])
    busy = _union_length(kinds["compute"] + kinds["communication"])
    everything = _union_length(kinds["compute"] + kinds["communication"] + kinds["input"])
    parts = [compute / 1e12, (busy - compute) / 1e12, (everything - busy) / 1e12]
    if sum(parts) > wall_sec:  # the trace ran a little past the caller's window
        parts = [p * wall_sec / sum(parts) for p in parts]
    compute_s, comm_s, input_s = parts
    per_step = 1.0 / steps
    other_s = max(0.0, wall_sec - compute_s - comm_s - input_s)
    host_s = other_s if not functions else min(other_s, max(0.0, wall_sec - _union_length(functions) / 1e12))
    return StepTime(
        steps=steps,
        step_sec=wall_sec * per_step,
        input_sec=input_s * per_step,
        compute_sec=compute_s * per_step,
        communication_sec=comm_s * per_step,
        other_sec=other_s * per_step,
        replicas=tuple(
            ReplicaTime(
                min(wall_sec, _union_length(r["compute"]) / 1e12) * per_step,
                min(wall_sec, _union_length(r["communication"]) / 1e12) * per_step,
            )
            for r in replicas[: max(1, num_replicas)]
        ),
        source="gpu" if on_gpu else "host",
        host_sec=host_s * per_step,
    )


#: A part of the step counts as the bottleneck from this share on.
BOUND_SHARE = 0.3
#: A replica is slow when its compute time is this much above the others' median...
SLOW_REPLICA_RATIO = 1.25
#: ...and the difference is at least this share of the step.
SLOW_REPLICA_SHARE = 0.1


def slow_replica(replicas: Sequence[ReplicaTime], step_sec: float) -> tuple[int, float] | None:
    """`(index, ratio)` of a replica whose compute time is clearly above the others' median, else `None`.

    Clearly: at least :data:`SLOW_REPLICA_RATIO` times the median of the
    others, and longer by at least :data:`SLOW_REPLICA_SHARE` of the step. The
    second condition keeps small, real differences quiet, such as the
    cross-replica work (summing gradients, aggregating metrics) that a
    mirrored strategy runs on its first device.
    """
    if len(replicas) < 2 or not step_sec > 0:
        return None
    compute = [r.compute_sec for r in replicas]
    slowest = max(range(len(compute)), key=compute.__getitem__)
    others = statistics.median(c for i, c in enumerate(compute) if i != slowest)
    if others <= 0 or (compute[slowest] - others) / step_sec < SLOW_REPLICA_SHARE:
        return None
    ratio = compute[slowest] / others
    return (slowest, ratio) if ratio >= SLOW_REPLICA_RATIO else None


def verdict(step: StepTime, replica_labels: Sequence[str] | None = None) -> list[str]:
    """Hints that follow from the measurement, each naming its number; empty when none does."""
    hints = []
    if step.share("input") >= BOUND_SHARE:
        hints.append(
            f"input-bound: {step.share('input'):.0%} of each step waits for input; make the input pipeline faster "
            "(more parallel map calls, caching, prefetching to the device) or do less work per sample on the host"
        )
    if step.share("communication") >= BOUND_SHARE:
        hints.append(
            f"communication-bound: {step.share('communication'):.0%} of each step is spent in reductions and "
            "transfers (waiting for a slower worker included); if no worker is a straggler, a larger batch per "
            "replica, fewer replicas per host link, or a faster interconnect helps"
        )
    slow = slow_replica(step.replicas, step.step_sec)
    if slow is not None:
        index, ratio = slow
        label = replica_labels[index] if replica_labels and index < len(replica_labels) else f"replica {index}"
        hints.append(
            f"slow replica: {label} computes {ratio:.1f}x as long per step as the median of the others; "
            "every replica waits for it"
        )
    return hints
