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
peers inside it), so compute stragglers are not named on JAX. Under
Keras' synchronous dispatch the step's outputs are waited for inside the
call (`jax.block_until_ready` on the logs): Keras waits for the same values
at the batch end anyway, so no wait is added. Under its asynchronous
dispatch (`verbose=0`: batch ends on a thread pool) nothing waits: a step
ends when its batch end ran (`StepClock`).

The rows are shared by `keras_gpu.hooks.step_time_cluster.ClusterSchedule`
at the same points as TensorFlow's all-gathered rows (the first epoch's end,
every 30 s by a count of steps every process adopts, later epoch ends
`EPOCH_SHARE_S` of steps apart, and the fit's end), through one all-gather
JAX offers (`JaxRowGather`), never on the per-batch path.
"""

from __future__ import annotations

import math
import threading
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
        self.clock.seen_ready(start)
        try:
            batch = next(self.inner)
        finally:
            self.clock.wait += time.perf_counter() - start
        self.clock.batches += 1
        return batch


class StepClock:
    """Host, input and device time of each call of the train function, on the host.

    Per call: three `perf_counter` reads, a few additions, and one per batch
    taken; no I/O, no device work of its own. The first call of each epoch
    (after the time between epochs) is left out.

    Where Keras runs the batch ends on the training thread (a progress bar,
    or a callback that is not `async_safe`), it converts each step's logs to
    floats there, a wait for the step; the clock waits for the same values
    inside the call instead (no wait is added), and the rest of the call is
    device time. Where Keras dispatches asynchronously (its batch ends on a
    thread pool, `verbose=0` on JAX), the clock never waits: each call's
    dispatch is timed on the training thread, and its completion is the time
    its batch end ran (`ended`, from `StepTimeLogger`'s batch end). A step's
    period then runs from the previous call's completion to its own; the
    device idled from that completion until the call was dispatched (the
    host's time, of which its own input wait is input), and the rest is
    device time. The first batch end tells which dispatch a fit runs; until
    then the clock waits.
    """

    def __init__(self) -> None:
        self.wait = 0.0  # input wait of the call under way
        self.batches = 0  # batches the call under way took
        self.blocking = True  # wait for each call's outputs (until a batch end runs off the training thread)
        self._prev_end: float | None = None
        self._sums = [0, 0.0, 0.0, 0.0]  # steps, host, input, device
        self._last = list(self._sums)
        # Asynchronous dispatch: the calls not yet accounted (begin, start, input wait, dispatched, batches, first
        # of its epoch), appended on the training thread in order, and each batch end's time, from Keras' pool.
        self._begin = -1
        self._calls: list[tuple[int, float, float, float, int, bool]] = []
        # Per call, when the training thread saw the previous call's outputs ready (`None`: not before it began).
        self._ready: list[float | None] = []
        self._done: dict[int, float] = {}
        self._done_lock = threading.Lock()
        self._async_seen = False
        self._first = True  # the next call is its epoch's first
        self._pending_logs: Any = None  # the last call's outputs, until seen ready
        self._ready_by: float | None = None  # when the training thread first saw them ready

    def wrap(self, train_function: Any) -> Any:
        """`train_function(state, iterator)` timed; under synchronous dispatch, its outputs waited for."""
        import jax

        def timed(state: Any, iterator: Any) -> Any:
            if self._async_seen and self.blocking:  # from now on, completions come from the batch ends
                self.blocking = False
                self._first = self._prev_end is None
            start = time.perf_counter()
            self.wait, self.batches = 0.0, 0
            if not self.blocking:
                first, self._first = self._first, False
                self.seen_ready(start)
                logs, state = train_function(state, _TimedIterator(iterator, self))  # its next() looks again
                ready_by, self._ready_by = self._ready_by, None  # the previous call's outputs, seen ready by then
                if self.batches:
                    self._calls.append((self._begin, start, self.wait, time.perf_counter(), self.batches, first))
                    self._ready.append(ready_by)
                    self._pending_logs = logs
                return logs, state
            prev, self._prev_end = self._prev_end, None  # a call that raises (the data's end) starts no gap
            logs, state = train_function(state, _TimedIterator(iterator, self))
            jax.block_until_ready(logs)  # Keras' batch end converts the logs to floats: the same wait, here
            end = time.perf_counter()
            if prev is not None and self.batches:
                self._add(self.batches, start - prev, self.wait, end - start - self.wait)
            self._prev_end = end
            self._first = False
            return logs, state

        timed.__wrapped__ = train_function  # type: ignore[attr-defined]
        setattr(timed, _MARK, True)
        return timed

    def seen_ready(self, t: float) -> None:
        """At `t`, on the training thread: note whether the last call's outputs are ready (never waits).

        A batch end runs on Keras' pool a little after its step finished; an
        output seen ready on the training thread bounds the step's end more
        tightly, so a wait for input after it counts whole.
        """
        logs = self._pending_logs
        if logs is None or self._ready_by is not None:
            return
        try:
            import jax

            leaf = jax.tree_util.tree_leaves(logs)[0]
            ready = leaf.is_ready()
        except Exception:  # noqa: BLE001 - no array, or an array without is_ready: the batch end tells
            ready = False
        if ready:
            self._ready_by, self._pending_logs = t, None

    def _add(self, steps: int, host: float, wait: float, device: float) -> None:
        sums = self._sums
        sums[0] += steps
        sums[1] += host
        sums[2] += wait
        sums[3] += device

    # The hooks StepTimeLogger calls on its probe.
    def epoch_begin(self) -> None:
        """Forget the previous call: the time between epochs (validation, epoch-end callbacks) is no gap."""
        self._account()  # every batch end of the last epoch ran (Keras waits for them at its end)
        self._calls.clear()
        self._ready.clear()
        self._pending_logs = self._ready_by = None
        with self._done_lock:
            self._done.clear()
        self._prev_end = None
        self._first = True

    def batch_begin(self, batch: int = -1) -> None:
        """Keras is about to call the train function for the steps from `batch` (on the training thread)."""
        self._begin = batch

    def batch_end(self) -> None:
        """Nothing: the clock reads the train function's calls themselves."""

    def ended(self, batch: int, t: float, off_thread: bool) -> None:
        """The batch end of `batch` ran at `t` (its step's outputs were ready), off the training thread or not.

        Safe from any thread, in any order.
        """
        with self._done_lock:
            self._done[batch] = t
        if off_thread:
            self._async_seen = True

    def _account(self) -> None:
        """Sum the calls whose batch ends ran, in order; the others wait for the next look (training thread)."""
        calls = self._calls
        if not calls:
            return
        with self._done_lock:
            ends = sorted(self._done.items())
        done: list[float] = []
        j = 0
        for k, call in enumerate(calls):  # each call ends at the first batch end at or after its begin
            while j < len(ends) and ends[j][0] < call[0]:
                j += 1
            nxt = calls[k + 1][0] if k + 1 < len(calls) else math.inf
            if j == len(ends) or ends[j][0] >= nxt:
                break
            done.append(ends[j][1])
        for k in range(len(done) - 2, -1, -1):  # a later step cannot finish before an earlier one
            done[k] = min(done[k], done[k + 1])
        prev = self._prev_end
        for (_, _, wait, dispatched, batches, first), end, ready_by in zip(calls, done, self._ready):
            if prev is not None and ready_by is not None:
                prev = min(prev, ready_by)  # the previous step was done by then
            if not first and prev is not None:
                idle = max(0.0, dispatched - prev)
                waited = min(wait, idle)
                self._add(batches, idle - waited, waited, max(0.0, end - prev - idle))
            prev = end
        self._prev_end = prev
        del calls[: len(done)]
        del self._ready[: len(done)]

    def read(self) -> ClockWindow | None:
        """The window since the previous read; `None` without a step."""
        self._account()
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
