"""The cluster view: every worker's step-time breakdown side by side, and the straggler.

Plain Python. In synchronous data-parallel training every worker waits for
the slowest one inside the collectives, so every worker logs the same rate;
what differs is how much of each step a worker is *busy* (its own compute,
its own input wait and its host time between steps: see
`keras_gpu.hooks.step_probe.ProbeWindow.busy_sec`) and how much it waits
for the others (the all-reduce, the distributed iterator's check). The
worker with the most busy time per step is the one the others wait for, and
the *imbalance* is how long the others wait for it: its busy time minus the
median of the other workers', as a share of the step. A difference of a
fraction of a millisecond on a short step is no straggler; a worker that
makes the others wait a tenth of every step, well beyond the differences
among the other workers, in most gathers of a fit, is; the verdict names the
part (compute, input, host) where it differs from the others' median.
Each worker is also held against its own best window (`cluster/slowdown`):
a worker that turns slow is named even where every worker slowed alike.

Each worker contributes one row (`ROW_FIELDS`) at a step every worker
reaches (see `StepTimeLogger`; the rows ride on a training step's gradient
all-reduce, or an all-gather): what its step probe
(`keras_gpu.hooks.step_probe`) measured since the last share. A worker with
nothing measured sends a row of NaN ("not available"); a field it cannot
measure (an input wait not told from the host time) is NaN alone.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "CLEAR_OF_SPREAD", "PARTS", "ROW_FIELDS", "SLOWDOWN_NAMED", "STRAGGLER_IMBALANCE", "ClusterSummary", "GatherFacts",
    "Verdict", "summarize_rows", "verdict_over",
]

#: One worker's row: whether it is available (1.0), its breakdown in seconds
#: per step (`other_sec`: host time between calls of the train function), its
#: busy time, the steps measured, and its proposed period to the next gather,
#: in steps.
ROW_FIELDS = (
    "available", "step_sec", "input_sec", "compute_sec", "communication_sec", "other_sec", "busy_sec",
    "traced_steps", "period_steps",
)
#: The parts of a worker's busy time, and the row field of each.
PARTS = ("compute", "input", "host")
_PART_FIELD = {"compute": "compute_sec", "input": "input_sec", "host": "other_sec"}
_PART_PHRASE = {"compute": "compute", "input": "input wait", "host": "host time between steps"}
#: A gather shows a straggler from this imbalance on: the others wait for it
#: a tenth of every step...
STRAGGLER_IMBALANCE = 0.1
#: ...and its excess over the others' median busy time is this many times
#: the spread (max - min) of the others' own busy times. Both measured on
#: balanced loopback jobs of 2, 3 and 4 CPU workers (see
#: `benchmarks/studies/straggler_rule.py`).
CLEAR_OF_SPREAD = 2.0
#: A worker whose busy time per step in the latest window is this many times
#: its own best window's is named as slowed.
SLOWDOWN_NAMED = 1.5

_FIELD = {name: i for i, name in enumerate(ROW_FIELDS)}


@dataclass(frozen=True)
class GatherFacts:
    """What one gather says about the slowest worker: what a verdict over a fit's gathers reads.

    Attributes:
        slowest_worker: Index of the worker with the most busy time per step.
        imbalance: Its busy time minus the median of the other workers', over
            its step time: the share of each step the others wait for it.
        part: The part of its busy time (`PARTS`) that exceeds the
            other workers' median of the same part the most (`None`: not
            known, a run logged before parts were).
        part_sec: Its seconds per step in that part.
        part_median_sec: The other workers' median of that part.
        excess_sec: Its busy time minus the other workers' median.
        spread_sec: Max minus min of the other workers' busy times (0 with
            one other worker).
        slowdown: The largest ratio, over the workers, of busy time per step
            in this window to the worker's own best window so far (`nan`:
            not tracked).
        slowdown_worker: The worker with that ratio (-1: not tracked).
    """

    slowest_worker: int
    imbalance: float
    part: str | None
    part_sec: float
    part_median_sec: float
    excess_sec: float
    spread_sec: float
    slowdown: float = math.nan
    slowdown_worker: int = -1

    @property
    def clear(self) -> bool:
        """Whether this gather shows a straggler: a clear imbalance, clear of the others' own spread."""
        return self.imbalance > STRAGGLER_IMBALANCE and self.excess_sec > CLEAR_OF_SPREAD * self.spread_sec


@dataclass(frozen=True)
class ClusterSummary(GatherFacts):
    """The workers' breakdowns at one gather (`GatherFacts`, and the spreads and rows).

    Attributes:
        workers: Workers in the job.
        reporting: Workers whose breakdown was available.
        busy, input, communication: `(min, median, max)` across the reporting
            workers, in seconds per step.
        rows: `{worker index: {field: value}}` of the reporting workers.

    `keras_gpu.output.step_time_tags.cluster_values` gives its `cluster/*` scalars.
    """

    workers: int = 0
    reporting: int = 0
    busy: tuple[float, float, float] = (math.nan, math.nan, math.nan)
    input: tuple[float, float, float] = (math.nan, math.nan, math.nan)
    communication: tuple[float, float, float] = (math.nan, math.nan, math.nan)
    rows: dict[int, dict[str, float]] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    """A fit's verdict over its gathers: the straggler with its part, and a worker slowed against its own best.

    Attributes:
        straggler: The worker named, or `None`.
        imbalance: The share of each step the others waited for it (the
            median of its clear gathers), or the median of all gathers where
            none is named; `None` without gathers.
        part, part_sec, part_median_sec: The straggler's part
            (`PARTS`) and its seconds per step against the others'
            median (medians over its clear gathers of that part).
        slowed_worker, slowdown: The worker with the largest ratio of a
            window's busy time to its own best, where it is at least
            `SLOWDOWN_NAMED`.
    """

    straggler: int | None = None
    imbalance: float | None = None
    part: str | None = None
    part_sec: float | None = None
    part_median_sec: float | None = None
    slowed_worker: int | None = None
    slowdown: float | None = None

    @property
    def sentence(self) -> str:
        """"worker 2 is the straggler: its input wait is 8.1 ms per step against a median of 0.4 ms (...)", or
        "no straggler (imbalance 3%)"; and a worker slowed against its own best, where one is."""
        if self.straggler is None or self.imbalance is None:
            text = "no straggler" + ("" if self.imbalance is None else f" (imbalance {self.imbalance:.0%})")
        else:
            text = f"worker {self.straggler} is the straggler: "
            if self.part is not None and self.part_sec is not None and self.part_median_sec is not None:
                text += (
                    f"its {_PART_PHRASE[self.part]} is {_ms(self.part_sec)} ms per step against a median of "
                    f"{_ms(self.part_median_sec)} ms (the others wait for it {self.imbalance:.0%} of each step)"
                )
            else:
                text += f"the other workers wait for it {self.imbalance:.0%} of each step"
        if self.slowed_worker is not None and self.slowdown is not None:
            text += f"; worker {self.slowed_worker} slowed {self.slowdown:.1f}x against its own best window"
        return text


def _ms(seconds: float) -> str:
    ms = 1e3 * seconds
    return f"{ms:.1f}" if ms < 100 else f"{ms:.0f}"


def _spread(values: Sequence[float]) -> tuple[float, float, float]:
    """`(min, median, max)` of the measured values (NaN: not measured); NaN for all three when none is."""
    measured = [v for v in values if not math.isnan(v)]
    if not measured:
        return math.nan, math.nan, math.nan
    return min(measured), statistics.median(measured), max(measured)


def _part(row: dict[str, float], part: str) -> float:
    value = row[_PART_FIELD[part]]
    return 0.0 if math.isnan(value) else value  # an input not told apart is in the host time


def summarize_rows(rows: Sequence[Sequence[float]], best: dict[int, float] | None = None) -> ClusterSummary | None:
    """The summary of one gather's rows (row k is worker k's); `None` when no worker reported.

    Args:
        rows: One row per worker (`ROW_FIELDS`).
        best: Each worker's lowest busy time per step in the fit's windows
            so far, updated here (`None`: no slowdown is tracked).
    """
    reporting = {
        k: {name: float(row[i]) for name, i in _FIELD.items()}
        for k, row in enumerate(rows)
        if len(row) == len(ROW_FIELDS) and row[_FIELD["available"]] == 1.0 and not math.isnan(row[_FIELD["busy_sec"]])
    }
    if not reporting:
        return None
    busy = {k: r["busy_sec"] for k, r in reporting.items()}
    slowest = max(busy, key=lambda k: (busy[k], -k))
    others = [k for k in busy if k != slowest]
    median = statistics.median(busy[k] for k in others) if others else busy[slowest]
    step = reporting[slowest]["step_sec"]
    excess = {
        part: _part(reporting[slowest], part) - (
            statistics.median(_part(reporting[k], part) for k in others) if others else _part(reporting[slowest], part)
        )
        for part in PARTS
    }
    part = max(PARTS, key=lambda p: excess[p])
    part_sec = _part(reporting[slowest], part)
    slowdown, slowdown_worker = math.nan, -1
    if best is not None:
        for k, b in busy.items():
            best[k] = min(best.get(k, b), b)
        ratios = {k: busy[k] / best[k] for k in busy if best[k] > 0}
        if ratios:
            slowdown_worker = max(ratios, key=lambda k: (ratios[k], -k))
            slowdown = ratios[slowdown_worker]
    return ClusterSummary(
        slowest_worker=slowest,
        imbalance=(busy[slowest] - median) / step if step > 0 else 0.0,
        part=part,
        part_sec=part_sec,
        part_median_sec=part_sec - excess[part],
        excess_sec=busy[slowest] - median,
        spread_sec=max(busy[k] for k in others) - min(busy[k] for k in others) if others else 0.0,
        slowdown=slowdown,
        slowdown_worker=slowdown_worker,
        workers=len(rows),
        reporting=len(reporting),
        busy=_spread(list(busy.values())),
        input=_spread([r["input_sec"] for r in reporting.values()]),
        communication=_spread([r["communication_sec"] for r in reporting.values()]),
        rows=reporting,
    )


def verdict_over(gathers: Sequence[GatherFacts]) -> Verdict:
    """The verdict over a fit's gathers (oldest first).

    A straggler is named only when it is the slowest worker in a clear
    gather (`GatherFacts.clear`) in more than half of all gathers: a
    single noisy gather names nobody. Its imbalance, part and part times are
    the medians over those gathers (the part: the one most of them show).
    Without a straggler, the imbalance is the median of all gathers. A worker
    is named as slowed where a gather's slowdown is at least
    `SLOWDOWN_NAMED` (the largest such gather's).
    """
    if not gathers:
        return Verdict()
    slowed = max((g for g in gathers if g.slowdown >= SLOWDOWN_NAMED), key=lambda g: g.slowdown, default=None)
    slow = {} if slowed is None else {"slowed_worker": slowed.slowdown_worker, "slowdown": slowed.slowdown}
    clear = [g for g in gathers if g.clear]
    if clear:
        straggler, count = Counter(g.slowest_worker for g in clear).most_common(1)[0]
        if count * 2 > len(gathers):
            own = [g for g in clear if g.slowest_worker == straggler]
            part = Counter(g.part for g in own).most_common(1)[0][0]
            in_part = [g for g in own if g.part == part]
            return Verdict(
                straggler=straggler,
                imbalance=statistics.median(g.imbalance for g in own),
                part=part,
                part_sec=statistics.median(g.part_sec for g in in_part),
                part_median_sec=statistics.median(g.part_median_sec for g in in_part),
                **slow,
            )
    return Verdict(imbalance=statistics.median(g.imbalance for g in gathers), **slow)
