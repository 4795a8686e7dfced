"""The series the keras-gpu tab draws: memory over time, the step's parts per window, and the cluster's gathers.

`TabSeries` is the `visit` of `keras_gpu.output.log_dir.read_log_dir`: it
keeps, of each run as the report's reader reads it, what the tab's charts
need, so that the event files are read once for the report's numbers and
the charts. Each chart's points are the logged points themselves (a long
series thinned to `MAX_POINTS`: the largest value of each bucket, so that no
peak is lost).

The cluster view is the chief's: at each of its gathers, the spread across
the workers (min, median, max), the slowest worker's score against the
rule's threshold, the workers standing out, and the table of the slowest
workers (`cluster/slowest_workers`), from which `standing` draws the
report's slowest workers over the gathers. Its matrix is every worker's busy
time per step at each gather (`keras_gpu.hooks.step_probe.ProbeWindow.busy_sec`:
input, compute and host time, waits for the others left out), read from
each worker's own run; above `MAX_ROWS` workers it keeps the workers the
report names and the slowest others up to `SLOWEST_FEW`, ranked by their
median ratio to each gather's median. Where only the chief writes a run
(above 16 workers, by default), its spread across the workers at each
gather stands for the matrix.

Examples:
    >>> thin([(1, 5.0), (2, 9.0), (3, 1.0), (4, 2.0)], 2)
    [[2, 9.0], [4, 2.0]]
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from keras_gpu.meters.cluster_view import SLOWDOWN_NAMED, WorkerFacts
from keras_gpu.output import tags as _tags
from keras_gpu.output.cluster_text import read_slowest_markdown
from keras_gpu.output.reader import worker_of
from keras_gpu.output.report_records import ClusterReport
from keras_gpu.output.step_time_tags import CLUSTER_SPREADS, SPREAD_STATS, STEP_PARTS
from keras_gpu.output.tag_records import Scalars, Texts

__all__ = ["MAX_POINTS", "MAX_ROWS", "SLOWEST_FEW", "TabSeries", "matrix", "named_workers", "standing", "thin"]

#: Points per line at most; a longer series keeps the largest value of each bucket.
MAX_POINTS = 300
#: Workers the matrix shows one row each, at most; above, the slowest few.
MAX_ROWS = 32
#: Workers the matrix keeps above `MAX_ROWS`: those the report names, then the slowest others by their median
#: ratio to each gather's median.
SLOWEST_FEW = 12

_MEMORY_LINES = (  # (tag, the line's name with its field, dashed)
    (_tags.ALLOC_CURRENT, "allocator in use, {device}", False),
    (_tags.ALLOC_PEAK, "allocator peak, {device}", True),
    (_tags.GPU_PROCESS_MEMORY, "GPU {gpu}, this process (NVML)", False),
    (_tags.GPU_MEMORY_USED, "GPU {gpu}, all processes (NVML)", True),
    (_tags.HOST_RSS, "host RSS", False),
)
_PART_NAMES = ("input", "compute", "communication", "transfer", "other")


def thin(points: Sequence[tuple[int, float]], limit: int) -> list[list[float]]:
    """`[[step, value], ...]` of `points`, at most `limit` of them: each bucket's last step and largest value."""
    if len(points) <= limit:
        return [[step, value] for step, value in points]
    size = math.ceil(len(points) / limit)
    return [
        [points[min(i + size, len(points)) - 1][0], max(v for _, v in points[i : i + size])]
        for i in range(0, len(points), size)
    ]


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _memory(scalars: Scalars, limit: int) -> list[dict[str, Any]]:
    """One line per device and kind of memory the run logged, in bytes, each with its device's `group`
    (`"GPU 0"` for the allocator's `GPU_0` and NVML's GPU 0 alike, `"host"`)."""
    lines = []
    for tag, name, dashed in _MEMORY_LINES:
        for found in sorted(t for t in scalars if tag.match(t) is not None):
            fields = tag.match(found) or {}
            group = fields["device"].replace("_", " ") if "device" in fields else (
                f"GPU {fields['gpu']}" if "gpu" in fields else "host")
            lines.append({"name": name.format(**fields), "group": group, "dashed": dashed,
                          "points": thin(scalars[found], limit)})
    return lines


def _steps(scalars: Scalars, limit: int) -> dict[str, Any] | None:
    """Per logged breakdown (a trace, or a probe window), its step and each part in seconds per step."""
    at = {field.removesuffix("_sec"): dict(scalars.get(tag.name(), [])) for tag, field in STEP_PARTS}
    steps = sorted(at["step"])
    if not steps:
        return None
    if len(steps) > limit:  # evenly spaced breakdowns: each bar is one logged breakdown
        steps = [steps[round(i * (len(steps) - 1) / (limit - 1))] for i in range(limit)]
    return {
        "steps": steps,
        "step_sec": [_finite(at["step"][s]) for s in steps],
        "parts": {part: [_finite(at[part].get(s)) for s in steps] for part in _PART_NAMES},
    }


def _busy(scalars: Scalars) -> dict[int, float]:
    """Per logged breakdown's step, the busy seconds per step: input (0 where not told apart), compute, host."""
    compute = dict(scalars.get(_tags.STEP_COMPUTE_SEC.name(), []))
    other = dict(scalars.get(_tags.STEP_OTHER_SEC.name(), []))
    inputs = dict(scalars.get(_tags.STEP_INPUT_SEC.name(), []))
    return {s: compute[s] + other[s] + inputs.get(s, 0.0) for s in compute.keys() & other.keys()}


def _chief_cluster(scalars: Scalars, texts: Texts) -> tuple[dict[str, Any], dict[int, tuple[WorkerFacts, ...]]] | None:
    """The chief's gathers as it logged them, and each gather's table of the slowest workers by its step.

    The one place the tab reads the chief's `cluster/*` series: per gather,
    the spreads across the workers, the slowest worker and its score, the
    rule's threshold, the workers standing out and reporting, the straggler
    so far (`None`: none yet), and the slowdown against the workers' own
    best (the largest, its worker, the median); `None` for a value not
    logged.
    """
    slowest = scalars.get(_tags.CLUSTER_SLOWEST_WORKER.name())
    if not slowest:
        return None
    steps = [s for s, _ in slowest]

    def at(tag: _tags.Tag) -> list[float | None]:
        values = dict(scalars.get(tag.name(), []))
        return [_finite(values.get(s)) for s in steps]

    logged = dict(texts.get(_tags.CLUSTER_SLOWEST_WORKERS.name(), []))
    tables = {s: read_slowest_markdown(logged[s]) for s in steps if s in logged}
    straggler = [None if v is None or v < 0 else int(v) for v in at(_tags.CLUSTER_STRAGGLER)]
    return {
        "steps": steps,
        "spreads": {part: {stat: at(tag) for stat, tag in zip(SPREAD_STATS, stat_tags)} for part, stat_tags in CLUSTER_SPREADS},
        "slowest_worker": [int(w) for _, w in slowest],
        "imbalance": at(_tags.CLUSTER_IMBALANCE),
        "slowest_score": at(_tags.CLUSTER_SLOWEST_SCORE),
        "threshold": at(_tags.CLUSTER_SCORE_THRESHOLD),
        "workers_out": at(_tags.CLUSTER_WORKERS_OUT),
        "straggler": straggler,
        "slowdown": at(_tags.CLUSTER_SLOWDOWN),
        "slowdown_worker": at(_tags.CLUSTER_SLOWDOWN_WORKER),
        "slowdown_median": at(_tags.CLUSTER_SLOWDOWN_MEDIAN),
        "workers_reporting": at(_tags.CLUSTER_WORKERS_REPORTING),
        "slowdown_named": SLOWDOWN_NAMED,
    }, tables


class TabSeries:
    """What the tab draws of each run, kept as `keras_gpu.output.reader.read_report` reads it (its `visit`).

    Args:
        max_points: Points per line at most (`MAX_POINTS`).
    """

    def __init__(self, max_points: int = MAX_POINTS) -> None:
        self.max_points = max_points
        self.runs: dict[str, dict[str, Any]] = {}
        self.cut: dict[str, tuple[str, ...]] = {}
        self.keras_gpu: dict[str, bool] = {}
        self._busy: dict[int, tuple[str, dict[int, float]]] = {}
        self._chief: dict[str, Any] | None = None
        self._tables: dict[int, tuple[WorkerFacts, ...]] = {}

    def __call__(self, run: str, scalars: Scalars, texts: Texts, cut: tuple[str, ...]) -> None:
        self.cut[run] = cut
        self.keras_gpu[run] = any(_tags.match(t) is not None for t in (*scalars, *texts))
        self.runs[run] = {"memory": _memory(scalars, self.max_points), "steps": _steps(scalars, self.max_points)}
        worker, label = worker_of(run)
        if worker is not None:
            self._busy[worker] = (label, _busy(scalars))
        if self._chief is None:
            chief = _chief_cluster(scalars, texts)
            if chief is not None:
                self._chief, self._tables = chief

    def cluster(self, named: Sequence[int] = ()) -> dict[str, Any] | None:
        """The chief's gathers, `standing` of the `named` workers and, where the workers wrote their runs, the
        workers x gathers matrix (which keeps the `named` workers, however many there are).

        Args:
            named: The workers the report names, in its order: its slowest
                workers over the fit, then other stragglers and a worker
                slowed against its own best (`named_workers`).
        """
        if self._chief is None:
            return None
        steps = self._chief["steps"]
        return {**self._chief, "standing": standing(steps, self._tables, named),
                "matrix": matrix(steps, self._busy, named)}

    def as_dict(self, named: Sequence[int] = ()) -> dict[str, Any]:
        """`{"runs": {run: {"memory", "steps"}}, "cluster"}`: plain data, `None` for what was not measured."""
        return {"runs": self.runs, "cluster": self.cluster(named)}


def named_workers(cluster: ClusterReport | None) -> list[int]:
    """The workers the report's cluster view names, in its order: the slowest workers over the fit
    (`ClusterReport.slowest_workers`), then the other stragglers and a worker slowed against its own best."""
    if cluster is None:
        return []
    verdict = cluster.verdict
    named = [s.worker for s in cluster.slowest_workers]
    for k in (verdict.straggler, *verdict.more_stragglers, verdict.slowed_worker):
        if k is not None and k not in named:
            named.append(k)
    return named


def standing(
    gathers: Sequence[int], tables: dict[int, tuple[WorkerFacts, ...]], workers: Sequence[int]
) -> dict[str, Any] | None:
    """Each of `workers` at each gather, as the gather's table of the slowest workers gives it.

    Args:
        gathers: The chief's gather steps.
        tables: Per gather step, its table (`cluster/slowest_workers`, read
            back by `keras_gpu.output.cluster_text.read_slowest_markdown`).
        workers: The workers to follow, in the order shown.

    Returns:
        `None` where no gather logged a table, or no worker is given; else
        `{"gathers", "workers", "score", "out", "part"}`: per worker, per
        gather, its score in spreads, whether it stood out and the part
        named (`None` where the gather did not list it among its highest
        scores).
    """
    if not tables or not workers:
        return None
    at = [{w.worker: w for w in tables.get(g, ())} for g in gathers]
    cells = [[by.get(k) for by in at] for k in workers]
    return {
        "gathers": list(gathers),
        "workers": list(workers),
        "score": [[None if w is None else _finite(w.score) for w in row] for row in cells],
        "out": [[None if w is None else w.out for w in row] for row in cells],
        "part": [[None if w is None else w.part for w in row] for row in cells],
    }


def matrix(
    gathers: Sequence[int], busy: dict[int, tuple[str, dict[int, float]]], named: Sequence[int] = ()
) -> dict[str, Any] | None:
    """Workers x gathers: each worker's busy seconds per step at each gather, against the gather's median.

    Args:
        gathers: The chief's gather steps.
        busy: Per worker index, `(label, {step: busy seconds per step})`
            from its run.
        named: Workers kept above `MAX_ROWS` whatever their ratio, first, in
            this order (the report's: `named_workers`).

    Returns:
        `None` where no worker but the chief logged a breakdown at a gather;
        else `{"gathers", "median", "workers", "rows", "shown"}`: per gather
        the median across workers; `rows`, per worker shown, its `busy`
        and `ratio` to each gather's median, its `score` (the median
        ratio), and against its own best: `best_sec`, `last_sec` and
        `slowdown` (the largest ratio of a gather's busy time to its best
        so far); `shown`: `"all"` (in worker order) or `"slowest"` (the
        `named` workers, then the others by score up to `SLOWEST_FEW` rows
        in all).
    """
    cells = {w: [(s_busy.get(g)) for g in gathers] for w, (_label, s_busy) in busy.items()}
    cells = {w: row for w, row in cells.items() if any(v is not None for v in row)}
    if len(cells) < 2:
        return None
    median = []
    for i in range(len(gathers)):
        column = [row[i] for row in cells.values() if row[i] is not None]
        median.append(statistics.median(column) if column else None)
    rows = []
    for w, row in cells.items():
        ratio = [None if v is None or not m else v / m for v, m in zip(row, median)]
        measured = [v for v in row if v is not None]
        best, slowdown = math.inf, 1.0
        for v in measured:
            best = min(best, v)
            slowdown = max(slowdown, v / best if best > 0 else 1.0)
        rows.append({
            "worker": w, "label": busy[w][0], "busy": row, "ratio": ratio,
            "score": statistics.median(r for r in ratio if r is not None) if any(r is not None for r in ratio) else None,
            "best_sec": best, "last_sec": measured[-1], "slowdown": slowdown,
        })
    if len(rows) <= MAX_ROWS:
        rows.sort(key=lambda r: r["worker"])
        shown = "all"
    else:
        by_worker = {r["worker"]: r for r in rows}
        kept = [k for k in dict.fromkeys(named) if k in by_worker]
        others = sorted((r for r in rows if r["worker"] not in kept), key=lambda r: (-(r["score"] or 0.0), r["worker"]))
        pinned = [by_worker[k] for k in kept]
        rows = pinned + others[: max(0, SLOWEST_FEW - len(pinned))]
        shown = "slowest"
    return {"gathers": list(gathers), "median": median, "workers": len(cells), "rows": rows, "shown": shown}
