"""What each line of a GPU plane in a profiler trace holds, and what its time counts as.

A `/device:GPU:k` plane of an XSpace (`keras_gpu.meters.xspace`) has two sorts
of lines. **Streams** (`Stream #142(Compute)`, `Stream #135(MemcpyH2D)`,
ROCm's `Stream #3(MemcpyOther)`, or just `Stream #7`) hold what the device
really ran: kernels and copies, each once. CUDA names its copies
`MemcpyH2D`, `MemcpyD2H`, `MemcpyD2D`, ...; ROCm names them
`CopyHostToDevice`, `CopyDeviceToHost`, `CopyDeviceToDevice`.
**Derived lines** (`Steps`, `TensorFlow Ops`, `TensorFlow Name Scope`,
`XLA Modules`, `XLA Ops`, `Source`, ...) are views the profiler builds from
the streams: the same time again, grouped by step, op, scope or source line,
and nested. Adding them to busy time would count each kernel several times.

A `/device:TPU:k` plane has no streams: its `XLA Ops` line holds the HLO
ops as the TPU core ran them, each once, and is what counts
(`TPU_LINE_KINDS`, `TPU_EVENT_KINDS`); `XLA Modules`,
`Async XLA Ops` (the spans of asynchronous ops, which overlap the ops) and
`XLA TraceMe` are views again.

`LINE_KINDS` names each line kind and what it counts for;
`EVENT_KINDS` names what an event on a stream is. Both are read in
order; the first match wins.
"""

from __future__ import annotations

import re
from typing import NamedTuple

__all__ = [
    "EVENT_KINDS",
    "LINE_KINDS",
    "TPU_EVENT_KINDS",
    "TPU_LINE_KINDS",
    "EventKind",
    "LineKind",
    "event_kind",
    "line_kind",
]


class LineKind(NamedTuple):
    """One kind of line on a GPU plane.

    Attributes:
        name: The kind's name (`"stream"`, `"steps"`, ...).
        pattern: Matches the line's name.
        busy: Whether its events are device work (only streams are).
        meaning: What the line holds.
    """

    name: str
    pattern: re.Pattern[str]
    busy: bool
    meaning: str


class EventKind(NamedTuple):
    """One kind of event on a GPU stream.

    Attributes:
        name: The kind's name (`"kernel"`, `"collective"`, `"host_copy"`, `"peer_copy"`, `"device_copy"`).
        pattern: Matches the event's name.
        part: What its time counts as: `"compute"`, `"communication"` or `"transfer"`.
        meaning: What the event is.
    """

    name: str
    pattern: re.Pattern[str]
    part: str
    meaning: str


LINE_KINDS: tuple[LineKind, ...] = (
    LineKind("stream", re.compile(r"^Stream #\d+"), True, "kernels and copies as the device ran them"),
    LineKind("steps", re.compile(r"^Steps$"), False, "one event per training step: where each step begins and ends"),
    LineKind(
        "framework_ops",
        re.compile(r"^(TensorFlow|Framework|JAX) (Ops|Name Scope)$"),
        False,
        "the kernels' time again, by framework op and name scope (nested)",
    ),
    LineKind(
        "xla",
        re.compile(r"^(Async )?XLA (Modules|Ops|TraceMe)$"),
        False,
        "the kernels' time again, by XLA module and HLO op",
    ),
    LineKind("source", re.compile(r"^Source$"), False, "the kernels' time again, by source line"),
    LineKind("launch_stats", re.compile(r"^Launch Stats$"), False, "kernel launch statistics"),
)
"""Line kinds of a GPU plane; a line that matches none is reported as unknown and not counted."""

EVENT_KINDS: tuple[EventKind, ...] = (
    EventKind(
        "host_copy",
        re.compile(r"(?i)^memcpy ?(h2d|d2h|htod|dtoh)|^Copy(HostToDevice|DeviceToHost)"),
        "transfer",
        "a copy between host and device memory",
    ),
    EventKind(
        "peer_copy",
        re.compile(r"(?i)^memcpy ?(p2p|ptop|peer)"),
        "communication",
        "a copy between two devices (peer to peer)",
    ),
    EventKind(
        "device_copy",
        re.compile(r"(?i)^memcpy ?(d2d|dtod)|^CopyDeviceToDevice"),
        "transfer",
        "a copy within one device's memory (ROCm's `CopyDeviceToDevice` too, which does not say which devices)",
    ),
    EventKind(
        "collective",
        re.compile(r"(?i)nccl|rccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|collective|memset.*p2p"),
        "communication",
        "a collective (NCCL) kernel: a reduction or exchange between devices",
    ),
    EventKind("kernel", re.compile(r""), "compute", "a kernel (or memset): the device computing"),
)
"""Event kinds on a stream line; every event matches one (`kernel` last)."""


TPU_LINE_KINDS: tuple[LineKind, ...] = (
    LineKind("ops", re.compile(r"^XLA Ops$"), True, "the HLO ops as the TPU core ran them"),
    LineKind("steps", re.compile(r"^Steps$"), False, "one event per training step: where each step begins and ends"),
    LineKind(
        "xla",
        re.compile(r"^(XLA Modules|Async XLA Ops|XLA TraceMe)$"),
        False,
        "the ops' time again by XLA module, the spans of asynchronous ops (overlapping the ops), annotations",
    ),
    LineKind(
        "framework_ops",
        re.compile(r"^(TensorFlow|Framework|JAX) (Ops|Name Scope)$|^Source$"),
        False,
        "the ops' time again, by framework op, name scope or source line",
    ),
)
"""Line kinds of a TPU plane; a line that matches none is reported as unknown and not counted."""

TPU_EVENT_KINDS: tuple[EventKind, ...] = (
    EventKind(
        "collective",
        re.compile(r"^(all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute|collective-broadcast|send|recv)"
                   r"(-start|-done)?(\.\d+)?$"),
        "communication",
        "a collective HLO op: a reduction or exchange between TPU cores",
    ),
    EventKind(
        "async_copy",
        re.compile(r"^copy-(start|done)(\.\d+)?$"),
        "transfer",
        "an asynchronous copy between memory spaces (host memory included)",
    ),
    EventKind("op", re.compile(r""), "compute", "an HLO op (a fusion, convolution, ...): the core computing"),
)
"""Event kinds on a TPU plane's `XLA Ops` line; every event matches one (`op` last)."""


def line_kind(name: str, device: str = "GPU") -> LineKind | None:
    """The kind of a GPU (or, `device="TPU"`, TPU) plane's line, by its name; `None` for a line the table does not know."""
    for kind in TPU_LINE_KINDS if device == "TPU" else LINE_KINDS:
        if kind.pattern.search(name):
            return kind
    return None


def event_kind(name: str, device: str = "GPU") -> EventKind:
    """The kind of an event on a GPU stream (or, `device="TPU"`, a TPU's `XLA Ops` line), by its name."""
    table = TPU_EVENT_KINDS if device == "TPU" else EVENT_KINDS
    for kind in table:
        if kind.pattern.search(name):
            return kind
    return table[-1]
