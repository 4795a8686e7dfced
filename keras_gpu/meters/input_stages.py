"""The input stage with the most self time, named from a trace's tf.data iterator events, or from the Python
data iterator's reads (`keras_gpu.meters.python_input`)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

from keras_gpu.meters import xspace
from keras_gpu.meters._spans import Span, clip, union_length
from keras_gpu.meters.python_input import PythonRead
from keras_gpu.meters.step_record import InputStage

__all__ = ["PYTHON_INPUT", "PYTHON_STAGES", "input_stage"]

# tf.data stages that only buffer: a consumer waiting in them waits for the stages upstream.
_BUFFER_STAGES = frozenset({"Root", "Prefetch", "MemoryCacheImpl", "Cache"})
# tf.data stages that work on their own threads while the consumer waits in their event.
_ASYNC_STAGE = re.compile(r"^(Parallel|LegacyParallel|MapAndBatch|Prefetch|DataService)")
#: The stage named where Keras' data iterator read the input in Python and the trace does not show through what.
PYTHON_INPUT = "Python input"
#: The stage named for each source of a Python read (`keras_gpu.meters.python_input.SOURCES`); a
#: `PyDataset` read on the training thread is named after its function (`"PyDataset __getitem__"`).
PYTHON_STAGES = {
    "PyDataset workers": "PyDataset workers",
    "PyDataset": "PyDataset",
    "generator": "generator",
    "arrays": "array slicing",
    "tf.data": "tf.data iterator",
    "DataLoader": "DataLoader",
    "Grain": "Grain",
}


def input_stage(
    iterators: Iterable[xspace.TraceEvent], steps: int, python_input: Iterable[PythonRead] = ()
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
    stage ran but Keras' data iterator read the input in Python (JAX), the
    stage is what it read through, with its time: a `PyDataset`'s
    `__getitem__` on the training thread (path: the function,
    `"data.py:10 __getitem__"`), a generator (its function), the wait for a
    `PyDataset`'s workers, array slicing, a `tf.data` or `DataLoader`
    iterator (`PYTHON_STAGES`), else `"Python input"`.

    Args:
        iterators: The host plane's `Iterator::...` events.
        steps: Steps in the trace (the time is divided by it).
        python_input: The data iterator's reads in Python
            (`keras_gpu.meters.python_input.data_reads`).
    """
    iterators = list(iterators)
    by_path: dict[str, list[Span]] = {}
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
            self_time[path] = sum(max(0, b - a - union_length(clip(upstream, [(a, b)]))) for a, b in spans)
    candidates = {path: t for path, t in self_time.items() if _stage_name(path) not in _BUFFER_STAGES and t > 0}
    if candidates:
        path = max(candidates, key=candidates.__getitem__)
        return InputStage(_stage_name(path), path, candidates[path] / 1e12 / max(1, steps))
    return _python_stage(python_input, steps)


def _python_stage(reads: Iterable[PythonRead], steps: int) -> InputStage | None:
    """The Python read with the most time: by source and user function (that function's own time), else
    the reads' time."""
    spans: dict[tuple[str, str], list[Span]] = {}
    function_ps: Counter[tuple[str, str]] = Counter()
    for read in reads:
        if read.source is None:
            key = (PYTHON_INPUT, PYTHON_INPUT)
        elif read.function is not None:
            key = (f"{PYTHON_STAGES[read.source]} {read.function.rsplit(' ', 1)[-1]}"
                   if read.source == "PyDataset" else PYTHON_STAGES[read.source], read.function)
            function_ps[key] += read.function_ps
        else:
            key = (PYTHON_STAGES[read.source],) * 2
        spans.setdefault(key, []).append(read.span)
    times = {key: function_ps[key] if key in function_ps else union_length(found) for key, found in spans.items()}
    times = {key: t for key, t in times.items() if t > 0}
    if not times:
        return None
    (name, path), ps = max(times.items(), key=lambda item: item[1])
    return InputStage(name, path, ps / 1e12 / max(1, steps))


def _stage_name(path: str) -> str:
    """`Iterator::Root::Prefetch::ParallelMapV2` -> `ParallelMapV2` (an interleave's `[0]` dropped)."""
    return re.sub(r"\[\d+\]$", "", path.rsplit("::", 1)[-1])

