"""The cluster view: every worker's step-time breakdown side by side, and the straggler.

In synchronous data-parallel training every worker waits for the slowest one
inside the collectives, so every worker logs the same rate; what differs is
how much of each step a worker is *busy* (its own compute, its own input wait
and its host time between steps: see
`keras_gpu.hooks.step_probe.ProbeWindow.busy_sec`) and how much it waits for
the others (the all-reduce, the distributed iterator's check). A worker the
others wait for has more busy time than they have; how long they wait is its
*imbalance*: its busy time minus the median of the other workers', as a
share of the step. Each worker is also held against its own best window
(`cluster/slowdown`): a worker that turns slow is named even where every
worker slowed alike, and the median of the workers' ratios tells a cluster
that slowed as a whole. A window's best is its lowest busy time, which a
hiccup does not move; a worker (or the cluster) is named as slowed only
where it is slowed in two gathers or more, so that one hiccup names nobody.

**The rule, per gather** (`summarize_rows`). Each worker's *excess* (its busy
time minus the other workers' median) is measured in units of the *spread*
of the other workers' busy times: 1.4826 times their median absolute
deviation, which is their standard deviation where their noise is normal,
and which one hiccup on another worker, or a handful, barely moves (the
range max - min, which the rule used before, grows with every hiccup and
with the number of workers). Where the other workers are too few to show a
spread of their own (one other worker has none), a prior spread of
`PRIOR_NOISE` of their median, worth `PRIOR_WORKERS` degrees of freedom, is pooled with
theirs; and the spread is never taken below `NOISE_FLOOR` of their median,
so that a perfectly quiet cluster does not call half a percent a straggler.
A worker *stands out* in the gather where its excess is more than
`score_threshold(n)` spreads (`n`: the workers reporting) and the others wait
for it more than `STRAGGLER_IMBALANCE` of each step.

Why that threshold: with `n` balanced workers whose busy times carry
independent normal noise, a worker's excess is more than `t` spreads with
chance `1 - Phi(t)`, and some worker's is with chance at most `n (1 - Phi(t))`
(the union bound). `t = Phi^-1(1 - FALSE_ALARM / n)` holds that to
`FALSE_ALARM` per gather at any `n`: 2.58 spreads for 2 workers, 3.02 for 8,
3.60 for 64, 4.27 for 1,024 and 4.57 for 4,096. It grows as `sqrt(2 ln n)`,
as the largest of `n` normal deviates does, so that the noisiest of many
balanced workers is not named, while a steady straggler's excess does not
shrink with `n` (the spread is estimated better with more workers).

**The rule, per fit** (`verdict_over`). A worker is named the straggler when
it stands out in more than half of the fit's gathers: one hiccup, however
large, names nobody, and a worker persistently a little slower than the
rest (a slower node) widens the spread it is judged against rather than
being called a straggler by chance. Where noise is independent from gather
to gather, a balanced fit of `G` gathers names some worker with chance at
most `n` times the chance that a binomial of `G` draws at `FALSE_ALARM / n`
exceeds `G / 2`. The verdict names the part (compute, input, host) where the
straggler's time exceeds the other workers' median of the same part the
most, in most of its gathers. Each gather keeps its `SLOWEST_KEPT` highest
scores and every worker standing out (`GatherFacts.slowest`): the verdict is
computed from those alone, so that what a gather logs stays a few numbers
per worker standing out, at any number of workers.
`python -m benchmarks.studies.straggler_scale` measures the rule's false
alarms and detections from 2 to 4,096 workers.

Each worker contributes one row (`ROW_FIELDS`) at a step every worker
reaches (see `StepTimeLogger`; the rows ride on a training step's gradient
all-reduce, or an all-gather): what its step probe
(`keras_gpu.hooks.step_probe`) measured since the last share. A worker with
nothing measured sends a row of NaN ("not available"); a field it cannot
measure (an input wait not told from the host time) is NaN alone.

Examples:
    >>> from keras_gpu.meters.cluster_view import summarize_rows, verdict_over
    >>> def row(compute_ms):  # ROW_FIELDS: a 20 ms step, 2 ms of host time
    ...     busy = (compute_ms + 2.0) / 1e3
    ...     comm = 0.02 - busy
    ...     return [1.0, 0.02, 0.0, compute_ms / 1e3, comm, 0.002, busy, 100.0, 1e3]
    >>> rows = [row(10.0 + 0.1 * (k % 5)) for k in range(64)]
    >>> rows[17] = row(13.0)  # worker 17 computes 3 ms more per step
    >>> gather = summarize_rows(rows)
    >>> gather.slowest_worker, gather.part, gather.clear
    (17, 'compute', True)
    >>> verdict = verdict_over([gather] * 3)
    >>> verdict.straggler, verdict.part, round(verdict.imbalance, 2)
    (17, 'compute', 0.14)
"""

from __future__ import annotations

import dataclasses
import functools
import math
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

__all__ = [
    "FALSE_ALARM", "NOISE_FLOOR", "OUT_KEPT_SHARE", "PARTS", "PRIOR_NOISE", "PRIOR_WORKERS", "ROWS_KEPT", "ROW_FIELDS", "SLOWDOWN_NAMED",
    "SLOWEST_KEPT", "STRAGGLER_IMBALANCE", "ClusterSummary", "GatherFacts", "Standing", "Verdict", "WorkerFacts",
    "score_threshold", "slowest_over", "summarize_rows", "verdict_over",
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
#: A worker stands out only where the others wait for it more than this share of each step: a smaller wait
#: costs the job little, however clear of the noise it is.
STRAGGLER_IMBALANCE = 0.05
#: The chance, per gather, that the noise of a balanced cluster puts some worker past the threshold (normal
#: noise; see `score_threshold`).
FALSE_ALARM = 0.01
#: The spread a worker is judged against is never below this share of the other workers' median busy time.
NOISE_FLOOR = 0.01
#: The spread assumed where the other workers are too few to show theirs, as a share of their median busy time:
#: about the noisiest a window's busy time was measured (balanced loopback CPU workers sharing two cores: 3.7%
#: with two workers, 12% with four, and single windows of the chief 19% above its peer; see
#: `benchmarks/studies/straggler_scale.py`)...
PRIOR_NOISE = 0.10
#: ...and what it weighs against the others' own spread, in degrees of freedom: it decides for 2 workers,
#: weighs as much as theirs at 4, and fades from a few dozen on.
PRIOR_WORKERS = 2
#: A worker whose busy time per step in the latest window is this many times
#: its own best window's is named as slowed.
SLOWDOWN_NAMED = 1.5
#: The workers with the highest scores that each gather keeps (`GatherFacts.slowest`), and every worker that
#: stands out, up to a `OUT_KEPT_SHARE`th of the workers: the fit's verdict reads these alone. A large job
#: always has a few workers in a hiccup, each standing out in its gather; the straggler stays among them.
SLOWEST_KEPT = 8
OUT_KEPT_SHARE = 16
#: `ClusterSummary.rows` holds every reporting worker's row in jobs of up to this many workers, and the rows of
#: the workers it keeps in `slowest` above: a fit's gathers stay small in memory at any number of workers.
ROWS_KEPT = 64

_FIELD = {name: i for i, name in enumerate(ROW_FIELDS)}
_MAD_TO_SD = 1.482602218505602  # 1 / Phi^-1(3/4): the median absolute deviation of normal noise is 0.6745 sd
_NAN = math.nan


@functools.lru_cache(maxsize=256)
def score_threshold(workers: int) -> float:
    """How many spreads a worker's excess must exceed among `workers` reporting workers: `Phi^-1(1 - FALSE_ALARM / n)`.

    With `n` balanced workers under independent normal noise, some worker
    exceeds it with chance at most `FALSE_ALARM` (the union bound over the
    workers; see the module's docstring).

    Examples:
        >>> [round(score_threshold(n), 2) for n in (2, 8, 64, 1024, 4096)]
        [2.58, 3.02, 3.6, 4.27, 4.57]
    """
    return NormalDist().inv_cdf(1.0 - FALSE_ALARM / max(1, int(workers)))


@dataclass(frozen=True)
class WorkerFacts:
    """One worker among a gather's highest scores.

    Attributes:
        worker: Its index.
        busy_sec: Its busy time per step (NaN: not known, a run logged before it was).
        imbalance: Its busy time minus the other workers' median, over its step
            time: the share of each step the others wait for it.
        score: Its excess over the other workers' median busy time, in their spreads.
        part: The part of its busy time (`PARTS`) that exceeds the other
            workers' median of the same part the most (`None`: not known).
        part_sec: Its seconds per step in that part.
        part_median_sec: The other workers' median of that part.
        out: Whether it stands out in this gather: past the score threshold,
            and an imbalance above `STRAGGLER_IMBALANCE`.
    """

    worker: int
    busy_sec: float
    imbalance: float
    score: float
    part: str | None
    part_sec: float
    part_median_sec: float
    out: bool


@dataclass(frozen=True)
class GatherFacts:
    """What one gather says about the slowest workers: what a verdict over a fit's gathers reads.

    Attributes:
        slowest_worker: Index of the worker with the most busy time per step.
        imbalance: Its busy time minus the median of the other workers', over
            its step time: the share of each step the others wait for it.
        part: The part of its busy time (`PARTS`) that exceeds the other
            workers' median of the same part the most (`None`: not known, a
            run logged before parts were).
        part_sec: Its seconds per step in that part.
        part_median_sec: The other workers' median of that part.
        excess_sec: Its busy time minus the other workers' median.
        spread_sec: The spread of the other workers' busy times it is judged
            against (see the module's docstring; in runs logged before this
            rule, max - min of theirs).
        slowdown: The largest ratio, over the workers, of busy time per step
            in this window to the worker's own best window so far (`nan`:
            not tracked).
        slowdown_worker: The worker with that ratio (-1: not tracked).
        threshold: How many spreads an excess must exceed (`score_threshold`
            of the workers reporting; 2 in runs logged before this rule).
        slowdown_median: The median of that ratio over the workers (`nan`:
            not tracked, or a run logged before it was).
        slowest: The workers with the highest scores, highest first:
            `SLOWEST_KEPT`, or more where more stand out (empty in runs
            logged before they were: the slowest worker alone then counts).
    """

    slowest_worker: int
    imbalance: float
    part: str | None
    part_sec: float
    part_median_sec: float
    excess_sec: float
    spread_sec: float
    slowdown: float = _NAN
    slowdown_worker: int = -1
    threshold: float = 2.0
    slowest: tuple[WorkerFacts, ...] = ()
    slowdown_median: float = _NAN

    @property
    def clear(self) -> bool:
        """Whether the slowest worker stands out: a clear imbalance, more than `threshold` spreads over the others."""
        return self.imbalance > STRAGGLER_IMBALANCE and self.excess_sec > self.threshold * self.spread_sec

    @property
    def listed(self) -> tuple[WorkerFacts, ...]:
        """`slowest`, or in runs logged before it was, the slowest worker alone."""
        if self.slowest:
            return self.slowest
        score = self.excess_sec / self.spread_sec if self.spread_sec > 0 else (math.inf if self.excess_sec > 0 else 0.0)
        return (WorkerFacts(
            self.slowest_worker, _NAN, self.imbalance, score, self.part, self.part_sec, self.part_median_sec, self.clear,
        ),)

    @property
    def outliers(self) -> tuple[WorkerFacts, ...]:
        """The workers that stand out in this gather (`WorkerFacts.out`)."""
        return tuple(w for w in self.listed if w.out)


@dataclass(frozen=True)
class ClusterSummary(GatherFacts):
    """The workers' breakdowns at one gather (`GatherFacts`, and the spreads and rows).

    Attributes:
        workers: Workers in the job.
        reporting: Workers whose breakdown was available.
        busy, input, communication: `(min, median, max)` across the reporting
            workers, in seconds per step.
        rows: `{worker index: {field: value}}` of the reporting workers (in
            jobs of more than `ROWS_KEPT` workers, of those in `slowest`).

    `keras_gpu.output.step_time_tags.cluster_values` gives its `cluster/*` scalars.
    """

    workers: int = 0
    reporting: int = 0
    busy: tuple[float, float, float] = (_NAN, _NAN, _NAN)
    input: tuple[float, float, float] = (_NAN, _NAN, _NAN)
    communication: tuple[float, float, float] = (_NAN, _NAN, _NAN)
    rows: dict[int, dict[str, float]] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    """A fit's verdict over its gathers: the straggler with its part, and a worker slowed against its own best.

    Attributes:
        straggler: The worker named, or `None`.
        imbalance: The share of each step the others waited for it (the
            median over the gathers it stood out in), or the median of all
            gathers' slowest workers where none is named; `None` without gathers.
        part, part_sec, part_median_sec: The straggler's part
            (`PARTS`) and its seconds per step against the others'
            median (medians over its gathers of that part).
        slowed_worker, slowdown: The worker with the largest ratio of a
            window's busy time to its own best, where it is at least
            `SLOWDOWN_NAMED` in two gathers or more (its largest).
        more_stragglers: Other workers that stood out in more than half of
            the gathers too, most often first.
        clear_gathers: The gathers the straggler stood out in (`None`: none named).
        cluster_slowdown: The largest median, over the workers, of that ratio,
            where it is at least `SLOWDOWN_NAMED` in two gathers or more: the
            cluster slowed as a whole.
    """

    straggler: int | None = None
    imbalance: float | None = None
    part: str | None = None
    part_sec: float | None = None
    part_median_sec: float | None = None
    slowed_worker: int | None = None
    slowdown: float | None = None
    more_stragglers: tuple[int, ...] = ()
    clear_gathers: int | None = None
    cluster_slowdown: float | None = None

    @property
    def sentence(self) -> str:
        """"worker 2 is the straggler: its input wait is 8.1 ms per step against a median of 0.4 ms (...)", or
        "no straggler (imbalance 3%)"; other stragglers, and a worker slowed against its own best, where any is."""
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
        if self.more_stragglers:
            more = [str(k) for k in self.more_stragglers]
            names = more[0] if len(more) == 1 else ", ".join(more[:-1]) + " and " + more[-1]
            text += f"; worker{'s' if len(more) > 1 else ''} {names} also stand{'' if len(more) > 1 else 's'} out"
        if self.slowed_worker is not None and self.slowdown is not None:
            text += f"; worker {self.slowed_worker} slowed {self.slowdown:.1f}x against its own best window"
        if self.cluster_slowdown is not None:
            text += f"; the workers slowed {self.cluster_slowdown:.1f}x against their own best windows (median)"
        return text


@dataclass(frozen=True)
class Standing:
    """One worker over a fit's gathers, among the slowest (`slowest_over`).

    Attributes:
        worker: Its index.
        clear_gathers: The gathers it stood out in.
        listed_gathers: The gathers that kept it among their highest scores.
        score: Its median score over those gathers, in spreads.
        imbalance: Its median imbalance over them.
        part: The part most of them name (`None`: not known).
    """

    worker: int
    clear_gathers: int
    listed_gathers: int
    score: float
    imbalance: float
    part: str | None


def _ms(seconds: float) -> str:
    ms = 1e3 * seconds
    return f"{ms:.1f}" if ms < 100 else f"{ms:.0f}"


def _spread(values: np.ndarray) -> tuple[float, float, float]:
    """`(min, median, max)` of the measured values (NaN: not measured); NaN for all three when none is."""
    measured = values[~np.isnan(values)]
    if not measured.size:
        return _NAN, _NAN, _NAN
    return float(measured.min()), float(np.median(measured)), float(measured.max())


def _table(rows: Sequence[Sequence[float]]) -> np.ndarray:
    """The rows as an `(n, len(ROW_FIELDS))` array; a row of another length becomes NaN (not available)."""
    width = len(ROW_FIELDS)
    try:
        table = np.asarray(rows, dtype=np.float64)
        if table.ndim == 2 and table.shape[1] == width:
            return table
    except (TypeError, ValueError):
        pass
    nan_row = [_NAN] * width
    return np.array([list(map(float, r)) if len(r) == width else nan_row for r in rows], np.float64).reshape(-1, width)


def _without(ranked: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """The median of sorted `ranked` without its element at `rank`, for each rank given."""
    m = ranked.size - 1

    def kth(p: int) -> np.ndarray:  # the p-th smallest of the others
        return np.where(rank > p, ranked[p], ranked[p + 1])

    return kth(m // 2) if m % 2 else 0.5 * (kth(m // 2 - 1) + kth(m // 2))


def _ranks(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(values, kind="stable")
    rank = np.empty(values.size, np.intp)
    rank[order] = np.arange(values.size)
    return values[order], rank


def _median_of_others(values: np.ndarray) -> np.ndarray:
    """For each value, the median of all the other values (itself where it is alone); exact, in O(n log n)."""
    if values.size < 2:
        return values.copy()
    return _without(*_ranks(values))


def _spread_of_others(values: np.ndarray, medians: np.ndarray) -> np.ndarray:
    """For each value, 1.4826 times the median absolute deviation of the other values from their median.

    `medians` holds the others' median of each value (`_median_of_others`),
    which takes at most three distinct values: one pass over the deviations
    from each.
    """
    out = np.zeros(values.size)
    if values.size < 3:
        return out  # one other value has no spread
    for median in np.unique(medians):
        who = np.flatnonzero(medians == median)
        ranked, rank = _ranks(np.abs(values - median))
        out[who] = _without(ranked, rank[who])
    return _MAD_TO_SD * out


def _noise(spread: np.ndarray, median: np.ndarray, others: int) -> np.ndarray:
    """The spread each worker is judged against: the others' own, pooled with the prior, above the floor."""
    dof = max(others - 1, 0)  # a spread of k values has k - 1 degrees of freedom
    pooled = np.sqrt((dof * spread**2 + PRIOR_WORKERS * (PRIOR_NOISE * median) ** 2) / (dof + PRIOR_WORKERS))
    return np.maximum(pooled, NOISE_FLOOR * np.abs(median))


def _slowdown(best: dict[int, float] | None, workers: list[int], busy: np.ndarray) -> tuple[float, int, float]:
    """The largest ratio of a worker's busy time to its own best so far (updated here), that worker, and the
    median of the ratios."""
    if best is None:
        return _NAN, -1, _NAN
    get = best.get
    bests = np.minimum(np.fromiter((get(k, math.inf) for k in workers), np.float64, len(workers)), busy)
    best.update(zip(workers, bests.tolist()))
    known = bests > 0
    if not known.any():
        return _NAN, -1, _NAN
    ratios = np.where(known, busy / np.where(known, bests, 1.0), -np.inf)
    j = int(np.argmax(ratios))
    return float(ratios[j]), workers[j], float(np.median(ratios[known]))


def _listed(score: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The positions a gather keeps, highest score first: every worker standing out (up to a
    `OUT_KEPT_SHARE`th of the workers, and at least `SLOWEST_KEPT`), then the highest other scores up to
    `SLOWEST_KEPT` in all."""
    ranked = np.argsort(-score, kind="stable")
    standing = ranked[out[ranked]][: max(SLOWEST_KEPT, score.size // OUT_KEPT_SHARE)]
    rest = ranked[~out[ranked]][: max(0, SLOWEST_KEPT - standing.size)]
    both = np.concatenate([standing, rest])
    return both[np.argsort(-score[both], kind="stable")]


def summarize_rows(rows: Sequence[Sequence[float]], best: dict[int, float] | None = None) -> ClusterSummary | None:
    """The summary of one gather's rows (row k is worker k's); `None` when no worker reported.

    Judges every reporting worker by the rule of the module's docstring and
    keeps the highest scores (`SLOWEST_KEPT`, and every worker standing out); a gather of 1,024 rows takes a
    few milliseconds (`python -m benchmarks.studies.straggler_scale`
    measures it).

    Args:
        rows: One row per worker (`ROW_FIELDS`).
        best: Each worker's lowest busy time per step in the fit's windows
            so far, updated here (`None`: no slowdown is tracked).
    """
    table = _table(rows)
    ok = (table[:, _FIELD["available"]] == 1.0) & ~np.isnan(table[:, _FIELD["busy_sec"]])
    index = np.flatnonzero(ok)
    if not index.size:
        return None
    rep = table[index]
    n = index.size
    busy, step = rep[:, _FIELD["busy_sec"]], rep[:, _FIELD["step_sec"]]
    median = _median_of_others(busy)
    noise = _noise(_spread_of_others(busy, median), median, n - 1)
    excess = busy - median if n > 1 else np.zeros(n)
    threshold = score_threshold(n)
    with np.errstate(divide="ignore", invalid="ignore"):
        imbalance = np.where(step > 0, excess / np.where(step > 0, step, 1.0), 0.0)
        score = np.where(noise > 0, excess / np.where(noise > 0, noise, 1.0), np.where(excess > 0, np.inf, 0.0))
    out = (excess > threshold * noise) & (imbalance > STRAGGLER_IMBALANCE)
    parts = np.nan_to_num(rep[:, [_FIELD[_PART_FIELD[p]] for p in PARTS]])  # an input not told apart is in the host
    part_medians = np.stack([_median_of_others(parts[:, i]) for i in range(len(PARTS))], axis=1)
    which = np.argmax(parts - part_medians, axis=1)  # the first of equal parts, as in PARTS

    def facts(j: int) -> WorkerFacts:
        p = int(which[j])
        return WorkerFacts(
            int(index[j]), float(busy[j]), float(imbalance[j]), float(score[j]), PARTS[p], float(parts[j, p]),
            float(part_medians[j, p]), bool(out[j]),
        )

    slowest = int(np.argmax(busy))  # the first of equal busy times: the lowest index
    listed = _listed(score, out)
    kept = range(n) if n <= ROWS_KEPT else sorted({slowest, *listed.tolist()})
    head = facts(slowest)
    slowdown, slowdown_worker, slowdown_median = _slowdown(best, index.tolist(), busy)
    return ClusterSummary(
        slowest_worker=head.worker,
        imbalance=head.imbalance,
        part=head.part,
        part_sec=head.part_sec,
        part_median_sec=head.part_median_sec,
        excess_sec=float(excess[slowest]),
        spread_sec=float(noise[slowest]),
        slowdown=slowdown,
        slowdown_worker=slowdown_worker,
        slowdown_median=slowdown_median,
        threshold=threshold,
        slowest=tuple(facts(int(j)) for j in listed),
        workers=len(table),
        reporting=n,
        busy=_spread(busy),
        input=_spread(rep[:, _FIELD["input_sec"]]),
        communication=_spread(rep[:, _FIELD["communication_sec"]]),
        rows={int(index[j]): dict(zip(ROW_FIELDS, rep[j].tolist())) for j in kept},
    )


def verdict_over(gathers: Sequence[GatherFacts]) -> Verdict:
    """The verdict over a fit's gathers (oldest first).

    A straggler is named only when it stands out (`WorkerFacts.out`) in more
    than half of all gathers: a single noisy gather names nobody. Where
    several workers do, the one that stood out most often is named (then the
    larger median imbalance), the others in `more_stragglers`. Its
    imbalance, part and part times are the medians over the gathers it stood
    out in (the part: the one most of them show). Without a straggler, the
    imbalance is the median of all gathers' slowest workers. A worker is
    named as slowed where it is a gather's most slowed worker, at least
    `SLOWDOWN_NAMED`, in two gathers or more (its largest ratio); the
    cluster, where the median ratio is at least that in two gathers or more.
    """
    if not gathers:
        return Verdict()
    slow = _slowed(gathers)
    stood: dict[int, list[WorkerFacts]] = {}
    for g in gathers:
        for w in g.outliers:
            stood.setdefault(w.worker, []).append(w)
    named = [k for k, own in stood.items() if 2 * len(own) > len(gathers)]
    if not named:
        return Verdict(imbalance=statistics.median(g.imbalance for g in gathers), **slow)
    named.sort(key=lambda k: (-len(stood[k]), -statistics.median(w.imbalance for w in stood[k]), k))
    own = stood[named[0]]
    part = Counter(w.part for w in own).most_common(1)[0][0]
    in_part = [w for w in own if w.part == part]
    return Verdict(
        straggler=named[0],
        imbalance=statistics.median(w.imbalance for w in own),
        part=part,
        part_sec=statistics.median(w.part_sec for w in in_part),
        part_median_sec=statistics.median(w.part_median_sec for w in in_part),
        more_stragglers=tuple(named[1:]),
        clear_gathers=len(own),
        **slow,
    )


def _slowed(gathers: Sequence[GatherFacts]) -> dict[str, float | int]:
    """The `Verdict` fields of a worker, and of the cluster, slowed against their own best in two gathers or more."""
    out: dict[str, float | int] = {}
    by_worker: dict[int, list[float]] = {}
    for g in gathers:
        if g.slowdown >= SLOWDOWN_NAMED:
            by_worker.setdefault(g.slowdown_worker, []).append(g.slowdown)
    twice = {k: max(ratios) for k, ratios in by_worker.items() if len(ratios) >= 2}
    if twice:
        worker = max(twice, key=lambda k: (twice[k], -k))
        out.update(slowed_worker=worker, slowdown=twice[worker])
    medians = [g.slowdown_median for g in gathers if g.slowdown_median >= SLOWDOWN_NAMED]
    if len(medians) >= 2:
        out["cluster_slowdown"] = max(medians)
    return out


def slowest_over(gathers: Sequence[GatherFacts], top: int = 5) -> tuple[Standing, ...]:
    """The `top` slowest workers over a fit's gathers: those standing out most often, then by median score.

    Reads the workers each gather kept (`GatherFacts.listed`), so it costs
    the same at any number of workers.
    """
    seen: dict[int, list[WorkerFacts]] = {}
    for g in gathers:
        for w in g.listed:
            seen.setdefault(w.worker, []).append(w)
    ranked = [
        Standing(
            worker=k,
            clear_gathers=sum(w.out for w in own),
            listed_gathers=len(own),
            score=statistics.median(w.score for w in own),
            imbalance=statistics.median(w.imbalance for w in own),
            part=Counter(w.part for w in own).most_common(1)[0][0],
        )
        for k, own in seen.items()
    ]
    ranked.sort(key=lambda s: (-s.clear_gathers, -s.listed_gathers, -s.score, s.worker))
    return tuple(ranked[:top])
