"""Which runs of a log directory the report lists, and in which order: one place for `keras-gpu report` and the tab.

`run_order` sorts run directories by depth, then by name with each number
taken as a number (`natural_key`: `worker_2/train` before `worker_10/train`):
the order of `keras-gpu report`'s tables, of its `--json` and of the
keras-gpu tab, whose log directories follow `natural_key` too.
`shown_runs` picks the runs a report of many workers lists one by one (the
chief, the stragglers and the slowest workers); the tab lists the same
runs first.

Examples:
    >>> runs = ["worker_10/train", "train", "worker_2/train", "worker_1/train"]
    >>> sorted(runs, key=run_order)
    ['train', 'worker_1/train', 'worker_2/train', 'worker_10/train']
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from keras_gpu.output.report_records import Report, RunSummary

__all__ = ["RUNS_SHOWN", "SLOWEST_SHOWN", "natural_key", "run_order", "shown_runs"]

#: Runs the report's tables list one by one; a log directory with more (a job of many workers, each writing
#: its own run) shows the chief, the stragglers and the slowest workers of the cluster view, and counts the
#: rest (`keras-gpu report --json` lists every run).
RUNS_SHOWN = 16
#: Workers of the cluster view's ranking the report shows.
SLOWEST_SHOWN = 5

_DIGITS = re.compile(r"(\d+)")
_SEP = re.compile(r"[\\/]")


def natural_key(path: str) -> tuple:
    """The sort key of a path by name, each number in it taken as a number (`run2` before `run10`); the path
    itself breaks a tie (`worker_01` against `worker_1`)."""
    parts = [p for p in _SEP.split(path) if p]
    return tuple(tuple(int(x) if i % 2 else x for i, x in enumerate(_DIGITS.split(part))) for part in parts), path


def run_order(path: str) -> tuple:
    """The sort key of a run directory relative to its log directory: the shallowest first (the chief's `train`
    before `worker_1/train`), then `natural_key`."""
    return len([p for p in _SEP.split(path) if p]), natural_key(path)


def shown_runs(
    report: Report, limit: int = RUNS_SHOWN, slowest: int = SLOWEST_SHOWN
) -> tuple[list[RunSummary], int]:
    """The runs the report's tables list, and how many they leave out.

    Every run, up to `limit`; above, the chief, the runs of the workers the
    cluster view names (the straggler, other stragglers, a worker slowed
    against its own best, the `slowest` slowest) and runs of no worker, in
    their order.

    Args:
        report: A `keras_gpu.output.reader.read_report` result.
        limit: Runs listed one by one at most, before only the named ones are.
        slowest: Workers of the cluster view's ranking named.
    """
    runs = report.runs
    if len(runs) <= limit:
        return runs, 0
    named = {0}
    cluster = report.cluster
    if cluster is not None:
        verdict = cluster.verdict
        named |= {k for k in (verdict.straggler, verdict.slowed_worker) if k is not None}
        named |= set(verdict.more_stragglers) | {s.worker for s in cluster.slowest_workers[:slowest]}
    shown = [r for r in runs if r.worker is None or r.worker in named]
    return shown, len(runs) - len(shown)
