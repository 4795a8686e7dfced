"""Reading a profiler trace's planes for the step-time breakdown: ops by kind, the host and GPU timelines, step marks.

Plain Python over an XSpace (`keras_gpu.meters.xspace`). The host plane's
events are sorted into compute, communication and input intervals (per
replica by name scope), the GPU planes' line by line
(`keras_gpu.meters.gpu_lines`); host step markers (`STEP_MARKER`)
and GPU `Steps` lines give the steps a trace marks (`trace_steps`).
`keras_gpu.meters.step_time.analyze` turns what is read here into the
breakdown.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from typing import Any, NamedTuple

from keras_gpu.core import topology
from keras_gpu.meters import gpu_lines, xspace
from keras_gpu.meters._spans import Span
from keras_gpu.meters.python_input import PythonRead, data_reads

__all__ = [
    "COMMUNICATION_OPS",
    "HOST_PLANE",
    "INPUT_OPS",
    "METADATA_PLANE",
    "STEP_MARKER",
    "GpuEvents",
    "HostEvents",
    "TraceSteps",
    "classify_op",
    "read_gpus",
    "read_host",
    "step_marker",
    "steps_from",
    "trace_steps",
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

#: The host plane of a trace.
HOST_PLANE = "/host:CPU"
#: The plane whose stats name the versions of the profiled process (`gpu_version`, ...): JAX's profiler writes it.
METADATA_PLANE = "/host:metadata"
_REPLICA_SCOPE = re.compile(r"(?:^|/)replica_(\d+)(?:/|$)")
_UPDATE_SCOPE = re.compile(r"(?:^|/)update_(\d+)(?:_\d+)?(?:/|$)")
_INPUT_ACTIVITY = re.compile(r"^Iterator.*::DoCompute$|^IteratorGetNext")
# JAX on the CPU: XLA runs each compiled step on the PjRt client's threads; the
# Python tracer names the data iterator's `next()` (see keras_gpu.meters.python_input).
_XLA_CPU_LINE = re.compile(r"^(tf_)?XLAPjRtCpuClient")
# TensorFlow with `jit_compile=True` on the CPU: the compiled step runs as one
# XLA executable (its HLO ops carry no op type or replica scope).
_XLA_EXECUTION = re.compile(r"^CpuExecutable::Execute")
# The backend's step function as the Python thread calls it: Keras' TensorFlow
# trainer (`one_step_on_iterator`, `multi_step_on_iterator`) and JAX's jitted step.
_STEP_FUNCTION = re.compile(r"^(one|multi)_step_on_(iterator|data)$|^PjitFunction\(.*step")
# Multi-worker collectives run asynchronously: their op event on a compute line
# is only the launch. The exchange itself, waiting for the slowest peer
# included, is on the `collective_ops` lines and in the executor's activities.
_COLLECTIVE_ACTIVITY = re.compile(r"^(Base)?CollectiveExecutor::")


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
    windows: tuple[Span, ...]
    per_device: dict[int, tuple[Span, ...]]
    source: str


def step_marker(step_num: int) -> tuple[str, dict[str, int]]:
    """`(name, stats)` of the host step marker for training step `step_num`.

    `tf.profiler.experimental.Trace(name, **stats)` (TensorFlow) and
    `jax.profiler.StepTraceAnnotation(name, step_num=step_num)` (JAX) around a
    step write it; `trace_steps` reads it back, as xprof does.
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


class HostEvents(NamedTuple):
    """What the host plane holds, as intervals by part."""

    parts: dict[str, list[Span]]
    replicas: list[dict[str, list[Span]]]
    functions: list[Span]
    markers: dict[int, Span]
    iterators: list[xspace.TraceEvent]
    python_input: list[PythonRead]
    python: list[xspace.TraceEvent]


class GpuEvents:
    """One GPU (or TPU) plane: its intervals by part, its step windows, the replica its ops name."""

    def __init__(self, index: int, device: str = "GPU") -> None:
        self.index = index
        self.device = device
        self.name = f"{device}:{index}"
        self.parts: dict[str, list[Span]] = {"compute": [], "communication": [], "transfer": []}
        self.steps: dict[Any, Span] = {}
        self.scopes: Counter[int | None] = Counter()
        self.kernels: list[tuple[str, Span]] = []  # every kernel and copy on the streams, by name
        self.unknown_lines: set[str] = set()

    @property
    def has_kernels(self) -> bool:
        return bool(self.parts["compute"] or self.parts["communication"])


def read_host(plane: Any, on_gpu: bool, num_replicas: int) -> HostEvents:
    """Sort the host plane's events into parts (on GPUs, host op events are launches and count for nothing);
    `plane=None` (a trace of device planes only) holds nothing."""
    host = HostEvents({"compute": [], "communication": [], "input": []}, [{"compute": [], "communication": []}
                 for _ in range(num_replicas)], [], {}, [], [], [])
    parts, replicas = host.parts, host.replicas
    marker_lines: set[str] = set()
    python_lines: dict[str, list[xspace.TraceEvent]] = {}
    for event in xspace.events(plane) if plane is not None else ():
        span = (event.start_ps, event.end_ps)
        line, name = event.line, event.name
        if name == STEP_MARKER:
            marker_lines.add(line)
        if line.startswith("tf_data") and name.startswith("Iterator::"):
            host.iterators.append(event)
        if line.startswith("python"):
            if _STEP_FUNCTION.match(name):
                host.functions.append(span)
            python_lines.setdefault(line, []).append(event)
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
    # One execution of the step function per outermost event: JAX writes two nested `PjitFunction(...)` per call.
    host.functions[:] = _outermost(host.functions)
    # Input on the Python lines: the data iterator's `next()` only.
    for found in python_lines.values():
        host.python.extend(found)
        reads = data_reads(found)
        host.python_input.extend(reads)
        parts["input"].extend(read.span for read in reads)
    # Step markers on whichever thread ran the loop (its line is named after the thread).
    for event in xspace.events(plane, stats=True, lines=marker_lines.__contains__) if marker_lines else ():
        step = (event.stats or {}).get("step_num")
        if event.name == STEP_MARKER and isinstance(step, int):
            old = host.markers.get(step)
            host.markers[step] = (event.start_ps, event.end_ps) if old is None else (
                min(old[0], event.start_ps), max(old[1], event.end_ps))
    return host


def _outermost(spans: list[Span]) -> list[Span]:
    """The spans not inside another one, in order (of spans that are equal, one)."""
    out: list[Span] = []
    for span in sorted(spans, key=lambda s: (s[0], -s[1])):
        if not out or span[1] > out[-1][1]:
            out.append(span)
    return out


def read_gpus(by_name: Mapping[str, Any]) -> dict[int, GpuEvents]:
    """Every `/device:GPU:k` plane, read line by line (see `keras_gpu.meters.gpu_lines`); in a trace
    without GPU planes, every `/device:TPU:k` plane (its `XLA Ops` line), by index alike."""
    gpus: dict[int, GpuEvents] = {}
    planes = {name: topology.parse_device(name) for name in by_name}
    planes = {n: p for n, p in planes.items() if p is not None and p.index is not None and p.job is None}
    device = "GPU" if any(p.device_type == "GPU" for p in planes.values()) else "TPU"
    for plane_name, parsed in planes.items():
        if parsed.device_type != device or parsed.index is None:
            continue
        plane = by_name[plane_name]
        gpu = gpus.setdefault(parsed.index, GpuEvents(parsed.index, device))
        for event in xspace.events(plane, stats=True):
            kind = gpu_lines.line_kind(event.line, device)
            if kind is None:
                gpu.unknown_lines.add(event.line)
            elif kind.name == "steps":
                step = (event.stats or {}).get("group_id", event.name)
                old = gpu.steps.get(step)
                gpu.steps[step] = (event.start_ps, event.end_ps) if old is None else (
                    min(old[0], event.start_ps), max(old[1], event.end_ps))
            elif kind.busy:
                part = gpu_lines.event_kind(event.name, device).part
                gpu.parts[part].append((event.start_ps, event.end_ps))
                gpu.kernels.append((event.name, (event.start_ps, event.end_ps)))
                if part == "compute":
                    stats = event.stats or {}
                    gpu.scopes[_replica_scope(str(stats.get("annotation") or stats.get("level 0") or ""))] += 1
    return gpus


def trace_steps(space: Any) -> TraceSteps | None:
    """The steps a trace marks, or `None` when it marks none.

    Host step markers (`step_marker`) win: one window from the first
    marked step's start to the last one's end, so the time between steps
    counts. Else the GPU planes' `Steps` lines: each device's own window per
    step, and as the step's window the longest of them (a step ends when its
    slowest device is done).
    """
    by_name = xspace.planes(space)
    host = by_name.get(HOST_PLANE)
    markers: dict[int, Span] = {}
    if host is not None:
        markers = read_host(host, False, 1).markers
    return steps_from(markers, read_gpus(by_name))


def steps_from(markers: Mapping[int, Span], gpus: Mapping[int, GpuEvents]) -> TraceSteps | None:
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

