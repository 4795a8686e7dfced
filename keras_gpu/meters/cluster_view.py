"""The cluster view: every worker's step-time breakdown side by side, and the straggler.

Plain Python. In synchronous data-parallel training every worker waits for
the slowest one inside the collectives, so every worker logs the same rate;
what differs is how much of each step a worker is *busy* (its own compute,
and its host time between steps: see
:attr:`keras_gpu.hooks.step_probe.ProbeWindow.busy_sec`) and how much it waits. The
worker with the most busy time per step is the one the others wait for, and
the *imbalance* is how long the others wait for it: its busy time minus the
median of the other workers', as a share of the step. A difference of a
fraction of a millisecond on a short step is no straggler; a worker that
makes the others wait a tenth of every step is.

Each worker contributes one row (:data:`ROW_FIELDS`) at a step every worker
reaches (see `StepTimeLogger`; the rows ride on a training step's gradient
all-reduce, or an all-gather): what its step probe
(:mod:`keras_gpu.hooks.step_probe`) measured since the last share. A worker with
nothing measured sends a row of NaN ("not available"); a field it cannot
measure (the input wait with several steps per call) is NaN alone.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "ROW_FIELDS", "STRAGGLER_IMBALANCE", "ClusterSummary", "straggler_over", "straggler_sentence", "summarize_rows",
]

#: One worker's row: whether it is available (1.0), its breakdown in seconds
#: per step (`other_sec`: host time between steps), its busy time, the steps
#: measured, and its proposed period to the next gather, in steps.
ROW_FIELDS = (
    "available", "step_sec", "input_sec", "compute_sec", "communication_sec", "other_sec", "busy_sec",
    "traced_steps", "period_steps",
)
#: A straggler is named from this imbalance on: the others wait for it a
#: tenth of every step. Balanced loopback CPU workers measured 0.1-7.5%
#: (the chief's callbacks write the runs); the slowed workers of the tests,
#: 20-60%.
STRAGGLER_IMBALANCE = 0.1

_FIELD = {name: i for i, name in enumerate(ROW_FIELDS)}


@dataclass(frozen=True)
class ClusterSummary:
    """The workers' breakdowns at one gather.

    Attributes:
        workers: Workers in the job.
        reporting: Workers whose breakdown was available.
        slowest_worker: Index of the worker with the most busy time per step.
        imbalance: Its busy time minus the median of the other workers', over
            its step time: the share of each step the others wait for it.
        busy, input, communication: `(min, median, max)` across the reporting
            workers, in seconds per step.
        rows: `{worker index: {field: value}}` of the reporting workers.

    :func:`keras_gpu.output.step_time_tags.cluster_values` gives its `cluster/*` scalars.
    """

    workers: int
    reporting: int
    slowest_worker: int
    imbalance: float
    busy: tuple[float, float, float]
    input: tuple[float, float, float]
    communication: tuple[float, float, float]
    rows: dict[int, dict[str, float]]


def _spread(values: Sequence[float]) -> tuple[float, float, float]:
    """`(min, median, max)` of the measured values (NaN: not measured); NaN for all three when none is."""
    measured = [v for v in values if not math.isnan(v)]
    if not measured:
        return math.nan, math.nan, math.nan
    return min(measured), statistics.median(measured), max(measured)


def summarize_rows(rows: Sequence[Sequence[float]]) -> ClusterSummary | None:
    """The summary of one gather's rows (row k is worker k's); `None` when no worker reported."""
    reporting = {
        k: {name: float(row[i]) for name, i in _FIELD.items()}
        for k, row in enumerate(rows)
        if len(row) == len(ROW_FIELDS) and row[_FIELD["available"]] == 1.0 and not math.isnan(row[_FIELD["busy_sec"]])
    }
    if not reporting:
        return None
    busy = {k: r["busy_sec"] for k, r in reporting.items()}
    slowest = max(busy, key=lambda k: (busy[k], -k))
    others = [b for k, b in busy.items() if k != slowest]
    median = statistics.median(others) if others else busy[slowest]
    step = reporting[slowest]["step_sec"]
    imbalance = (busy[slowest] - median) / step if step > 0 else 0.0
    return ClusterSummary(
        workers=len(rows),
        reporting=len(reporting),
        slowest_worker=slowest,
        imbalance=imbalance,
        busy=_spread(list(busy.values())),
        input=_spread([r["input_sec"] for r in reporting.values()]),
        communication=_spread([r["communication_sec"] for r in reporting.values()]),
        rows=reporting,
    )


def straggler_over(gathers: Sequence[tuple[int, float]]) -> tuple[int | None, float | None]:
    """`(straggler, imbalance)` over a fit's gathers of `(slowest worker, imbalance)`.

    A straggler is named only when most gathers show a clear imbalance
    (above :data:`STRAGGLER_IMBALANCE`): a single noisy gather names nobody.
    The imbalance is then the median of the straggler's clear gathers, and
    otherwise the median of all gathers (`None` without any).
    """
    if not gathers:
        return None, None
    clear = [(w, i) for w, i in gathers if i > STRAGGLER_IMBALANCE]
    if clear and len(clear) * 2 > len(gathers):
        straggler = Counter(w for w, _ in clear).most_common(1)[0][0]
        return straggler, statistics.median(i for w, i in clear if w == straggler)
    return None, statistics.median(i for _, i in gathers)


def straggler_sentence(slowest_worker: int | None, imbalance: float | None) -> str:
    """"worker 1 is the straggler: ..." when the imbalance is clear, else "no straggler"."""
    if slowest_worker is None or imbalance is None or imbalance <= STRAGGLER_IMBALANCE:
        return "no straggler" + ("" if imbalance is None else f" (imbalance {imbalance:.0%})")
    return f"worker {slowest_worker} is the straggler: the other workers wait for it {imbalance:.0%} of each step"
