"""The step-time breakdown and the cluster view as tag values: the one place their records become scalars.

:func:`step_time_values` turns a :class:`keras_gpu.meters.step_record.StepTime`
into the `step_time/*` scalars, :func:`cluster_values` a
:class:`keras_gpu.meters.cluster_view.ClusterSummary` into the `cluster/*`
ones (names and units in :mod:`keras_gpu.output.tags`). `StepTimeLogger`
writes them; `keras-gpu report` reads them back.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from keras_gpu.meters.cluster_view import ClusterSummary
from keras_gpu.meters.step_record import StepTime
from keras_gpu.output import tags

__all__ = ["cluster_values", "step_time_values"]

_SPREADS = (
    ("busy", (tags.CLUSTER_BUSY_MIN, tags.CLUSTER_BUSY_MEDIAN, tags.CLUSTER_BUSY_MAX)),
    ("input", (tags.CLUSTER_INPUT_MIN, tags.CLUSTER_INPUT_MEDIAN, tags.CLUSTER_INPUT_MAX)),
    ("communication", (tags.CLUSTER_COMMUNICATION_MIN, tags.CLUSTER_COMMUNICATION_MEDIAN, tags.CLUSTER_COMMUNICATION_MAX)),
)


def step_time_values(result: StepTime, labels: Iterable[str]) -> dict[str, float]:
    """The `step_time/*` scalars of a breakdown, in seconds per step (`traced_steps`: a count).

    `step_time/input_sec` is left out where the input wait was not measured
    (NaN: the step probe with several steps per call), and the replicas'
    `communication_sec` where the breakdown comes from the probe (it measures
    each replica's compute only).

    Args:
        result: The breakdown.
        labels: Per local replica, in replica order, its tag label
            (`<global index>_<DEV>_<n>`).
    """
    values = {
        tags.STEP_SEC.name(): result.step_sec,
        tags.STEP_TRACED_STEPS.name(): float(result.steps),
        tags.STEP_INPUT_SEC.name(): result.input_sec,
        tags.STEP_COMPUTE_SEC.name(): result.compute_sec,
        tags.STEP_COMMUNICATION_SEC.name(): result.communication_sec,
        tags.STEP_OTHER_SEC.name(): result.other_sec,
    }
    if math.isnan(result.input_sec):
        del values[tags.STEP_INPUT_SEC.name()]
    for label, replica in zip(labels, result.replicas):
        values[tags.REPLICA_COMPUTE_SEC.name(replica=label)] = replica.compute_sec
        if result.source != "probe":
            values[tags.REPLICA_COMMUNICATION_SEC.name(replica=label)] = replica.communication_sec
    return values


def cluster_values(summary: ClusterSummary) -> dict[str, float]:
    """The `cluster/*` scalars of one gather: the slowest worker (an index), the imbalance (a fraction),
    the workers reporting (a count), and the busy, input and communication seconds per step across the
    workers (min, median, max; a spread no worker measured is left out)."""
    out = {
        tags.CLUSTER_SLOWEST_WORKER.name(): float(summary.slowest_worker),
        tags.CLUSTER_IMBALANCE.name(): summary.imbalance,
        tags.CLUSTER_WORKERS_REPORTING.name(): float(summary.reporting),
    }
    for part, stat_tags in _SPREADS:
        for tag, value in zip(stat_tags, getattr(summary, part)):
            if not math.isnan(value):
                out[tag.name()] = value
    return out
