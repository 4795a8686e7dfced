"""Which executions compiled: what `ThroughputMeter` asks before it leaves one out of the steady rate.

A batch shape new to the fit makes JAX trace and compile the train step
again (and XLA compile on TensorFlow with `jit_compile=True`; without it,
Keras 3.15 traces its train function once, on the iterator, whatever the
batch shape). Where the data schedule knows the batch sizes, the execution
that runs a new size is known before it runs (`CompileLeaveOut.watch`,
`CompileLeaveOut.ran_new_size`); with a counter, the meter's caller tells it
from the backend's own signal (`keras_gpu.hooks.throughput_setup`), and
`CompileLeaveOut.mark` says where the execution that compiled started. Either
way the meter moves the execution's time, steps and samples to the first
execution's (`time/first_step_sec`).
"""

from __future__ import annotations

from keras_gpu.meters.throughput_records import DataSchedule

__all__ = ["CompileLeaveOut"]


class CompileLeaveOut:
    """What this fit knows of its compiles: the batch sizes it ran, and where the last execution ended.

    Owned by one `ThroughputMeter`, which tells it each execution it
    accounts for (`mark`, `note_sizes`, `short_batch`) and asks it which
    execution compiles (`watch`, `ran_new_size`) and where the one that
    compiled began (`mark`).

    Args:
        schedule: How `fit` feeds batches.
        counted: Whether a counter counts the samples (the schedule then
            cannot tell which execution runs a new size: the caller does).

    Attributes:
        mark: `(batch, time, epoch steps, epoch samples)` at the last batch
            end accounted for at a known time: where the next execution
            began.

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
        self.mark: tuple[int, float, int, int] = (-1, 0.0, 0, 0)
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
