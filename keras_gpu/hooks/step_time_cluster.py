"""The cluster view of `StepTimeLogger` in a multi-worker TensorFlow fit: the step probe's windows, gathered from every worker.

`ClusterSchedule` decides, in counts of the fit's steps (alike on
every worker), when every worker shares what its step probe
(`keras_gpu.hooks.step_probe`) measured since the last share: on the
gradient all-reduce of the next step (`keras_gpu.hooks.row_ride`), or
by an all-gather, a collective of its own, which epoch ends and the
fit's end call only as often as its cost allows; the rows become a
`keras_gpu.meters.cluster_view.ClusterSummary`.
`log_cluster` is the chief's end-of-fit line.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from keras_gpu.core import backend, keras_private
from keras_gpu.core.cluster import ClusterInfo
from keras_gpu.core.log import Once, logger
from keras_gpu.hooks import step_probe
from keras_gpu.hooks.row_ride import install_ride
from keras_gpu.hooks.step_time_trace import steps_done
from keras_gpu.meters import step_time as steptime
from keras_gpu.meters.cluster_view import ROW_FIELDS, ClusterSummary, summarize_rows, verdict_over

__all__ = [
    "CLUSTER_EVERY_S", "EPOCH_SHARE_S", "MIN_GATHER_STEPS", "ClusterSchedule", "as_step_time", "install_probe", "log_cluster",
    "rides_exactly",
]

_INF = float("inf")
#: Seconds between the cluster view's gathers within an epoch (the chief turns
#: it into a count of steps that every worker adopts).
CLUSTER_EVERY_S = 30.0
#: An epoch's end shares what the probe measured once at least this many
#: steps went by since the last share (a count, so every worker decides alike).
MIN_GATHER_STEPS = 5
#: Where the rows travel by an all-gather (a collective of its own, about
#: 1 ms and the wait for the slowest worker to reach it), an epoch's end
#: after the fit's first share gathers only once this many seconds of steps
#: (in the chief's adopted period's pace) went by since the last share:
#: epochs of a second would otherwise pay a gather each.
EPOCH_SHARE_S = 5.0

#: `write(breakdown, replica labels, global step)`: logs this worker's own window.
Write = Callable[[steptime.StepTime, list[str], int], None]
#: A cluster view: `(global step, summary)`, the summary `None` when no worker had a window.
View = tuple[int, ClusterSummary | None]


class ClusterSchedule:
    """The cluster view's state in one multi-worker `fit`: the probe, how the rows travel, and when.

    Every decision is a count of this fit's steps, so every worker shares its
    row at the same steps. A row rides on the next training step's gradient
    all-reduce where the step carries `ride` (`keras_gpu.hooks.row_ride`:
    no collective of its own; every worker reads the rows at the next batch
    end); otherwise, and for the fit's last row (no step follows it), every
    worker all-gathers the rows with `gather` at once.

    Shares fall at the first epoch end (its row carries the chief's period
    for the next, `CLUSTER_EVERY_S` of steps), at batch ends every period,
    and at later epoch ends: each one where the row rides, and where it
    is gathered only once `EPOCH_SHARE_S` of steps went by since the last
    share. Without a ride, the fit's end gathers what is left.

    Args:
        probe: The step probe installed in the model's train step.
        gather: The all-gather of one row per worker (`keras_gpu.hooks.gather.RowGather`).
        replicas: `(tag label, device)` per local replica.
        first_step: The global step this fit starts from.
        ride: The rows' ride on the gradient all-reduce (`None`: gather every time).
        epoch_steps: Steps per epoch, where Keras knows them: with
            `steps_per_execution > 1` Keras numbers a short last call's batch
            end as if the call were whole, so batch indices alone would count
            steps that never ran.
    """

    def __init__(
        self,
        probe: step_probe.StepProbe,
        gather: Any,
        replicas: list[tuple[str, str]],
        first_step: int = 0,
        ride: Any = None,
        epoch_steps: int | None = None,
    ) -> None:
        self.probe = probe
        self.epoch_steps = epoch_steps if isinstance(epoch_steps, int) and epoch_steps > 0 else None
        self.gather = gather
        self.ride = ride
        self.replicas = replicas
        self.first_step = first_step
        self.base = 0  # steps of this fit before the current epoch
        self.last_batch = -1
        self.warm = False  # the first batch end starts the first window
        self.gathered_at = 0  # the step of the last shared row (or of the first window's start)
        self.t_window = 0.0
        self.gather_at: int | None = None  # the next share within an epoch, once the chief proposed a period
        self.period: int | None = None  # the chief's last proposed period, in steps
        self.next_batch: float = 0
        self.pending: int | None = None  # the step of the published row the next training step carries
        self.published: list[float] = []  # this worker's last published row (with its sequence number)
        self.failed = False  # the rows could not be shared: the cluster view is off for this fit
        self.best: dict[int, float] = {}  # each worker's lowest busy time per step in this fit's windows

    def step_of(self, batch: int) -> int:
        """Steps of this fit done at the end of `batch` of the current epoch."""
        return self.base + steps_done(batch, self.epoch_steps)

    def epoch_end(self) -> None:
        self.base += steps_done(self.last_batch, self.epoch_steps)
        self.last_batch = -1
        self.schedule()

    def due_at_epoch_end(self) -> bool:
        """Whether the epoch's end shares a row: a point every worker reaches, decided by counts alike everywhere.

        After at least `MIN_GATHER_STEPS` steps since the last share: where
        the row rides on the next step (no collective of its own), for the
        fit's first share (it brings the chief's period), and otherwise once
        `EPOCH_SHARE_S` of steps went by at the period's pace.
        """
        since = self._unshared_steps()
        if since < MIN_GATHER_STEPS:
            return False
        if self.period is None or self.rides():
            return True
        return since >= self.period * EPOCH_SHARE_S / CLUSTER_EVERY_S

    def _unshared_steps(self) -> int:
        """Steps measured since the last share (none before the first window starts)."""
        return self.step_of(self.last_batch) - self.gathered_at if self.warm else 0

    def rides(self) -> bool:
        """Whether the rows ride on the training steps' all-reduce (otherwise each share is an all-gather)."""
        return self.ride is not None and bool(self.ride.rode)

    def schedule(self) -> None:
        """The next batch (of this epoch) whose end has something to do."""
        if not self.warm or self.pending is not None:
            self.next_batch = 0
        elif self.gather_at is None:
            self.next_batch = _INF
        else:
            self.next_batch = self.gather_at - self.base - 1

    def batch_end(self, batch: int) -> bool:
        """At the end of `batch`: start the first window after the fit's first step; whether to call `at_batch_end`."""
        self.last_batch = batch
        if batch < self.next_batch:
            return False
        if self.pending is not None:
            return True  # the step just done carried the published rows
        if not self.warm:
            # The fit's first step (tracing, first runs of every op) stays out of every window.
            self.probe.reset()
            self.warm = True
            self.gathered_at = self.step_of(batch)
            self.t_window = time.perf_counter()
        elif self.gather_at is not None and self.step_of(batch) >= self.gather_at:
            return True
        self.schedule()
        return False

    def at_batch_end(self, write: Write | None, once: Once) -> list[View]:
        """Where `batch_end` said so: the view the step just done carried, and this worker's row when due."""
        views = self._collect(once)
        if self.gather_at is not None and self.step_of(self.last_batch) >= self.gather_at:
            views += self._share(write, once)
        self.schedule()
        return views

    def at_epoch_end(self, write: Write | None, once: Once) -> list[View]:
        """At an epoch's end (before `epoch_end`): this worker's row, when enough steps went by."""
        views = self._collect(once)
        if self.due_at_epoch_end():
            views += self._share(write, once)
        return views

    def at_fit_end(self, once: Once, write: Write | None = None) -> list[View]:
        """At the fit's end: every worker all-gathers once, whatever its own state, or shares what is left.

        Where the rows ride, a published row that no step carried comes back
        then. The gather is unconditional (a row of NaN from a worker with
        nothing pending), so that no worker ever waits in it alone. Where
        they are gathered, the steps since the last share are, once at least
        `MIN_GATHER_STEPS` went by (a count alike on every worker).
        """
        views = self._collect(once)
        if self.failed:
            pass
        elif not self.rides():
            if self._unshared_steps() >= MIN_GATHER_STEPS:
                views += self._share(write, once)
        else:
            pending = self.pending is not None
            row = self.published[:-1] if pending else [math.nan] * len(ROW_FIELDS)
            rows = self._attempt(once, self.gather, row, collective=True)
            if pending:
                views += self._view(self.pending, rows)
        self.pending = None
        return views

    def _share(self, write: Write | None, once: Once) -> list[View]:
        """This worker's window: published for the next step to carry, or all-gathered now."""
        step, row = self._take_row(write)
        if not self.rides():
            return self._view(step, self._attempt(once, self.gather, row, collective=True))
        self.published = [*row, self.published[-1] + 1.0 if self.published else 1.0]
        self._attempt(once, self.ride.publish, self.published, collective=False)  # failed: the other workers see this row as stale
        self.pending = step
        return []

    def _collect(self, once: Once) -> list[View]:
        """The rows a training step carried since the last publish (a stale row: that worker is not reporting).

        Where the step carried nothing (this worker's own row is not the
        latest publish: a `LossScaleOptimizer` step that skipped the update),
        the row stays pending for the next step; every worker reads the same
        sums, so every worker decides alike.
        """
        if self.pending is None or self.step_of(self.last_batch) <= self.pending or self.failed:
            return []
        rows = self._attempt(once, self.ride.read, collective=False)
        seq = self.published[-1]
        if rows is None or rows[self.ride.worker][-1] != seq:
            return []
        step, self.pending = self.pending, None
        stale = [math.nan] * len(ROW_FIELDS)
        return self._view(step, [row[:-1] if row[-1] == seq else stale for row in rows])

    def _take_row(self, write: Write | None) -> tuple[int, list[float]]:
        """This worker's window since the last share as a row (`ROW_FIELDS`), with its proposed period."""
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
        # This worker's proposal for the next share, in steps at its pace: the chief's is adopted.
        row.append(float(max(1, round(CLUSTER_EVERY_S * steps / elapsed))) if steps > 0 and elapsed > 0 else 0.0)
        return step, row

    def _attempt(self, once: Once, call: Callable[..., Any], *args: Any, collective: bool) -> Any:
        """`call(*args)`, or `None` after one warning: a failed all-gather (`collective`) ends the view for this fit;
        a failed publish or read on this worker alone leaves this worker out where it failed, and the fit goes on."""
        try:
            return call(*args)
        except Exception as exc:  # noqa: BLE001 - the cluster view must not stop training
            if collective:
                self.failed = True
                key, what = "gather-failed", "gather the workers' measurements (%s: %s); the cluster view is off for this fit"
            else:
                key = "ride-failed"
                what = "share this worker's measurements (%s: %s); the cluster view leaves this worker out where it failed"
            once.log(logging.WARNING, key, f"keras-gpu: StepTimeLogger could not {what}.", type(exc).__name__, exc)
            return None

    def _view(self, step: int, rows: Any) -> list[View]:
        """The view at `step` from every worker's row, and the next share the chief proposed."""
        if not isinstance(rows, list):
            return []
        period = int(rows[0][-1]) if rows and rows[0][-1] > 0 else None
        self.period = period
        if period is not None:
            self.gather_at = step + period
        return [(self.first_step + step, summarize_rows(rows, self.best))]


def install_probe(model: Any, workers: int, worker: int) -> step_probe.StepProbe | None:
    """Put what the cluster view measures into `model`'s training step, before `fit` builds its train function.

    The step probe (with the distributed iterator's check clock, `keras_gpu.setup.iterator_check_private`,
    under the multi-worker strategy), and its rows' ride on the gradient all-reduce
    (`StepProbe.ride`, `None`
    where the optimizer has no such all-reduce). `None` where the step
    cannot be probed (`keras_gpu.hooks.step_probe.unavailable_reason`).
    """
    from keras_gpu.setup.iterator_check_private import attach_clock
    from keras_gpu.setup.keras_compat import KerasMultiWorkerMirroredStrategy

    devices = list(backend.replica_devices(model))
    probe = step_probe.install(model, len(devices))
    if probe is not None:
        if isinstance(backend.strategy(model), KerasMultiWorkerMirroredStrategy) and probe.check_clock is None:
            probe.check_clock = attach_clock(backend.strategy(model))
            keras_private.drop_train_function(model)  # the step reads the clock
        probe.ride = None
        if rides_exactly(workers * len(devices)):
            probe.ride = install_ride(model, workers, worker, len(ROW_FIELDS) + 1, len(devices), devices[0])
    return probe


def rides_exactly(replicas_in_sync: int) -> bool:
    """Whether the rows may ride on a gradient all-reduce of `replicas_in_sync` members without changing a sum.

    The rows lengthen the all-reduce's pack, which moves the boundaries of
    the chunks a ring all-reduce sums in turn, and so the order in which
    each gradient element's terms are added. With two members each element
    is one addition, `a + b == b + a` exactly; with three or more a moved
    boundary changes the rounding (measured: 5.96e-8 on a weight after three
    epochs of three workers). So only a job of two replicas in all rides;
    every other job shares its rows by an all-gather at the share points,
    between steps, where no gradient passes.
    """
    return replicas_in_sync == 2


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


def log_cluster(gathers: Sequence[ClusterSummary | None], task: ClusterInfo | None) -> str | None:
    """The chief's end-of-fit line: the verdict over the fit's gathers; returns its sentence (`None`: not logged).

    Nothing on other workers.
    """
    summaries = [c for c in gathers if c is not None]
    if not summaries or task is None or not task.is_chief:
        return None
    last = summaries[-1]
    sentence = verdict_over(summaries).sentence
    logger.info(
        "keras-gpu: cluster view (%d of %d workers, busy %.3g-%.3g ms per step, %d gathers): %s.",
        last.reporting,
        last.workers,
        1e3 * last.busy[0],
        1e3 * last.busy[2],
        len(summaries),
        sentence,
    )
    return sentence
