"""The tags read back into records: the one place `keras-gpu report` turns logged series into typed data.

The counterpart of `keras_gpu.output.step_time_tags` (records to tags):
each function takes a run's series as
`keras_gpu.output.reader.read_scalars` and
`read_texts` return them (`tag -> [(step,
value), ...]`) and finds them through the tag objects of
`keras_gpu.output.tags`, the step-time and cluster ones through the
tables the writer uses.

Means are weighted by time: a rate's mean is the mean over the windows
weighted by each window's wall time (so samples/s is samples over seconds),
a steady rate's mean is `keras_gpu.meters.throughput_records.steady_rate` over
the epochs (the figure of `ThroughputLogger`'s end-of-fit line), and a
step-time part's mean is weighted by the steps each trace covered.
"""

from __future__ import annotations

import dataclasses
import math
import statistics

from keras_gpu.meters.cluster_view import PARTS, GatherFacts, slowest_over, verdict_over
from keras_gpu.meters.step_record import InputStage, ReplicaTime, StepTime
from keras_gpu.meters.throughput_records import steady_rate
from keras_gpu.output import tags as _tags
from keras_gpu.output.cluster_text import read_slowest_markdown
from keras_gpu.output.report_records import (
    ClusterReport,
    EpochTimes,
    MemorySummary,
    SeriesStats,
    StepTimeSummary,
    Throughput,
)
from keras_gpu.output.step_time_tags import (
    CLUSTER_FACTS,
    CLUSTER_SPREADS,
    REPLICA_PARTS,
    SPREAD_STATS,
    STEP_PARTS,
)
from keras_gpu.output.step_time_text import read_host_work_markdown, read_input_stage_markdown, read_kernels_markdown

__all__ = [
    "Scalars",
    "Texts",
    "keras_gpu_tags",
    "last_step",
    "read_cluster",
    "read_epoch_times",
    "read_memory",
    "read_placement_counts",
    "read_step_time",
    "read_throughput",
    "series_stats",
    "uncounted_allocator",
]

#: A run's scalars: `tag -> [(step, value), ...]`, in file order.
Scalars = dict[str, list[tuple[int, float]]]
#: A run's text summaries: `tag -> [(step, Markdown), ...]`, in file order.
Texts = dict[str, list[tuple[int, str]]]

_RATE_TAGS = _tags.rates("window")
_STEADY_TAGS = _tags.rates("epoch")
_TIME_TAGS = (_tags.EPOCH_SEC, _tags.TRAIN_SEC, _tags.FIRST_STEP_SEC, _tags.VALIDATION_SEC, _tags.OTHER_EPOCH_SEC)
_ALLOC_TAGS = (_tags.ALLOC_CURRENT, _tags.ALLOC_PEAK, _tags.ALLOC_RUN_PEAK)
_GPU_TAGS = tuple(t for t in _tags.TAGS if t.pattern.startswith("gpu/{gpu}/"))
_PLACEMENT_COUNT_TAGS = tuple(t for t in _tags.TAGS if t.pattern.startswith("placement/") and not t.text)


def uncounted_allocator(device: str) -> str:
    """Why `device`'s allocator can count no byte for a model that allocates, in a few words.

    Said wherever such an allocator would otherwise show "0 B": the end-of-fit
    line of `MemoryLogger` and `keras-gpu report`.
    """
    if device.upper().startswith("CPU"):
        return "TensorFlow's CPU allocator statistics leave small tensors out; the host RSS is this process's memory"
    return "the backend reported no allocation on this device"


def series_stats(points: list[tuple[int, float]]) -> SeriesStats:
    """Mean, median, max, last value and count of a series' points (the mean unweighted)."""
    values = [v for _, v in points]
    return SeriesStats(
        mean=statistics.fmean(values), median=statistics.median(values), max=max(values), last=values[-1],
        points=len(values),
    )


def last_step(scalars: Scalars) -> int:
    """The largest step any scalar was logged at (0 for none)."""
    return max((s for pts in scalars.values() for s, _ in pts), default=0)


def keras_gpu_tags(scalars: Scalars) -> list[str]:
    """The scalar tags among `scalars` that keras-gpu declares, sorted."""
    return sorted(t for t in scalars if _tags.match(t) is not None)


def read_placement_counts(scalars: Scalars) -> dict[str, float]:
    """The `placement/*` scalars' last values (ops), by the tag's name after `placement/`."""
    return {t.field: scalars[t.name()][-1][1] for t in _PLACEMENT_COUNT_TAGS if t.name() in scalars}


def read_throughput(scalars: Scalars) -> Throughput:
    """The `throughput/*` rates; each `mean` is weighted by the time its points cover.

    A window's time is its steps (the global-step axis advances by them, from
    0 for the first window) over its steps/s. Steady-state rates, one point
    per epoch, have their `mean` from `keras_gpu.meters.throughput_records.steady_rate`,
    each epoch weighted by its steady seconds (`time/train_sec -
    time/first_step_sec`, logged at the same step).
    """
    seconds: dict[int, float] = {}
    prev = 0
    for step, rate in scalars.get(_tags.STEPS_PER_SEC.name(), []):
        if rate > 0 and step > prev:
            seconds[step] = (step - prev) / rate
        prev = max(prev, step)
    first = dict(scalars.get(_tags.FIRST_STEP_SEC.name(), []))
    steady = {step: train - first[step] for step, train in scalars.get(_tags.TRAIN_SEC.name(), []) if step in first}
    rates = {}
    for tag in _RATE_TAGS + _STEADY_TAGS:
        points = scalars.get(tag.name())
        if not points:
            continue
        stats = series_stats(points)
        weights = [seconds.get(step) for step, _ in points]
        if tag in _RATE_TAGS and all(w is not None for w in weights) and sum(weights) > 0:
            mean = sum(w * v for w, (_, v) in zip(weights, points)) / sum(weights)
            stats = dataclasses.replace(stats, mean=mean, seconds=sum(weights))
        elif tag in _STEADY_TAGS and all(step in steady for step, _ in points):
            mean = steady_rate((v, steady[step]) for step, v in points) or stats.mean
            stats = dataclasses.replace(stats, mean=mean, seconds=sum(steady[step] for step, _ in points))
        rates[tag.field] = stats
    return Throughput(rates)


def read_epoch_times(scalars: Scalars) -> EpochTimes | None:
    """Totals of the per-epoch `time/*` tags in seconds, and the number of epochs; `None` without epochs."""
    epochs = scalars.get(_tags.EPOCH_SEC.name())
    if not epochs:
        return None
    totals = {tag.field: sum(v for _, v in scalars.get(tag.name(), [])) for tag in _TIME_TAGS}
    first = scalars.get(_tags.FIRST_STEP_SEC.name())
    return EpochTimes(epochs=len(epochs), **totals, first_epoch_first_step_sec=first[0][1] if first else 0.0)


def _replica_order(label: str) -> tuple[int, str]:
    index, _, rest = label.partition("_")
    return (int(index) if index.isdigit() else 0, rest)


def _input_stage(texts: Texts, weights: dict[int, float]) -> InputStage | None:
    """The input stage the traces name for the most traced steps, with its mean time per batch over them."""
    named: dict[str, list[tuple[float, InputStage]]] = {}
    for step, text in texts.get(_tags.STEP_INPUT_STAGE.name(), []):
        stage = read_input_stage_markdown(text)
        if stage is not None:
            named.setdefault(stage.name, []).append((weights.get(step, 1.0), stage))
    if not named:
        return None
    found = max(named.values(), key=lambda traces: sum(w for w, _ in traces))
    total = sum(w for w, _ in found)
    return InputStage(found[-1][1].name, found[-1][1].path, sum(w * s.sec_per_step for w, s in found) / total)


def read_step_time(scalars: Scalars, texts: Texts | None = None) -> StepTimeSummary | None:
    """The step-time breakdown over every trace, each weighted by the steps it covered; `None` without traces.

    The slowest input stage is the one the traces name for the most steps
    (`step_time/input_stage`), with its mean time per batch over those traces.
    The device parts (compute, communication, transfer, other, host) are
    means over the traces that measured them: a GPU job's trace without GPU
    activity (`step_time/unmeasured`) logs none, and where no trace measured
    them they are NaN, with the trace's sentence in `StepTime.unmeasured`.
    The kernel view and the host's work are the last trace's
    (`step_time/kernels`, `step_time/host_work`).
    """
    points = scalars.get(_tags.STEP_SEC.name())
    if not points:
        return None
    texts = texts or {}
    counts = dict(scalars.get(_tags.STEP_TRACED_STEPS.name(), []))
    weights = {s: counts.get(s, 1.0) for s, _ in points}
    total = sum(weights.values())
    unmeasured = dict(texts.get(_tags.STEP_UNMEASURED.name(), []))
    measured = {s: w for s, w in weights.items() if s not in unmeasured}

    def mean(tag: str, over: dict[int, float] = weights) -> float:
        values = dict(scalars.get(tag, []))
        if not over:
            return math.nan
        return sum(w * values.get(s, 0.0) for s, w in over.items()) / sum(over.values())

    replica_tag = REPLICA_PARTS[0][0]
    labels = sorted({fields["replica"] for t in scalars if (fields := replica_tag.match(t))}, key=_replica_order)
    device = ("compute_sec", "communication_sec", "transfer_sec", "other_sec", "host_sec")
    kernels = texts.get(_tags.STEP_KERNELS.name(), [])
    classes, top = read_kernels_markdown(kernels[-1][1]) if kernels and measured else ([], [])
    work = texts.get(_tags.STEP_HOST_WORK.name(), [])
    step = StepTime(
        steps=int(total),
        **{field: mean(tag.name(), measured if field in device else weights) for tag, field in STEP_PARTS},
        replicas=tuple(
            ReplicaTime(**{field: mean(tag.name(replica=label), measured) for tag, field in REPLICA_PARTS})
            for label in labels
        ),
        source="report",
        input_stage=_input_stage(texts, weights),
        unmeasured="" if measured else next(iter(unmeasured.values()), ""),
        kernels=tuple(top),
        kernel_classes=tuple(classes),
        host_work=tuple(read_host_work_markdown(work[-1][1])) if work and measured else (),
    )
    return StepTimeSummary(step=step, traces=len(points), replica_labels=tuple(labels))


def read_cluster(scalars: Scalars, texts: Texts | None = None) -> ClusterReport | None:
    """The chief's cluster view over every gather, the verdict over them; `None` without gathers logged.

    Each gather's facts come back from the tags they were logged under
    (`CLUSTER_FACTS`) and its table of the slowest workers
    (`cluster/slowest_workers`), so the verdict is the one the chief's
    end-of-fit line gave; a run logged before a fact had its tag gets the
    neutral value (no part, no spread to stand clear of, no slowdown, the
    slowest worker alone), and the rule of its time (an excess of twice the
    others' range).
    """
    slowest = scalars.get(_tags.CLUSTER_SLOWEST_WORKER.name())
    if not slowest:
        return None
    at = {field: dict(scalars.get(tag.name(), [])) for tag, field in CLUSTER_FACTS}
    part = dict(scalars.get(_tags.CLUSTER_PART.name(), []))
    slowdown = dict(scalars.get(_tags.CLUSTER_SLOWDOWN.name(), []))
    slowdown_worker = dict(scalars.get(_tags.CLUSTER_SLOWDOWN_WORKER.name(), []))
    slowdown_median = dict(scalars.get(_tags.CLUSTER_SLOWDOWN_MEDIAN.name(), []))
    tables = dict((texts or {}).get(_tags.CLUSTER_SLOWEST_WORKERS.name(), []))
    gathers = [
        GatherFacts(
            slowest_worker=int(worker),
            imbalance=at["imbalance"][step],
            part=PARTS[int(part[step])] if 0 <= part.get(step, -1) < len(PARTS) else None,
            part_sec=at["part_sec"].get(step, math.nan),
            part_median_sec=at["part_median_sec"].get(step, math.nan),
            excess_sec=at["excess_sec"].get(step, math.inf),
            spread_sec=at["spread_sec"].get(step, 0.0),
            slowdown=slowdown.get(step, math.nan),
            slowdown_worker=int(slowdown_worker.get(step, -1)),
            slowdown_median=slowdown_median.get(step, math.nan),
            threshold=at["threshold"].get(step, 2.0),
            slowest=read_slowest_markdown(tables.get(step, "")),
        )
        for step, worker in slowest
        if at["imbalance"].get(step) is not None
    ]
    reporting = scalars.get(_tags.CLUSTER_WORKERS_REPORTING.name(), [])
    spreads = {
        part: {stat: scalars[tag.name()][-1][1] for stat, tag in zip(SPREAD_STATS, stat_tags) if tag.name() in scalars}
        for part, stat_tags in CLUSTER_SPREADS
    }
    last = {
        field: points[-1][1] if (points := scalars.get(tag.name())) else None
        for field, tag in (
            ("threshold", _tags.CLUSTER_SCORE_THRESHOLD), ("workers_out", _tags.CLUSTER_WORKERS_OUT),
            ("slowest_score", _tags.CLUSTER_SLOWEST_SCORE), ("straggler_so_far", _tags.CLUSTER_STRAGGLER),
        )
    }
    return ClusterReport(
        gathers=len(gathers),
        verdict=verdict_over(gathers),
        workers_reporting=reporting[-1][1] if reporting else None,
        **spreads,
        slowest_workers=list(slowest_over(gathers)),
        **last,
    )


def read_memory(scalars: Scalars, texts: Texts | None = None) -> MemorySummary:
    """Each allocator's peak, JAX's preallocated pools, NVML's statistics per GPU and metric, and the host's peak RSS.

    A pool is one an allocator logged its preallocation setting
    (`memory/allocator/<device>/preallocation`, `""` where absent) or its
    size for, with the largest size logged (`None` where JAX reported none).
    """
    settings = {
        found["device"]: points[-1][1]
        for name, points in (texts or {}).items()
        if points and (found := _tags.ALLOC_PREALLOCATION.match(name)) is not None
    }
    sizes = {
        found["device"]: max(v for _, v in points)
        for name, points in scalars.items()
        if points and (found := _tags.ALLOC_POOL.match(name)) is not None
    }
    pools = {device: (sizes.get(device), settings.get(device, "")) for device in sorted(settings.keys() | sizes.keys())}
    allocator: dict[str, float] = {}
    gpus: dict[str, dict[str, SeriesStats]] = {}
    for name, points in scalars.items():
        if (found := _tags.match(name, _ALLOC_TAGS)) is not None:
            device = found[1]["device"]
            allocator[device] = max(allocator.get(device, 0.0), max(v for _, v in points))
        elif (found := _tags.match(name, _GPU_TAGS)) is not None:
            tag, fields = found
            gpus.setdefault(fields["gpu"], {})[tag.pattern.split("/", 2)[2]] = series_stats(points)
    host = scalars.get(_tags.HOST_PEAK_RSS.name()) or scalars.get(_tags.HOST_RSS.name())
    return MemorySummary(
        allocator_peak_bytes={device: peak for device, peak in allocator.items() if peak > 0},
        allocator_uncounted={device: uncounted_allocator(device) for device, peak in allocator.items() if peak <= 0},
        gpus=gpus,
        host_rss_peak_bytes=max(v for _, v in host) if host else None,
        pools=pools,
    )
