"""The cluster view's table of the slowest workers as Markdown, written and read back in this one place.

`StepTimeLogger` writes `slowest_markdown` as the `cluster/slowest_workers`
text summary of each gather (`keras_gpu.output.tags.CLUSTER_SLOWEST_WORKERS`);
`keras-gpu report` reads it back with `read_slowest_markdown`, so that the
fit's verdict (`keras_gpu.meters.cluster_view.verdict_over`) comes out the
same from the event files as on the chief, at any number of workers.

Examples:
    >>> from keras_gpu.meters.cluster_view import WorkerFacts
    >>> from keras_gpu.output.cluster_text import read_slowest_markdown, slowest_markdown
    >>> row = WorkerFacts(517, 0.012, 0.125, 6.5, "compute", 0.009, 0.007, True)
    >>> print(slowest_markdown([row]))
    | worker | busy ms per step | others wait (share of the step) | score (spreads) | part | part ms per step | others' median ms | stands out |
    |---|---|---|---|---|---|---|---|
    | 517 | 12 | 12.5% | 6.5 | compute | 9 | 7 | yes |
    >>> read_slowest_markdown(slowest_markdown([row])) == (row,)
    True
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from keras_gpu.meters.cluster_view import PARTS, WorkerFacts

__all__ = ["read_slowest_markdown", "slowest_markdown"]

_COLUMNS = (
    "worker", "busy ms per step", "others wait (share of the step)", "score (spreads)", "part", "part ms per step",
    "others' median ms", "stands out",
)
_HEADER = "| " + " | ".join(_COLUMNS) + " |"


def _number(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.6g}"


def slowest_markdown(listed: Sequence[WorkerFacts]) -> str | None:
    """A gather's slowest workers (`GatherFacts.slowest`, highest score first) as a Markdown table; `None` for none."""
    if not listed:
        return None
    lines = [_HEADER, "|" + "---|" * len(_COLUMNS)]
    for w in listed:
        lines.append(
            f"| {w.worker} | {_number(1e3 * w.busy_sec)} | {_number(100 * w.imbalance)}% | {_number(w.score)} | "
            f"{w.part or '-'} | {_number(1e3 * w.part_sec)} | {_number(1e3 * w.part_median_sec)} | "
            f"{'yes' if w.out else 'no'} |"
        )
    return "\n".join(lines)


def _float(cell: str, scale: float = 1.0) -> float:
    return math.nan if cell == "-" else float(cell.rstrip("%")) / scale


def read_slowest_markdown(text: str) -> tuple[WorkerFacts, ...]:
    """The `WorkerFacts` that `slowest_markdown` wrote (seconds and fractions again), in order; empty for any other text."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != _HEADER:
        return ()
    found = []
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != len(_COLUMNS):
            continue
        try:
            found.append(WorkerFacts(
                worker=int(cells[0]), busy_sec=_float(cells[1], 1e3), imbalance=_float(cells[2], 100.0),
                score=_float(cells[3]), part=cells[4] if cells[4] in PARTS else None,
                part_sec=_float(cells[5], 1e3), part_median_sec=_float(cells[6], 1e3), out=cells[7] == "yes",
            ))
        except ValueError:
            continue
    return tuple(found)
