"""The series the keras-gpu tab draws: memory over time, the step's parts per window, and the cluster's gathers.

`TabSeries` is the `visit` of `keras_gpu.output.log_dir.read_log_dir`: it
keeps, of each run as the report's reader reads it, what the tab's charts
need, so that the event files are read once for the report's numbers and
the charts. Each chart's points are the logged points themselves (a long
series thinned to `MAX_POINTS`: the largest value of each bucket, so that no
peak is lost).

The cluster view's matrix is every worker's busy time per step at each of
the chief's gathers (`keras_gpu.hooks.step_probe.ProbeWindow.busy_sec`:
input, compute and host time, waits for the others left out), read from
each worker's own run; above `MAX_ROWS` workers it keeps the `SLOWEST_FEW`
slowest, ranked by their median ratio to each gather's median. Where only
the chief writes a run (above 16 workers, by default), the chief's
spread across workers at each gather stands for it.

Examples:
    >>> thin([(1, 5.0), (2, 9.0), (3, 1.0), (4, 2.0)], 2)
    [[2, 9.0], [4, 2.0]]
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Sequence
from typing import Any

from keras_gpu.meters.cluster_view import SLOWDOWN_NAMED
from keras_gpu.output import tags as _tags
from keras_gpu.output.reader import worker_of
from keras_gpu.output.step_time_tags import CLUSTER_SPREADS, SPREAD_STATS, STEP_PARTS
from keras_gpu.output.tag_records import Scalars, Texts

__all__ = ["MAX_POINTS", "MAX_ROWS", "SLOWEST_FEW", "TabSeries", "thin"]

#: Points per line at most; a longer series keeps the largest value of each bucket.
MAX_POINTS = 300
#: Workers the matrix shows one row each, at most; above, the slowest few.
MAX_ROWS = 32
#: Workers the matrix keeps above `MAX_ROWS`: the slowest by their median ratio to each gather's median.
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


def _chief_cluster(scalars: Scalars) -> dict[str, Any] | None:
    """The chief's gathers as it logged them: steps, the spreads across workers, the slowest, the slowdown.

    The one place the tab reads the chief's `cluster/*` series.
    """
    slowest = scalars.get(_tags.CLUSTER_SLOWEST_WORKER.name())
    if not slowest:
        return None
    steps = [s for s, _ in slowest]

    def at(tag: _tags.Tag) -> list[float | None]:
        values = dict(scalars.get(tag.name(), []))
        return [_finite(values.get(s)) for s in steps]

    named = Counter(int(w) for _, w in slowest)
    return {
        "steps": steps,
        "spreads": {part: {stat: at(tag) for stat, tag in zip(SPREAD_STATS, stat_tags)} for part, stat_tags in CLUSTER_SPREADS},
        "slowest_worker": [int(w) for _, w in slowest],
        "imbalance": at(_tags.CLUSTER_IMBALANCE),
        "slowdown": at(_tags.CLUSTER_SLOWDOWN),
        "slowdown_worker": at(_tags.CLUSTER_SLOWDOWN_WORKER),
        "workers_reporting": at(_tags.CLUSTER_WORKERS_REPORTING),
        "named_slowest": [{"worker": w, "gathers": n} for w, n in named.most_common(SLOWEST_FEW)],
        "slowdown_named": SLOWDOWN_NAMED,
    }


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

    def __call__(self, run: str, scalars: Scalars, texts: Texts, cut: tuple[str, ...]) -> None:
        self.cut[run] = cut
        self.keras_gpu[run] = any(_tags.match(t) is not None for t in (*scalars, *texts))
        self.runs[run] = {"memory": _memory(scalars, self.max_points), "steps": _steps(scalars, self.max_points)}
        worker, label = worker_of(run)
        if worker is not None:
            self._busy[worker] = (label, _busy(scalars))
        chief = _chief_cluster(scalars)
        if chief is not None and self._chief is None:
            self._chief = chief

    def cluster(self) -> dict[str, Any] | None:
        """The chief's gathers and, where the workers wrote their runs, the workers x gathers matrix."""
        if self._chief is None:
            return None
        return {**self._chief, "matrix": matrix(self._chief["steps"], self._busy)}

    def as_dict(self) -> dict[str, Any]:
        """`{"runs": {run: {"memory", "steps"}}, "cluster"}`: plain data, `None` for what was not measured."""
        return {"runs": self.runs, "cluster": self.cluster()}


def matrix(gathers: Sequence[int], busy: dict[int, tuple[str, dict[int, float]]]) -> dict[str, Any] | None:
    """Workers x gathers: each worker's busy seconds per step at each gather, against the gather's median.

    Args:
        gathers: The chief's gather steps.
        busy: Per worker index, `(label, {step: busy seconds per step})`
            from its run.

    Returns:
        `None` where no worker but the chief logged a breakdown at a gather;
        else `{"gathers", "median", "workers", "rows", "shown"}`: per gather
        the median across workers; `rows`, per worker shown, its `busy`
        and `ratio` to each gather's median, its `score` (the median
        ratio), and against its own best: `best_sec`, `last_sec` and
        `slowdown` (the largest ratio of a gather's busy time to its best
        so far); `shown`: `"all"` or `"slowest"`.
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
        rows.sort(key=lambda r: (-(r["score"] or 0.0), r["worker"]))
        rows = rows[:SLOWEST_FEW]
        shown = "slowest"
    return {"gathers": list(gathers), "median": median, "workers": len(cells), "rows": rows, "shown": shown}
