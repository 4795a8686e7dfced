"""`ThroughputLogger` is exact when Keras runs its batch ends on a thread pool, concurrently and out of order.

Keras (on JAX and PyTorch, `verbose=0`) calls `on_train_batch_begin` on the
training thread, in order, and submits each `on_train_batch_end` to a
`ThreadPoolExecutor`; it waits for them all only at the epoch's end. These
tests drive the callback the same way, with the batch ends of each epoch
submitted in a shuffled order to a pool, and check the counts, the windows'
tiling of the training phase, and validation timed from the training phase's
end.
"""

from __future__ import annotations

import concurrent.futures
import random
import threading

import keras
import pytest

from keras_gpu import ThroughputLogger
from keras_gpu.hooks.fit_introspection import BatchCounter
from keras_gpu.meters.throughput import ThroughputMeter
from keras_gpu.meters.throughput_records import DataSchedule, Window


@pytest.fixture(autouse=True)
def _batch_ends_on_a_pool(monkeypatch):
    """As on JAX and PyTorch: Keras may run batch ends on its pool (TensorFlow, this process's backend, never does)."""
    from keras_gpu.core import backend

    monkeypatch.setattr(backend, "batch_ends_in_order", lambda: False)


def _model():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    return model


def _drive(cb, *, epochs, steps, seed, spe=1, validation=False, take=None, taken_before_begin=False):
    """Run the callback's hooks as Keras' asynchronous dispatch does; the threads that ran batch ends.

    `take(begin, end)`, where given, takes an execution's batches on the training thread: before its
    batch begin (PyTorch's trainer) or after it, in the step (JAX's).
    """
    rng = random.Random(seed)
    threads = set()

    def end(batch):
        threads.add(threading.get_ident())
        cb.on_train_batch_end(batch)

    cb.set_params({"epochs": epochs, "steps": steps, "verbose": 0})
    cb.on_train_begin()
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        for epoch in range(epochs):
            cb.on_epoch_begin(epoch)
            ends = []
            for begin in range(0, steps, spe):
                last = min(begin + spe, steps) - 1
                if take is not None and taken_before_begin:
                    take(begin, last)
                cb.on_train_batch_begin(begin)
                if take is not None and not taken_before_begin:
                    take(begin, last)
                ends.append(last)
            rng.shuffle(ends)
            for f in [pool.submit(end, b) for b in ends]:
                f.result()  # Keras waits for every batch end before the epoch's end (and before on_test_end)
            if validation:
                cb.on_test_begin()
                cb.on_test_end()
            cb.on_epoch_end(epoch, {})
    cb.on_train_end()
    return threads


@pytest.mark.parametrize("seed", range(5))
def test_out_of_order_batch_ends_count_every_step_and_sample(tmp_path, seed):
    cb = ThroughputLogger(tmp_path, every_n_steps=3, batch_size=8, samples_per_epoch=8 * 19 + 5)
    cb.set_model(_model())
    threads = _drive(cb, epochs=3, steps=20, seed=seed)
    assert threading.get_ident() not in threads
    s = cb.summary
    assert (s["steps"], s["samples"], s["epochs"]) == (60, 3 * (8 * 19 + 5), 3)
    assert s["measured_steps"] == 60  # the windows tile every epoch's training phase
    assert s["train_seconds"] > 0


@pytest.mark.parametrize("seed", range(3))
def test_out_of_order_batch_ends_with_steps_per_execution(tmp_path, seed):
    cb = ThroughputLogger(tmp_path, every_n_steps=4, batch_size=8)
    cb.set_model(_model())
    _drive(cb, epochs=2, steps=18, seed=seed, spe=4)
    assert (cb.summary["steps"], cb.summary["samples"]) == (36, 36 * 8)
    assert cb.summary["measured_steps"] == 36


class _Taken:
    """The training thread's batches through JAX's and PyTorch's batch counter, a batch's size by its index."""

    def __init__(self, size, steps):
        import numpy as np

        self.counter = BatchCounter()
        epochs = (np.zeros((size(b), 2), "float32") for _ in iter(int, 1) for b in range(steps))
        self._batches = self.counter.wrap(epochs)

    def take(self, begin, end):
        for _ in range(begin, end + 1):
            next(self._batches)


@pytest.mark.parametrize("taken_before_begin", [True, False], ids=["pytorch", "jax"])
@pytest.mark.parametrize("spe", [1, 3])
def test_counted_batches_are_exact_however_far_the_training_thread_runs_ahead(
    tmp_path, monkeypatch, taken_before_begin, spe
):
    # Every begin of the epoch runs before the first batch end: each window must count its own batches only.
    def size(batch):
        return 5 if batch == 16 else 8 + batch % 3

    taken = _Taken(size, 17)
    windows = []
    monkeypatch.setattr(ThroughputLogger, "_counter", lambda self, data=None: taken.counter)
    monkeypatch.setattr(ThroughputLogger, "_write", lambda self, events: windows.extend(events))
    cb = ThroughputLogger(tmp_path, every_n_steps=4)
    cb.set_model(_model())
    _drive(cb, epochs=2, steps=17, seed=1, spe=spe, take=taken.take, taken_before_begin=taken_before_begin)
    per_epoch = sum(size(b) for b in range(17))
    assert (cb.summary["steps"], cb.summary["samples"]) == (34, 2 * per_epoch)
    assert len(windows) >= 4
    for window in windows:
        if not isinstance(window, Window):
            continue  # the first execution of an epoch (its time only)
        in_epoch = range(window.step - window.steps, window.step)  # global steps; 17 per epoch
        assert window.samples == sum(size(step % 17) for step in in_epoch), window


def test_concurrent_batch_ends_are_taken_in_batch_order(tmp_path):
    cb = ThroughputLogger(tmp_path, every_n_steps=1, batch_size=2)
    cb.set_model(_model())
    cb.set_params({"epochs": 1, "steps": 4, "verbose": 0})
    cb.on_train_begin()
    cb.on_epoch_begin(0)
    for b in range(4):
        cb.on_train_batch_begin(b)
    cb.on_train_batch_end(3)  # the last batch end first: it covers the three before it
    for b in (0, 1, 2):
        cb.on_train_batch_end(b)
    cb.on_epoch_end(0, {})
    cb.on_train_end()
    assert (cb.summary["steps"], cb.summary["samples"], cb.summary["measured_steps"]) == (4, 8, 4)


def test_validation_counts_from_the_training_phases_end():
    # An asynchronous step still running when validation starts on the host is training time.
    meter = ThroughputMeter(DataSchedule(batch_size=4, last_batch_size=4, batches_per_pass=3), every_n_steps=10)
    meter.epoch_begin(0.0)
    for batch, t in ((0, 1.0), (1, 2.0), (2, 3.0)):
        meter.look(batch, t)
    meter.epoch_end(2, 3.0)
    meter.validation(2.5, 4.0)  # started on the host at 2.5, while the last step ran until 3.0
    times = meter.epoch_close(5.0)
    assert times.train_sec == pytest.approx(3.0)
    assert times.validation_sec == pytest.approx(1.0)
    assert times.other_sec == pytest.approx(1.0)


def test_validation_between_batch_ends_is_timed(tmp_path):
    cb = ThroughputLogger(tmp_path, every_n_steps=2, batch_size=4)
    cb.set_model(_model())
    _drive(cb, epochs=2, steps=6, seed=0, validation=True)
    s = cb.summary
    assert (s["steps"], s["samples"]) == (12, 48)
    assert s["validation_seconds"] >= 0


def test_an_epoch_stopped_early_ends_its_training_phase_before_validation(tmp_path):
    import time

    # `stop_training` at a batch end the logger did not look at: the phase ends at the latest where validation began.
    cb = ThroughputLogger(tmp_path, every_n_steps=100, batch_size=4)
    cb.set_model(_model())
    cb.set_params({"epochs": 1, "steps": 20, "verbose": 0})
    cb.on_train_begin()
    cb.on_epoch_begin(0)
    t0 = time.perf_counter()
    for b in range(8):
        cb.on_train_batch_begin(b)
        cb.on_train_batch_end(b)
    validation_start = time.perf_counter()
    cb.on_test_begin()
    time.sleep(0.05)
    cb.on_test_end()
    cb.on_epoch_end(0, {})
    cb.on_train_end()
    s = cb.summary
    assert (s["steps"], s["samples"]) == (8, 32)
    assert s["train_seconds"] <= validation_start - t0 + 1e-3  # not the validation's 50 ms
    assert s["validation_seconds"] >= 0.05
