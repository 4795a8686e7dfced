"""The benchmark's own instruments: hook timers, callback-thread CPU, epoch clocks, first-call timer.

How the direct cost of a set of callbacks is measured, in one `fit`:

* **Hook time.** Every `on_*` method a measured callback defines itself
  (Keras' own empty defaults, marked `_is_default`, are left alone: they cost
  about as much as the timer would, and wrapping both `on_train_batch_end`
  and the `on_batch_end` it forwards to would count that time twice) is
  replaced on the instance by a wrapper that adds the `time.perf_counter()`
  interval of the call to an accumulator. This is wall time spent on the
  training thread inside the hook, so it includes anything the hook waits
  for. The wrapper's own cost per call is calibrated by
  :func:`wrapper_overhead_s` and recorded; it is not subtracted, so hook times
  are slight over-estimates.
* **Background threads.** The Python threads alive before the run are the
  baseline. Threads that appear later were started by the measured callbacks
  (no other code in the benchmark starts Python threads during `fit`; bare
  runs check that). They are found by diffing `threading.enumerate()` around
  each begin/end hook (which names the callback that started them) and at
  each epoch end. Their CPU time is read from outside the thread, by native
  thread id, from `/proc/self/task/<tid>/schedstat` (nanoseconds; `stat`
  utime+stime as a fallback), at each epoch end and just before each
  `on_train_end` hook (which typically joins them). CPU a thread uses after
  its last reading, or a thread that starts and ends between two readings, is
  not counted. Hook time and thread CPU are added up, so a hook that waits
  for the callback's own thread (a join, or the GIL while that thread runs
  Python) is counted twice: the direct cost is an upper bound.
* **First call.** A callback that interposes on `model.train_function` (as
  `PlacementLogger` does for the first step of each `fit`) does its work
  outside any hook. So the first call of each `fit` is timed twice: outside
  everything the callbacks installed (the tail clock wraps whatever
  `model.train_function` is after their `on_train_begin`), and inside, around
  Keras' own training function (wrapped once per model by the head clock, so
  its identity stays the same from `fit` to `fit`). The difference is the
  interposer's own work around the step (set-up, analysis, writing); a
  slowdown of the step itself (such as collecting run metadata) shows only in
  the wall-clock comparison.

:class:`EpochClock` provides the two callbacks that bracket the measured ones
(`head` first in the list, `tail` last) and records, per epoch, the wall time
from one `tail.on_epoch_end` to the next (a full epoch cycle, every hook
included) and the cumulative hook and thread-CPU totals at that moment.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import keras

from benchmarks._proc import thread_cpu_seconds

__all__ = ["SLOW_CALL_S", "BatchClock", "EpochClock", "FitRecord", "HookTimer", "wrapper_overhead_s"]

_pc = time.perf_counter

SLOW_CALL_S = 50e-6
"""Hook calls longer than this are also counted apart ("slow calls"): they show when a hook that is
cheap per call does real work now and then (writing a window, flushing)."""


def _live_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.native_id is not None}


class HookTimer:
    """Times the overridden `on_*` hooks of some callbacks and accounts for the threads they start.

    Args:
        callbacks: The measured callback instances; their hooks are wrapped in
            place by :meth:`install`.
    """

    def __init__(self, callbacks: Sequence[keras.callbacks.Callback]) -> None:
        self.callbacks = list(callbacks)
        self.slots: dict[str, list] = {}
        self._baseline = _live_threads()
        # Keyed by the Thread object (not the OS id, which the kernel may reuse after a thread ends).
        self._threads: dict[threading.Thread, dict[str, Any]] = {}
        self._installed = False

    # -- wrapping ------------------------------------------------------------

    def install(self) -> HookTimer:
        """Wrap the hooks; returns `self`. Idempotent."""
        if self._installed:
            return self
        self._installed = True
        counts: dict[str, int] = {}
        for callback in self.callbacks:
            cls = type(callback).__name__
            counts[cls] = counts.get(cls, 0) + 1
            owner = cls if counts[cls] == 1 else f"{cls}#{counts[cls]}"
            for name in dir(type(callback)):
                if not name.startswith("on_"):
                    continue
                method = getattr(callback, name, None)
                if not callable(method) or getattr(method, "_is_default", False):
                    continue
                slot = self.slots.setdefault(f"{owner}.{name}", [0.0, 0, 0, 0.0])
                setattr(callback, name, self._wrap(method, slot, owner, name))
        return self

    def _wrap(self, method: Callable, slot: list, owner: str, name: str) -> Callable:
        if "batch" in name:

            def timed(*args: Any, **kwargs: Any) -> Any:
                t0 = _pc()
                try:
                    return method(*args, **kwargs)
                finally:
                    dt = _pc() - t0
                    slot[0] += dt
                    slot[1] += 1
                    if dt > SLOW_CALL_S:
                        slot[2] += 1
                        slot[3] += dt

            return timed

        ending = name.endswith("_end")

        def timed_and_watched(*args: Any, **kwargs: Any) -> Any:
            if ending:
                self.sample_threads()  # the hook may join its threads: read their CPU while they exist
            before = _live_threads()
            t0 = _pc()
            try:
                return method(*args, **kwargs)
            finally:
                dt = _pc() - t0
                slot[0] += dt
                slot[1] += 1
                if dt > SLOW_CALL_S:
                    slot[2] += 1
                    slot[3] += dt
                self._discover(before, owner)

        return timed_and_watched

    # -- threads -------------------------------------------------------------

    def _discover(self, before: set[threading.Thread] | None, owner: str | None) -> None:
        for thread in _live_threads():
            if thread in self._baseline or thread in self._threads:
                continue
            attributed = owner if (before is not None and thread not in before) else "unattributed"
            self._threads[thread] = {"name": thread.name, "owner": attributed, "cpu_s": 0.0}

    def sample_threads(self) -> float:
        """Find new threads, read every known callback thread's CPU time; returns the cumulative total."""
        self._discover(None, None)
        total = 0.0
        for thread, info in self._threads.items():
            cpu = thread_cpu_seconds(thread.native_id) if thread.is_alive() else None
            if cpu is not None and cpu > info["cpu_s"]:
                info["cpu_s"] = cpu
            total += info["cpu_s"]
        return total

    @property
    def threads(self) -> list[dict[str, Any]]:
        """The callback threads seen so far: `name`, `owner` (callback class) and `cpu_s` (last reading)."""
        return [dict(info) for info in self._threads.values()]

    def alive_threads(self) -> list[str]:
        """Names of callback threads still alive now."""
        return [info["name"] for thread, info in self._threads.items() if thread.is_alive()]

    # -- totals --------------------------------------------------------------

    def hook_seconds(self) -> float:
        """Seconds spent in the wrapped hooks so far, all callbacks together."""
        return sum(slot[0] for slot in self.slots.values())

    def snapshot_slots(self) -> dict[str, tuple[float, int, int, float]]:
        """A copy of the per-hook accumulators: `{"Class.on_x": (seconds, calls, slow calls, slow seconds)}`."""
        return {key: tuple(slot) for key, slot in self.slots.items()}


class FitRecord:
    """What the clocks record during one `fit`; turned into plain data by :meth:`as_dict`."""

    def __init__(self) -> None:
        self.t_head_begin: float | None = None
        self.t_tail_begin: float | None = None
        self.t_epoch_end: list[float] = []
        self.t_train_end: float | None = None
        self.cost_head_begin: tuple[float, float] = (0.0, 0.0)
        self.cost_tail_begin: tuple[float, float] = (0.0, 0.0)
        self.cost_epoch_end: list[tuple[float, float]] = []
        self.cost_train_end: tuple[float, float] = (0.0, 0.0)
        self.first_call_s: float | None = None
        self.inner_first_call_s: float | None = None
        self.interposed = False
        self.slots_begin: dict[str, tuple[float, int]] = {}
        self.slots_tail_begin: dict[str, tuple[float, int]] = {}
        self.slots_epoch_end: list[dict[str, tuple[float, int]]] = []
        self.slots_end: dict[str, tuple[float, int]] = {}

    def as_dict(self, fit_wall_s: float, steps_per_epoch: int) -> dict[str, Any]:
        """Per-epoch cycle times and costs of this `fit` (all times in seconds).

        `epochs[k]` holds `cycle_s` (wall time of epoch k: from the end of the
        previous epoch, or of the train-begin hooks, to this epoch's end),
        `hook_s` and `thread_cpu_s` (the measured callbacks' hook time and
        thread CPU within that cycle), `batch_hook_s` (the part of `hook_s`
        spent in batch hooks) and `hooks` (`{"Class.on_x": [calls, seconds,
        slow calls, slow seconds]}` within the cycle; see :data:`SLOW_CALL_S`).
        """
        if self.t_head_begin is None or self.t_tail_begin is None or self.t_train_end is None:
            raise RuntimeError("The epoch clocks did not see this `fit` begin and end; were they in `callbacks`?")
        epochs = []
        prev_t, prev_c, prev_s = self.t_tail_begin, self.cost_tail_begin, self.slots_tail_begin
        for t, c, slots in zip(self.t_epoch_end, self.cost_epoch_end, self.slots_epoch_end):
            hooks = _slot_delta(prev_s, slots)
            epochs.append(
                {
                    "cycle_s": t - prev_t,
                    "hook_s": c[0] - prev_c[0],
                    "batch_hook_s": sum(h[1] for key, h in hooks.items() if "batch" in key),
                    "thread_cpu_s": c[1] - prev_c[1],
                    "hooks": hooks,
                }
            )
            prev_t, prev_c, prev_s = t, c, slots
        hooks = {
            key: {"calls": n, "seconds": sec, "slow_calls": slow, "slow_seconds": slow_s}
            for key, (n, sec, slow, slow_s) in _slot_delta(self.slots_begin, self.slots_end).items()
        }
        return {
            "wall_s": fit_wall_s,
            "steps_per_epoch": steps_per_epoch,
            "train_begin": {
                "wall_s": self.t_tail_begin - self.t_head_begin,
                "hook_s": self.cost_tail_begin[0] - self.cost_head_begin[0],
                "thread_cpu_s": self.cost_tail_begin[1] - self.cost_head_begin[1],
            },
            "epochs": epochs,
            "train_end": {
                "wall_s": self.t_train_end - prev_t,
                "hook_s": self.cost_train_end[0] - prev_c[0],
                "thread_cpu_s": self.cost_train_end[1] - prev_c[1],
            },
            "total_hook_s": self.cost_train_end[0] - self.cost_head_begin[0],
            "total_thread_cpu_s": self.cost_train_end[1] - self.cost_head_begin[1],
            "first_call_s": self.first_call_s,
            "inner_first_call_s": self.inner_first_call_s,
            "interposed": self.interposed,
            "hooks": hooks,
        }


def _slot_delta(before: dict[str, tuple], after: dict[str, tuple]) -> dict[str, list]:
    """`{key: [calls, seconds, slow calls, slow seconds]}` between two slot snapshots, keys with no call left out."""
    delta = {}
    for key, (seconds, calls, slow, slow_s) in after.items():
        s0, c0, sl0, ss0 = before.get(key, (0.0, 0, 0, 0.0))
        if calls - c0:
            delta[key] = [calls - c0, seconds - s0, slow - sl0, slow_s - ss0]
    return delta


class _Head(keras.callbacks.Callback):
    def __init__(self, clock: EpochClock) -> None:
        super().__init__()
        self._clock = clock

    def on_train_begin(self, logs=None):
        clock = self._clock
        record = clock.record = FitRecord()
        clock.install_inner_timer(self.model)
        clock.train_function_at_begin = getattr(self.model, "train_function", None)
        record.slots_begin = clock.slots()
        record.cost_head_begin = clock.cost()
        record.t_head_begin = _pc()


class _Tail(keras.callbacks.Callback):
    def __init__(self, clock: EpochClock) -> None:
        super().__init__()
        self._clock = clock

    def on_train_begin(self, logs=None):
        t = _pc()
        clock = self._clock
        record = clock.record
        record.cost_tail_begin = clock.cost()
        record.slots_tail_begin = clock.slots()
        record.t_tail_begin = t
        clock.install_first_call_timer(self.model)

    def on_epoch_end(self, epoch, logs=None):
        t = _pc()
        clock = self._clock
        clock.record.t_epoch_end.append(t)
        clock.record.cost_epoch_end.append(clock.cost())
        clock.record.slots_epoch_end.append(clock.slots())

    def on_train_end(self, logs=None):
        t = _pc()
        clock = self._clock
        record = clock.record
        record.t_train_end = t
        record.cost_train_end = clock.cost()
        record.slots_end = clock.slots()
        clock.remove_first_call_timer()


class EpochClock:
    """Two callbacks, `head` and `tail`, to put first and last around the measured callbacks.

    Args:
        timer: The :class:`HookTimer` of the measured callbacks (`None` for a
            bare run): its totals are read at each clock event.
    """

    def __init__(self, timer: HookTimer | None) -> None:
        self.timer = timer
        self.head = _Head(self)
        self.tail = _Tail(self)
        self.record = FitRecord()
        self.train_function_at_begin: Any = None
        self.inner_armed = False
        self._first_call: tuple[Any, Any, Any] | None = None

    def cost(self) -> tuple[float, float]:
        """`(hook seconds, callback-thread CPU seconds)` so far."""
        if self.timer is None:
            return (0.0, 0.0)
        return (self.timer.hook_seconds(), self.timer.sample_threads())

    def slots(self) -> dict[str, tuple[float, int]]:
        """A copy of the hook timer's per-hook accumulators (empty for a bare run)."""
        return self.timer.snapshot_slots() if self.timer is not None else {}

    def wrap(self, callbacks: Sequence[keras.callbacks.Callback]) -> list[keras.callbacks.Callback]:
        """`[head, *callbacks, tail]`."""
        return [self.head, *callbacks, self.tail]

    def install_inner_timer(self, model: Any) -> None:
        """Wrap Keras' training function of `model` once, to time its first call in each `fit`.

        The wrapper stays for the model's life (a callback that keeps a
        reference to the training function sees the same object in every
        `fit`) and costs one flag test per step when not armed.
        """
        inner = getattr(model, "train_function", None)
        if inner is None or not callable(inner) or getattr(inner, "_bench_inner_timer", False):
            return
        clock = self

        def timed_step(*args: Any, **kwargs: Any) -> Any:
            if not clock.inner_armed:
                return inner(*args, **kwargs)
            clock.inner_armed = False
            record = clock.record
            t0 = _pc()
            try:
                return inner(*args, **kwargs)
            finally:
                record.inner_first_call_s = _pc() - t0

        timed_step._bench_inner_timer = True  # type: ignore[attr-defined]
        model.train_function = timed_step

    def install_first_call_timer(self, model: Any) -> None:
        """Time the next call of `model.train_function` (whatever it is now), then step aside."""
        record = self.record
        current = getattr(model, "train_function", None)
        record.interposed = current is not self.train_function_at_begin
        self.inner_armed = True
        if current is None or not callable(current):
            return

        def first_call(*args: Any, **kwargs: Any) -> Any:
            if getattr(model, "train_function", None) is first_call:
                model.train_function = current  # restore before the call, as an interposer would expect
            self._first_call = None
            t0 = _pc()
            try:
                return current(*args, **kwargs)
            finally:
                record.first_call_s = _pc() - t0

        model.train_function = first_call
        self._first_call = (model, current, first_call)

    def remove_first_call_timer(self) -> None:
        """Undo :meth:`install_first_call_timer` if the training function was never called."""
        self.inner_armed = False
        if self._first_call is None:
            return
        model, original, wrapper = self._first_call
        self._first_call = None
        if getattr(model, "train_function", None) is wrapper:
            model.train_function = original


class SteadyClock(keras.callbacks.Callback):
    """The wall and process CPU seconds from an epoch's first training batch end to its last (placed last).

    It overrides `on_train_batch_end`, so on JAX and PyTorch the fit it is in
    dispatches batch hooks synchronously (as a callback that is not
    `async_safe` would): an A/B of that dispatch times whole fits instead
    (:mod:`benchmarks._ab`).
    """

    first: tuple[float, float] | None = None
    last: tuple[float, float] | None = None

    def on_epoch_begin(self, epoch, logs=None):
        self.first = self.last = None

    def on_train_batch_end(self, batch, logs=None):
        t = (_pc(), time.process_time())
        if self.first is None:
            self.first = t
        self.last = t

    def seconds(self) -> float:
        return (self.last or (0.0, 0.0))[0] - (self.first or (0.0, 0.0))[0]

    def cpu_seconds(self) -> float:
        return (self.last or (0.0, 0.0))[1] - (self.first or (0.0, 0.0))[1]


class BatchClock(keras.callbacks.Callback):
    """Records `time.perf_counter()` at every training batch end, keyed by global step.

    Put it immediately before the callback whose timing it checks: the two
    timestamps then differ by a constant few microseconds, which cancels in
    every interval.

    Attributes:
        stamps: `{global_step: perf_counter}`; the global step after a batch is
            the optimizer's iteration count at the start of `fit` plus the
            batches run so far in this `fit` (with `steps_per_execution=1`).
        epoch_starts: `{global_step: perf_counter}` at each epoch's start,
            keyed by the global step before its first batch.
    """

    def __init__(self) -> None:
        super().__init__()
        self.stamps: dict[int, float] = {}
        self.epoch_starts: dict[int, float] = {}
        self._step = 0

    def on_train_begin(self, logs=None):
        iterations = self.model.optimizer.iterations
        self._step = int(keras.ops.convert_to_numpy(iterations))

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch_starts[self._step] = _pc()

    def on_train_batch_end(self, batch, logs=None):
        t = _pc()
        self._step += 1
        self.stamps[self._step] = t


def wrapper_overhead_s(calls: int = 20000) -> float:
    """Seconds per call that a :class:`HookTimer` batch-hook wrapper reports for an empty hook."""

    class _Empty(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            pass

    callback = _Empty()
    timer = HookTimer([callback]).install()
    hook = callback.on_train_batch_end
    for i in range(calls):
        hook(i, None)
    return timer.hook_seconds() / calls
