"""Half-open intervals on a trace's clock (picoseconds): their union's length, and clipping to windows."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["Span", "clip", "union_length"]

#: `(start, end)` on a trace's clock, picoseconds, end excluded.
Span = tuple[int, int]


def union_length(intervals: Iterable[Span]) -> int:
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


def clip(intervals: Iterable[Span], windows: Sequence[Span] | None) -> list[Span]:
    """The parts of `intervals` inside `windows` (all of them when `windows` is `None`)."""
    if windows is None:
        return list(intervals)
    return [(max(a, s), min(b, e)) for a, b in intervals for s, e in windows if a < e and b > s]

