"""Whether a fit may trace: the profiler's measured cost against the fit's expected length (`TraceGate`), the
per-process record of that cost, and real TensorFlow fits that start no profiler when tracing costs too much."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil

import numpy as np
import pytest

from keras_gpu.hooks import trace_cost
from keras_gpu.hooks.step_time_trace import Profiler, TraceSchedule
from keras_gpu.hooks.trace_cost import MAX_SHARE, TraceGate, record_cost


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def empty_record(monkeypatch):
    """Each test starts with no measured cost in the process (other tests trace)."""
    monkeypatch.setattr(trace_cost, "_costs", {})


def _gate(backend, clock, *, prior=0.3, forced=False):
    # A backend name of its own per test: the INFO line is once per process and (backend, kind).
    trace_cost.PRIOR_COST_S[(backend, "gpu")] = (prior, "a test's prior")
    return TraceGate(backend, "gpu", forced=forced, clock=clock)


@pytest.fixture
def priors(monkeypatch):
    monkeypatch.setattr(trace_cost, "PRIOR_COST_S", dict(trace_cost.PRIOR_COST_S))


def _no_trace_lines(caplog):
    return [r for r in caplog.records if "no trace" in r.getMessage() and r.levelno == logging.INFO]


def test_a_short_fit_does_not_trace_and_says_why_once(priors, caplog):
    caplog.set_level(logging.DEBUG, logger="keras_gpu")
    clock = Clock()
    gate = _gate("short-fit", clock)
    clock.now += 2.0  # the first step compiles
    gate.note_first_step(1)
    clock.now += 49 * 0.008  # 49 steps of 8 ms: 2.39 s so far, 1,200 steps left, a ~12 s fit
    assert gate.allow(50, 1250, traces=0, last_chance=True) is False
    assert gate.reason == (
        "its start and stop cost ~0.30 s (a test's prior), more than 0.5% of this ~12 s fit"
    )
    lines = _no_trace_lines(caplog)
    assert len(lines) == 1
    assert lines[0].getMessage() == (
        "keras-gpu: StepTimeLogger: no trace: its start and stop cost ~0.30 s (a test's prior), more than 0.5% of "
        "this ~12 s fit; pass profile_every_s=... to trace anyway."
    )
    # The next short fit of the process decides the same, at DEBUG only.
    again = _gate("short-fit", clock)
    clock.now += 1.0
    assert again.allow(50, 100, traces=0, last_chance=True) is False
    assert len(_no_trace_lines(caplog)) == 1
    assert [r for r in caplog.records if r.levelno == logging.DEBUG and "no trace" in r.getMessage()]


def test_a_long_fit_traces_at_its_pace_after_the_first_step(priors):
    clock = Clock()
    gate = _gate("long-fit", clock)
    clock.now += 5.0  # the first step: compilation
    gate.note_first_step(1)
    clock.now += 0.49  # 49 more steps of 10 ms
    # Expected: 5.49 s so far + 9,950 steps x 10 ms = 105 s; 0.3 s is 0.29% of it.
    assert gate.allow(50, 10_000, traces=0, last_chance=True) is True
    # A second trace in the same fit (0.6 s) is 0.57%: too many.
    assert gate.allow(50, 10_000, traces=1, last_chance=True) is False
    assert gate.reason.startswith("2 traces at ~0.30 s each")


def test_compilation_is_not_taken_for_the_step_pace(priors):
    clock = Clock()
    gate = _gate("compile", clock)
    clock.now += 10.0  # the first step compiles for 10 s
    gate.note_first_step(1)
    clock.now += 0.049  # 49 steps of 1 ms
    # 10.049 s + 950 x 1 ms = 11 s: 0.3 s is 2.7% (10.05 s / 50 steps x 1,000 would be 201 s, 0.15%).
    seconds, lower_bound = gate.expected_sec(50, 1000)
    assert seconds == pytest.approx(10.999) and not lower_bound
    assert gate.allow(50, 1000, traces=0, last_chance=True) is False


def test_an_explicit_profile_every_s_traces_whatever_it_costs(priors):
    clock = Clock()
    gate = _gate("forced", clock, prior=1e6, forced=True)
    clock.now += 0.01
    assert gate.allow(5, 10, traces=3, last_chance=True) is True
    assert gate.reason is None


def test_a_measured_cost_replaces_the_prior(priors):
    clock = Clock()
    gate = _gate("measured", clock, prior=0.3)
    clock.now += 20.0
    gate.note_first_step(1)
    clock.now += 40.0  # 60 s so far, 1,000 steps of 2,000 done: a ~100 s fit
    assert gate.cost() == (0.3, "a test's prior")
    assert gate.allow(1000, 2000, traces=0, last_chance=True) is True  # 0.3% with the prior
    record_cost("measured", "gpu", 0.2, 0.6)
    record_cost("measured", "gpu", 0.0, 0.4)  # mean: 0.1 + 0.5
    assert gate.cost() == (pytest.approx(0.6), "measured over 2 trace(s) in this process")
    assert gate.allow(1000, 2000, traces=0, last_chance=True) is False  # 0.6% measured
    assert "measured over 2 trace(s)" in gate.reason
    # Another device kind of the same backend keeps its prior.
    trace_cost.PRIOR_COST_S[("measured", "cpu")] = (0.01, "a test's prior")
    assert TraceGate("measured", "cpu", forced=False, clock=clock).cost() == (0.01, "a test's prior")


def test_an_unknown_length_waits_where_an_epoch_follows(priors):
    clock = Clock()
    gate = _gate("unknown", clock)
    clock.now += 30.0  # 30 s so far: 0.3 s is 1% of that lower bound
    assert gate.allow(50, None, traces=0, last_chance=False) is None
    assert gate.reason is None
    assert gate.allow(50, None, traces=0, last_chance=True) is False
    assert "of this fit of at least 30 s" in gate.reason
    long = _gate("unknown", clock)
    clock.now += 60.0  # 60 s so far: within 0.5% at 0.3 s
    assert long.allow(50, None, traces=0, last_chance=False) is True


def test_no_cost_known_traces(priors):
    gate = TraceGate("no-prior", "tpu", forced=False, clock=Clock())
    assert gate.cost() is None and gate.allow(1, 2, traces=0, last_chance=True) is True


def test_max_share_is_half_a_percent():
    assert MAX_SHARE == 0.005


class FakeProfiler:
    """A profiler that records its calls."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def profiler(self) -> Profiler:
        return Profiler(
            lambda directory: self.calls.append("start"),
            lambda: self.calls.append("stop"),
            lambda n: contextlib.nullcontext(),
        )


def _schedule(profiler, gate, epochs, epoch_steps):
    return TraceSchedule(
        profiler,
        [("0_CPU_0", "/device:CPU:0")],
        warmup_steps=5,
        profile_steps=3,
        epochs=epochs,
        epoch_steps=epoch_steps,
        gate=gate,
    )


def _run_epoch(schedule, epoch, steps, clock, step_sec):
    jobs = []
    schedule.epoch_begin(epoch)
    for batch in range(steps):
        if schedule.pace_pending and (batch or schedule.base):  # as StepTimeLogger's batch-begin hook
            schedule.pace_pending = False
            schedule.gate.note_first_step(schedule.base + batch)
        clock.now += step_sec
        schedule.last_batch = batch  # as StepTimeLogger's batch-end hook
        if batch >= schedule.next_batch:
            jobs.append(schedule.batch_end(batch))
    if schedule.tracing:
        jobs.append(schedule.stop())
    schedule.epoch_end()
    return [j for j in jobs if j is not None]


def test_the_schedule_never_starts_the_profiler_in_a_short_fit(priors, tmp_path):
    clock = Clock()
    fake = FakeProfiler()
    gate = _gate("schedule-short", clock, prior=0.3)
    schedule = _schedule(fake.profiler(), gate, epochs=2, epoch_steps=10)
    for epoch in range(2):
        assert _run_epoch(schedule, epoch, 10, clock, 0.01) == []
    assert fake.calls == [] and schedule.traces == 0 and gate.reason is not None


def test_the_schedule_traces_a_long_fit_and_records_the_measured_cost(priors, tmp_path):
    clock = Clock()
    fake = FakeProfiler()
    gate = _gate("schedule-long", clock, prior=0.3)
    schedule = _schedule(fake.profiler(), gate, epochs=2, epoch_steps=10)
    jobs = []
    for epoch in range(2):
        jobs += _run_epoch(schedule, epoch, 10, clock, 100.0)  # 100 s steps: a ~2,000 s fit
    assert fake.calls[:1] == ["start"] and schedule.traces == 1
    for job in jobs:
        assert job.stop_profiler()  # waits for the stop thread
    assert fake.calls == ["start", "stop"]
    cost = trace_cost.trace_costs()[("schedule-long", "gpu")]
    assert cost.traces == 1 and cost.start_sec >= 0 and cost.stop_sec >= 0
    assert gate.cost()[1] == "measured over 1 trace(s) in this process"
    for job in jobs:
        shutil.rmtree(job.staging, ignore_errors=True)


def test_an_unknown_epoch_length_is_decided_at_the_next_epoch(priors):
    clock = Clock()
    fake = FakeProfiler()
    gate = _gate("schedule-unknown", clock, prior=0.3)
    schedule = _schedule(fake.profiler(), gate, epochs=3, epoch_steps=None)
    assert _run_epoch(schedule, 0, 10, clock, 0.01) == []  # too short a lower bound: wait
    assert gate.reason is None and schedule.epoch_steps == 10
    _run_epoch(schedule, 1, 10, clock, 0.01)  # 30 steps known now: ~0.3 s, no trace
    assert fake.calls == [] and "~0.3 s fit" in gate.reason


# -- real TensorFlow fits ------------------------------------------------------------------------

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from keras_gpu.hooks.step_time_logger import StepTimeLogger


@pytest.fixture
def start_spy(monkeypatch):
    calls = []
    real = tf.profiler.experimental.start

    def spy(logdir, *args, **kwargs):
        calls.append(logdir)
        return real(logdir, *args, **kwargs)

    monkeypatch.setattr(tf.profiler.experimental, "start", spy)
    return calls


def _fit(callbacks, epochs=2):
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
    model.compile("sgd", "mse")
    x, y = np.ones((16 * 30, 8), np.float32), np.ones((16 * 30, 4), np.float32)
    return model.fit(x, y, batch_size=16, epochs=epochs, verbose=0, callbacks=callbacks)


def test_a_short_tensorflow_fit_starts_no_profiler_by_default(priors, start_spy, tmp_path, caplog):
    # A cost no 60-step fit covers, whatever the machine's load: the decision, not the machine, is tested.
    trace_cost.PRIOR_COST_S[("tensorflow", "cpu")] = (1e4, "a test's prior")
    caplog.set_level(logging.INFO, logger="keras_gpu")
    cb = StepTimeLogger(tmp_path / "default", warmup_steps=5)
    history = _fit([cb])
    assert len(history.history["loss"]) == 2
    assert start_spy == [] and cb.traces == [] and cb.profiler_cost is None
    assert cb.no_trace_reason is not None and "a test's prior" in cb.no_trace_reason
    assert not os.path.exists(tmp_path / "default" / "train" / "plugins")
    assert not [r for r in caplog.records if "traced no step" in r.getMessage()]
    # The same fit with an explicit interval traces, and its start and stop are measured.
    forced = StepTimeLogger(tmp_path / "forced", warmup_steps=5, profile_steps=3, profile_every_s=300)
    _fit([forced])
    assert len(start_spy) == 1 and len(forced.traces) == 1 and forced.no_trace_reason is None
    cost = forced.profiler_cost
    assert cost is not None and cost.traces == 1 and (cost.backend, cost.device_kind) == ("tensorflow", "cpu")
    assert cost.start_sec > 0 and cost.stop_sec > 0


def test_the_profiler_cost_benchmark_measures_each_part(priors, capsys):
    from benchmarks.studies import profiler_cost

    result = profiler_cost.run(fits=1, steps=40)
    assert result["backend"] == "tensorflow" and result["steps_per_fit"] == 40
    assert len(result["start_sec"]) == len(result["stop_sec"]) == len(result["parse_sec"]) == 1
    assert result["start_sec"][0] > 0 and result["stop_sec"][0] > 0 and result["parse_sec"][0] > 0
    untraced = result["untraced"]
    assert len(untraced["on_train_begin_sec"]) == len(untraced["fit_sec_with"]) == len(untraced["fit_sec_without"]) == 1
    with pytest.raises(SystemExit):
        profiler_cost.main(["--fits", "0"])
    assert "--fits must be at least 1. Received: --fits=0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        profiler_cost.main(["--steps", "29"])
    assert "--steps must be at least 30. Received: --steps=29" in capsys.readouterr().err


# -- what a trace costs the fit: its stop runs on a thread of its own -------------------------------------------


def _stop_loss(backend, clock, *, step_sec, slow_sec, slow_steps, stop_sec=0.43):
    """A stop that ran `stop_sec` beside `slow_steps` steps of `slow_sec`, then steps of `step_sec`: its cost."""
    loss = trace_cost.StopLoss(backend, "cpu", 0.001, t0=clock.now, step0=100, clock=clock)
    steps = 100
    for _ in range(slow_steps):
        clock.now += slow_sec
        steps += 1
        assert loss.step(steps)
    loss.stopped(stop_sec)  # the stop's thread ended meanwhile
    wanted = True
    while wanted:
        clock.now += step_sec
        steps += 1
        wanted = loss.step(steps)
    return trace_cost.trace_costs()[(backend, "cpu")]


def test_a_stop_beside_the_training_costs_the_fit_almost_nothing_and_a_long_fit_traces(priors):
    # A free core: the 0.43 s stop ran while 43 steps of 10 ms went on as before.
    clock = Clock()
    cost = _stop_loss("stop-free", clock, step_sec=0.01, slow_sec=0.01, slow_steps=43)
    assert cost.stop_sec == pytest.approx(0.43) and cost.lost_sec == pytest.approx(0.0, abs=1e-9)
    assert cost.per_trace_sec == pytest.approx(0.001)
    gate = TraceGate("stop-free", "cpu", forced=False, clock=clock)
    clock.now += 1.0
    gate.note_first_step(1)
    clock.now += 0.99  # 99 steps of 10 ms: a ~52 s fit of 5,100 steps
    assert gate.allow(100, 5100, traces=0, last_chance=True) is True


def test_a_starved_machine_pays_for_the_stop_in_slower_steps_and_does_not_trace(priors):
    # No free core: the 10 ms steps took 20 ms while the stop ran (43 of them: 0.43 s lost).
    clock = Clock()
    cost = _stop_loss("stop-starved", clock, step_sec=0.01, slow_sec=0.02, slow_steps=43)
    assert cost.lost_sec == pytest.approx(0.43)
    gate = TraceGate("stop-starved", "cpu", forced=False, clock=clock)
    clock.now += 1.0
    gate.note_first_step(1)
    clock.now += 0.99
    assert gate.allow(100, 5100, traces=0, last_chance=True) is False
    assert "measured over 1 trace(s)" in gate.reason


@pytest.mark.parametrize("stopped_first", [True, False], ids=["stopped-then-epoch-end", "epoch-end-then-stopped"])
def test_a_stop_outlasting_the_epochs_steps_costs_the_whole_stop_recorded_once(priors, stopped_first):
    clock = Clock()
    loss = trace_cost.StopLoss("stop-abandoned", "cpu", 0.002, t0=clock.now, step0=10, clock=clock)
    clock.now += 0.01
    assert loss.step(11)
    if stopped_first:
        loss.stopped(0.3)
        loss.abandon()  # the epoch ended before the steady pace was timed
    else:
        loss.abandon()  # the epoch ended with the stop still running
        assert "stop-abandoned" not in {b for b, _ in trace_cost.trace_costs()}
        loss.stopped(0.3)
    loss.abandon()
    assert loss.step(12) is False
    cost = trace_cost.trace_costs()[("stop-abandoned", "cpu")]
    assert (cost.traces, cost.lost_sec) == (1, None)
    assert cost.per_trace_sec == pytest.approx(0.302)  # not measured: the whole stop, an upper bound
