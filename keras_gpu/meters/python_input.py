"""Python's reads of the training input in a trace: which `next()` calls are the data iterator's, and what they read.

JAX's profiler records Python's calls on the `python` line of the host plane:
a Python function as `$file.py:LINE name`, a C function as `$module name`
(`$builtins next`). A `next()` call is the input only where Keras' data
iterator makes it: its caller is Keras' trainer or epoch iterator
(`DATA_ITERATOR_CALLER`: the JAX trainer's `iterator_step` and its
epoch iterator's `__next__`). Every other `next()` is not input: the one in
`contextlib`'s `__exit__` that stops `jax.profiler.trace` (seconds long),
the ones in JAX's argument binding (`inspect.Signature._bind`), the user's
own.

What a data-iterator `next()` read is named from the Keras data adapter
frame under it (`SOURCES`), with the user's own function it called
(a `PyDataset`'s `__getitem__`, a generator), so a hint can say what was
measured and what fits it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NamedTuple

from keras_gpu.meters import xspace
from keras_gpu.meters._spans import Span

__all__ = ["DATA_ITERATOR_CALLER", "PYTHON_NEXT", "SOURCES", "PythonRead", "data_reads"]

#: The name of Python's `next()` on the tracer's line.
PYTHON_NEXT = "$builtins next"
#: The Python frames (by name) whose `next()` calls read the training data: Keras' trainer and epoch iterator.
DATA_ITERATOR_CALLER = re.compile(r"^\$(trainer|epoch_iterator)\.py:\d+ (iterator_step|__next__|_enumerate_iterator)$")
#: What a read went through, by the Keras frame under the `next()`: `(source, frame pattern)`, first match wins.
SOURCES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("PyDataset workers", re.compile(r"^\$py_dataset_adapter\.py:\d+ _(finite|infinite)_enqueuer_generator$")),
    ("PyDataset", re.compile(r"^\$py_dataset_adapter\.py:\d+ _(finite|infinite)_generator$")),
    ("arrays", re.compile(r"^\$array_data_adapter\.py:\d+ ")),
    ("tf.data", re.compile(r"^\$tf_dataset_adapter\.py:\d+ ")),
    ("DataLoader", re.compile(r"^\$torch_data_loader_adapter\.py:\d+ ")),
    ("Grain", re.compile(r"^\$grain_dataset_adapter\.py:\d+ ")),
    ("generator", re.compile(r"^\$data_adapter_utils\.py:\d+ get_jax_iterator$")),
)
# The sources whose adapter frame calls the user's own function on the training thread.
_USER_CALLS = frozenset({"PyDataset", "generator"})
# A Python function's frame, `$file:LINE name` (the file may be `<string>`); C functions have no line.
_PYTHON_FRAME = re.compile(r"^\$(\S+:\d+ .+)$")
# Keras' own data plumbing around the user's function (batch standardising, conversion).
_KERAS_DATA_FRAME = re.compile(r"^\$(\w+_adapter|data_adapter_utils|tree_api|optree_impl)\.py:")


class PythonRead(NamedTuple):
    """One `next()` of Keras' data iterator.

    Attributes:
        span: When it ran, picoseconds on the trace's clock.
        source: What it read through (a name of `SOURCES`), or `None`
            where no adapter frame is under it (the epoch iterator's own step).
        function: The user's function it called (`"data.py:10 __getitem__"`,
            `"data.py:3 gen"`), the longest Python frame the adapter's frame
            called, for a `PyDataset` read on this thread and a generator;
            `None` for the other sources (a `PyDataset`'s workers run
            `__getitem__` on threads of their own).
        function_ps: That function's time in this read, picoseconds.
    """

    span: Span
    source: str | None
    function: str | None
    function_ps: int


def data_reads(events: Iterable[xspace.TraceEvent]) -> list[PythonRead]:
    """The data iterator's `next()` calls among one Python line's events, each with what it read."""
    ordered = sorted(events, key=lambda e: (e.start_ps, -e.end_ps))
    reads = []
    stack: list[int] = []  # indices of the events enclosing the current one
    for i, event in enumerate(ordered):
        while stack and ordered[stack[-1]].end_ps <= event.start_ps:
            stack.pop()
        caller = ordered[stack[-1]].name if stack else ""
        if event.name == PYTHON_NEXT and DATA_ITERATOR_CALLER.match(caller):
            reads.append(_read(ordered, i))
        stack.append(i)
    return reads


def _read(ordered: list[xspace.TraceEvent], i: int) -> PythonRead:
    """The read of the `next()` at `ordered[i]`: the adapter frame under it (the first in `SOURCES`
    order), and, for a `PyDataset` read on this thread or a generator, the user's function it called."""
    top = ordered[i]
    found: dict[str, int] = {}
    j = i + 1
    while j < len(ordered) and ordered[j].start_ps < top.end_ps:
        source = next((name for name, pattern in SOURCES if pattern.match(ordered[j].name)), None)
        if source is not None:
            found.setdefault(source, j)
        j += 1
    span = (top.start_ps, top.end_ps)
    source = next((name for name, _ in SOURCES if name in found), None)
    if source is None:
        return PythonRead(span, None, None, 0)
    function, ps = _longest_child(ordered, found[source]) if source in _USER_CALLS else (None, 0)
    return PythonRead(span, source, function, ps)


def _longest_child(ordered: list[xspace.TraceEvent], j: int) -> tuple[str | None, int]:
    """The longest Python function frame called directly by the frame `ordered[j]` (`$file.py:N name` -> `file.py:N name`)."""
    parent = ordered[j]
    best: tuple[str | None, int] = (None, 0)
    k, child_end = j + 1, parent.start_ps
    while k < len(ordered) and ordered[k].start_ps < parent.end_ps:
        event = ordered[k]
        if event.start_ps >= child_end:  # a direct child: it starts after the previous child ended
            child_end = event.end_ps
            match = _PYTHON_FRAME.match(event.name)
            if match and event.end_ps - event.start_ps > best[1] and not _KERAS_DATA_FRAME.match(event.name):
                best = (match.group(1), event.end_ps - event.start_ps)
        k += 1
    return best
