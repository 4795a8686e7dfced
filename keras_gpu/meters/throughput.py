"""The throughput meter: logging windows, exact sample counts, rates, FLOP/s and MFU.

Plain Python, no TensorFlow. A `ThroughputMeter` is fed batch indices
and timestamps by the `ThroughputLogger` callback (or by a test with a fake
clock) and answers with `Window`
records holding exact counts and rates; `fit`'s batches are its
`DataSchedule`.

Where the batch size is not known before `fit` runs (a `tf.data` pipeline
with a dynamic batch, a generator, a `PyDataset`, a PyTorch `DataLoader`), a
*counter* counts instead: a callable giving the steps and samples done so
far, read when a window closes (never per batch). The meter then takes each
window's steps and samples from the counter, so short and uneven batches,
and an execution that stopped early, count as they ran. A counter that
counts samples only gives `None` steps: Keras' batch index then counts them
(exact where every execution runs all its steps).

Windows tile each epoch's training phase with no gap, so the first window
holds the first execution and the sum of the window times is the training
phase's wall time (the conventions: `keras_gpu.meters.throughput_records`).
Executions that compiled are left out of the steady rate like the first: a
batch shape new to the fit makes JAX, and XLA under `jit_compile=True`,
compile again. Where the batch ends are fed in order as the steps end (on the
training thread), the meter times the executions it leaves out itself, and
asks its `keras_gpu.meters.throughput_compiles.CompileLeaveOut` which
execution runs a new batch size. Where they run late and out of order (on
Keras' thread pool) only the training thread knows when an execution ended:
the caller sets `left_out_told` and hands over every execution left out,
the first included, timed from its batch begins (`leave_out`; see
`keras_gpu.meters.throughput_compiles.BeginClock`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from keras_gpu.core.checks import check_positive
from keras_gpu.meters.throughput_compiles import CompileLeaveOut, LeftOut
from keras_gpu.meters.throughput_records import (
    DataSchedule,
    EpochRates,
    EpochTimes,
    FirstExecution,
    Rates,
    Window,
    steady_rate,
    window_rates,
)

__all__ = ["ThroughputMeter"]

_INF = math.inf


def _positive_number(name: str, value: Any) -> float | None:
    value = check_positive(name, value, allow_none=True)
    return None if value is None else float(value)


@dataclass
class _Epoch:
    """Per-epoch bookkeeping between `epoch_begin` and `epoch_close`."""

    t0: float
    index: int
    first_seconds: float = 0.0
    first_steps: int = 0
    first_samples: int = 0
    train_end: float | None = None
    first_booked: bool = False  # the first execution's time is in `_Totals.first_seconds`
    left_out_span: tuple[float, float] = (0.0, 0.0)  # the last executions handed over as left out: (start, end)
    steady_unknown: bool = False  # an execution left out could not be counted: no steady rate this epoch
    end_step: int = 0
    steps: int = 0
    samples: int = 0
    validation_sec: float = 0.0


@dataclass
class _Totals:
    steps: int = 0
    samples: int = 0
    measured_steps: int = 0
    measured_samples: int = 0
    measured_seconds: float = 0.0
    epochs: list[EpochTimes] = field(default_factory=list)
    validation_seconds: float = 0.0
    other_seconds: float = 0.0
    first_seconds: list[float] = field(default_factory=list)


class ThroughputMeter:
    """Turns batch-end indices and timestamps into exact windows and rates.

    The caller (the callback) compares each batch end against
    `next_batch` and `next_time` itself and calls
    `execution_end` only when one is reached (the callback reads the
    clock only at batch ends it chose, see `ThroughputLogger`), so the
    per-batch cost stays a store and a comparison.

    Args:
        schedule: How `fit` feeds batches.
        every_n_steps: Close a window once this many steps have run since it
            opened. Mutually exclusive with `every_s`.
        every_s: Close a window once this many seconds have passed since it
            opened (default 5.0 when `every_n_steps` is not given).
        num_replicas: Replicas in sync, all workers together.
        flops_per_sample: Training FLOPs per sample (forward + backward), or
            `None`.
        peak_flops: Summed peak FLOP/s of all replica devices, or `None`.
        initial_step: The global step when training starts.
        counter: Running totals `(steps, samples)` of this fit, exact at any
            batch end (see the module's docstring); read once per window.
            With it, the counts come from the counter, not from `schedule`.
            Steps `None`: counted from Keras' batch index; samples `None`
            (or a raise): the counter can no longer tell, samples are not
            logged from then on.
        tokens_per_sample: Tokens per sample (a text model's sequence
            length), for tokens/s; or `None`.
    """

    def __init__(
        self,
        schedule: DataSchedule,
        *,
        every_n_steps: int | None = None,
        every_s: float | None = None,
        num_replicas: int = 1,
        flops_per_sample: float | None = None,
        peak_flops: float | None = None,
        initial_step: int = 0,
        counter: Callable[[], tuple[int | None, int | None]] | None = None,
        tokens_per_sample: float | None = None,
    ) -> None:
        if not isinstance(schedule, DataSchedule):
            raise TypeError(f"`schedule` must be a DataSchedule. Received: schedule={schedule!r}")
        check_positive("every_n_steps", every_n_steps, integer=True, allow_none=True)
        every_s = _positive_number("every_s", every_s)
        if every_n_steps is not None and every_s is not None:
            raise ValueError(
                "Pass only one of `every_n_steps` and `every_s`. "
                f"Received: every_n_steps={every_n_steps!r}, every_s={every_s!r}"
            )
        if every_n_steps is None and every_s is None:
            every_s = 5.0
        check_positive("num_replicas", num_replicas, integer=True)
        if isinstance(initial_step, bool) or not isinstance(initial_step, int) or initial_step < 0:
            raise ValueError(f"`initial_step` must be a non-negative integer. Received: initial_step={initial_step!r}")
        self.schedule = schedule
        self.every_n_steps = every_n_steps
        self.every_s = every_s
        self.num_replicas = num_replicas
        self.flops_per_sample = _positive_number("flops_per_sample", flops_per_sample)
        self.peak_flops = _positive_number("peak_flops", peak_flops)
        self.tokens_per_sample = _positive_number("tokens_per_sample", tokens_per_sample)
        if counter is not None and not callable(counter):
            raise TypeError(f"`counter` must be a callable returning (steps, samples). Received: counter={counter!r}")
        self.initial_step = initial_step
        self.epochs = 0
        self._counter = counter
        self._counted = (0, 0)
        if counter is not None:
            steps0, samples0 = counter()
            self._counted = (steps0 or 0, samples0 or 0)
        self.counter_failed = False  # the counter saw no step where Keras ran some: samples unknown from then on
        self._totals = _Totals()
        # Position in the current pass over the data, true and as Keras counts it.
        self._pos = 0
        self._seen = 0
        self._in_epoch = False
        self._first_pending = False
        self._epoch: _Epoch | None = None
        self._compiles = CompileLeaveOut(schedule, counted=counter is not None)  # which executions compiled
        self._epoch_pos = 0  # the position in the pass over the data where the epoch started
        self._acc_batch = -1  # last batch index accounted for in this epoch
        # The last two batch ends this epoch was fed, `(batch, time)`: where the previous execution ended.
        self._prev: tuple[int, float] = (-1, 0.0)
        self._end: tuple[int, float] = (-1, 0.0)
        # The caller times and hands over every execution left out of the steady rate (`leave_out`).
        self.left_out_told = False
        self._epoch_last = _INF  # Keras' batch index of the epoch's last step, where known
        self.next_look: float = _INF  # the next batch end the meter asks to `look` at
        self._watch = -1  # the batch end before an execution that may compile (a new batch shape)
        self._win_batch = -1
        self._win_t = 0.0
        self._win_steps = 0
        self._win_samples: int | None = 0
        self.next_batch: float = _INF
        self.next_time: float = _INF

    @property
    def step(self) -> int:
        """The global step: `initial_step` plus the steps counted since."""
        return self.initial_step + self._totals.steps

    @property
    def last_end(self) -> tuple[int, float]:
        """`(batch, time)` of the last batch end this epoch was fed (`(-1, start)` before any)."""
        return self._end

    @property
    def counts_samples(self) -> bool:
        """Whether samples are counted: by the schedule (batch size known) or by the counter."""
        if self._counter is not None:
            return not self.counter_failed
        return self.schedule.counts_samples

    @property
    def exact_steps(self) -> bool:
        """Whether every execution's step count is known when it ends (always, with a counter)."""
        return self._counter is not None or self.schedule.exact_steps

    # -- feeding ----------------------------------------------------------------

    def epoch_begin(self, t: float, last_batch: int | None = None) -> None:
        """Start an epoch at time `t` (seconds, any monotonic clock); its first window opens at `t`.

        Args:
            t: The epoch's start.
            last_batch: Keras' batch index of the epoch's last step, where
                known: `next_look` then includes its batch end.
        """
        if self.schedule.steps_per_epoch is None:
            self._pos = self._seen = 0
        self._epoch_pos = self._pos
        self._in_epoch = True
        self._first_pending = not self.left_out_told
        self._epoch = _Epoch(t0=t, index=self.epochs)
        self._acc_batch = -1
        self._prev = self._end = (-1, t)
        self._open_window(-1, t)
        self._epoch_last = _INF if last_batch is None else last_batch
        if self.left_out_told:  # the caller times what is left out: look where windows end
            self._watch = -1
            self.next_look = self._plan_look()
            return
        self.next_batch = 0  # the first execution always reaches the handler
        self.next_time = _INF
        self._watch = self.compile_watch
        self.next_look = 0

    def look(self, batch: int, t: float) -> list[Window | FirstExecution]:
        """The batch end of `batch`, at `t`: the one call per batch end the caller looks at (`next_look`).

        It may look at any batch end, in order; the meter asks for those it
        needs in `next_look`. Each batch end looked at is where an execution
        ended: the next one's start, for the executions left out of the
        steady rate (unless the caller times those, `left_out_told`).

        Args:
            batch: Keras' `batch` argument: index of the execution's last step.
            t: Time of the batch end.

        Returns:
            What to log: a `FirstExecution` for the first execution of an
            epoch, and any `Window` that closed.
        """
        if not self._in_epoch:
            return []
        self._observe(batch, t)
        out = self.execution_end(batch, t) if batch >= self.next_batch or t >= self.next_time else []
        self.next_look = self._plan_look()
        return out

    def _observe(self, batch: int, t: float) -> None:
        """Note a batch end fed to the meter (the same batch end twice counts once)."""
        if batch > self._end[0]:
            self._prev, self._end = self._end, (batch, t)

    def _plan_look(self) -> float:
        """The next batch end to look at: a window's end, the epoch's last, the one before a compile.

        Windows by time close at the first batch end at or after their end:
        looks are spaced from the pace so far, each halfway to the window's
        end in steps, so a few looks per window find it within a step. Where
        the epoch's length is unknown, every batch end is looked at (its last
        is the training phase's end).
        """
        (batch, t), (prev_batch, prev_t) = self._end, self._prev
        if self._epoch_last == _INF:
            return batch + 1
        nxt = min(self.next_batch, self._epoch_last)
        if self._watch > batch:
            nxt = min(nxt, self._watch)
        if self.next_time < _INF:
            steps, seconds = batch - prev_batch, t - prev_t
            ahead = 1
            if steps > 0 and seconds > 0:
                ahead = max(1, int((self.next_time - t) * steps / seconds / 2))
            nxt = min(nxt, batch + ahead)
        return nxt

    def execution_end(self, batch: int, t: float) -> list[Window | FirstExecution]:
        """Handle a batch end that reached `next_batch` or `next_time` (`look` calls it).

        Args:
            batch: Keras' `batch` argument: index of the execution's last step.
            t: Time the batch hook ran.

        Returns:
            What to log: a `FirstExecution` for the first execution of
            an epoch, and any `Window` that closed.
        """
        if not self._in_epoch:
            return []
        self._observe(batch, t)
        out: list[Window | FirstExecution] = []
        if self._first_pending:
            self._first_pending = False
            steps, samples = self._advance(batch)
            self._add_to_window(steps, samples)
            epoch = self._epoch
            epoch.first_seconds = max(0.0, t - epoch.t0)
            epoch.first_steps, epoch.first_samples = steps, samples or 0
            epoch.first_booked = True
            self._compiles.note_sizes(batch)
            self._totals.first_seconds.append(epoch.first_seconds)
            out.append(FirstExecution(self.step, self.epochs, steps, epoch.first_seconds))
            self._schedule_window()
            if batch < self.next_batch and t < self.next_time:
                return out
        if self.exact_steps:
            end_batch, end_t = batch, t
        else:
            # This execution may be the last of the pass and may have stopped
            # early; the previous one is proven full by this one's existence.
            end_batch, end_t = self._prev
            if end_batch <= self._win_batch or end_batch < 0:
                self._schedule_window()
                return out
        window = self._close_window(end_batch, end_t)
        self._open_window(end_batch, end_t)
        if window is not None:
            out.append(window)
        return out

    def epoch_end(
        self, last_batch: int, t: float, epoch_steps: int | None = None, left_open: tuple[int, float, Any] | None = None
    ) -> list[Window]:
        """End the epoch's training phase and close its last (partial) window.

        Args:
            last_batch: `batch` of the epoch's last execution (-1 if none ran).
            t: Now. The training phase ends at the last execution's batch end:
                at the time it was looked at, where it was (`look`), else at
                `t` (an epoch stopped early at a batch end not looked at).
            epoch_steps: The exact number of steps the epoch ran, when the
                caller knows it (only consulted when `DataSchedule.exact_steps`
                is False); the last execution's count is corrected to match,
                within what is possible (it ran between 1 and
                `steps_per_execution` steps).
            left_open: Where the caller times what is left out
                (`left_out_told`): `(first batch, start, counts before)` of
                the executions left out that ran to the training phase's end
                (`keras_gpu.meters.throughput_compiles.BeginClock.close`).
        """
        if not self._in_epoch:
            return []
        self._observe(last_batch, t)
        (_, last_t), (prev_batch, prev_t) = self._end, self._prev
        self._in_epoch = False
        self.next_look = _INF
        self.next_batch = self.next_time = _INF
        out: list[Window] = []
        epoch = self._epoch
        if last_batch > self._acc_batch:
            steps, samples = self._advance(last_batch)
            self._add_to_window(steps, samples)
        if not self._first_pending and not self.exact_steps and epoch_steps is not None:
            self._correct_last_execution(epoch_steps)
        if last_batch >= 0 and last_batch > self._win_batch:
            window = self._make_window(last_t - self._win_t)
            if window is not None:
                out.append(window)
        if last_batch >= 0:
            epoch.train_end = last_t
            if self._compiles.ran_new_size(last_batch, self.counts_samples) and not self.left_out_told:
                self._leave_out_last(last_batch, last_t, prev_batch, prev_t)
            if self.left_out_told:
                self._end_left_out(last_batch, last_t, left_open)
        epoch.end_step = self.step
        self.epochs += 1
        if self.schedule.batches_per_pass is not None and self._seen >= self.schedule.batches_per_pass:
            self._pos = self._seen = 0
        return out

    # -- the executions that compiled (what `CompileLeaveOut` knows of them) ---------------

    @property
    def compile_watch(self) -> int:
        """Keras' batch index of the execution before the one that runs a batch size new to this fit; -1 if none.

        See `CompileLeaveOut.watch`; `look` looks at that batch end, and
        `epoch_end` leaves the execution after it out of the steady rate.
        """
        return self._compiles.watch(self.counts_samples)

    def leave_out(self, left: LeftOut) -> None:
        """Executions of this epoch, timed on the training thread, go out of the steady rate (`left_out_told`).

        Their time, steps and samples go with the first execution's
        (`time/first_step_sec`); the first execution of the epoch is the
        first handed over. Steps and samples come from the counter's readings
        `left` carries, else from the schedule. Where they cannot be told
        (a reading missing), the epoch gets no steady rate rather than a
        wrong one.
        """
        if self._epoch is None or not self._in_epoch:
            return
        before = self._through(left.first_batch - 1, left.counts_before)
        through = self._through(left.last_batch, left.counts_through)
        self._book_left_out(left.start, left.end, before, through)

    def _book_left_out(self, start: float, end: float, before: tuple[int, int | None] | None, through: Any) -> None:
        epoch = self._epoch
        if before is None or through is None or through[0] < before[0]:
            epoch.steady_unknown = True
            return
        epoch.left_out_span = (start, end)
        epoch.first_seconds += max(0.0, end - start)
        epoch.first_steps += through[0] - before[0]
        if before[1] is not None and through[1] is not None:
            epoch.first_samples += through[1] - before[1]
        if epoch.first_booked:
            self._totals.first_seconds[-1] = epoch.first_seconds
        else:
            epoch.first_booked = True
            self._totals.first_seconds.append(epoch.first_seconds)

    def _end_left_out(self, last_batch: int, last_t: float, left_open: tuple[int, float, Any] | None) -> None:
        """End what the caller left out with the training phase (`epoch_end`, `left_out_told`)."""
        epoch = self._epoch
        start, end = epoch.left_out_span
        if end > last_t:  # a batch begin after the training phase's end (a step begun where the data ran out)
            epoch.first_seconds -= end - max(start, last_t)
            if epoch.first_booked:
                self._totals.first_seconds[-1] = epoch.first_seconds
        if left_open is None or left_open[0] > last_batch:
            return
        first, start, counts_before = left_open
        # The counter's last reading covers the epoch's last batch (`_advance` in `epoch_end`, or the last look).
        through: Any = (epoch.steps, epoch.samples if self.counts_samples else None)
        if self._counter is not None:
            through = (last_batch + 1 if self._counted[0] is None else self._counted[0], self._counted[1])
        self._book_left_out(start, last_t, self._through(first - 1, counts_before), through)

    def _through(self, batch: int, counts: Any) -> tuple[int, int | None] | None:
        """This epoch's `(steps, samples)` through Keras' batch index `batch` (`None`: not known).

        With a counter: its running reading `counts`, taken when it covered
        exactly those batches (only differences of two readings mean
        anything). Else, where the schedule counts, from the batch sizes,
        relative to the epoch's start.
        """
        if self._counter is not None:
            if counts is None:
                return None
            steps, samples = counts
            return (batch + 1 if steps is None else steps), (None if self.counter_failed else samples)
        steps = batch + 1
        sched = self.schedule
        n = sched.batches_per_pass
        if n is not None:
            steps = max(0, min(steps, n - self._epoch_pos))
        if not sched.counts_samples:
            return steps, None
        samples = steps * sched.batch_size
        if n is not None and steps > 0 and self._epoch_pos + steps == n:
            samples -= sched.batch_size - sched.last_batch_size
        return steps, samples

    def _leave_out_last(self, last_batch: int, last_t: float, prev_batch: int, prev_t: float) -> None:
        """Count the epoch's last execution, which ran a batch size new to this fit, with the first one."""
        sched, epoch = self.schedule, self._epoch
        if prev_batch < 0 or epoch.first_steps == 0 or epoch.steps <= epoch.first_steps:
            return  # the first execution (already left out) ran it, or nothing else ran
        steps = min(last_batch - prev_batch, epoch.steps - epoch.first_steps)
        epoch.first_seconds += max(0.0, last_t - prev_t)
        epoch.first_steps += steps
        epoch.first_samples += (steps - 1) * sched.batch_size + sched.last_batch_size
        self._totals.first_seconds[-1] = epoch.first_seconds

    def validation(self, start: float, end: float) -> None:
        """A validation that ran from `start` to `end` in the epoch whose training phase `epoch_end` closed.

        Its time counts from the later of `start` and the training phase's
        end: where Keras dispatches steps asynchronously, the training phase
        ends when its last step finished, which can be after validation was
        started on the host.
        """
        epoch = self._epoch
        if epoch is None:
            return
        if epoch.train_end is not None:
            start = max(start, epoch.train_end)
        epoch.validation_sec += max(0.0, end - start)

    def epoch_close(self, t: float) -> EpochTimes | None:
        """Close the accounting of the last epoch at `t`: the next epoch's start, or the end of training.

        Returns `None` when no epoch is open or its training phase ran no step.
        """
        epoch = self._epoch
        if epoch is None or self._in_epoch:
            return None
        self._epoch = None
        if epoch.train_end is None:
            return None
        epoch_sec = max(0.0, t - epoch.t0)
        train_sec = max(0.0, epoch.train_end - epoch.t0)
        other_sec = max(0.0, epoch_sec - train_sec - epoch.validation_sec)
        steady_steps = epoch.steps - epoch.first_steps
        steady_seconds = train_sec - epoch.first_seconds
        steady_sps = steady_samps = None
        if steady_steps > 0 and steady_seconds > 0 and self._steady_known(epoch):
            steady_sps = steady_steps / steady_seconds
            if self.counts_samples:
                steady_samps = (epoch.samples - epoch.first_samples) / steady_seconds
        self._totals.validation_seconds += epoch.validation_sec
        self._totals.other_seconds += other_sec
        times = EpochTimes(
            step=epoch.end_step,
            epoch=epoch.index,
            epoch_sec=epoch_sec,
            train_sec=train_sec,
            first_step_sec=epoch.first_seconds,
            validation_sec=epoch.validation_sec,
            other_sec=other_sec,
            steady_steps_per_sec=steady_sps,
            steady_samples_per_sec=steady_samps,
            steady_mfu=self._mfu(steady_samps),
        )
        self._totals.epochs.append(times)
        return times

    def epoch_rates(self) -> EpochRates | None:
        """The rates of the epoch whose training phase `epoch_end` just closed, for Keras' epoch `logs`.

        Known at the epoch's end, before `epoch_close` (which waits for
        the next epoch's start to time the epoch-end work). `None` when no
        epoch has ended since it began or its training phase ran no step.
        """
        epoch = self._epoch
        if epoch is None or self._in_epoch or epoch.train_end is None:
            return None
        train_sec = epoch.train_end - epoch.t0
        if epoch.steps <= 0 or train_sec <= 0:
            return None
        counted = self.counts_samples
        rates = self._rates(epoch.steps, epoch.samples if counted else None, train_sec)
        steady_seconds = train_sec - epoch.first_seconds
        steady = None
        if counted and epoch.steps > epoch.first_steps and steady_seconds > 0 and self._steady_known(epoch):
            steady = (epoch.samples - epoch.first_samples) / steady_seconds
        return EpochRates(rates.samples_per_sec, steady, rates.mfu)

    # -- results ----------------------------------------------------------------

    @property
    def total_steps(self) -> int:
        """Steps counted since the meter was created, first executions included."""
        return self._totals.steps

    @property
    def total_samples(self) -> int | None:
        """Samples counted since the meter was created, or `None` if unknown."""
        return self._totals.samples if self.counts_samples else None

    def summary(self) -> dict[str, Any]:
        """Totals and mean rates over the whole run.

        Keys:

        * `steps`, `samples`, `epochs`: totals (`samples` is `None` when not
          counted);
        * `measured_steps`, `measured_samples`, `measured_seconds`: what the
          wall-clock rates cover (every closed window: the training phases);
        * `steps_per_sec`, `samples_per_sec`, `samples_per_sec_per_replica`,
          `tflops_per_sec`, `mfu`: wall-clock rates over the training phases,
          first executions included;
        * `steady_steps_per_sec`, `steady_samples_per_sec`, `steady_mfu`: the
          same with the first execution of each epoch left out, over the
          closed epochs (`steady_rate`);
        * `train_seconds`, `validation_seconds`, `other_seconds`: training
          phases, and validation and the rest summed over closed epochs (see
          `epoch_close`); `first_step_sec`: one per epoch;
        * `num_replicas`, `flops_per_sample`, `peak_flops`.

        Unknown values are `None`.
        """
        tot = self._totals
        measured = tot.measured_seconds > 0
        rates = self._rates(tot.measured_steps, tot.measured_samples, tot.measured_seconds)
        return {
            "steps": tot.steps,
            "samples": self.total_samples,
            "epochs": self.epochs,
            "measured_steps": tot.measured_steps,
            "measured_samples": tot.measured_samples if self.counts_samples else None,
            "measured_seconds": tot.measured_seconds,
            "steps_per_sec": rates.steps_per_sec if measured else None,
            "samples_per_sec": rates.samples_per_sec if measured else None,
            "samples_per_sec_per_replica": rates.samples_per_sec_per_replica if measured else None,
            "tflops_per_sec": rates.tflops_per_sec if measured else None,
            "mfu": rates.mfu if measured else None,
            "steady_steps_per_sec": steady_rate((e.steady_steps_per_sec, e.steady_sec) for e in tot.epochs),
            "steady_samples_per_sec": steady_rate((e.steady_samples_per_sec, e.steady_sec) for e in tot.epochs),
            "steady_mfu": self._mfu(steady_rate((e.steady_samples_per_sec, e.steady_sec) for e in tot.epochs)),
            "train_seconds": tot.measured_seconds,
            "validation_seconds": tot.validation_seconds,
            "other_seconds": tot.other_seconds,
            "first_step_sec": tuple(tot.first_seconds),
            "num_replicas": self.num_replicas,
            "flops_per_sample": self.flops_per_sample,
            "peak_flops": self.peak_flops,
        }

    # -- internals --------------------------------------------------------------

    def _advance(self, batch: int) -> tuple[int, int | None]:
        """Account for the steps up to `batch`; returns (steps, samples or None)."""
        nominal = batch - self._acc_batch
        if nominal <= 0:
            return 0, (0 if self.counts_samples else None)
        self._acc_batch = batch
        if self._counter is not None:
            return self._count(nominal)
        sched = self.schedule
        self._seen += nominal
        n = sched.batches_per_pass
        steps = nominal if n is None else max(0, min(nominal, n - self._pos))
        samples: int | None = None
        if sched.counts_samples:
            samples = steps * sched.batch_size
            if n is not None and steps > 0 and self._pos + steps == n:
                samples -= sched.batch_size - sched.last_batch_size
                if steps == nominal:  # the execution ending at `batch` ran it
                    self._compiles.short_batch(batch)
        self._pos += steps
        return self._book(steps, samples)

    def _count(self, nominal: int) -> tuple[int, int | None]:
        """Steps and samples since the last read of the counter (`nominal`: the steps Keras' batch index implies)."""
        samples: int | None
        try:
            steps_now, samples_now = self._counter()
        except Exception:  # noqa: BLE001 - a failed read costs the samples, never training
            steps_now, samples_now = self._counted[0], None
        if samples_now is None:  # the counter can no longer tell
            steps, samples = 0, -1
        else:
            if steps_now is None:  # the counter counts samples only: Keras' batch index is exact
                steps_now = self._counted[0] + nominal
            steps = steps_now - self._counted[0]
            samples = samples_now - self._counted[1]
            self._counted = (steps_now, samples_now)
        if steps <= 0 or steps > nominal or samples < 0:
            # The counter does not see the steps Keras ran: count them by index, samples unknown.
            self.counter_failed = True
            steps = nominal
        if self.counter_failed:
            samples = None
            self._win_samples = None
        return self._book(steps, samples)

    def _book(self, steps: int, samples: int | None) -> tuple[int, int | None]:
        """Add a read's steps and samples (`None`: not known) to the epoch and the totals; return them."""
        self._totals.steps += steps
        if self._epoch is not None:
            self._epoch.steps += steps
            self._epoch.samples += samples or 0
        if samples is not None:
            self._totals.samples += samples
        return steps, samples

    def _correct_last_execution(self, epoch_steps: int) -> None:
        counted = self._epoch.steps
        k = self.schedule.steps_per_execution
        actual = min(counted, max(counted - k + 1, int(epoch_steps), 1))
        delta = actual - counted  # <= 0
        if delta == 0:
            return
        self._totals.steps += delta
        self._win_steps += delta
        self._epoch.steps += delta
        if self.schedule.counts_samples:  # never with a counter: its steps are exact
            self._totals.samples += delta * self.schedule.batch_size
            if self._epoch is not None:
                self._epoch.samples += delta * self.schedule.batch_size
            if self._win_samples is not None:
                self._win_samples += delta * self.schedule.batch_size

    def _open_window(self, batch: int, t: float) -> None:
        self._win_batch = batch
        self._win_t = t
        self._win_steps = 0
        self._win_samples = 0
        self._schedule_window()

    def _schedule_window(self) -> None:
        """Set `next_batch` / `next_time` for the open window."""
        self.next_batch = self._win_batch + self.every_n_steps if self.every_n_steps is not None else _INF
        self.next_time = self._win_t + self.every_s if self.every_s is not None else _INF

    def _add_to_window(self, steps: int, samples: int | None) -> None:
        self._win_steps += steps
        self._win_samples = None if samples is None or self._win_samples is None else self._win_samples + samples

    def _close_window(self, end_batch: int, end_t: float) -> Window | None:
        self._add_to_window(*self._advance(end_batch))
        return self._make_window(end_t - self._win_t)

    def _make_window(self, seconds: float) -> Window | None:
        steps = self._win_steps
        samples = self._win_samples if self.counts_samples else None
        if steps <= 0 or seconds <= 0:
            return None
        tot = self._totals
        tot.measured_steps += steps
        tot.measured_samples += samples or 0
        tot.measured_seconds += seconds
        return Window(self.step, steps, samples, seconds, **dataclasses.asdict(self._rates(steps, samples, seconds)))

    def _steady_known(self, epoch: _Epoch) -> bool:
        """Whether the executions the epoch's steady rate leaves out were counted (the first among them)."""
        return not epoch.steady_unknown and (epoch.first_booked or not self.left_out_told)

    def _mfu(self, samples_per_sec: float | None) -> float | None:
        """MFU at `samples_per_sec` (`None` without it, the FLOPs per sample or the peak)."""
        if samples_per_sec is None or self.flops_per_sample is None or not self.peak_flops:
            return None
        return samples_per_sec * self.flops_per_sample / self.peak_flops

    def _rates(self, steps: int, samples: int | None, seconds: float) -> Rates:
        """Rates over `seconds` (`window_rates`), samples if counted."""
        return window_rates(
            steps,
            samples if self.counts_samples else None,
            seconds,
            num_replicas=self.num_replicas,
            flops_per_sample=self.flops_per_sample,
            peak_flops=self.peak_flops,
            tokens_per_sample=self.tokens_per_sample,
        )
