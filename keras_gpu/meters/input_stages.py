"""The input stage with the most self time, named from a trace's tf.data iterator events (or Python's `next()`)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

from keras_gpu.meters import xspace
from keras_gpu.meters._spans import Span, clip, union_length
from keras_gpu.meters.step_record import InputStage

__all__ = ["PYTHON_INPUT", "input_stage"]

# tf.data stages that only buffer: a consumer waiting in them waits for the stages upstream.
_BUFFER_STAGES = frozenset({"Root", "Prefetch", "MemoryCacheImpl", "Cache"})
# tf.data stages that work on their own threads while the consumer waits in their event.
_ASYNC_STAGE = re.compile(r"^(Parallel|LegacyParallel|MapAndBatch|Prefetch|DataService)")
#: The stage named where Python's `next()` read the input (a `PyDataset` or generator).
PYTHON_INPUT = "Python input"


def input_stage(
    iterators: Iterable[xspace.TraceEvent], steps: int, python_input: Iterable[Span] = ()
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
    python = union_length(python_input)
    if python > 0:
        return InputStage(PYTHON_INPUT, PYTHON_INPUT, python / 1e12 / max(1, steps))
    return None


def _stage_name(path: str) -> str:
    """`Iterator::Root::Prefetch::ParallelMapV2` -> `ParallelMapV2` (an interleave's `[0]` dropped)."""
    return re.sub(r"\[\d+\]$", "", path.rsplit("::", 1)[-1])

