"""The cluster view of `StepTimeLogger` in a multi-process Keras-on-JAX fit: each process's host clock, gathered.

On JAX a training step is one compiled program: its compute and its
collectives (the gradient all-reduce, waiting for slower processes
included) cannot be told apart from the host. So each process measures,
on the host and without the profiler, three parts of each call of Keras'
train function (`StepClock`):

* **host**: from the end of one call to the start of the next (Keras' loop
  and the callbacks), within an epoch;
* **input**: its own wait for its batches (the time in `next()` of the
  iterator the train function reads);
* **device**: the rest of the call, until the step's outputs are ready:
  the compiled step with its collectives, and the wait for the other
  processes in them.

A process's busy time is its host time and its own input wait; the device
part is never busy time (compute cannot be separated from the wait for the
peers inside it), so compute stragglers are not named on JAX. The step's
outputs are waited for inside the call (`jax.block_until_ready` on the
logs): Keras waits for the same values at the same point anyway (a callback
that overrides `on_train_batch_end`, `StepTimeLogger` itself, makes Keras
convert the logs to Python floats at every batch end), so no wait is added,
and that wait is counted as device time rather than host time.

The rows are shared by `keras_gpu.hooks.step_time_cluster.ClusterSchedule`
at the same points as TensorFlow's all-gathered rows (the first epoch's end,
every 30 s by a count of steps every process adopts, later epoch ends
`EPOCH_SHARE_S` of steps apart, and the fit's end), through one all-gather
JAX offers (`JaxRowGather`), never on the per-batch path.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from keras_gpu.core import keras_private
from keras_gpu.hooks.step_time_cluster import ClusterSchedule
from keras_gpu.meters.cluster_view import ROW_FIELDS

__all__ = ["ClockWindow", "JaxRowGather", "StepClock", "install_clock", "jax_schedule", "remove_clock"]

_MARK = "_keras_gpu_step_clock"  # keras-gpu's mark on the train function it put in Keras' place


@dataclass(frozen=True)
class ClockWindow:
    """What one process's steps did between two reads, in seconds per step (the fields a cluster row reads).

    Attributes:
        steps: Training steps in the window.
        step_sec: Host, input and device time per step.
        input_sec: The wait for this process's own batches.
        host_sec: Host time between calls of the train function.
        device_sec: The rest: the compiled step, its collectives and the
            wait for the other processes in them (not told apart on JAX).
    """

    steps: int
    step_sec: float
    input_sec: float
    host_sec: float
    device_sec: float
    compute_sec: float = math.nan  # not measured on JAX (inside the compiled step)
    communication_sec: float = math.nan  # idem

    @property
    def busy_sec(self) -> float:
        """Seconds per step this process may keep the others waiting: its host time and its own input wait."""
        return self.host_sec + self.input_sec


class _TimedIterator:
    """The train function's iterator, with the time spent in `next()` summed on `clock`."""

    __slots__ = ("clock", "inner")

    def __init__(self, inner: Iterator[Any], clock: StepClock) -> None:
        self.inner, self.clock = inner, clock

    def __iter__(self) -> _TimedIterator:
        return self

    def __next__(self) -> Any:
        start = time.perf_counter()
        try:
            batch = next(self.inner)
        finally:
            self.clock.wait += time.perf_counter() - start
        self.clock.batches += 1
        return batch


class StepClock:
    """Host, input and device time of each call of the train function, summed on the training thread.

    Per call: three `perf_counter` reads, a few additions, and one per batch
    taken; no I/O, no device work of its own. The first call of each epoch
    (after the time between epochs) is left out.
    """

    def __init__(self) -> None:
        self.wait = 0.0  # input wait of the call under way
        self.batches = 0  # batches the call under way took
        self._prev_end: float | None = None
        self._sums = [0, 0.0, 0.0, 0.0]  # steps, host, input, device
        self._last = list(self._sums)

    def wrap(self, train_function: Any) -> Any:
        """`train_function(state, iterator)` timed; the step's outputs waited for before it returns."""
        import jax

        def timed(state: Any, iterator: Any) -> Any:
            start = time.perf_counter()
            self.wait, self.batches = 0.0, 0
            prev, self._prev_end = self._prev_end, None  # a call that raises (the data's end) starts no gap
            logs, state = train_function(state, _TimedIterator(iterator, self))
            jax.block_until_ready(logs)  # Keras' batch end converts the logs to floats: the same wait, here
            end = time.perf_counter()
            if prev is not None and self.batches:
                sums = self._sums
                sums[0] += self.batches
                sums[1] += start - prev
                sums[2] += self.wait
                sums[3] += end - start - self.wait
            self._prev_end = end
            return logs, state

        timed.__wrapped__ = train_function  # type: ignore[attr-defined]
        setattr(timed, _MARK, True)
        return timed

    # The hooks StepTimeLogger calls on its probe.
    def epoch_begin(self) -> None:
        """Forget the previous call: the time between epochs (validation, epoch-end callbacks) is no gap."""
        self._prev_end = None

    def batch_begin(self) -> None:
        """Nothing: the clock reads the train function's calls themselves."""

    def batch_end(self) -> None:
        """Nothing: the clock reads the train function's calls themselves."""

    def read(self) -> ClockWindow | None:
        """The window since the previous read; `None` without a step."""
        sums, last = list(self._sums), self._last
        self._last = sums
        steps = sums[0] - last[0]
        if steps <= 0:
            return None
        host, wait, device = ((a - b) / steps for a, b in zip(sums[1:], last[1:]))
        return ClockWindow(steps=steps, step_sec=host + wait + device, input_sec=wait, host_sec=host, device_sec=device)

    def reset(self) -> None:
        """Start a new window now, dropping what was summed so far (warm-up)."""
        self.read()


class JaxRowGather:
    """All-gather one row of `width` floats per process with `jax.experimental.multihost_utils.process_allgather`.

    The row travels bit-exact as float64 viewed as uint32 (JAX without x64
    would round float64 to float32). Call it on every process at the same
    point of the fit.

    Args:
        width: Floats per row.
    """

    def __init__(self, width: int) -> None:
        self.width = width

    def __call__(self, row: Sequence[float]) -> list[list[float]]:
        """Every process's row, process 0 first."""
        import numpy as np
        from jax.experimental import multihost_utils

        if len(row) != self.width:
            raise ValueError(f"`row` must hold {self.width} numbers. Received: {len(row)} numbers")
        words = np.ascontiguousarray(np.asarray(row, np.float64)).view(np.uint32)
        rows = np.ascontiguousarray(np.asarray(multihost_utils.process_allgather(words))).view(np.float64)
        return [list(map(float, r)) for r in rows.reshape(-1, self.width)]


def install_clock(model: Any) -> StepClock | None:
    """Time `model.train_function` (built by `fit` before `on_train_begin`) with a new `StepClock`.

    A clock left on the model by a `fit` that raised is taken off first.
    `None` where the model has no train function to time.
    """
    remove_clock(model)
    function = getattr(model, "train_function", None)
    if not callable(function):
        return None
    clock = StepClock()
    keras_private.set_train_function(model, clock.wrap(function))
    return clock


def remove_clock(model: Any) -> None:
    """Put back the train function `install_clock` timed (nothing where it is not timed)."""
    function = getattr(model, "train_function", None)
    while function is not None and getattr(function, _MARK, False):
        function = function.__wrapped__
        keras_private.set_train_function(model, function)


def jax_schedule(
    model: Any, replicas: list[tuple[str, str]], first_step: int, epoch_steps: int | None = None
) -> ClusterSchedule | None:
    """The cluster view's schedule for this fit of a multi-process JAX job: the clock and the all-gather."""
    clock = install_clock(model)
    if clock is None:
        return None
    return ClusterSchedule(  # type: ignore[arg-type]
        clock, JaxRowGather(len(ROW_FIELDS)), replicas, first_step, epoch_steps=epoch_steps
    )
