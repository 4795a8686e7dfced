"""`fit` never waits for a trace to be parsed, and the end-of-fit line counts the time `fit` really took.

Runs on TensorFlow and on JAX (`KERAS_BACKEND=jax`): both profilers write the traces read here.

The parser is held busy by a gate the test holds, so every assertion is an
order of events the test controls, never a wall-clock bound.
"""

from __future__ import annotations

import logging
import textwrap
import threading
import time

import numpy as np
import pytest

from tests._util import run_python

keras = pytest.importorskip("keras")

pytestmark = pytest.mark.skipif(
    keras.backend.backend() not in ("tensorflow", "jax"), reason="only TensorFlow's and JAX's profilers write traces"
)

from keras_gpu.hooks import step_time_logger
from keras_gpu.hooks.step_time_logger import StepTimeLogger
from keras_gpu.hooks.throughput_logger import ThroughputLogger
from keras_gpu.output.reader import read_scalars


def _model():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    return model


def _arrays(n):
    rng = np.random.default_rng(0)
    return rng.random((n, 8), dtype=np.float32), rng.random((n, 1), dtype=np.float32)


class _Gate:
    """Holds the parser inside `read_trace` until the test opens it."""

    def __init__(self, monkeypatch):
        self.open = threading.Event()
        self.entered = threading.Event()
        self.parsed = 0
        real = step_time_logger.read_trace

        def gated(*args, **kwargs):
            self.entered.set()
            self.open.wait()
            real(*args, **kwargs)
            self.parsed += 1

        monkeypatch.setattr(step_time_logger, "read_trace", gated)


class _Seen(keras.callbacks.Callback):
    """After the step-time logger in the list: what the parser had done when `fit` ended."""

    def on_train_end(self, logs=None):
        self.parser_entered = self.gate.entered.is_set()
        self.parsed_at_end = self.gate.parsed


def test_fit_returns_while_its_trace_is_parsed_and_the_points_follow(tmp_path, monkeypatch, caplog):
    gate = _Gate(monkeypatch)
    seen = _Seen()
    seen.gate = gate
    caplog.set_level(logging.INFO, logger="keras_gpu")
    x, y = _arrays(16 * 12)
    cb = StepTimeLogger(tmp_path, profile_steps=4, warmup_steps=2, profile_every_s=300)
    model = _model()
    model.fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[cb, seen])
    # fit returned with the parser still held inside its first trace: nothing of it is written yet.
    assert seen.parser_entered and seen.parsed_at_end == 0 and gate.parsed == 0
    assert not cb.wait(timeout=0)
    assert "step_time/step_sec" not in read_scalars(str(tmp_path / "train"))
    assert not [r for r in caplog.records if "StepTimeLogger:" in r.getMessage()]

    # A second fit with the same callback while the first fit's traces wait: they must not mix.
    model.fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[cb, seen])
    assert gate.parsed == 0
    gate.open.set()
    assert cb.wait()
    # One trace per fit (after 2 steps of warm-up; the next would come 300 s later), of 4 steps; the
    # callback's breakdowns are the second fit's only.
    assert [t.steps for t in cb.traces] == [4] and gate.parsed == 2
    steps = [s for s, _ in read_scalars(str(tmp_path / "train"))["step_time/step_sec"]]
    # 24 steps per fit: the first fit's trace ends at step 6, the second's at 24 + 6.
    assert steps == [6, 30]
    lines = [r.getMessage() for r in caplog.records if "StepTimeLogger:" in r.getMessage()]
    assert len(lines) == 2 and all("over 4 traced steps" in line for line in lines)


def test_points_of_a_trace_parsed_after_fit_survive_interpreter_exit(tmp_path):
    # The script returns from fit with the parser held, opens the gate from another thread, and ends at once;
    # the interpreter must finish the parse and write its points before it exits.
    code = f"""
        import threading
        import numpy as np
        import keras
        from keras_gpu.hooks import step_time_logger
        from keras_gpu.hooks.step_time_logger import StepTimeLogger

        gate, real = threading.Event(), step_time_logger.read_trace
        def gated(*args, **kwargs):
            gate.wait()
            real(*args, **kwargs)
        step_time_logger.read_trace = gated
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
        model.compile("sgd", "mse")
        x, y = np.zeros((16 * 12, 8), "float32"), np.zeros((16 * 12, 1), "float32")
        cb = StepTimeLogger({str(tmp_path)!r}, profile_steps=4, warmup_steps=2, profile_every_s=300)
        model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[cb])
        assert not cb.wait(timeout=0)
        threading.Thread(target=gate.set).start()
        print("RETURNED")
    """
    proc = run_python(textwrap.dedent(code), timeout=600, env={"KERAS_BACKEND": keras.backend.backend()})
    assert "RETURNED" in proc.stdout
    steps = [s for s, _ in read_scalars(str(tmp_path / "train"))["step_time/step_sec"]]
    assert steps == [6]
    assert "StepTimeLogger: " in proc.stderr  # the end-of-fit line, from the parser's thread


class _Stamp(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        self.begin = time.perf_counter()

    def on_train_end(self, logs=None):
        self.end = time.perf_counter()


class _SlowEnd(StepTimeLogger):
    """A keras-gpu callback whose end-of-fit work takes a while (after ThroughputLogger's own end)."""

    def on_train_end(self, logs=None):
        time.sleep(0.3)
        self.slept_until = time.perf_counter()
        super().on_train_end(logs)


def test_end_of_fit_line_counts_the_end_of_every_keras_gpu_callback(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="keras_gpu")
    first, after_rates, last = _Stamp(), _Stamp(), _Stamp()
    rates = ThroughputLogger(tmp_path, every_n_steps=4)
    slow = _SlowEnd(tmp_path, profile_every_s=0)
    x, y = _arrays(16 * 8)
    _model().fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[first, rates, after_rates, slow, last])
    seconds = rates.summary["fit_seconds"]
    # From ThroughputLogger's on_train_begin (the first keras-gpu callback) to the slow callback's end, at least.
    assert seconds >= slow.slept_until - after_rates.begin
    assert seconds <= last.end - first.begin
    (line,) = [r.getMessage() for r in caplog.records if "ThroughputLogger: wall-clock" in r.getMessage()]
    assert f"in {seconds:.2f} s of fit" in line


class _HeldStops:
    """The backend's profiler, with each stop held until the training thread has run `hold` more batches.

    Records the thread of every stop, and whether a start came while a stop was still under way.
    """

    def __init__(self, monkeypatch, hold):
        from keras_gpu.hooks import step_time_trace

        self.hold, self.batches = hold, 0
        self.released = threading.Event()
        self.stop_threads, self.starts_while_stopping, self.stops_held = [], 0, 0
        self.stopping = self.fit_over = False
        real = step_time_trace.backend_profiler()

        def start(d):
            self.starts_while_stopping += self.stopping
            real.start(d)

        def stop():
            self.released.clear()
            self.release_at = self.batches + self.hold
            self.stopping = True
            self.stop_threads.append(threading.current_thread())
            # Never released if the stop ran on the training thread (it would wait for its own batches).
            self.stops_held += True if self.fit_over else self.released.wait(timeout=120)
            real.stop()
            self.stopping = False

        wrapped = step_time_trace.Profiler(start, stop, real.mark)
        monkeypatch.setattr(step_time_logger, "backend_profiler", lambda: wrapped)

    def batch_end(self):
        self.batches += 1
        if self.stopping and self.batches >= self.release_at:
            self.released.set()


class _Counter(keras.callbacks.Callback):
    def __init__(self, held):
        super().__init__()
        self.held = held

    def on_train_batch_end(self, batch, logs=None):
        self.held.batch_end()


def test_the_profiler_stops_off_the_training_thread_and_its_trace_holds_only_the_traced_steps(tmp_path, monkeypatch):
    # Each stop waits for 5 more batches of training: it can only end if training goes on meanwhile.
    held = _HeldStops(monkeypatch, hold=5)
    cb = StepTimeLogger(tmp_path, profile_steps=4, warmup_steps=2, profile_every_s=1e-3)
    x, y = _arrays(16 * 40)
    _model().fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[cb, _Counter(held)])
    held.fit_over = True  # a stop still held at the fit's end is let go (a later one is not held)
    held.released.set()
    assert cb.wait()
    main = threading.main_thread()
    assert held.stop_threads and all(t is not main for t in held.stop_threads)
    assert held.stops_held == len(held.stop_threads)  # every stop was released by batches run after it began
    # No trace started while the one before it was stopping; several traces still ran in 40 steps.
    assert held.starts_while_stopping == 0
    assert len(cb.traces) >= 3
    # Only the marked steps count: the steps that ran while the profiler was still on are not in the trace.
    # (The fit's last epoch may cut its last trace short.)
    steps = [t.steps for t in cb.traces]
    assert steps[:-1] == [4] * (len(steps) - 1) and 1 <= steps[-1] <= 4


def test_a_stop_that_never_ends_turns_tracing_off_with_one_warning(tmp_path, monkeypatch, caplog):
    from keras_gpu.hooks import step_time_trace

    # The first trace's stop never ends (as a profiler stop once hung in a multi-worker process); the next
    # trace is put off, never waited for, and after STOP_WAIT_S tracing is off for the fit and training goes on.
    never = threading.Event()
    real = step_time_trace.backend_profiler()
    stuck = step_time_trace.Profiler(real.start, lambda: (never.wait(), real.stop()), real.mark)
    monkeypatch.setattr(step_time_logger, "backend_profiler", lambda: stuck)
    monkeypatch.setattr(step_time_trace, "STOP_WAIT_S", 0.0)
    caplog.set_level(logging.INFO, logger="keras_gpu")
    cb = StepTimeLogger(tmp_path, profile_steps=2, warmup_steps=2, profile_every_s=1e-3)
    x, y = _arrays(16 * 20)
    history = _model().fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[cb])
    assert len(history.history["loss"]) == 2
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "last stop has not ended after 0 s" in warnings[0]
    assert not cb.wait(timeout=0)  # the stuck stop still holds the fit's output
    never.set()  # the stop ends; its trace is read, and no other trace was started
    assert cb.wait()
    assert [t.steps for t in cb.traces] == [2]


def test_a_trace_due_while_the_last_one_stops_is_put_off_never_waited_for(tmp_path, monkeypatch):
    from keras_gpu.hooks import step_time_trace

    # The first trace's stop does not end during the fit, and a trace is due every batch end after it: the
    # training thread must not wait for that stop (it would wait here for as long as STOP_WAIT_S allows).
    release = threading.Event()
    real = step_time_trace.backend_profiler()
    starts = []
    slow = step_time_trace.Profiler(
        lambda d: (starts.append(d), real.start(d)), lambda: (release.wait(), real.stop()), real.mark
    )
    monkeypatch.setattr(step_time_logger, "backend_profiler", lambda: slow)
    monkeypatch.setattr(step_time_trace, "STOP_WAIT_S", 1e6)
    cb = StepTimeLogger(tmp_path, profile_steps=2, warmup_steps=2, profile_every_s=1e-3)
    x, y = _arrays(16 * 20)
    history = _model().fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[cb])
    assert len(history.history["loss"]) == 2
    assert step_time_trace._STOPS.busy()  # the fit ended with the first stop still under way
    assert len(starts) == 1  # no trace started while it stopped
    release.set()
    assert cb.wait()
    assert [t.steps for t in cb.traces] == [2]
