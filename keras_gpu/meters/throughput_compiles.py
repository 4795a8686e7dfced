"""The executions that compiled, left out of the steady rate with the first: a mixin of `ThroughputMeter`.

A batch shape new to the fit makes JAX trace and compile the train step
again (and XLA compile on TensorFlow with `jit_compile=True`; without it,
Keras 3.15 traces its train function once, on the iterator, whatever the
batch shape). Where the data schedule knows the batch sizes, the meter predicts the
execution that runs a new size (`CompileLeaveOut.compile_watch`); with
a counter, the caller tells it from the backend's own signal
(`keras_gpu.hooks.throughput_setup`) with
`CompileLeaveOut.execution_compiled`. Either way, the execution's time,
steps and samples go with the first execution's (`time/first_step_sec`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["CompileLeaveOut"]


class CompileLeaveOut:
    """The part of `ThroughputMeter` that leaves compiles out of the steady rate."""

    if TYPE_CHECKING:
        _acc_batch: int
        _counter: Any
        _epoch: Any
        _first_pending: bool
        _in_epoch: bool
        _mark: tuple[int, float, int, int]
        _short_batch_at: int
        _sizes_run: set[int]
        _totals: Any
        exact_steps: bool
        schedule: Any

        def _advance(self, batch: int) -> tuple[int, int | None]: ...

        def _add_to_window(self, steps: int, samples: int | None) -> None: ...

        def _observe(self, batch: int, t: float) -> None: ...

    @property
    def compile_watch(self) -> int:
        """Keras' batch index of the execution before the one that runs a batch size new to this fit; -1 if none.

        Where the epoch is one pass over data with a short last batch that this
        fit has not run yet, the execution that runs it compiles (JAX; XLA on
        TensorFlow with `jit_compile=True`); the caller times the batch end before it
        and passes it to `epoch_end`, which leaves that execution out of
        the steady rate.
        """
        sched = self.schedule
        n, k = sched.batches_per_pass, sched.steps_per_execution
        if (
            self._counter is not None
            or not sched.counts_samples
            or sched.steps_per_epoch is not None
            or n is None
            or sched.last_batch_size == sched.batch_size
            or sched.last_batch_size in self._sizes_run
        ):
            return -1
        return ((n - 1) // k) * k - 1

    def account(self, batch: int, t: float) -> None:
        """Account for the steps up to `batch` (its batch end at `t`) without closing a window.

        It reads the counter: call it where that is cheap (on the host). It
        marks where an execution that compiles next starts (`execution_compiled`).
        """
        self._observe(batch, t)
        if self._in_epoch and not self._first_pending and self.exact_steps and batch > self._acc_batch:
            self._add_to_window(*self._advance(batch))
            self._mark = (batch, t, self._epoch.steps, self._epoch.samples)

    def execution_compiled(self, batch: int, t: float) -> None:
        """The executions after the last batch end accounted for, up to `batch` (at `t`), compiled.

        Their time, steps and samples go with the first execution's
        (`time/first_step_sec`), out of the steady rate: exactly the one that
        compiled where the batch end before it was accounted for
        (`account`). Call it before `execution_end` at that batch
        end. Nothing for the first execution (left out already), or where
        steps are known only later.
        """
        self._observe(batch, t)
        if not self._in_epoch or self._first_pending or not self.exact_steps or batch < self._acc_batch:
            return
        mark_batch, mark_t, mark_steps, mark_samples = self._mark  # where `_acc_batch` was reached
        self._add_to_window(*self._advance(batch))
        epoch = self._epoch
        if batch > mark_batch and t > mark_t:
            epoch.first_seconds += t - mark_t
            epoch.first_steps += epoch.steps - mark_steps
            epoch.first_samples += epoch.samples - mark_samples
            self._totals.first_seconds[-1] = epoch.first_seconds
        self._mark = (batch, t, epoch.steps, epoch.samples)

    def _note_sizes(self, batch: int) -> None:
        """The batch sizes the execution ending at `batch` ran, as run (known only from the schedule)."""
        sched = self.schedule
        if self._counter is None and sched.counts_samples:
            self._sizes_run.add(sched.batch_size)
            if self._short_batch_at == batch:
                self._sizes_run.add(sched.last_batch_size)

    def _leave_out_compile(self, last_batch: int, last_t: float, prev_batch: int, prev_t: float) -> None:
        """Count the epoch's last execution with the first one where it ran a batch size new to this fit."""
        sched, epoch = self.schedule, self._epoch
        new_size = (
            self._counter is None
            and sched.counts_samples
            and self._short_batch_at == last_batch
            and sched.last_batch_size not in self._sizes_run
        )
        self._note_sizes(last_batch)
        if not new_size or prev_batch < 0 or epoch.first_steps == 0 or epoch.steps <= epoch.first_steps:
            return  # the first execution (already left out) ran it, or nothing else ran
        steps = min(last_batch - prev_batch, epoch.steps - epoch.first_steps)
        epoch.first_seconds += max(0.0, last_t - prev_t)
        epoch.first_steps += steps
        epoch.first_samples += (steps - 1) * sched.batch_size + sched.last_batch_size
        self._totals.first_seconds[-1] = epoch.first_seconds

