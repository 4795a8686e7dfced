"""Callbacks with a known cost, to check that the benchmark's instruments measure what they claim.

* :class:`BusyHookProbe` spends about `seconds` on the training thread in
  every `on_train_batch_end` (a busy wait) and times itself from inside the
  hook: the benchmark's hook timer must agree with that, less its own small
  per-call cost. (The wait itself can run long when the thread is preempted
  on a busy machine; the self-timing sees that too.)
* :class:`EmptyHookProbe` has an empty `on_train_batch_end`: what the hook
  timer reports for it in a real `fit` is the timer's floor per call.
* :class:`SpinThreadProbe` starts a background thread at `on_train_begin`
  that burns a known amount of CPU, then idles until `on_train_end` joins it.

`python -m benchmarks.overhead --self-check` runs them through the same
harness as the real callbacks and reports measured against expected.
"""

from __future__ import annotations

import threading
import time

import keras

__all__ = ["BusyHookProbe", "EmptyHookProbe", "SpinThreadProbe"]


class BusyHookProbe(keras.callbacks.Callback):
    """Busy-waits `seconds` in every `on_train_batch_end`.

    Attributes:
        calls: Number of `on_train_batch_end` calls so far.
        self_timed_s: Seconds the hook measured for itself, all calls together.
    """

    def __init__(self, seconds: float) -> None:
        super().__init__()
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds >= 0:
            raise ValueError(f"`seconds` must be a non-negative number. Received: seconds={seconds!r}")
        self.seconds = float(seconds)
        self.calls = 0
        self.self_timed_s = 0.0

    def on_train_batch_end(self, batch, logs=None):
        start = time.perf_counter()
        self.calls += 1
        end = start + self.seconds
        now = start
        while now < end:
            now = time.perf_counter()
        self.self_timed_s += now - start


class EmptyHookProbe(keras.callbacks.Callback):
    """An `on_train_batch_end` that does nothing."""

    def on_train_batch_end(self, batch, logs=None):
        pass


class SpinThreadProbe(keras.callbacks.Callback):
    """Starts a thread at `on_train_begin` that burns `cpu_seconds` of CPU, joined at `on_train_end`.

    Attributes:
        burned_s: CPU seconds the last thread measured for itself with
            `time.thread_time()` (the ground truth for the benchmark's reading
            from outside).
    """

    def __init__(self, cpu_seconds: float) -> None:
        super().__init__()
        if isinstance(cpu_seconds, bool) or not isinstance(cpu_seconds, (int, float)) or not cpu_seconds >= 0:
            raise ValueError(f"`cpu_seconds` must be a non-negative number. Received: cpu_seconds={cpu_seconds!r}")
        self.cpu_seconds = float(cpu_seconds)
        self.burned_s = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def on_train_begin(self, logs=None):
        self._stop.clear()
        self._thread = threading.Thread(target=self._spin, name="spin-thread-probe", daemon=True)
        self._thread.start()

    def on_train_end(self, logs=None):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
            self._thread = None

    def _spin(self) -> None:
        start = time.thread_time()
        x = 0
        while time.thread_time() - start < self.cpu_seconds and not self._stop.is_set():
            for _ in range(1000):
                x += 1
        self.burned_s = time.thread_time() - start
        self._stop.wait()
