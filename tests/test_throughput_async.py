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
import types

import keras
import pytest

from keras_gpu import ThroughputLogger
from keras_gpu.hooks import throughput_logger
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


# -- the training thread's clock: batch ends late and out of order ----------------------------------------------


class _Clock:
    """A fake `time` for the logger: every event of the script reads the time it is given."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


class _Script:
    """One epoch as Keras' asynchronous dispatch runs it, with the training thread's and the pool's times apart.

    Begins run in order at the given times; batch ends run later, in the order given, each at a time after
    every event before it. What the training thread saw is the truth: each execution from its batch begin
    to the next one's, the last to its batch end.
    """

    def __init__(
        self, cb, clock, monkeypatch, *, steps, sizes=None, counter=None, take_before_begin=False, jax=True
    ):
        self.cb, self.clock, self.steps = cb, clock, steps
        self.sizes = sizes or [8] * steps
        self.taken = counter
        self.take_before_begin = take_before_begin
        self.on_compile = None
        self.begins: dict[int, float] = {}
        self.ends: dict[int, float] = {}

        def watch(on_compile):  # JAX tells its compiles; PyTorch does not
            self.on_compile = on_compile
            return types.SimpleNamespace(close=lambda: None) if jax else None

        monkeypatch.setattr(throughput_logger, "watch_compiles", watch)

    def at(self, t):
        assert t >= self.clock.now
        self.clock.now = t

    def begin(self, batch, t, compiles=False):
        self.at(t)
        if self.taken is not None and self.take_before_begin:
            self.taken.take(batch, batch)
        self.begins[batch] = t
        self.cb.on_train_batch_begin(batch)
        if self.taken is not None and not self.take_before_begin:
            self.taken.take(batch, batch)
        if compiles:
            self.on_compile()  # JAX's compile event, on the training thread, inside the step

    def end(self, batch, t):
        self.at(t)
        self.ends[batch] = t
        self.cb.on_train_batch_end(batch)


def _async_logger(tmp_path, monkeypatch, clock, steps, windows, **kwargs):
    monkeypatch.setattr(throughput_logger, "time", clock)
    monkeypatch.setattr(ThroughputLogger, "_write", lambda self, events: windows.extend(events))
    cb = ThroughputLogger(tmp_path, **kwargs)
    cb.set_model(_model())
    cb.set_params({"epochs": 1, "steps": steps, "verbose": 0})
    return cb


def _run_epoch(script, *, compile_at=(), end_order, host_ahead, stop_after=None):
    """Begins at 1 s for the first execution's compile, then 10 ms apart (0.5 s more for a compile); ends after."""
    cb, clock = script.cb, script.clock
    cb.on_train_begin()
    clock.now = 0.0
    cb.on_epoch_begin(0)
    last = script.steps - 1 if stop_after is None else stop_after
    t = 0.0
    pending = list(end_order)
    for batch in range(last + 1):
        script.begin(batch, t, compiles=batch in compile_at)
        t += 1.0 if batch == 0 else 0.01
        if batch in compile_at:
            t += 0.5
        if not host_ahead:  # the pool runs the batch ends it may, a little after each step
            while pending and pending[0] < batch:
                script.end(pending.pop(0), max(t - 0.004, clock.now))
    for batch in pending:
        if batch <= last:
            script.end(batch, max(t, clock.now) + 0.001 * (batch + 1))
    clock.now += 0.01
    cb.on_epoch_end(0, logs := {})
    cb.on_train_end()
    return logs


def _truth(script, left_out):
    """Steady samples/s by the training thread's clock: each execution from its begin to the next (the last to its end)."""
    last = max(script.ends)
    bounds = {b: script.begins[b] for b in script.begins}
    bounds[last + 1] = script.ends[last]
    kept = [b for b in range(1, last + 1) if b not in left_out]
    return sum(script.sizes[b] for b in kept) / sum(bounds[b + 1] - bounds[b] for b in kept)


def _first_end_last(steps, seed):
    order = list(range(1, steps))
    random.Random(seed).shuffle(order)
    return [*order, 0]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("host_ahead", [True, False], ids=["host-ahead", "interleaved"])
@pytest.mark.parametrize("jax", [True, False], ids=["jax", "pytorch"])
def test_the_steady_rate_of_a_16_step_epoch_follows_the_training_threads_clock(
    tmp_path, monkeypatch, seed, host_ahead, jax
):
    # 1,000 samples in batches of 64: 16 steps; the pool runs batch end 0 last, after every other.
    clock, windows = _Clock(), []
    cb = _async_logger(tmp_path, monkeypatch, clock, 16, windows, batch_size=64, samples_per_epoch=1000)
    script = _Script(cb, clock, monkeypatch, steps=16, sizes=[64] * 15 + [40], jax=jax)
    # The short last batch is a size new to the fit: JAX says it compiled; elsewhere the schedule foresees it.
    logs = _run_epoch(script, compile_at={15} if jax else (), end_order=_first_end_last(16, seed), host_ahead=host_ahead)
    truth = _truth(script, left_out={15})
    assert logs["throughput/steady_samples_per_sec"] == pytest.approx(truth, rel=1e-9)
    assert cb.summary["first_step_sec"] == (pytest.approx(script.begins[1] + script.ends[15] - script.begins[15]),)
    assert (cb.summary["steps"], cb.summary["samples"]) == (16, 1000)
    measured = [w for w in windows if isinstance(w, Window)]
    assert sum(w.seconds for w in measured) == pytest.approx(script.ends[15])  # the windows tile the training phase
    assert sum(w.samples for w in measured) == 1000


@pytest.mark.parametrize("taken_before_begin", [True, False], ids=["pytorch", "jax"])
@pytest.mark.parametrize("seed", range(3))
def test_a_compile_mid_epoch_leaves_out_exactly_the_execution_that_compiled(
    tmp_path, monkeypatch, taken_before_begin, seed
):
    # A PyDataset's batches counted on the host; JAX compiles again at batch 9 (a batch of another shape).
    sizes = [32] * 9 + [16] + [32] * 10
    clock, windows = _Clock(), []
    taken = _Taken(lambda b: sizes[b], 20)
    monkeypatch.setattr(ThroughputLogger, "_counter", lambda self, data=None: taken.counter)
    cb = _async_logger(tmp_path, monkeypatch, clock, 20, windows, every_n_steps=5)
    script = _Script(cb, clock, monkeypatch, steps=20, sizes=sizes, counter=taken, take_before_begin=taken_before_begin)
    logs = _run_epoch(script, compile_at={9}, end_order=_first_end_last(20, seed), host_ahead=seed % 2 == 0)
    assert logs["throughput/steady_samples_per_sec"] == pytest.approx(_truth(script, left_out={9}), rel=1e-9)
    compiled = script.begins[10] - script.begins[9]
    assert cb.summary["first_step_sec"] == (pytest.approx(script.begins[1] + compiled),)
    assert cb.summary["samples"] == sum(sizes)


def test_an_epoch_stopped_in_the_execution_that_compiled_leaves_it_out_to_the_training_phases_end(
    tmp_path, monkeypatch
):
    clock, windows = _Clock(), []
    cb = _async_logger(tmp_path, monkeypatch, clock, 20, windows, batch_size=8)
    script = _Script(cb, clock, monkeypatch, steps=20)
    logs = _run_epoch(script, compile_at={7}, end_order=[3, 1, 2, 0, 5, 4, 7, 6], host_ahead=False, stop_after=7)
    last = script.ends[7]
    expected = 6 * 8 / (script.begins[7] - script.begins[1])  # executions 1..6; 7 compiled and the epoch stopped
    assert logs["throughput/steady_samples_per_sec"] == pytest.approx(expected, rel=1e-9)
    assert cb.summary["first_step_sec"] == (pytest.approx(script.begins[1] + last - script.begins[7]),)
    assert (cb.summary["steps"], cb.summary["samples"]) == (8, 64)


def test_an_epoch_of_one_execution_has_no_steady_rate(tmp_path, monkeypatch):
    clock, windows = _Clock(), []
    cb = _async_logger(tmp_path, monkeypatch, clock, 1, windows, batch_size=8)
    script = _Script(cb, clock, monkeypatch, steps=1)
    logs = _run_epoch(script, end_order=[0], host_ahead=True)
    assert "throughput/steady_samples_per_sec" not in logs
    assert logs["throughput/samples_per_sec"] == pytest.approx(8 / script.ends[0])
