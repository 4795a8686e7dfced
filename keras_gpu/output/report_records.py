"""The report of a run as records: what `keras-gpu report` reads back from the event files, typed.

`keras_gpu.output.reader.read_report` returns a `Report`, one
`RunSummary` per run directory; `keras_gpu.output.tag_records`
builds each part from the tags. Each record's `as_dict()` is its part of
`keras-gpu report --json` (plain, JSON-serialisable data).

Units: seconds (`*_sec`), bytes (`*_bytes`), samples/s and steps/s for the
rates, fractions 0..1 for shares and the imbalance.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from keras_gpu.meters.cluster_view import Standing, Verdict
from keras_gpu.meters.step_record import StepTime
from keras_gpu.output import tags as _tags

__all__ = [
    "ClusterReport",
    "EpochTimes",
    "MemorySummary",
    "PlacementDigest",
    "Report",
    "RunSummary",
    "SeriesStats",
    "StepTimeSummary",
    "Throughput",
]

#: The parts of a step whose shares the report gives.
_SHARE_PARTS = ("input", "compute", "communication", "transfer", "other", "host")


@dataclass(frozen=True)
class SeriesStats:
    """Statistics of one series' points.

    Attributes:
        mean: The mean; for a rate, weighted by the time each point covers
            where that is known (see `seconds`).
        median: The median of the points.
        max: The largest point.
        last: The last point.
        points: How many points the series holds.
        seconds: The time the points cover where the mean is time-weighted,
            else `None`.
    """

    mean: float
    median: float
    max: float
    last: float
    points: int
    seconds: float | None = None

    def as_dict(self) -> dict[str, float]:
        """`mean`, `median`, `max`, `last`, `points`, and `seconds` where known."""
        out = {"mean": self.mean, "median": self.median, "max": self.max, "last": self.last, "points": self.points}
        if self.seconds is not None:
            out["seconds"] = self.seconds
        return out


def _present(record: Any) -> dict[str, Any]:
    """The fields of `record` that are not `None`, each as its `as_dict()`."""
    return {
        f.name: value.as_dict()
        for f in dataclasses.fields(record)
        if (value := getattr(record, f.name)) is not None
    }


_RATE_FIELDS = frozenset(t.field for t in _tags.TAGS if t.rate is not None)


@dataclass(frozen=True)
class Throughput:
    """The `throughput/*` rates of a run: one `SeriesStats` per rate tag it logged.

    Every rate of the tag registry (`keras_gpu.output.tags.rates`) reads as
    an attribute named after the tag's name after `throughput/`
    (`throughput.samples_per_sec`), `None` where the run logged none.
    Per-window rates have a mean weighted by each window's wall time
    (samples over seconds); per-epoch (steady) rates a mean weighted by each
    epoch's steady seconds (the end-of-fit figure).
    """

    rates: Mapping[str, SeriesStats] = dataclasses.field(default_factory=dict)

    def __getattr__(self, name: str) -> SeriesStats | None:
        if name in _RATE_FIELDS:
            return self.rates.get(name)
        raise AttributeError(f"{type(self).__name__!r} has no attribute {name!r}")

    def __bool__(self) -> bool:
        return bool(self.rates)

    def as_dict(self) -> dict[str, dict[str, float]]:
        """The logged rates only, each as `SeriesStats.as_dict`."""
        return {name: stats.as_dict() for name, stats in self.rates.items()}


@dataclass(frozen=True)
class EpochTimes:
    """Totals of the per-epoch `time/*` tags over the run, in seconds (0 for a tag never logged).

    Field names are the tags' names after `time/`.
    """

    epochs: int
    epoch_sec: float
    train_sec: float
    first_step_sec: float
    validation_sec: float
    other_sec: float
    first_epoch_first_step_sec: float = 0.0
    """The first epoch's `time/first_step_sec` alone (tracing and compiling are paid there)."""

    def as_dict(self) -> dict[str, float]:
        """Every field."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class StepTimeSummary:
    """The step-time breakdown over every trace of a run, each trace weighted by the steps it covered.

    Attributes:
        step: The breakdown (`source="report"`, `steps`: traced steps in all),
            with the input stage the traces name for the most steps.
        traces: How many traces it is made of.
        replica_labels: Per replica in `StepTime.replicas`, its tag
            label (`<global index>_<DEV>_<n>`).
    """

    step: StepTime
    traces: int
    replica_labels: tuple[str, ...]

    @property
    def shares(self) -> dict[str, float]:
        """Each part's share of the step, 0..1 (`host`: the part of `other` outside the compiled step; NaN where
        not measured)."""
        return {part: self.step.share(part) for part in _SHARE_PARTS}

    @property
    def replica_names(self) -> list[str]:
        """Per replica, `"replica 1 (GPU:1)"`: its index and device, for sentences."""
        names = []
        for label in self.replica_labels:
            index, _, device = label.partition("_")
            names.append(f"replica {index} ({device.replace('_', ':')})" if device else f"replica {index}")
        return names

    def as_dict(self) -> dict[str, Any]:
        """`StepTime.as_dict` with `traces`, `shares` and `replica_labels`."""
        out = self.step.as_dict()
        out["traces"] = self.traces
        out["shares"] = {k: None if math.isnan(v) else v for k, v in self.shares.items()}
        out["replica_labels"] = list(self.replica_labels)
        return out


@dataclass(frozen=True)
class ClusterReport:
    """The chief's cluster view over every gather of a run.

    Attributes:
        gathers: Gathers with both the slowest worker and the imbalance.
        verdict: The straggler with its part, other stragglers, and a worker
            slowed against its own best
            (`keras_gpu.meters.cluster_view.verdict_over`): the same verdict
            as the end-of-fit line.
        workers_reporting: Workers that reported at the last gather, `None`
            where not logged.
        busy, input, communication: `{"min"|"median"|"max": seconds per step}`
            across the workers at the last gather, the statistics logged only.
        slowest_workers: The slowest workers over the fit's gathers, those
            standing out most often first (`keras_gpu.meters.cluster_view.slowest_over`).
        threshold: The score a worker had to pass at the last gather, in
            spreads (`None`: not logged).
        workers_out: Workers standing out at the last gather (`None`: not logged).
        slowest_score: The slowest worker's score at the last gather, in
            spreads (`None`: not logged).
        straggler_so_far: The chief's `cluster/straggler` at the last gather
            (-1: none; `None`: not logged): in a running job, the verdict so far.
    """

    gathers: int
    verdict: Verdict
    workers_reporting: float | None
    busy: dict[str, float]
    input: dict[str, float]
    communication: dict[str, float]
    slowest_workers: list[Standing] = dataclasses.field(default_factory=list)
    threshold: float | None = None
    workers_out: float | None = None
    slowest_score: float | None = None
    straggler_so_far: float | None = None

    @property
    def straggler(self) -> int | None:
        """The worker named the straggler, or `None`."""
        return self.verdict.straggler

    @property
    def imbalance(self) -> float | None:
        """The share of each step the others waited for it (a fraction), `None` without gathers."""
        return self.verdict.imbalance

    @property
    def sentence(self) -> str:
        """"worker 1 is the straggler: its ..." or "no straggler ..."."""
        return self.verdict.sentence

    def as_dict(self) -> dict[str, Any]:
        """Every field (the verdict's flat, `slowest_workers` as a list of dicts), and `sentence`."""
        out = {
            f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("verdict", "slowest_workers")
        }
        verdict = dataclasses.asdict(self.verdict)
        verdict["more_stragglers"] = list(self.verdict.more_stragglers)
        slowest = [{**dataclasses.asdict(s), "score": _finite(s.score)} for s in self.slowest_workers]
        return {**out, **verdict, "slowest_workers": slowest, "sentence": self.sentence}


def _finite(value: float) -> float | None:
    """`value`, or `None` where it is not finite (JSON has no infinity)."""
    return value if math.isfinite(value) else None


@dataclass(frozen=True)
class MemorySummary:
    """Peak memory of a run.

    Attributes:
        allocator_peak_bytes: Per device label, the allocator's peak (bytes),
            for devices whose allocator counted something.
        allocator_uncounted: Per device label whose allocator counted no byte,
            why (see `keras_gpu.output.tag_records.uncounted_allocator`).
        gpus: Per GPU index, per NVML metric (the tag's name after
            `gpu/{gpu}/`), the statistics of its points.
        host_rss_peak_bytes: The process' peak resident set size (bytes),
            `None` where not logged.
        pools: Per device label whose allocator preallocated a pool (JAX on
            a GPU), `(its size in bytes, None where JAX reported none; the
            setting that decides it, in words)`.
    """

    allocator_peak_bytes: dict[str, float]
    allocator_uncounted: dict[str, str]
    gpus: dict[str, dict[str, SeriesStats]]
    host_rss_peak_bytes: float | None
    pools: dict[str, tuple[float | None, str]] = dataclasses.field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.allocator_peak_bytes or self.allocator_uncounted or self.gpus or self.host_rss_peak_bytes)

    def as_dict(self) -> dict[str, Any]:
        """Every field, the statistics as `SeriesStats.as_dict`."""
        return {
            "allocator_peak_bytes": dict(self.allocator_peak_bytes),
            "allocator_uncounted": dict(self.allocator_uncounted),
            "gpus": {gpu: {k: s.as_dict() for k, s in metrics.items()} for gpu, metrics in self.gpus.items()},
            "host_rss_peak_bytes": self.host_rss_peak_bytes,
            "pools": {device: {"pool_bytes": size, "setting": setting} for device, (size, setting) in self.pools.items()},
        }


@dataclass(frozen=True)
class PlacementDigest:
    """What `placement.json` says about a run's training step.

    Attributes:
        cpu_fallback_ops: Ops on the CPU while the replicas sit on GPUs.
        top_fallbacks: `(op type, count)` of the ten most frequent of them.
        ops_per_device: Ops per device name, as the file holds them.
        copy_ops: Cross-device transfers, as the file holds them (`None`
            where absent).
    """

    cpu_fallback_ops: int
    top_fallbacks: list[tuple[str, int]]
    ops_per_device: dict[str, Any]
    copy_ops: Any

    def as_dict(self) -> dict[str, Any]:
        """Every field."""
        return {
            "cpu_fallback_ops": self.cpu_fallback_ops,
            "top_fallbacks": list(self.top_fallbacks),
            "ops_per_device": self.ops_per_device,
            "copy_ops": self.copy_ops,
        }


@dataclass(frozen=True)
class RunSummary:
    """One run directory of a log directory.

    Attributes:
        run: Its path relative to the log directory.
        worker: The worker index (0 for the chief's `train`), `None` where the
            path names none.
        label: `"chief"`, `"worker 1"`, or the path.
        steps: The largest step any scalar was logged at.
        keras_gpu_tags: The scalar tags keras-gpu declares, sorted.
        placement_counts: The `placement/*` scalars' last values, by the
            tag's name after `placement/`.
        throughput, time, step_time, cluster, memory, placement: The parts,
            `None` (or empty) where the run logged none.
    """

    run: str
    worker: int | None
    label: str
    steps: int
    keras_gpu_tags: list[str]
    placement_counts: dict[str, float]
    throughput: Throughput
    time: EpochTimes | None
    step_time: StepTimeSummary | None
    cluster: ClusterReport | None
    memory: MemorySummary
    placement: PlacementDigest | None

    @property
    def has_data(self) -> bool:
        """Whether any part holds a measurement (runs without any are left out of the report)."""
        parts = (self.throughput, self.time, self.step_time, self.cluster, self.placement, self.memory)
        return any(bool(p) for p in parts)

    def as_dict(self) -> dict[str, Any]:
        """Every field, each part as its `as_dict()` (`None` for a missing one)."""
        def part(record: Any) -> Any:
            return None if record is None else record.as_dict()

        return {
            "run": self.run,
            "worker": self.worker,
            "label": self.label,
            "steps": self.steps,
            "keras_gpu_tags": list(self.keras_gpu_tags),
            "placement_counts": dict(self.placement_counts),
            "throughput": self.throughput.as_dict(),
            "time": part(self.time),
            "step_time": part(self.step_time),
            "cluster": part(self.cluster),
            "memory": self.memory.as_dict(),
            "placement": part(self.placement),
        }


@dataclass(frozen=True)
class Report:
    """Every run under a log directory, the chief's cluster view, and the hints that follow from them.

    Attributes:
        log_dir: The log directory.
        runs: The runs with data, shallowest first.
        cluster: The first run's cluster view that has one (the chief's).
        hints: Sentences, each naming the measurement it follows from.
    """

    log_dir: str
    runs: list[RunSummary]
    cluster: ClusterReport | None
    hints: list[str]

    def as_dict(self) -> dict[str, Any]:
        """The JSON of `keras-gpu report --json`."""
        return {
            "log_dir": self.log_dir,
            "runs": [r.as_dict() for r in self.runs],
            "cluster": None if self.cluster is None else self.cluster.as_dict(),
            "hints": list(self.hints),
        }
