"""Where a training step's time goes, measured from a profiler trace.

Plain Python over an XSpace (see :mod:`keras_gpu.meters.xspace`), as TensorFlow's and
JAX's profilers write it. :func:`analyze` takes the trace of a few training
steps and splits each step's time into four parts that add up to it:

* **input**: the step waited for the input pipeline (`tf.data` `GetNext`
  calls, `IteratorGetNext` ops, Python's `next()` on a `PyDataset` or
  generator) while no device computed or communicated;
* **compute**: at least one replica device ran a model op, a kernel, or a
  compiled (XLA) program;
* **communication**: a cross-replica or cross-worker reduction or transfer
  ran (`_Send`/`_Recv`, collectives, NCCL kernels, device-to-device and
  host-device copies) while no device computed; a multi-worker collective
  counts from its start to its end, so the time a worker waits for a slower
  peer is here;
* **other**: the rest: host-side overhead (Python, callbacks, launching
  work) and idle time.

Each instant of the traced window counts once, in the first of compute,
communication, input that is active then, so the parts never add up to more
than the step.

**The window and the step count.** Where the trace marks its steps, the
breakdown uses the marks and says so (:attr:`StepTime.step_source`): host
step markers (events named :data:`STEP_MARKER` with a `step_num` stat, on
any host thread, as `tf.profiler.experimental.Trace("train", step_num=n,
_r=1)` and JAX's `StepTraceAnnotation` write them) bound the window from the
first marked step's start to the last one's end, and nothing outside it
counts; a GPU plane's `Steps` line gives each device its own window per
step, and a step lasts as long as its slowest device's window. Without
marks, the caller's `steps` and `wall_sec` hold. `StepTimeLogger` marks each
traced step from one batch end to the next, so its window holds exactly the
traced steps: the time after an epoch's last batch end (Keras' epoch-end
work, stopping a `PyDataset`'s workers, epoch-end callbacks) is never in it.

**GPU planes** are read line by line (:mod:`keras_gpu.meters.gpu_lines`): kernels on
the streams are compute, NCCL kernels and device-to-device copies are
communication, host-device copies are transfers (communication in the four
parts, and their own figure per device), and derived lines (`Steps`,
`TensorFlow Ops`, `TensorFlow Name Scope`, `XLA Ops`, ...) add nothing.

**Per replica**, compute and communication are the busy time of that
replica's work, attributed by where it really ran: on GPUs by the device's
own timeline, mapped to replicas by `gpu_replicas` (see
:func:`keras_gpu.core.topology.trace_gpu_replicas`); on CPU devices by the
replica's name scope (`replica_k/`, and `update_k/` for the variable updates
a mirrored strategy runs on replica k). Ops outside any replica scope, and
compiled programs, whose ops carry no scope, count for replica 0. A GPU that
did work but maps to no replica is named in :attr:`StepTime.notes`.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from keras_gpu.meters import gpu_lines
from keras_gpu.core import topology
from keras_gpu.meters import xspace

__all__ = [
    "STEP_MARKER",
    "DeviceTime",
    "InputStage",
    "ReplicaTime",
    "StepTime",
    "TraceSteps",
    "analyze",
    "classify_op",
    "input_stage",
    "input_stage_markdown",
    "read_input_stage_markdown",
    "slow_replica",
    "step_marker",
    "trace_steps",
    "verdict",
]

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

#: The name of a host step marker; its `step_num` stat numbers the step.
STEP_MARKER = "train"

_HOST_PLANE = "/host:CPU"
_REPLICA_SCOPE = re.compile(r"(?:^|/)replica_(\d+)(?:/|$)")
_UPDATE_SCOPE = re.compile(r"(?:^|/)update_(\d+)(?:_\d+)?(?:/|$)")
_INPUT_ACTIVITY = re.compile(r"^Iterator.*::DoCompute$|^IteratorGetNext")
# JAX on the CPU: XLA runs each compiled step on the PjRt client's threads; the
# Python tracer names the step's `next(iterator)` call on the data.
_XLA_CPU_LINE = re.compile(r"^(tf_)?XLAPjRtCpuClient")
# TensorFlow with `jit_compile=True` on the CPU: the compiled step runs as one
# XLA executable (its HLO ops carry no op type or replica scope).
_XLA_EXECUTION = re.compile(r"^CpuExecutable::Execute")
_PYTHON_NEXT = "$builtins next"
# The backend's step function as the Python thread calls it: Keras' TensorFlow
# trainer (`one_step_on_iterator`, `multi_step_on_iterator`) and JAX's jitted step.
_STEP_FUNCTION = re.compile(r"^(one|multi)_step_on_(iterator|data)$|^PjitFunction\(.*step")
# Multi-worker collectives run asynchronously: their op event on a compute line
# is only the launch. The exchange itself, waiting for the slowest peer
# included, is on the `collective_ops` lines and in the executor's activities.
_COLLECTIVE_ACTIVITY = re.compile(r"^(Base)?CollectiveExecutor::")
# tf.data stages that only buffer: a consumer waiting in them waits for the stages upstream.
_BUFFER_STAGES = frozenset({"Root", "Prefetch", "MemoryCacheImpl", "Cache"})
# tf.data stages that work on their own threads while the consumer waits in their event.
_ASYNC_STAGE = re.compile(r"^(Parallel|LegacyParallel|MapAndBatch|Prefetch|DataService)")
_PYTHON_INPUT = "Python input"

_Span = tuple[int, int]


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
class DeviceTime:
    """One device's busy seconds per step, from its own timeline in the trace.

    Attributes:
        name: The device as the trace names it, `"GPU:4"`.
        compute_sec: Kernels (NCCL kernels left out).
        communication_sec: NCCL kernels and device-to-device copies.
        transfer_sec: Host-to-device and device-to-host copies.
        replicas: The local replicas mapped to it; empty when none is.
    """

    name: str
    compute_sec: float
    communication_sec: float
    transfer_sec: float
    replicas: tuple[int, ...] = ()


@dataclass(frozen=True)
class InputStage:
    """The input stage with the most self time.

    Attributes:
        name: The stage, `"ParallelMapV2"`, `"Generator"`, or `"Python input"`
            (a `PyDataset` or generator read by Python's `next()`).
        path: The tf.data iterator's full name
            (`"Iterator::Root::Prefetch::ParallelMapV2"`), or the name itself.
        sec_per_step: Its self time per step (per batch): its own time,
            leaving out the stages nested in it.
    """

    name: str
    path: str
    sec_per_step: float


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
        step_source: Where `steps` and the window come from: `"host markers"`,
            `"device markers"` (GPU `Steps` lines), `"caller"` (the
            arguments), `"step function"` (executions of the step function)
            or `"trace"` (the span of the trace's events).
        devices: Per GPU in the trace that did work, its own busy time.
        input_stage: The input stage with the most self time, if the trace shows one.
        notes: What the reader could not attribute (a GPU that maps to no
            replica, a line it does not know, a replica scope that
            contradicts the mapping).
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
    step_source: str = "caller"
    devices: tuple[DeviceTime, ...] = ()
    input_stage: InputStage | None = None
    notes: tuple[str, ...] = field(default=())

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
        fields = (
            "steps", "step_sec", "input_sec", "compute_sec", "communication_sec", "other_sec", "host_sec", "source",
            "step_source",
        )
        out = {k: getattr(self, k) for k in fields}
        out["replicas"] = [{"compute_sec": r.compute_sec, "communication_sec": r.communication_sec} for r in self.replicas]
        out["devices"] = {
            d.name: {
                "compute_sec": d.compute_sec,
                "communication_sec": d.communication_sec,
                "transfer_sec": d.transfer_sec,
                "replicas": list(d.replicas),
            }
            for d in self.devices
        }
        stage = self.input_stage
        out["input_stage"] = None if stage is None else {"name": stage.name, "path": stage.path, "sec_per_step": stage.sec_per_step}
        out["notes"] = list(self.notes)
        return out


class TraceSteps(NamedTuple):
    """The steps a trace marks.

    Attributes:
        steps: How many steps are marked.
        windows: The steps' windows on the trace's clock, picoseconds, in order.
        per_device: For devices with their own step windows (GPU `Steps`
            lines), `{GPU index: windows}`.
        source: `"host markers"` or `"device markers"`.
    """

    steps: int
    windows: tuple[_Span, ...]
    per_device: dict[int, tuple[_Span, ...]]
    source: str


def step_marker(step_num: int) -> tuple[str, dict[str, int]]:
    """`(name, stats)` of the host step marker for training step `step_num`.

    `tf.profiler.experimental.Trace(name, **stats)` (TensorFlow) and
    `jax.profiler.StepTraceAnnotation(name, step_num=step_num)` (JAX) around a
    step write it; :func:`trace_steps` reads it back, as xprof does.
    """
    if isinstance(step_num, bool) or not isinstance(step_num, int) or step_num < 0:
        raise ValueError(f"`step_num` must be a non-negative integer. Received: step_num={step_num!r}")
    return STEP_MARKER, {"step_num": step_num, "_r": 1}


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


def _replica_scope(path: str) -> int | None:
    """The replica a name scope names (`replica_k/`, `update_k/`), else `None`."""
    for scope in (_REPLICA_SCOPE, _UPDATE_SCOPE):
        match = scope.search(path)
        if match:
            return int(match.group(1))
    return None


def _replica_of(path: str, num_replicas: int) -> int:
    """The local replica an op ran for, from its name scope (0 outside any)."""
    index = _replica_scope(path)
    return index if index is not None and index < num_replicas else 0


def _union_length(intervals: Iterable[_Span]) -> int:
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


def _clip(intervals: Iterable[_Span], windows: Sequence[_Span] | None) -> list[_Span]:
    """The parts of `intervals` inside `windows` (all of them when `windows` is `None`)."""
    if windows is None:
        return list(intervals)
    return [(max(a, s), min(b, e)) for a, b in intervals for s, e in windows if a < e and b > s]


# --------------------------------------------------------------------------- reading the trace


class _Host(NamedTuple):
    """What the host plane holds, as intervals by part."""

    parts: dict[str, list[_Span]]
    replicas: list[dict[str, list[_Span]]]
    functions: list[_Span]
    markers: dict[int, _Span]
    iterators: list[xspace.TraceEvent]
    python_input: list[_Span]


class _Gpu:
    """One GPU plane: its intervals by part, its step windows, the replica its ops name."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.name = f"GPU:{index}"
        self.parts: dict[str, list[_Span]] = {"compute": [], "communication": [], "transfer": []}
        self.steps: dict[Any, _Span] = {}
        self.scopes: Counter[int | None] = Counter()
        self.unknown_lines: set[str] = set()

    @property
    def has_kernels(self) -> bool:
        return bool(self.parts["compute"] or self.parts["communication"])


def _read_host(plane: Any, on_gpu: bool, num_replicas: int) -> _Host:
    """Sort the host plane's events into parts (on GPUs, host op events are launches and count for nothing)."""
    host = _Host({"compute": [], "communication": [], "input": []}, [{"compute": [], "communication": []}
                 for _ in range(num_replicas)], [], {}, [], [])
    parts, replicas = host.parts, host.replicas
    marker_lines: set[str] = set()
    for event in xspace.events(plane):
        span = (event.start_ps, event.end_ps)
        line, name = event.line, event.name
        if name == STEP_MARKER:
            marker_lines.add(line)
        if line.startswith("tf_data") and name.startswith("Iterator::"):
            host.iterators.append(event)
        if line.startswith("python"):
            if _STEP_FUNCTION.match(name):
                host.functions.append(span)
            elif name == _PYTHON_NEXT:
                parts["input"].append(span)
                host.python_input.append(span)
            continue
        if line.startswith("tf_data_iterator_get_next") and _INPUT_ACTIVITY.match(name):
            parts["input"].append(span)
            continue
        if _XLA_CPU_LINE.match(line) or _XLA_EXECUTION.match(name):
            if not on_gpu:
                parts["compute"].append(span)
                replicas[0]["compute"].append(span)
            continue
        if line.startswith("collective_ops") or _COLLECTIVE_ACTIVITY.match(name):
            # The collective executor's own threads, and its parameter exchange
            # with the group leader over RPC: all of it is communication.
            if not on_gpu and not name.startswith("Threadpool"):
                op = classify_op(name)
                parts["communication"].append(span)
                replicas[_replica_of(op[1], num_replicas) if op else 0]["communication"].append(span)
            continue
        op = classify_op(name) if line.startswith("tf_Compute") else None
        if op is None:
            continue
        if op[0] == "input":
            parts["input"].append(span)
        elif not on_gpu:
            parts[op[0]].append(span)
            replicas[_replica_of(op[1], num_replicas)][op[0]].append(span)
    # Step markers on whichever thread ran the loop (its line is named after the thread).
    for event in xspace.events(plane, stats=True, lines=marker_lines.__contains__) if marker_lines else ():
        step = (event.stats or {}).get("step_num")
        if event.name == STEP_MARKER and isinstance(step, int):
            old = host.markers.get(step)
            host.markers[step] = (event.start_ps, event.end_ps) if old is None else (
                min(old[0], event.start_ps), max(old[1], event.end_ps))
    return host


def _read_gpus(by_name: Mapping[str, Any]) -> dict[int, _Gpu]:
    """Every `/device:GPU:k` plane, read line by line (see :mod:`keras_gpu.meters.gpu_lines`)."""
    gpus: dict[int, _Gpu] = {}
    for plane_name, plane in by_name.items():
        parsed = topology.parse_device(plane_name)
        if parsed is None or parsed.device_type != "GPU" or parsed.index is None or parsed.job is not None:
            continue
        gpu = gpus.setdefault(parsed.index, _Gpu(parsed.index))
        for event in xspace.events(plane, stats=True):
            kind = gpu_lines.line_kind(event.line)
            if kind is None:
                gpu.unknown_lines.add(event.line)
            elif kind.name == "steps":
                step = (event.stats or {}).get("group_id", event.name)
                old = gpu.steps.get(step)
                gpu.steps[step] = (event.start_ps, event.end_ps) if old is None else (
                    min(old[0], event.start_ps), max(old[1], event.end_ps))
            elif kind.busy:
                part = gpu_lines.event_kind(event.name).part
                gpu.parts[part].append((event.start_ps, event.end_ps))
                if part == "compute":
                    stats = event.stats or {}
                    gpu.scopes[_replica_scope(str(stats.get("annotation") or stats.get("level 0") or ""))] += 1
    return gpus


def trace_steps(space: Any) -> TraceSteps | None:
    """The steps a trace marks, or `None` when it marks none.

    Host step markers (:func:`step_marker`) win: one window from the first
    marked step's start to the last one's end, so the time between steps
    counts. Else the GPU planes' `Steps` lines: each device's own window per
    step, and as the step's window the longest of them (a step ends when its
    slowest device is done).
    """
    by_name = xspace.planes(space)
    host = by_name.get(_HOST_PLANE)
    markers: dict[int, _Span] = {}
    if host is not None:
        markers = _read_host(host, False, 1).markers
    return _steps_from(markers, _read_gpus(by_name))


def _steps_from(markers: Mapping[int, _Span], gpus: Mapping[int, _Gpu]) -> TraceSteps | None:
    if markers:
        window = (min(s for s, _ in markers.values()), max(e for _, e in markers.values()))
        return TraceSteps(len(markers), (window,), {}, "host markers")
    ids = sorted({step for gpu in gpus.values() for step in gpu.steps}, key=str)
    if not ids:
        return None
    windows, per_device = [], {g: [] for g, gpu in gpus.items() if gpu.steps}
    for step in ids:
        spans = {g: gpu.steps[step] for g, gpu in gpus.items() if step in gpu.steps}
        for g, span in spans.items():
            per_device[g].append(span)
        windows.append(max(spans.values(), key=lambda s: (s[1] - s[0], -s[0])))
    return TraceSteps(len(ids), tuple(sorted(windows)), {g: tuple(w) for g, w in per_device.items()}, "device markers")


# --------------------------------------------------------------------------- replicas and devices


def _replica_map(
    gpus: Mapping[int, _Gpu], gpu_replicas: Mapping[int, Any] | None, num_replicas: int, worked: set[int]
) -> tuple[dict[int, tuple[int, ...]], list[str]]:
    """`{GPU index: local replicas}` in range, and notes on GPUs that worked (`worked`) but no replica
    claims, and on GPUs whose kernels' replica scopes disagree with the mapping."""
    if gpu_replicas is None:  # the GPUs that ran kernels, in index order, as a strategy over them places replicas
        working = [g for g in sorted(gpus) if gpus[g].has_kernels]
        mapping = {g: (i,) for i, g in enumerate(working[:num_replicas])}
    else:
        mapping = {}
        for g, value in gpu_replicas.items():
            found = (value,) if isinstance(value, int) else tuple(value)
            mapping[int(g)] = tuple(r for r in found if 0 <= r < num_replicas)
    notes = []
    for g in sorted(gpus):
        gpu = gpus[g]
        if g in worked and not mapping.get(g):
            notes.append(f"{gpu.name} did work in the trace but maps to no replica; its time counts for no replica")
        scoped = [(k, n) for k, n in gpu.scopes.items() if k is not None]
        if mapping.get(g) and scoped:
            scope, count = max(scoped, key=lambda kn: kn[1])
            if 2 * count > sum(gpu.scopes.values()) and scope not in mapping[g]:
                replicas = ", ".join(str(r) for r in mapping[g])
                notes.append(f"{gpu.name}'s kernels come from replica_{scope}/ ops, but it is mapped to replica {replicas}")
        notes.extend(f"{gpu.name}: line {line!r} is not a known GPU line kind; not counted" for line in sorted(gpu.unknown_lines))
    return mapping, notes


def _device_windows(steps: TraceSteps | None, g: int) -> Sequence[_Span] | None:
    if steps is None:
        return None
    return steps.per_device.get(g, steps.windows)


# --------------------------------------------------------------------------- the input stage


def input_stage(
    iterators: Iterable[xspace.TraceEvent], steps: int, python_input: Iterable[_Span] = ()
) -> InputStage | None:
    """The input stage with the most self time per step, from a trace's `Iterator::...` events.

    Self time is a stage's own work, leaving out the stages upstream of it. A
    synchronous stage (`Map`, `BatchV2`, `Generator`, `TensorSlice`, ...)
    works inside its event: its duration less the iterator events nested in
    it on the same thread. An asynchronous stage (`ParallelMapV2`,
    `MapAndBatch`, `ParallelInterleaveV4`, ...) works on other threads while
    its consumer waits in its event: its self time is that wait less the time
    its upstream stages' events ran meanwhile, on any thread. Stages that only
    buffer (`Root`, `Prefetch`, `Cache`) are never named. Where no tf.data
    stage ran but Python's `next()` read the input (a `PyDataset` or
    generator on JAX or PyTorch), the stage is `"Python input"`.

    Args:
        iterators: The host plane's `Iterator::...` events.
        steps: Steps in the trace (the time is divided by it).
        python_input: Intervals of Python's `next()` on the input.
    """
    iterators = list(iterators)
    by_path: dict[str, list[_Span]] = {}
    by_line: dict[str, list[xspace.TraceEvent]] = {}
    for event in iterators:
        by_path.setdefault(event.name, []).append((event.start_ps, event.end_ps))
        by_line.setdefault(event.line, []).append(event)
    self_time: Counter[str] = Counter()
    for events in by_line.values():  # synchronous stages: less the iterators nested on the same thread
        events.sort(key=lambda e: (e.start_ps, -e.end_ps))
        stack: list[list[Any]] = []  # [event, time of the iterators nested in it]
        for event in [*events, None]:
            while stack and (event is None or event.start_ps >= stack[-1][0].end_ps):
                done, nested = stack.pop()
                self_time[done.name] += max(0, done.end_ps - done.start_ps - nested)
                if stack:
                    stack[-1][1] += done.end_ps - done.start_ps
            if event is not None:
                stack.append([event, 0])
    for path, spans in by_path.items():  # asynchronous stages: less their upstream's work during the wait
        if _ASYNC_STAGE.match(_stage_name(path)):
            upstream = [span for p, found in by_path.items() if p.startswith(path + "::") for span in found]
            self_time[path] = sum(max(0, b - a - _union_length(_clip(upstream, [(a, b)]))) for a, b in spans)
    candidates = {path: t for path, t in self_time.items() if _stage_name(path) not in _BUFFER_STAGES and t > 0}
    if candidates:
        path = max(candidates, key=candidates.__getitem__)
        return InputStage(_stage_name(path), path, candidates[path] / 1e12 / max(1, steps))
    python = _union_length(python_input)
    if python > 0:
        return InputStage(_PYTHON_INPUT, _PYTHON_INPUT, python / 1e12 / max(1, steps))
    return None


def _stage_name(path: str) -> str:
    """`Iterator::Root::Prefetch::ParallelMapV2` -> `ParallelMapV2` (an interleave's `[0]` dropped)."""
    return re.sub(r"\[\d+\]$", "", path.rsplit("::", 1)[-1])


# --------------------------------------------------------------------------- the breakdown


def analyze(
    space: Any,
    *,
    steps: int | None = None,
    wall_sec: float | None = None,
    num_replicas: int = 1,
    gpu_replicas: Mapping[int, int | Sequence[int]] | None = None,
    steps_per_mark: int = 1,
) -> StepTime:
    """The step-time breakdown of a trace of `steps` training steps that took `wall_sec`.

    Where the trace marks its steps (:func:`trace_steps`), the marks give the
    step count and the window instead, and :attr:`StepTime.step_source` says
    so: nothing outside the marked steps counts.

    Args:
        space: An XSpace message (:func:`keras_gpu.meters.xspace.load`).
        steps: Training steps the trace covers; `None`: the executions of the
            step function in the trace, else 1.
        wall_sec: Their wall time, measured by the caller around the trace;
            `None`: from the first to the last step function (or event) in the trace.
        num_replicas: This worker's replicas.
        gpu_replicas: For GPU traces, `{GPU index in the trace: local replica
            index, or several for logical GPUs sharing one device}`
            (:func:`keras_gpu.core.topology.trace_gpu_replicas`); by default the
            GPUs that ran kernels, in index order, run replicas 0, 1, ...
        steps_per_mark: Training steps in each marked step: Keras'
            `steps_per_execution`, where each mark holds one call of the
            train function.

    Raises:
        ValueError: For `steps < 1`, `wall_sec <= 0`, `steps_per_mark < 1`,
            or a trace without a host plane.
    """
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise ValueError(f"`steps` must be a positive integer. Received: steps={steps!r}")
    if isinstance(steps_per_mark, bool) or not isinstance(steps_per_mark, int) or steps_per_mark < 1:
        raise ValueError(
            "`steps_per_mark` must be a positive integer (the steps_per_execution of the traced fit). "
            f"Received: steps_per_mark={steps_per_mark!r}"
        )
    if wall_sec is not None and not wall_sec > 0:
        raise ValueError(f"`wall_sec` must be a positive number of seconds. Received: wall_sec={wall_sec!r}")
    by_name = xspace.planes(space)
    if _HOST_PLANE not in by_name:
        raise ValueError(f"The trace has no {_HOST_PLANE} plane. Received planes: {sorted(by_name)}")
    num_replicas = max(1, num_replicas)
    gpus = _read_gpus(by_name)
    on_gpu = any(gpu.has_kernels or gpu.parts["transfer"] for gpu in gpus.values())
    host = _read_host(by_name[_HOST_PLANE], on_gpu, num_replicas)
    marked = _steps_from(host.markers, gpus)
    notes: list[str] = []
    if marked is not None:
        if marked.source == "host markers" and steps_per_mark > 1:
            marked = marked._replace(steps=marked.steps * steps_per_mark)
        if steps is not None and steps != marked.steps:
            notes.append(f"the trace marks {marked.steps} steps where the caller counted {steps}; the marks are used")
        steps, wall_sec, source = marked.steps, sum(e - s for s, e in marked.windows) / 1e12, marked.source
    else:
        steps, wall_sec, source = _unmarked_window(host, gpus, steps, wall_sec)
    worked = {g for g, gpu in gpus.items() if any(_clip(p, _device_windows(marked, g)) for p in gpu.parts.values())}
    mapping, mapping_notes = _replica_map(gpus, gpu_replicas, num_replicas, worked)
    windows = marked.windows if marked is not None else None
    parts = {k: _clip(v, windows) for k, v in host.parts.items()}
    replicas = [{k: _clip(v, windows) for k, v in r.items()} for r in host.replicas]
    for g, gpu in gpus.items():
        own = _device_windows(marked, g)
        busy = {"compute": _clip(gpu.parts["compute"], own)}
        busy["communication"] = _clip(gpu.parts["communication"] + gpu.parts["transfer"], own)
        for kind in ("compute", "communication"):
            parts[kind].extend(_clip(busy[kind], windows))
            for r in mapping.get(g, ()):
                replicas[r][kind].extend(busy[kind])
    return _result(
        parts, replicas, host, gpus, mapping, marked,
        steps=steps, wall_sec=wall_sec, source=source, notes=tuple(notes + mapping_notes), on_gpu=on_gpu,
    )


def _unmarked_window(
    host: _Host, gpus: Mapping[int, _Gpu], steps: int | None, wall_sec: float | None
) -> tuple[int, float, str]:
    """`(steps, wall_sec, step_source)` of a trace without step marks: the caller's, else the trace's own."""
    if steps is not None and wall_sec is not None:
        return steps, wall_sec, "caller"
    spans = host.functions or [s for p in host.parts.values() for s in p] + [
        s for gpu in gpus.values() for p in gpu.parts.values() for s in p
    ]
    if wall_sec is None:
        if not spans:
            raise ValueError("The trace holds no step function and no timed work, so `wall_sec` is needed. Received: wall_sec=None")
        wall_sec = (max(e for _, e in spans) - min(s for s, _ in spans)) / 1e12
    source = "step function" if host.functions else "trace"
    return (steps if steps is not None else max(1, len(host.functions))), wall_sec, source


def _result(
    parts: dict[str, list[_Span]],
    replicas: list[dict[str, list[_Span]]],
    host: _Host,
    gpus: Mapping[int, _Gpu],
    mapping: Mapping[int, tuple[int, ...]],
    marked: TraceSteps | None,
    *,
    steps: int,
    wall_sec: float,
    source: str,
    notes: tuple[str, ...],
    on_gpu: bool,
) -> StepTime:
    """Assemble the :class:`StepTime` from the intervals of each part, per step."""
    compute = _union_length(parts["compute"])
    busy = _union_length(parts["compute"] + parts["communication"])
    everything = _union_length(parts["compute"] + parts["communication"] + parts["input"])
    shares = [compute / 1e12, (busy - compute) / 1e12, (everything - busy) / 1e12]
    if sum(shares) > wall_sec:  # the trace ran a little past the caller's window
        shares = [p * wall_sec / sum(shares) for p in shares]
    compute_s, comm_s, input_s = shares
    per_step = 1.0 / steps
    other_s = max(0.0, wall_sec - compute_s - comm_s - input_s)
    functions = _clip(host.functions, marked.windows if marked is not None else None)
    host_s = other_s if not functions else min(other_s, max(0.0, wall_sec - _union_length(functions) / 1e12))
    devices = []
    for g in sorted(gpus):
        own = _device_windows(marked, g)
        times = [_union_length(_clip(gpus[g].parts[k], own)) / 1e12 * per_step for k in ("compute", "communication", "transfer")]
        if any(times):
            devices.append(DeviceTime(gpus[g].name, *times, replicas=mapping.get(g, ())))
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
            for r in replicas
        ),
        source="gpu" if on_gpu else "host",
        host_sec=host_s * per_step,
        step_source=source,
        devices=tuple(devices),
        input_stage=input_stage(
            [e for e in host.iterators if _clip([(e.start_ps, e.start_ps + 1)], marked and marked.windows)],
            steps,
            _clip(host.python_input, marked and marked.windows),
        ),
        notes=notes,
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


#: What to try for the slowest input stage, by its name (first match; the last matches all).
_STAGE_ADVICE: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"Map"), "raise num_parallel_calls or cache its output"),
    (re.compile(r"Batch"), "batch in parallel (num_parallel_calls) or map after batching, over whole batches"),
    (
        re.compile(r"Generator|^Python input$"),
        ("Python reads one element at a time: use more PyDataset workers, tf.data ops instead of a generator, "
         "or cache its output"),
    ),
    (
        re.compile(r"Interleave|Record|TextLine|FixedLength|FlatMap"),
        "read files in parallel (interleave with num_parallel_calls) or cache what it reads",
    ),
    (re.compile(r""), "cache its output or move its work out of the step's path (prefetch)"),
)


def _input_hint(step: StepTime) -> str:
    share = f"input-bound: {step.share('input'):.0%} of each step waits for input"
    stage = step.input_stage
    if stage is None:
        return (
            f"{share}; make the input pipeline faster (more parallel map calls, caching, prefetching to the "
            "device) or do less work per sample on the host"
        )
    advice = next(text for pattern, text in _STAGE_ADVICE if pattern.search(stage.name))
    return f"{share}; the slowest stage is {stage.name} ({1e3 * stage.sec_per_step:.3g} ms per batch): {advice}"


_STAGE_HEADER = "| slowest input stage | tf.data iterator | self time per batch (ms) | input share of the step |"


def input_stage_markdown(step: StepTime) -> str | None:
    """The slowest input stage of a breakdown as Markdown; `None` where the trace shows none.

    A one-row table (the stage, its tf.data iterator, its self time per batch
    in ms, the input share of the step), then the input-bound hint where the
    step is input-bound. `StepTimeLogger` writes it as the
    `step_time/input_stage` text summary; :func:`read_input_stage_markdown`
    reads it back.
    """
    stage = step.input_stage
    if stage is None:
        return None
    lines = [
        _STAGE_HEADER,
        "|---|---|---|---|",
        f"| {stage.name} | {stage.path} | {1e3 * stage.sec_per_step:.6g} | {step.share('input'):.0%} |",
    ]
    if step.share("input") >= BOUND_SHARE:
        lines += ["", f"{_input_hint(step)}."]
    return "\n".join(lines)


def read_input_stage_markdown(text: str) -> InputStage | None:
    """The :class:`InputStage` that :func:`input_stage_markdown` wrote; `None` for any other text."""
    rows = text.splitlines()
    if len(rows) < 3 or rows[0].strip() != _STAGE_HEADER:
        return None
    cells = [c.strip() for c in rows[2].strip().strip("|").split("|")]
    if len(cells) != 4:
        return None
    try:
        sec = float(cells[2]) / 1e3
    except ValueError:
        return None
    return InputStage(cells[0], cells[1], sec) if cells[0] else None


def verdict(step: StepTime, replica_labels: Sequence[str] | None = None) -> list[str]:
    """Hints that follow from the measurement, each naming its number; empty when none does.

    An input-bound hint names the input stage with the most self time
    (:attr:`StepTime.input_stage`) and what to try for it; a
    communication-bound one says when host-device copies are most of it.
    """
    hints = []
    if step.share("input") >= BOUND_SHARE:
        hints.append(_input_hint(step))
    if step.share("communication") >= BOUND_SHARE:
        copies = sum(d.transfer_sec for d in step.devices)
        if copies > step.communication_sec / 2:
            hints.append(
                f"communication-bound: {step.share('communication'):.0%} of each step is spent in reductions and "
                "transfers, mostly copies between host and device; keep tensors on the device and prefetch input "
                "to it"
            )
        else:
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
