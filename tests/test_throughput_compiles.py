"""Executions that compiled are left out of the steady rate where a counter counts the samples.

The meter is driven by a fake clock and a hand-kept counter (the truth is the
hand count), as `ThroughputLogger` drives it where batch ends run on Keras'
pool: the executions left out are timed from their batch begins; :class:`keras_gpu.hooks.throughput_setup.CompileWatch` is fed the
events JAX sends; and on TensorFlow a generator fit with a short last batch is
timed by a stopwatch and its train function's own tracing count, the
backend's word that nothing but the first execution traced.
"""

from __future__ import annotations

import json
import threading

import pytest

from keras_gpu.hooks.throughput_setup import JAX_COMPILE_EVENTS, CompileWatch, watch_compiles
from keras_gpu.meters.throughput import ThroughputMeter
from keras_gpu.meters.throughput_compiles import BeginClock, LeftOut
from keras_gpu.meters.throughput_records import DataSchedule
from tests._util import run_python
from tests._workers.compile_worker import steady_bounds


class _Counter:
    """Running totals `(steps, samples)` kept by hand, as JAX's batch counter keeps them on the host."""

    def __init__(self) -> None:
        self.steps = self.samples = 0

    def __call__(self) -> tuple[int, int]:
        return self.steps, self.samples

    def run(self, size: int) -> None:
        self.steps += 1
        self.samples += size


def _meter(counter: _Counter, **kwargs) -> ThroughputMeter:
    meter = ThroughputMeter(DataSchedule(batch_size=None, last_batch_size=None), counter=counter, **kwargs)
    meter.left_out_told = True  # as ThroughputLogger's, where batch ends run on Keras' pool
    return meter


def _fit_epoch(meter, counter, sizes, seconds, compiled, looked_at, t0=0.0):
    """Run one epoch as `ThroughputLogger` feeds the meter on JAX: begins and the clock on the training thread.

    Execution `b` begins at `t0 + sum(seconds[:b])` and its batch end runs when it ends; `compiled`: the
    executions JAX compiled; `looked_at`: the batch ends the logger checks besides those the meter asks for.
    """
    clock = BeginClock(every_reading=True)
    meter.epoch_begin(t0)
    clock.epoch_begin(t0, counter())
    t = t0
    for batch, (size, sec) in enumerate(zip(sizes, seconds)):
        left = clock.begin(batch, t, batch - 1, counter())  # JAX takes the batch inside the step, after the begin
        if left is not None:
            meter.leave_out(left)
        counter.run(size)
        if batch in compiled:
            clock.leave_out_current()
        t += sec
        if batch in looked_at or batch >= meter.next_look:
            meter.look(batch, t)
    meter.epoch_end(len(sizes) - 1, t, left_open=clock.close())
    return meter.epoch_rates(), meter.epoch_close(t)


SIZES = [32] * 10 + [8]  # a short last batch: JAX compiles for it in the first epoch
SECONDS = [2.0] + [0.1] * 9 + [1.5]  # the first execution traces; the last compiles


def test_the_compiling_execution_is_left_out():
    counter = _Counter()
    meter = _meter(counter, every_n_steps=100)
    rates, times = _fit_epoch(meter, counter, SIZES, SECONDS, compiled={10}, looked_at=set())
    # By hand: executions 1..9, 9 x 32 samples in 0.9 s.
    assert rates.steady_samples_per_sec == pytest.approx(9 * 32 / 0.9)
    assert times.steady_samples_per_sec == pytest.approx(9 * 32 / 0.9)
    assert times.steady_steps_per_sec == pytest.approx(9 / 0.9)
    assert times.first_step_sec == pytest.approx(2.0 + 1.5)
    assert meter.summary()["samples"] == 10 * 32 + 8  # the counts stay exact
    assert meter.summary()["first_step_sec"] == (pytest.approx(3.5),)


def test_without_the_compile_signal_the_compile_is_in_the_steady_rate():
    counter = _Counter()
    rates, _ = _fit_epoch(_meter(counter, every_n_steps=100), counter, SIZES, SECONDS, compiled=set(), looked_at={9})
    assert rates.steady_samples_per_sec == pytest.approx((9 * 32 + 8) / (0.9 + 1.5))


@pytest.mark.parametrize("looked_at", [set(), {3}, {3, 6, 11}, set(range(12))])
def test_a_new_size_mid_epoch_leaves_out_exactly_the_execution_that_compiled(looked_at):
    counter = _Counter()
    sizes = [32] * 6 + [16] + [32] * 5  # a new size in the middle
    seconds = [2.0] + [0.1] * 5 + [1.0] + [0.1] * 5
    meter = _meter(counter, every_n_steps=100)
    rates, times = _fit_epoch(meter, counter, sizes, seconds, compiled={6}, looked_at=looked_at)
    # Left out: the first execution and the one that compiled, whichever batch ends the logger looked at.
    assert rates.steady_samples_per_sec == pytest.approx(10 * 32 / 1.0)
    assert times.first_step_sec == pytest.approx(2.0 + 1.0)


def test_a_compile_in_the_first_execution_or_the_next_epoch_changes_nothing_else():
    counter = _Counter()
    meter = _meter(counter, every_n_steps=3)
    _fit_epoch(meter, counter, SIZES, SECONDS, compiled={0, 10}, looked_at={9, 10})
    rates, times = _fit_epoch(meter, counter, SIZES, [0.2] + [0.1] * 10, compiled=set(), looked_at=set(), t0=10.0)
    assert rates.steady_samples_per_sec == pytest.approx((9 * 32 + 8) / 1.0)
    assert times.first_step_sec == pytest.approx(0.2)
    assert meter.summary()["first_step_sec"] == (pytest.approx(3.5), pytest.approx(0.2))


def test_a_missing_reading_gives_no_steady_rate_rather_than_a_wrong_one():
    counter = _Counter()
    meter = _meter(counter, every_n_steps=100)
    meter.epoch_begin(0.0)
    for batch in range(4):
        counter.run(8)
        meter.look(batch, 1.0 + batch)
    meter.leave_out(LeftOut(0, 0, 0.0, 1.0, counts_before=(0, 0), counts_through=None))
    meter.epoch_end(3, 4.0)
    assert meter.epoch_rates().steady_samples_per_sec is None
    assert meter.epoch_close(4.0).steady_samples_per_sec is None
    assert meter.summary()["samples"] == 32


def test_windows_still_tile_the_epoch_and_hold_every_sample():
    counter = _Counter()
    meter = _meter(counter, every_n_steps=4)
    meter.epoch_begin(0.0)
    windows, t = [], 0.0
    for size, sec in zip(SIZES, SECONDS):
        counter.run(size)
        t += sec
        batch = counter.steps - 1
        windows += [w for w in meter.look(batch, t) if hasattr(w, "samples_per_sec")]
    windows += meter.epoch_end(10, t)
    assert sum(w.samples for w in windows) == 10 * 32 + 8
    assert sum(w.seconds for w in windows) == pytest.approx(sum(SECONDS))


# -- the backend's signal -------------------------------------------------------------------


def test_compile_watch_counts_compile_events_of_its_thread_only():
    calls = []
    watch = CompileWatch(lambda: calls.append(1))
    watch.event(JAX_COMPILE_EVENTS + "backend_compile_duration", 0.2)
    watch.event("/jax/compilation_cache/cache_hits", 0.0)  # not a compile
    other = threading.Thread(target=watch.event, args=(JAX_COMPILE_EVENTS + "jaxpr_trace_duration", 0.1))
    other.start()
    other.join()
    assert watch.count == 1
    assert calls == [1]
    with pytest.raises(TypeError, match="on_compile"):
        CompileWatch(on_compile=3)


def test_no_compile_watch_off_jax():
    assert watch_compiles(lambda: None) is None  # this environment's backend is TensorFlow


@pytest.mark.slow
def test_tensorflow_traces_once_and_the_steady_rate_matches_a_stopwatch():
    """A generator with a short last batch: TensorFlow's tracing count is the truth that nothing else compiles."""
    proc = run_python(
        "from tests._workers.compile_worker import main; main(['short_last', 'short_last_dense'])",
        env={"KERAS_BACKEND": "tensorflow"},
        timeout=600,
    )
    result = json.loads(proc.stdout.split("RESULT", 1)[1])
    for case in result.values():
        for epoch in case["epochs"]:
            _first, *rest = epoch["executions"]
            assert all(e["compiles"] == 0 for e in rest)  # the train function traced in the first execution only
            low, high = steady_bounds(epoch["executions"], set())
            assert low * (1 - 1e-9) <= epoch["steady"] <= high * (1 + 1e-9)


def test_a_step_begun_where_the_data_ran_out_ends_nothing_after_the_training_phase():
    # Data of unknown length: Keras begins a step 6 that never runs; the compiling execution 5 ends with the phase.
    counter = _Counter()
    meter = _meter(counter, every_n_steps=100)
    clock = BeginClock(every_reading=True)
    meter.epoch_begin(0.0)
    clock.epoch_begin(0.0, counter())
    for batch, t in enumerate([0.0, 1.0, 1.1, 1.2, 1.3, 1.4]):
        left = clock.begin(batch, t, batch - 1, counter())
        if left is not None:
            meter.leave_out(left)
        counter.run(32)
        if batch == 5:
            clock.leave_out_current()  # the last execution compiled
        meter.look(batch, t + (0.5 if batch == 5 else 0.1))
    left = clock.begin(6, 2.5, 5, counter())  # the step that never runs, well after the last one ended at 1.9
    meter.leave_out(left)
    clock.leave_out_current()
    meter.epoch_end(5, 2.6, left_open=clock.close())
    times = meter.epoch_close(2.6)
    assert times.train_sec == pytest.approx(1.9)
    assert times.first_step_sec == pytest.approx(1.0 + 0.5)
    assert times.steady_samples_per_sec == pytest.approx(4 * 32 / 0.4)
