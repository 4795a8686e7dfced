"""The cluster view: every worker's step-time breakdown side by side, and the straggler.

Plain Python. In synchronous data-parallel training every worker waits for
the slowest one inside the collectives, so every worker logs the same rate;
what differs is how much of each step a worker is *busy* (input, compute, and
host time outside the step function: see
:attr:`keras_gpu.steptime.StepTime.busy_sec`) and how much it waits. The
worker with the most busy time per step is the one the others wait for, and
its *imbalance* is its busy time over the median of the other workers', minus 1.

Each worker contributes one row (:data:`ROW_FIELDS`) to an all-gather at a
step every worker reaches (see `StepTimeLogger`); a worker whose trace is not
parsed yet, or failed, sends a row of NaN ("not available").
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from keras_gpu import tags as _tags

__all__ = ["ROW_FIELDS", "STRAGGLER_IMBALANCE", "ClusterSummary", "summarize_rows", "straggler_sentence"]

#: One worker's row: whether it is available (1.0), its breakdown in seconds
#: per step, its busy time, the steps traced, and its proposed trace period in steps.
ROW_FIELDS = (
    "available", "step_sec", "input_sec", "compute_sec", "communication_sec", "other_sec", "busy_sec",
    "traced_steps", "period_steps",
)
#: A straggler is named from this imbalance on (its busy time 10% above the
#: other workers' median). Balanced loopback workers measured within 1% of each
#: other; the slowed workers of the tests, 2.1x and 2.4x.
STRAGGLER_IMBALANCE = 0.1

_FIELD = {name: i for i, name in enumerate(ROW_FIELDS)}


@dataclass(frozen=True)
class ClusterSummary:
    """The workers' breakdowns at one gather.

    Attributes:
        workers: Workers in the job.
        reporting: Workers whose breakdown was available.
        slowest_worker: Index of the worker with the most busy time per step.
        imbalance: Its busy time over the median of the other workers', minus 1.
        busy, input, communication: `(min, median, max)` across the reporting
            workers, in seconds per step.
        rows: `{worker index: {field: value}}` of the reporting workers.
    """

    workers: int
    reporting: int
    slowest_worker: int
    imbalance: float
    busy: tuple[float, float, float]
    input: tuple[float, float, float]
    communication: tuple[float, float, float]
    rows: dict[int, dict[str, float]]

    def values(self) -> dict[str, float]:
        """The `cluster/*` scalars to log."""
        out = {
            _tags.CLUSTER_SLOWEST_WORKER.name(): float(self.slowest_worker),
            _tags.CLUSTER_IMBALANCE.name(): self.imbalance,
            _tags.CLUSTER_WORKERS_REPORTING.name(): float(self.reporting),
        }
        for part, stats in (("busy", self.busy), ("input", self.input), ("communication", self.communication)):
            for stat, value in zip(("min", "median", "max"), stats):
                out[f"cluster/{part}_sec/{stat}"] = value
        return out


def _spread(values: Sequence[float]) -> tuple[float, float, float]:
    return min(values), statistics.median(values), max(values)


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
    imbalance = busy[slowest] / median - 1.0 if median > 0 else 0.0
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


def straggler_sentence(slowest_worker: int | None, imbalance: float | None) -> str:
    """"worker 1 is the straggler: ..." when the imbalance is clear, else "no straggler"."""
    if slowest_worker is None or imbalance is None or imbalance <= STRAGGLER_IMBALANCE:
        return "no straggler" + ("" if imbalance is None else f" (imbalance {imbalance:.0%})")
    return (
        f"worker {slowest_worker} is the straggler: its steps take {1 + imbalance:.1f}x the median busy time; "
        "the others wait for it"
    )
