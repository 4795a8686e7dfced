"""The throughput arithmetic, driven by a controlled clock: exact counts, windows, rates, MFU."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from keras_gpu.meters.throughput import ThroughputMeter
from keras_gpu.meters.throughput_records import DataSchedule, EpochTimes, FirstExecution, Window


def _drive(meter: ThroughputMeter, executions: list[tuple[int, float]]) -> list[Window | FirstExecution]:
    """Feed batch ends exactly as the callback does: each one the meter asks to look at (`next_look`)."""
    out: list[Window | FirstExecution] = []
    for batch, t in executions:
        if batch >= meter.next_look:
            out += meter.look(batch, t)
    return out


def _epoch(meter, t0, executions, epoch_steps=None, close=None):
    meter.epoch_begin(t0)
    events = _drive(meter, executions)
    last_batch, last_t = executions[-1] if executions else (-1, t0)
    events += meter.epoch_end(last_batch, last_t, epoch_steps)
    if close is not None:
        events.append(meter.epoch_close(close))
    return events


def _windows(events):
    return [e for e in events if isinstance(e, Window)]


ARRAYS_1000_BY_64 = dict(batch_size=64, last_batch_size=40, batches_per_pass=16)


def test_module_does_not_import_tensorflow():
    code = "import sys, keras_gpu.meters.throughput; assert 'tensorflow' not in sys.modules, 'tensorflow imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_step_windows_exact_rates_and_short_last_batch():
    meter = ThroughputMeter(DataSchedule(**ARRAYS_1000_BY_64), every_n_steps=5)
    executions = [(b, 1.0 + 0.1 * b) for b in range(16)]
    events = _epoch(meter, 0.0, executions)
    first, *rest = events
    assert first == FirstExecution(step=1, epoch=0, steps=1, seconds=1.0)
    windows = _windows(rest)
    # The first window opens at the epoch's start and holds the first execution.
    assert [w.step for w in windows] == [5, 10, 15, 16]
    assert [w.steps for w in windows] == [5, 5, 5, 1]
    assert [w.samples for w in windows] == [320, 320, 320, 40]
    assert [w.seconds for w in windows] == pytest.approx([1.4, 0.5, 0.5, 0.1])
    assert windows[1].steps_per_sec == pytest.approx(10.0)
    assert windows[0].samples_per_sec == pytest.approx(320 / 1.4)
    # The windows tile the training phase: their times add up to its wall time.
    assert sum(w.seconds for w in windows) == pytest.approx(executions[-1][1] - 0.0)
    assert meter.total_steps == 16
    assert meter.total_samples == 1000


def test_steps_per_execution_counts_every_step():
    meter = ThroughputMeter(DataSchedule(**ARRAYS_1000_BY_64, steps_per_execution=4), every_n_steps=8)
    # Batch hooks fire once per execution with the index of its last step.
    for epoch in range(2):
        t0 = 100.0 * epoch
        events = _epoch(meter, t0, [(3, t0 + 1), (7, t0 + 2), (11, t0 + 3), (15, t0 + 4)])
        first, *rest = events
        assert first.steps == 4 and first.seconds == pytest.approx(1.0)
        windows = _windows(rest)
        assert [(w.steps, w.samples) for w in windows] == [(8, 512), (8, 7 * 64 + 40)]
        assert [w.step for w in windows] == [16 * epoch + 8, 16 * epoch + 16]
        assert windows[0].steps_per_sec == pytest.approx(4.0)  # 8 steps in 2 s
        assert windows[1].samples_per_sec == pytest.approx(488 / 2.0)
    assert (meter.total_steps, meter.total_samples) == (32, 2000)


def test_last_execution_stops_at_end_of_data():
    # 16 batches with steps_per_execution=3: the sixth execution (nominal batches
    # 15..17) runs only batch 15, the short one.
    meter = ThroughputMeter(DataSchedule(**ARRAYS_1000_BY_64, steps_per_execution=3), every_n_steps=100)
    events = _epoch(meter, 0.0, [(b, float(i + 1)) for i, b in enumerate([2, 5, 8, 11, 14, 17])])
    (window,) = _windows(events)
    assert window.steps == 16  # the first execution's steps included
    assert window.samples == 1000
    assert window.seconds == pytest.approx(6.0)
    assert (meter.total_steps, meter.total_samples, meter.step) == (16, 1000, 16)


def test_time_windows():
    meter = ThroughputMeter(DataSchedule(batch_size=32, last_batch_size=32), every_s=1.0)
    # First execution ends at t=2.0; then one batch every 0.25 s.
    executions = [(0, 2.0)] + [(b, 2.0 + 0.25 * b) for b in range(1, 11)]
    events = _epoch(meter, 0.0, executions)
    assert events[0] == FirstExecution(step=1, epoch=0, steps=1, seconds=2.0)
    windows = _windows(events)
    # Windows close at the first batch end at or after 1 s past their start; the
    # first one, opened at the epoch's start, closes with the slow first execution.
    assert [(w.step, w.steps) for w in windows] == [(1, 1), (5, 4), (9, 4), (11, 2)]
    assert [w.seconds for w in windows] == pytest.approx([2.0, 1.0, 1.0, 0.5])
    assert [w.samples_per_sec for w in windows] == pytest.approx([16.0, 128.0, 128.0, 128.0])


def test_default_window_is_five_seconds_and_windows_are_exclusive():
    assert ThroughputMeter(DataSchedule()).every_s == 5.0
    with pytest.raises(ValueError, match=r"only one of `every_n_steps` and `every_s`.*Received: every_n_steps=3, every_s=2.0"):
        ThroughputMeter(DataSchedule(), every_n_steps=3, every_s=2.0)
    with pytest.raises(ValueError, match=r"Received: every_n_steps=0"):
        ThroughputMeter(DataSchedule(), every_n_steps=0)
    with pytest.raises(ValueError, match=r"Received: every_s=-1"):
        ThroughputMeter(DataSchedule(), every_s=-1)
    with pytest.raises(TypeError, match="DataSchedule"):
        ThroughputMeter({"batch_size": 3})


def test_first_execution_counts_in_wall_clock_rates_and_is_left_out_of_steady_ones():
    meter = ThroughputMeter(DataSchedule(batch_size=10, last_batch_size=10), every_n_steps=2)
    # A 30 s first execution (tracing) is time the user pays: it is in the rate.
    events = _epoch(meter, 0.0, [(0, 30.0), (1, 31.0), (2, 32.0)], close=40.0)
    assert [e.seconds for e in events if isinstance(e, FirstExecution)] == [30.0]
    assert [(w.steps, w.seconds) for w in _windows(events)] == [(2, 31.0), (1, 1.0)]
    times = events[-1]
    assert times == EpochTimes(
        step=3, epoch=0, epoch_sec=40.0, train_sec=32.0, first_step_sec=30.0, validation_sec=0.0,
        other_sec=8.0, steady_steps_per_sec=1.0, steady_samples_per_sec=10.0,
    )
    s = meter.summary()
    assert s["steps_per_sec"] == pytest.approx(3 / 32)
    assert s["samples_per_sec"] == pytest.approx(30 / 32)
    assert (s["steady_steps_per_sec"], s["steady_samples_per_sec"]) == (1.0, 10.0)
    assert s["first_step_sec"] == (30.0,)
    assert (s["steps"], s["samples"], s["measured_steps"], s["measured_samples"]) == (3, 30, 3, 30)


def test_epoch_end_closes_partial_window_and_short_epochs_get_a_point():
    meter = ThroughputMeter(DataSchedule(batch_size=8, last_batch_size=8), every_n_steps=1000)
    events = _epoch(meter, 0.0, [(0, 1.0), (1, 1.5), (2, 2.0)])
    (window,) = _windows(events)
    assert (window.step, window.steps, window.samples, window.seconds) == (3, 3, 24, 2.0)
    # An epoch of a single execution still gets a rate: its wall time is known.
    events = _epoch(meter, 10.0, [(0, 10.5)])
    assert [type(e) for e in events] == [FirstExecution, Window]
    assert (events[1].steps, events[1].seconds) == (1, 0.5)
    # An epoch with no execution at all gives nothing, and closing it reports nothing.
    assert _epoch(meter, 20.0, [], close=21.0) == [None]
    assert meter.epochs == 3


def test_summary_means_over_windows():
    meter = ThroughputMeter(DataSchedule(batch_size=4, last_batch_size=4), every_n_steps=2, num_replicas=2)
    _epoch(meter, 0.0, [(0, 1.0), (1, 2.0), (2, 3.0)], close=10.0)  # 3 steps in 3 s
    _epoch(meter, 10.0, [(0, 11.0), (1, 11.5), (2, 12.0), (3, 12.5), (4, 13.0)], close=14.0)  # 5 steps in 3 s
    s = meter.summary()
    assert s["measured_steps"] == 8 and s["measured_seconds"] == pytest.approx(6.0)
    assert s["steps_per_sec"] == pytest.approx(8 / 6)
    assert s["samples_per_sec"] == pytest.approx(32 / 6)
    assert s["samples_per_sec_per_replica"] == pytest.approx(16 / 6)
    # Steady state: 2 steps in 2 s, then 4 steps in 2 s.
    assert s["steady_steps_per_sec"] == pytest.approx(1.5)
    assert s["steady_samples_per_sec"] == pytest.approx(6.0)
    assert (s["train_seconds"], s["validation_seconds"], s["other_seconds"]) == pytest.approx((6.0, 0.0, 8.0))
    assert (s["steps"], s["samples"], s["epochs"]) == (8, 32, 2)
    assert s["first_step_sec"] == (1.0, 1.0)


def test_per_replica_rate_and_mfu():
    meter = ThroughputMeter(
        DataSchedule(batch_size=256, last_batch_size=256),
        every_n_steps=5,
        num_replicas=8,
        flops_per_sample=3e9,
        peak_flops=8 * 100e12,
    )
    (window,) = _windows(_epoch(meter, 0.0, [(b, 0.5 * (b + 1)) for b in range(5)]))
    assert window.samples_per_sec == pytest.approx(512.0)  # 1280 samples in 2.5 s
    assert window.samples_per_sec_per_replica == pytest.approx(64.0)
    assert window.tflops_per_sec == pytest.approx(3e9 * 512 / 1e12)
    assert window.mfu == pytest.approx(3e9 * 512 / 800e12)
    s = meter.summary()
    assert s["mfu"] == pytest.approx(window.mfu) and s["tflops_per_sec"] == pytest.approx(window.tflops_per_sec)


def test_no_peak_means_tflops_without_mfu_and_unknown_batch_means_steps_only():
    meter = ThroughputMeter(DataSchedule(batch_size=2, last_batch_size=2), every_n_steps=1, flops_per_sample=10.0)
    window = _windows(_epoch(meter, 0.0, [(0, 1.0), (1, 2.0)]))[-1]
    assert window.tflops_per_sec == pytest.approx(20.0 / 1e12) and window.mfu is None

    meter = ThroughputMeter(DataSchedule(), every_n_steps=1, flops_per_sample=10.0, peak_flops=1e12)
    window = _windows(_epoch(meter, 0.0, [(0, 1.0), (1, 3.0)]))[-1]
    assert window.steps_per_sec == pytest.approx(0.5)
    assert (window.samples, window.samples_per_sec, window.samples_per_sec_per_replica, window.tflops_per_sec, window.mfu) == (
        None,
        None,
        None,
        None,
        None,
    )
    s = meter.summary()
    assert s["samples"] is None and s["samples_per_sec"] is None and s["steps"] == 2


def test_initial_step_offsets_the_axis():
    meter = ThroughputMeter(DataSchedule(batch_size=1, last_batch_size=1), every_n_steps=2, initial_step=100)
    events = _epoch(meter, 0.0, [(0, 1.0), (1, 2.0), (2, 3.0)])
    assert [e.step for e in events] == [101, 102, 103]
    with pytest.raises(ValueError, match="Received: initial_step=-1"):
        ThroughputMeter(DataSchedule(), initial_step=-1)


def test_steps_per_epoch_continues_one_pass_across_epochs():
    # 16 batches per pass, steps_per_epoch=10: Keras keeps one iterator; epoch 2
    # stops after the 6 batches left (the last one short), epoch 3 starts over.
    meter = ThroughputMeter(DataSchedule(**ARRAYS_1000_BY_64, steps_per_epoch=10), every_n_steps=100)
    _epoch(meter, 0.0, [(b, 1.0 + b) for b in range(10)])
    assert meter.total_samples == 640
    _epoch(meter, 100.0, [(b, 101.0 + b) for b in range(6)])
    assert meter.total_samples == 1000
    _epoch(meter, 200.0, [(b, 201.0 + b) for b in range(10)])
    assert (meter.total_steps, meter.total_samples) == (26, 1640)


def test_steps_per_epoch_not_a_multiple_of_steps_per_execution():
    # Repeating data, steps_per_epoch=10, steps_per_execution=4: executions end at
    # batches 3, 7, 11 and every one runs 4 real steps (Keras' progress bar says 10).
    meter = ThroughputMeter(
        DataSchedule(batch_size=5, last_batch_size=5, infinite=True, steps_per_epoch=10, steps_per_execution=4),
        every_n_steps=100,
    )
    _epoch(meter, 0.0, [(3, 1.0), (7, 2.0), (11, 3.0)])
    assert (meter.total_steps, meter.total_samples) == (12, 60)


def test_unknown_length_with_steps_per_execution_is_corrected_at_epoch_end():
    # 15 full batches of unknown count, steps_per_execution=4: the fourth execution
    # runs 3 steps though its `batch` says 15. Windows lag one execution (the
    # previous one is proven full), and epoch end corrects the last one.
    schedule = DataSchedule(batch_size=64, last_batch_size=64, steps_per_execution=4)
    assert not schedule.exact_steps
    meter = ThroughputMeter(schedule, every_n_steps=4)
    events = _epoch(meter, 0.0, [(3, 1.0), (7, 2.0), (11, 3.0), (15, 3.75)], epoch_steps=15)
    windows = _windows(events)
    assert [(w.step, w.steps, w.samples) for w in windows] == [(4, 4, 256), (8, 4, 256), (12, 4, 256), (15, 3, 192)]
    assert windows[0].seconds == pytest.approx(1.0)
    assert windows[3].seconds == pytest.approx(0.75) and windows[3].steps_per_sec == pytest.approx(4.0)
    assert (meter.total_steps, meter.total_samples) == (15, 960)
    # A correction is bounded by what one execution can lose.
    meter = ThroughputMeter(schedule, every_n_steps=4)
    _epoch(meter, 0.0, [(3, 1.0), (7, 2.0)], epoch_steps=1)
    assert meter.total_steps == 5


def test_from_samples_and_schedule_validation():
    s = DataSchedule.from_samples(1000, 64, steps_per_execution=2)
    assert (s.batch_size, s.last_batch_size, s.batches_per_pass, s.steps_per_execution) == (64, 40, 16, 2)
    assert DataSchedule.from_samples(128, 64).last_batch_size == 64
    assert s.counts_samples and s.exact_steps
    assert not DataSchedule(batch_size=64).counts_samples
    with pytest.raises(ValueError, match=r"Received: batch_size=0"):
        DataSchedule(batch_size=0)
    with pytest.raises(ValueError, match=r"Received: batch_size=64, last_batch_size=65"):
        DataSchedule(batch_size=64, last_batch_size=65)
    with pytest.raises(TypeError, match=r"Received: steps_per_execution=True"):
        DataSchedule(steps_per_execution=True)
    with pytest.raises(ValueError, match=r"Received: samples_per_epoch=0"):
        DataSchedule.from_samples(0, 64)
    with pytest.raises(ValueError, match="Received: batches_per_pass=3"):
        DataSchedule(batches_per_pass=3, infinite=True)
    with pytest.raises(ValueError, match=r"Received: flops_per_sample=inf"):
        ThroughputMeter(DataSchedule(), flops_per_sample=math.inf)


def test_zero_length_window_is_counted_but_not_rated():
    meter = ThroughputMeter(DataSchedule(batch_size=1, last_batch_size=1), every_n_steps=1)
    events = _epoch(meter, 0.0, [(0, 1.0), (1, 1.0), (2, 2.0)])
    assert [(w.steps, w.seconds) for w in _windows(events)] == [(1, 1.0), (1, 1.0)]
    assert meter.total_steps == 3
    assert meter.summary()["measured_steps"] == 2


def test_feeding_outside_an_epoch_is_ignored():
    meter = ThroughputMeter(DataSchedule(batch_size=1, last_batch_size=1))
    assert meter.look(5, 1.0) == []
    assert meter.epoch_end(5, 1.0) == []
    assert meter.total_steps == 0
    assert meter.summary()["steps_per_sec"] is None


def test_epoch_times_add_up_with_validation_and_epoch_end_work():
    meter = ThroughputMeter(DataSchedule(batch_size=2, last_batch_size=2), every_s=100.0)
    meter.epoch_begin(10.0)
    _drive(meter, [(0, 11.0), (1, 12.0), (2, 13.0)])
    meter.epoch_end(2, 13.0)
    meter.validation(13.5, 15.5)
    times = meter.epoch_close(16.0)
    assert (times.epoch_sec, times.train_sec, times.validation_sec, times.other_sec) == (6.0, 3.0, 2.0, 1.0)
    assert times.epoch_sec == pytest.approx(times.train_sec + times.validation_sec + times.other_sec)
    assert (times.first_step_sec, times.steady_steps_per_sec, times.steady_samples_per_sec) == (1.0, 1.0, 2.0)
    assert meter.epoch_close(17.0) is None  # closed once
    # Validation started on the host before the training phase's last step ended counts from that end.
    meter.epoch_begin(20.0)
    _drive(meter, [(0, 21.0)])
    meter.epoch_end(0, 21.0)
    meter.validation(20.5, 23.0)
    times = meter.epoch_close(24.0)
    assert (times.validation_sec, times.other_sec, times.steady_steps_per_sec) == (2.0, 1.0, None)
    s = meter.summary()
    assert (s["validation_seconds"], s["other_seconds"], s["train_seconds"]) == (4.0, 2.0, 4.0)




def test_an_execution_that_runs_a_new_batch_size_is_left_out_of_the_steady_rate():
    # 1000 samples by 64: 15 full batches and one of 40. In the first epoch the short batch compiles (3 s here);
    # in the second it is compiled already.
    meter = ThroughputMeter(DataSchedule(**ARRAYS_1000_BY_64), every_n_steps=100)
    meter.epoch_begin(0.0)
    assert meter.compile_watch == 14  # the batch end before the short batch's execution
    executions = [(0, 5.0)] + [(b, 5.0 + 0.1 * b) for b in range(1, 15)] + [(15, 5.0 + 1.4 + 3.0)]
    _drive(meter, executions)
    meter.epoch_end(15, 9.4)  # the previous batch end looked at, 14 at 6.4, starts it
    first = meter.epoch_close(10.0)
    assert first.first_step_sec == pytest.approx(5.0 + 3.0)
    assert first.steady_steps_per_sec == pytest.approx(14 / 1.4)
    assert first.steady_samples_per_sec == pytest.approx(14 * 64 / 1.4)
    meter.epoch_begin(10.0)
    assert meter.compile_watch == -1  # every size has run
    executions = [(b, 10.2 + 0.1 * b) for b in range(16)]
    _drive(meter, executions)
    meter.epoch_end(15, 11.7)
    second = meter.epoch_close(12.0)
    assert second.first_step_sec == pytest.approx(0.2)
    assert second.steady_samples_per_sec == pytest.approx((14 * 64 + 40) / 1.5)
    # Over the fit, each epoch weighted by its steady seconds.
    s = meter.summary()
    assert s["steady_samples_per_sec"] == pytest.approx((14 * 64 + 14 * 64 + 40) / (1.4 + 1.5))
    assert s["first_step_sec"] == pytest.approx((8.0, 0.2))
