"""The step-time breakdown and the cluster view as tag values: the one place their records become scalars.

`step_time_values` turns a `keras_gpu.meters.step_record.StepTime`
into the `step_time/*` scalars, `cluster_values` a
`keras_gpu.meters.cluster_view.ClusterSummary` into the `cluster/*`
ones (names and units in `keras_gpu.output.tags`). `StepTimeLogger`
writes them; `keras_gpu.output.tag_records` reads them back into records
through the same tables (`STEP_PARTS`, `REPLICA_PARTS`,
`CLUSTER_SPREADS`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from keras_gpu.meters.cluster_view import PARTS, ClusterSummary, Verdict
from keras_gpu.meters.step_record import StepTime
from keras_gpu.output import tags

__all__ = ["CLUSTER_FACTS", "CLUSTER_SPREADS", "REPLICA_PARTS", "SPREAD_STATS", "STEP_PARTS", "cluster_values", "step_time_values"]

#: The breakdown's `step_time/*` tags, each with the `StepTime` field it holds (seconds per step).
STEP_PARTS: tuple[tuple[tags.Tag, str], ...] = (
    (tags.STEP_SEC, "step_sec"),
    (tags.STEP_INPUT_SEC, "input_sec"),
    (tags.STEP_COMPUTE_SEC, "compute_sec"),
    (tags.STEP_COMMUNICATION_SEC, "communication_sec"),
    (tags.STEP_TRANSFER_SEC, "transfer_sec"),
    (tags.STEP_OTHER_SEC, "other_sec"),
    (tags.STEP_HOST_SEC, "host_sec"),
)
#: A replica's `step_time/replica_{replica}/*` tags, each with the
#: `ReplicaTime` field it holds (compute first).
REPLICA_PARTS: tuple[tuple[tags.Tag, str], ...] = (
    (tags.REPLICA_COMPUTE_SEC, "compute_sec"),
    (tags.REPLICA_COMMUNICATION_SEC, "communication_sec"),
)
#: A gather's facts (`keras_gpu.meters.cluster_view.GatherFacts` fields) logged as plain scalars,
#: the slowest worker first; the part is logged as its index in `PARTS`.
CLUSTER_FACTS: tuple[tuple[tags.Tag, str], ...] = (
    (tags.CLUSTER_SLOWEST_WORKER, "slowest_worker"),
    (tags.CLUSTER_IMBALANCE, "imbalance"),
    (tags.CLUSTER_PART_SEC, "part_sec"),
    (tags.CLUSTER_PART_MEDIAN_SEC, "part_median_sec"),
    (tags.CLUSTER_EXCESS_SEC, "excess_sec"),
    (tags.CLUSTER_SPREAD_SEC, "spread_sec"),
    (tags.CLUSTER_SCORE_THRESHOLD, "threshold"),
)
#: The statistics of a spread across workers, in the order of `ClusterSummary`'s triples.
SPREAD_STATS = ("min", "median", "max")
#: The cluster view's spreads: each `ClusterSummary` field, with its tags in `SPREAD_STATS` order.
CLUSTER_SPREADS: tuple[tuple[str, tuple[tags.Tag, tags.Tag, tags.Tag]], ...] = (
    ("busy", (tags.CLUSTER_BUSY_MIN, tags.CLUSTER_BUSY_MEDIAN, tags.CLUSTER_BUSY_MAX)),
    ("input", (tags.CLUSTER_INPUT_MIN, tags.CLUSTER_INPUT_MEDIAN, tags.CLUSTER_INPUT_MAX)),
    ("communication", (tags.CLUSTER_COMMUNICATION_MIN, tags.CLUSTER_COMMUNICATION_MEDIAN, tags.CLUSTER_COMMUNICATION_MAX)),
)


def step_time_values(result: StepTime, labels: Iterable[str]) -> dict[str, float]:
    """The `step_time/*` scalars of a breakdown, in seconds per step (`traced_steps`: a count).

    A part that was not measured (NaN) is left out: `step_time/input_sec`
    for the step probe with several steps per call, the device parts of a
    GPU job's trace without GPU activity (`StepTime.unmeasured`); and the
    replicas' `communication_sec` where the breakdown comes from the probe
    (it measures each replica's compute only).

    Args:
        result: The breakdown.
        labels: Per local replica, in replica order, its tag label
            (`<global index>_<DEV>_<n>`).
    """
    values = {tags.STEP_TRACED_STEPS.name(): float(result.steps)}
    for tag, field in STEP_PARTS:
        if not math.isnan(getattr(result, field)):
            values[tag.name()] = getattr(result, field)
    parts = REPLICA_PARTS[:1] if result.source == "probe" else REPLICA_PARTS  # the probe: compute only
    for label, replica in zip(labels, result.replicas):
        for tag, field in parts:
            if not math.isnan(getattr(replica, field)):
                values[tag.name(replica=label)] = getattr(replica, field)
    return values


def cluster_values(summary: ClusterSummary, so_far: Verdict | None = None) -> dict[str, float]:
    """The `cluster/*` scalars of one gather: the slowest worker (an index), the imbalance (a fraction),
    the workers reporting and standing out (counts), the slowest worker's part, its excess, the others'
    spread and the threshold (`CLUSTER_FACTS`), its score, the slowdown against each worker's own best
    (where tracked), and the busy, input and communication seconds per step across the workers (min,
    median, max; a spread no worker measured is left out). With `so_far`, the verdict over the fit's
    gathers up to this one (`keras_gpu.meters.cluster_view.verdict_over`), its straggler (-1: none)."""
    out = {
        **{tag.name(): float(getattr(summary, field)) for tag, field in CLUSTER_FACTS},
        tags.CLUSTER_WORKERS_REPORTING.name(): float(summary.reporting),
        tags.CLUSTER_WORKERS_OUT.name(): float(len(summary.outliers)),
        tags.CLUSTER_PART.name(): float(PARTS.index(summary.part)),
    }
    if summary.spread_sec > 0:
        out[tags.CLUSTER_SLOWEST_SCORE.name()] = summary.excess_sec / summary.spread_sec
    if so_far is not None:
        out[tags.CLUSTER_STRAGGLER.name()] = -1.0 if so_far.straggler is None else float(so_far.straggler)
    if not math.isnan(summary.slowdown):
        out[tags.CLUSTER_SLOWDOWN.name()] = summary.slowdown
        out[tags.CLUSTER_SLOWDOWN_WORKER.name()] = float(summary.slowdown_worker)
    if not math.isnan(summary.slowdown_median):
        out[tags.CLUSTER_SLOWDOWN_MEDIAN.name()] = summary.slowdown_median
    for part, stat_tags in CLUSTER_SPREADS:
        for tag, value in zip(stat_tags, getattr(summary, part)):
            if not math.isnan(value):
                out[tag.name()] = value
    return out
