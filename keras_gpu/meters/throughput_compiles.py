"""Which executions are left out of the steady rate, and the training thread's clock of them.

The steady rate leaves out each epoch's first execution (tracing, warm-up,
iterator start) and every execution that compiled: a batch shape new to the
fit makes JAX trace and compile the train step again (and XLA compile on
TensorFlow with `jit_compile=True`; without it, Keras 3.15 traces its train
function once, on the iterator, whatever the batch shape).

Two ways, by where Keras runs the batch ends:

* On the training thread, in order (TensorFlow): the meter times every
  execution from the batch ends it looks at. Where the data schedule knows
  the batch sizes, the execution that runs a new size is known before it
  runs (`CompileLeaveOut.watch`, `CompileLeaveOut.ran_new_size`).
* On Keras' thread pool (JAX, PyTorch), where batch ends arrive late and out
  of order: a batch end tells that its step is done, not when. The training
  thread's batch begins are in order and on time, so a `BeginClock` times the
  executions left out from them (an execution runs from its batch begin to
  the next one's, the first from the epoch's start) and takes their counts
  from the batch counter's readings at those begins; the caller hands each
  closed `LeftOut` to `ThroughputMeter.leave_out`. Which executions compiled
  comes from the backend's own signal (JAX's compile events, on the training
  thread), else from the schedule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from keras_gpu.meters.throughput_records import DataSchedule

__all__ = ["BeginClock", "CompileLeaveOut", "LeftOut"]

_KEEP = 8  # the counter's readings a `BeginClock` keeps: a few executions back, whatever `steps_per_execution`


class CompileLeaveOut:
    """What this fit knows of its compiles: the batch sizes it ran, and where the last execution ended.

    Owned by one `ThroughputMeter`, which tells it each execution it
    accounts for (`note_sizes`, `short_batch`) and asks it which execution
    compiles (`watch`, `ran_new_size`).

    Args:
        schedule: How `fit` feeds batches.
        counted: Whether a counter counts the samples (the schedule then
            cannot tell which execution runs a new size: the caller does).

    Examples:
        >>> from keras_gpu.meters.throughput_compiles import CompileLeaveOut
        >>> from keras_gpu.meters.throughput_records import DataSchedule
        >>> watch = CompileLeaveOut(DataSchedule.from_samples(1000, 64), counted=False)
        >>> watch.watch(counts_samples=True)  # the batch end before the short batch's execution
        14
        >>> watch.note_sizes(14)
        >>> watch.short_batch(15)
        >>> first = watch.ran_new_size(15, counts_samples=True)
        >>> first, watch.ran_new_size(15, counts_samples=True)
        (True, False)
    """

    def __init__(self, schedule: DataSchedule, counted: bool) -> None:
        self.schedule = schedule
        self.counted = counted
        self._sizes_run: set[int] = set()  # batch sizes this fit has run (a new one compiles)
        self._short_batch_at = -2  # Keras' batch index of the execution that ran a pass's short last batch

    def watch(self, counts_samples: bool) -> int:
        """Keras' batch index of the execution before the one that runs a batch size new to this fit; -1 if none.

        Where the epoch is one pass over data with a short last batch that this
        fit has not run yet, the execution that runs it compiles (JAX; XLA on
        TensorFlow with `jit_compile=True`); the meter looks at the batch end
        before it, the start of the execution it leaves out.
        """
        sched = self.schedule
        n, k = sched.batches_per_pass, sched.steps_per_execution
        if (
            self.counted
            or not counts_samples
            or sched.steps_per_epoch is not None
            or n is None
            or sched.last_batch_size == sched.batch_size
            or sched.last_batch_size in self._sizes_run
        ):
            return -1
        return ((n - 1) // k) * k - 1

    def short_batch(self, batch: int) -> None:
        """The execution ending at `batch` ran the pass's short last batch."""
        self._short_batch_at = batch

    def note_sizes(self, batch: int) -> None:
        """The execution ending at `batch` ran: its batch sizes are compiled from now on."""
        sched = self.schedule
        if not self.counted and sched.counts_samples:
            self._sizes_run.add(sched.batch_size)
            if self._short_batch_at == batch:
                self._sizes_run.add(sched.last_batch_size)

    def ran_new_size(self, batch: int, counts_samples: bool) -> bool:
        """Whether the execution ending at `batch` ran a batch size new to this fit (noting its sizes as run)."""
        sched = self.schedule
        new = (
            not self.counted
            and counts_samples
            and self._short_batch_at == batch
            and sched.last_batch_size not in self._sizes_run
        )
        self.note_sizes(batch)
        return new


@dataclass(frozen=True)
class LeftOut:
    """Executions left out of the steady rate, timed on the training thread (`BeginClock`).

    Attributes:
        first_batch: Keras' batch index of their first step.
        last_batch: Keras' batch index of their last step.
        start: The first one's batch begin (the epoch's start for the
            epoch's first execution).
        end: The batch begin after the last one (the meter ends them with
            the training phase where that comes first: Keras begins a step
            that never runs where the data ran out).
        counts_before: The counter's running `(steps, samples)` through
            `first_batch - 1`, read on the training thread; `None` where
            the schedule counts (or the reading is missing).
        counts_through: The same through `last_batch`.
    """

    first_batch: int
    last_batch: int
    start: float
    end: float
    counts_before: Any = None
    counts_through: Any = None


class BeginClock:
    """The training thread's clock of the executions left out of the steady rate (see the module's docstring).

    Fed on the training thread, in order: `epoch_begin`, then `begin` at each
    batch begin; `leave_out_current` marks the execution begun last (it
    compiled, or runs a batch size new to the fit). Each `begin` closes the
    executions left out before it; `close` hands over those still open at
    the epoch's end, which end with the training phase. Per batch: a dict
    store and a comparison; no lock (the caller takes its own where it hands
    a `LeftOut` over).

    Args:
        every_reading: Whether the caller passes the counter's reading at
            every begin (a counter counts); else the schedule counts.

    Examples:
        >>> from keras_gpu.meters.throughput_compiles import BeginClock
        >>> clock = BeginClock(every_reading=False)
        >>> clock.epoch_begin(0.0)
        >>> clock.begin(0, 0.1) is None  # the first execution runs on
        True
        >>> clock.begin(1, 2.0)  # it ended when the second began
        LeftOut(first_batch=0, last_batch=0, start=0.0, end=2.0, counts_before=None, counts_through=None)
        >>> clock.begin(2, 2.1)
        >>> clock.leave_out_current()  # the execution begun at batch 2 compiled
        >>> left = clock.begin(3, 3.1)
        >>> left.first_batch, left.end - left.start
        (2, 1.0)
    """

    __slots__ = ("_current", "_open", "_readings", "every_reading")

    def __init__(self, every_reading: bool) -> None:
        self.every_reading = every_reading
        self._readings: dict[int, Any] = {}  # the counter's readings by the last batch index they cover
        self._open: tuple[int, float] | None = None  # (first batch, start) of the executions left out, still open
        self._current = (0, 0.0)  # (first batch, begin) of the execution begun last

    def epoch_begin(self, t: float, counts: Any = None) -> None:
        """An epoch starts at `t`, its counter reading `counts`: its first execution is left out from `t`."""
        self._readings = {-1: counts}
        self._open = self._current = (0, t)

    def begin(self, batch: int, t: float, through: int = -1, counts: Any = None) -> LeftOut | None:
        """The batch begin of the execution whose first step is `batch`, at `t`.

        Args:
            batch: Keras' batch index.
            t: Now.
            through: The last batch index the counter's reading covers.
            counts: The counter's running `(steps, samples)` now.

        Returns:
            The executions left out that ended here, or `None`.
        """
        if self.every_reading:
            readings = self._readings
            readings[through] = counts
            if len(readings) > _KEEP:
                del readings[min(readings)]
        closed = None
        start = self._open
        if start is not None and batch > start[0]:
            self._open = None
            closed = LeftOut(start[0], batch - 1, start[1], t, *self._counts(start[0], batch - 1))
        self._current = (batch, t)
        return closed

    def leave_out_current(self) -> None:
        """The execution begun last is left out (it compiled, or it runs a new batch size)."""
        if self._open is None:
            self._open = self._current

    def close(self) -> tuple[int, float, Any] | None:
        """At the epoch's end: `(first batch, start, counts before)` of the executions left out still open."""
        start, self._open = self._open, None
        if start is None:
            return None
        return start[0], start[1], self._readings.get(start[0] - 1) if self.every_reading else None

    def _counts(self, first: int, last: int) -> tuple[Any, Any]:
        if not self.every_reading:
            return None, None
        return self._readings.get(first - 1), self._readings.get(last)
