"""What the training thread does between a step's dispatch and the next, as the profiler's Python tracer saw it.

`HOST_WORK` is the one table of the host activities keras-gpu names in a
breakdown, by the event names of the Python lines of a trace (JAX's and
TensorFlow's profilers with their Python tracer on): each activity's time
is the time of its outermost events inside the traced steps, per step.
Activities can nest in others' (Keras' log conversion runs inside the
callbacks' batch-end hooks), so their times do not add up. Where the
trace has no Python events (the Python tracer off), no activity is named.

On an H200 (`tests/data/h200_jax_small_mlp.xplane.pb`, 1.92 ms steps) the
training thread spent, per step, 0.42 ms dispatching the compiled step,
0.48 ms in Keras' log conversion (0.42 ms of it waiting for the step's
result) and 0.30 ms in `Layer.__setattr__`.

Examples:
    >>> from keras_gpu.meters.host_work import host_work
    >>> from keras_gpu.meters.xspace import TraceEvent
    >>> step = "PjitFunction(train_step)"
    >>> events = [TraceEvent("python3", step, 0, 400_000_000),
    ...           TraceEvent("python3", step, 1_000_000_000, 1_500_000_000)]
    >>> [(w.name, round(w.sec_per_step * 1e3, 3)) for w in host_work(events, None, 2)]
    [('dispatch of the compiled step (`PjitFunction(train_step)`)', 0.45)]
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from keras_gpu.meters._spans import Span, clip, union_length
from keras_gpu.meters.xspace import TraceEvent

__all__ = ["HOST_WORK", "RESULT_WAIT", "HostWork", "host_work"]

#: `(what it is, pattern of its event name)`, in the order the text names them when their times tie.
HOST_WORK: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("dispatch of the compiled step (`{name}`)", re.compile(r"^PjitFunction\(.*\)$|^(one|multi)_step_on_(iterator|data)$")),
    ("Keras' log conversion (`pythonify_logs`)", re.compile(r"python_utils\.py:\d+ pythonify_logs$")),
    ("`Layer.__setattr__`", re.compile(r"layer\.py:\d+ __setattr__$")),
    ("copying the batch to the device (`device_put`)", re.compile(r"api\.py:\d+ device_put$")),
)
#: The host waiting for a step's result: a device array read as NumPy (JAX), inside the log conversion.
RESULT_WAIT = re.compile(r"^np\.asarray\(jax\.Array\)$|^\$array\.py:\d+ _value$")


class HostWork(NamedTuple):
    """One host activity's time on the training thread.

    Attributes:
        name: What it is (a `HOST_WORK` entry, with the event's own name where the entry names it).
        sec_per_step: Seconds per step, its outermost events inside the traced steps.
        wait_sec_per_step: Of it, seconds per step waiting for a step's result (`RESULT_WAIT`).
    """

    name: str
    sec_per_step: float
    wait_sec_per_step: float = 0.0


def _outermost(events: Iterable[TraceEvent]) -> dict[str, list[Span]]:
    """Per line, the spans of events not nested in another of the same line (sorted)."""
    spans: dict[str, list[Span]] = {}
    for event in sorted(events, key=lambda e: (e.line, e.start_ps, -e.end_ps)):
        line = spans.setdefault(event.line, [])
        if not line or event.start_ps >= line[-1][1]:
            line.append((event.start_ps, event.end_ps))
    return spans


def host_work(events: Sequence[TraceEvent], windows: Sequence[Span] | None, steps: int) -> tuple[HostWork, ...]:
    """The `HOST_WORK` activities found on the Python lines' `events`, largest first.

    Args:
        events: The events of the host plane's Python lines.
        windows: The traced steps' windows (`None`: all of the trace).
        steps: Steps in the windows.
    """
    waits = [(e.start_ps, e.end_ps) for e in events if RESULT_WAIT.search(e.name)]
    found = []
    for label, pattern in HOST_WORK:
        matched = [e for e in events if pattern.search(e.name)]
        if not matched:
            continue
        spans = [s for line in _outermost(matched).values() for s in clip(line, windows)]
        sec = union_length(spans) / 1e12 / steps
        if sec <= 0:
            continue
        wait = union_length(_intersect(waits, spans)) / 1e12 / steps
        found.append(HostWork(label.format(name=matched[0].name), sec, wait))
    return tuple(sorted(found, key=lambda w: -w.sec_per_step))


def _intersect(spans: list[Span], within: list[Span]) -> list[Span]:
    """The parts of `spans` inside any of `within`."""
    return clip(spans, within) if within else []
