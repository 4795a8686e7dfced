"""The cluster view of `StepTimeLogger` in a multi-worker TensorFlow fit: the step probe's windows, gathered from every worker.

:class:`ClusterSchedule` decides, in counts of the fit's steps (alike on
every worker), when every worker all-gathers what its step probe
(:mod:`keras_gpu.hooks.step_probe`) measured since the last gather; the rows
become a :class:`keras_gpu.meters.cluster_view.ClusterSummary`.
:func:`log_cluster` is the chief's end-of-fit line.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from keras_gpu.core.cluster import ClusterInfo
from keras_gpu.core.log import Once, logger
from keras_gpu.hooks import step_probe
from keras_gpu.meters import step_time as steptime
from keras_gpu.meters.cluster_view import (
    ROW_FIELDS,
    ClusterSummary,
    straggler_over,
    straggler_sentence,
    summarize_rows,
)

__all__ = ["CLUSTER_EVERY_S", "MIN_GATHER_STEPS", "ClusterSchedule", "as_step_time", "log_cluster"]

_INF = float("inf")
#: Seconds between the cluster view's gathers within an epoch (the chief turns
#: it into a count of steps that every worker adopts).
CLUSTER_EVERY_S = 30.0
#: An epoch's end gathers what the probe measured once at least this many
#: steps went by since the last gather (a count, so every worker decides alike).
MIN_GATHER_STEPS = 5

#: `write(breakdown, replica labels, global step)`: logs this worker's own window.
Write = Callable[[steptime.StepTime, list[str], int], None]


class ClusterSchedule:
    """The cluster view's state in one multi-worker `fit`: the probe, the gather, and when to gather next.

    Every decision is a count of this fit's steps, so every worker gathers at
    the same steps.

    Args:
        probe: The step probe installed in the model's train step.
        gather: The all-gather of one row per worker (:class:`keras_gpu.hooks.gather.RowGather`).
        replicas: `(tag label, device)` per local replica.
        first_step: The global step this fit starts from.
    """

    def __init__(
        self, probe: step_probe.StepProbe, gather: Any, replicas: list[tuple[str, str]], first_step: int = 0
    ) -> None:
        self.probe = probe
        self.gather = gather
        self.replicas = replicas
        self.first_step = first_step
        self.base = 0  # steps of this fit before the current epoch
        self.last_batch = -1
        self.warm = False  # the first batch end starts the first window
        self.gathered_at = 0  # the step of the last gather (or of the first window's start)
        self.t_window = 0.0
        self.gather_at: int | None = None  # the next gather within an epoch, once the chief proposed a period
        self.next_batch: float = 0

    def step_of(self, batch: int) -> int:
        """Steps of this fit done at the end of `batch` of the current epoch."""
        return self.base + batch + 1

    def epoch_end(self) -> None:
        self.base += self.last_batch + 1
        self.last_batch = -1
        self.schedule()

    def due_at_epoch_end(self) -> bool:
        """Whether the epoch's end gathers: a point every worker reaches, after enough steps (alike on every worker)."""
        return self.warm and self.step_of(self.last_batch) - self.gathered_at >= MIN_GATHER_STEPS

    def schedule(self) -> None:
        """The next batch (of this epoch) whose end has something to do."""
        if not self.warm:
            self.next_batch = 0
        elif self.gather_at is None:
            self.next_batch = _INF
        else:
            self.next_batch = self.gather_at - self.base - 1

    def batch_end(self, batch: int) -> bool:
        """At the end of `batch`: start the first window after the fit's first step; whether to gather now."""
        self.last_batch = batch
        if batch < self.next_batch:
            return False
        if not self.warm:
            # The fit's first step (tracing, first runs of every op) stays out of every window.
            self.probe.reset()
            self.warm = True
            self.gathered_at = self.step_of(batch)
            self.t_window = time.perf_counter()
        elif self.gather_at is not None and self.step_of(batch) >= self.gather_at:
            return True  # `gather_rows` schedules the next batch
        self.schedule()
        return False

    def gather_rows(self, write: Write | None, once: Once) -> tuple[int, ClusterSummary | None] | None:
        """All-gather every worker's probe window, at a step every worker reaches.

        This worker's own window goes to `write` first (unless it is `None`).
        Returns `(global step, summary)`, the summary `None` when no worker had
        a window; `None` where the gather failed (one warning: the cluster
        view is then off for this fit).
        """
        step = self.step_of(self.last_batch)
        now = time.perf_counter()
        steps, elapsed = step - self.gathered_at, now - self.t_window
        self.gathered_at, self.t_window, self.gather_at = step, now, None
        window = self.probe.read()
        row = [float("nan")] * (len(ROW_FIELDS) - 1)
        if window is not None:
            row = [
                1.0, window.step_sec, window.input_sec, window.compute_sec, window.communication_sec,
                window.host_sec, window.busy_sec, float(window.steps),
            ]
            if write is not None:
                write(as_step_time(window), [label for label, _ in self.replicas], self.first_step + step)
        # This worker's proposal for the next gather, in steps at its pace: the chief's is adopted.
        row.append(float(max(1, round(CLUSTER_EVERY_S * steps / elapsed))) if steps > 0 and elapsed > 0 else 0.0)
        try:
            rows = self.gather(row)
        except Exception as exc:  # noqa: BLE001 - the cluster view must not stop training
            once.log(
                logging.WARNING,
                "gather-failed",
                "keras-gpu: StepTimeLogger could not gather the workers' measurements (%s: %s); the cluster view is "
                "off for this fit.",
                type(exc).__name__,
                exc,
            )
            return None
        period = int(rows[0][-1]) if rows and rows[0][-1] > 0 else None
        if period is not None:
            self.gather_at = step + period
        self.schedule()
        return self.first_step + step, summarize_rows(rows)


def as_step_time(window: step_probe.ProbeWindow) -> steptime.StepTime:
    """A probe window as the breakdown every other source gives (`other` is the host time)."""
    return steptime.StepTime(
        steps=window.steps,
        step_sec=window.step_sec,
        input_sec=window.input_sec,
        compute_sec=window.compute_sec,
        communication_sec=window.communication_sec,
        other_sec=window.host_sec,
        replicas=tuple(steptime.ReplicaTime(c, 0.0) for c in window.replica_compute_sec),
        source="probe",
        host_sec=window.host_sec,
    )


def log_cluster(gathers: Sequence[ClusterSummary | None], task: ClusterInfo | None) -> None:
    """The chief's end-of-fit line: the straggler, over the fit's gathers (nothing on other workers)."""
    summaries = [c for c in gathers if c is not None]
    if not summaries or task is None or not task.is_chief:
        return
    last = summaries[-1]
    straggler, imbalance = straggler_over([(c.slowest_worker, c.imbalance) for c in summaries])
    logger.info(
        "keras-gpu: cluster view (%d of %d workers, busy %.3g-%.3g ms per step, %d gathers): %s.",
        last.reporting,
        last.workers,
        1e3 * last.busy[0],
        1e3 * last.busy[2],
        len(summaries),
        straggler_sentence(straggler, imbalance),
    )
