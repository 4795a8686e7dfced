"""`ScaleWindow` driven with the interleavings Keras' thread pool produces: each window closes once.

On JAX and PyTorch (`verbose=0`) Keras hands each batch end to a thread pool and reads
`model.stop_training` only afterwards, so batch ends after the one that closes the window are
already in flight when it closes. The window's clock is replaced by a counter, so every second
in these tests is exact.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import threading

import keras
import pytest

from keras_gpu.hooks import scale_window
from keras_gpu.hooks.scale_window import ScaleWindow
from keras_gpu.hooks.study_env import StudySettings


class _Clock:
    """`time.perf_counter` as 1, 2, 3, ... in the order of the calls."""

    def __init__(self) -> None:
        self._ticks = itertools.count(1)
        self._lock = threading.Lock()

    def perf_counter(self) -> float:
        with self._lock:
            return float(next(self._ticks))


class _ArrivalOrderLock:
    """A lock granted in the order the threads asked for it, once the test opens the gate.

    `arrived` is released once per thread that asked; the test waits for it,
    so it knows each batch end is past everything before the lock.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._next_ticket = 0
        self._serving = 0
        self.gate = threading.Event()
        self.arrived = threading.Semaphore(0)

    def __enter__(self) -> None:
        with self._cond:
            ticket = self._next_ticket
            self._next_ticket += 1
        self.arrived.release()
        self.gate.wait()
        with self._cond:
            self._cond.wait_for(lambda: self._serving == ticket)

    def __exit__(self, *exc: object) -> None:
        with self._cond:
            self._serving += 1
            self._cond.notify_all()


@pytest.fixture()
def window(tmp_path, monkeypatch):
    monkeypatch.setattr(scale_window, "time", _Clock())
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    w = ScaleWindow(StudySettings(str(tmp_path), warmup=2, steps=4))
    w.set_model(model)
    w.on_train_begin()
    w.on_epoch_begin(0)
    return w


def test_a_second_batch_end_in_flight_when_the_window_closes_does_not_close_it_again(window):
    # Batch ends 0-4 in order: the window opens at batch 1's end (2 steps, t=2).
    for batch in range(5):
        window.on_train_batch_end(batch)
    lock = _ArrivalOrderLock()
    window._lock = lock
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        closing = pool.submit(window.on_train_batch_end, 5)  # 6 steps: closes the window
        lock.arrived.acquire()
        late = pool.submit(window.on_train_batch_end, 6)  # dispatched before Keras read stop_training
        lock.arrived.acquire()
        lock.gate.set()  # both are past the check before the lock; the closing one takes it first
        closing.result(), late.result()
    assert window.model.stop_training is True
    window.on_epoch_end(0)
    window.on_train_end()
    assert (window.result["steps"], window.result["seconds"]) == (4, 4.0)  # batch 1's end at t=2 to batch 5's at t=6


def test_batch_ends_after_stop_training_on_a_pool_leave_the_window_as_it_closed(window):
    for batch in range(6):  # closes at batch 5's end (t=6)
        window.on_train_batch_end(batch)
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        for f in [pool.submit(window.on_train_batch_end, b) for b in (9, 7, 8, 6)]:
            f.result()
    window.on_epoch_end(0)
    window.on_epoch_begin(1)  # a late epoch start does not reopen a segment
    window.on_train_batch_end(0)
    window.on_train_end()
    assert (window.result["steps"], window.result["seconds"], window.result["steps_trained"]) == (4, 4.0, 6)
