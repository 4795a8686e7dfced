"""`StepTimeLogger`'s traces on real TensorFlow fits: windows that hold steps only, full traces, one step axis,
step markers that xprof reads."""

from __future__ import annotations

import json
import os
import textwrap
import time

import numpy as np
import pytest

from tests._callbacks import StopsSettled
from tests._util import run_python

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from keras_gpu.hooks.step_time_logger import StepTimeLogger
from keras_gpu.hooks.throughput_logger import ThroughputLogger
from keras_gpu.meters import step_time as steptime
from keras_gpu.meters import xspace
from keras_gpu.meters.step_hints import input_hint
from keras_gpu.output.reader import read_scalars, read_texts
from keras_gpu.output.step_time_text import read_input_stage_markdown


def _model(width=8):
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(width), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    return model


def _arrays(n):
    rng = np.random.default_rng(0)
    return rng.random((n, 8), dtype=np.float32), rng.random((n, 1), dtype=np.float32)


def _unknown_length(batches, batch=16):
    """A tf.data input of `batches` batches whose length Keras cannot know (a `filter`)."""
    x, y = _arrays(batches * batch)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).filter(lambda a, b: True).batch(batch)
    assert int(ds.cardinality()) == tf.data.UNKNOWN_CARDINALITY
    return ds


def _kept(run_dir):
    return xspace.find_traces(os.path.join(run_dir, "plugins", "profile"))


@pytest.mark.slow
def test_mirrored_traces_into_the_epoch_end_match_a_stopwatch(tmp_path):
    # Two replicas on 2 logical CPUs, an input whose length the first epoch
    # does not know (its trace runs until the epoch ends), and a callback that
    # sleeps 0.3 s at every epoch end before StepTimeLogger's hook: that time
    # is epoch-end work, never step time. Each breakdown is compared with two
    # stopwatches over the same steps: `before` ahead of the logger's batch
    # hook, `after` behind it.
    code = f"""
    import json, time, numpy as np, keras_gpu
    keras_gpu.configure_devices(cpu_devices=2)
    import tensorflow as tf, keras
    from keras_gpu.hooks.step_time_logger import StepTimeLogger

    class Watch(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.ends = []

        def on_train_batch_end(self, batch, logs=None):
            self.ends.append(time.perf_counter())

    class SlowEpochEnd(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            time.sleep(0.3)

    strategy = keras_gpu.make_strategy("mirrored")
    with strategy.scope():
        model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(256, activation="relu"), keras.layers.Dense(10)])
        model.compile("sgd", "mse")
    rng = np.random.default_rng(0)
    x, y = rng.random((64 * 30, 64), dtype=np.float32), rng.random((64 * 30, 10), dtype=np.float32)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).filter(lambda a, b: True).batch(64)
    before, after = Watch(), Watch()
    cb = StepTimeLogger({str(tmp_path)!r}, profile_steps=25, warmup_steps=10, profile_every_s=0.001)
    model.fit(ds, epochs=3, verbose=0, callbacks=[before, SlowEpochEnd(), cb, after])
    print("RESULT", json.dumps(dict(before=before.ends, after=after.ends, traces=[t.as_dict() for t in cb.traces])))
    """
    proc = run_python(textwrap.dedent(code), timeout=300)
    result = json.loads(proc.stdout.split("RESULT", 1)[1])
    before, after, traces = result["before"], result["after"], result["traces"]
    assert len(before) == 90
    scalars = read_scalars(str(tmp_path / "train"))
    ends = [int(s) for s, _ in scalars["step_time/step_sec"]]
    counts = [int(v) for _, v in scalars["step_time/traced_steps"]]
    # The first trace starts after 10 steps and ends at the first epoch's last batch end; the second fills the
    # second epoch from its first batch end (a full 25 steps fit there).
    assert (ends[0], counts[0]) == (30, 20)
    assert (ends[1] - counts[1], counts[1]) == (31, 25)
    assert all(t["step_source"] == "host markers" and t["steps"] == n for t, n in zip(traces, counts))
    measured = stopwatch = 0.0
    for end, steps, trace in zip(ends, counts, traces):
        watch = before[end - 1] - after[end - 1 - steps]
        measured += trace["step_sec"] * steps
        stopwatch += watch
        if steps >= 10:  # one trace: enough steps that a pause between two hooks stays small
            assert trace["step_sec"] == pytest.approx(watch / steps, rel=0.15), (end, steps)
    assert measured == pytest.approx(stopwatch, rel=0.15)


def test_unknown_length_steps_line_up_with_throughput(tmp_path):
    # Keras advances the optimizer's iterations by 31 per 30-batch epoch of
    # unknown length (the batch that finds the end counts); both loggers count
    # the steps fit ran instead, so their points share one axis.
    model = _model()
    steps = StepTimeLogger(tmp_path, profile_steps=40, warmup_steps=5, profile_every_s=0.001)
    rates = ThroughputLogger(tmp_path, every_n_steps=10, batch_size=16)
    model.fit(_unknown_length(30), epochs=3, verbose=0, callbacks=[rates, steps, StopsSettled()])
    assert steps.wait()  # fit does not wait for its last trace to be parsed and written
    assert int(model.optimizer.iterations.numpy()) == 93
    scalars = read_scalars(str(tmp_path / "train"))
    epoch_ends = [s for s, _ in scalars["time/train_sec"]]
    assert epoch_ends == [30, 60, 90]
    # Each trace ends at an epoch's last batch end: the first runs into the end it could not know, the others are
    # bounded by the length the first epoch showed.
    traced = [s for s, _ in scalars["step_time/step_sec"]]
    assert traced == [30, 60, 90]
    assert set(traced) <= {s for s, _ in scalars["throughput/steps_per_sec"]}
    assert [t.steps for t in steps.traces] == [25, 29, 29]


def test_traces_hold_profile_steps_and_never_pass_the_epoch(tmp_path):
    # 30 steps per epoch, 20 per trace: a trace that would start too late in an
    # epoch waits for the next epoch's first batch end, so every trace is whole.
    x, y = _arrays(16 * 30)
    cb = StepTimeLogger(tmp_path / "full", profile_steps=20, warmup_steps=15, profile_every_s=0.001)
    _model().fit(x, y, batch_size=16, epochs=4, verbose=0, callbacks=[cb, StopsSettled()])
    assert cb.wait()
    ends = [s for s, _ in read_scalars(str(tmp_path / "full" / "train"))["step_time/step_sec"]]
    assert ends[:3] == [51, 81, 111] and [t.steps for t in cb.traces[:3]] == [20, 20, 20]
    # Only the last epoch, which no epoch follows, may hold a shorter one; it ends at the epoch's last batch end.
    assert ends[3:] in ([], [120])
    # An epoch shorter than a trace: the steps after its first batch end.
    x, y = _arrays(16 * 8)
    cb = StepTimeLogger(tmp_path / "short", profile_steps=20, profile_every_s=0.001)
    _model().fit(x, y, batch_size=16, epochs=3, verbose=0, callbacks=[cb])
    assert cb.wait()
    ends = [s for s, _ in read_scalars(str(tmp_path / "short" / "train"))["step_time/step_sec"]]
    assert ends == [16, 24] and [t.steps for t in cb.traces] == [7, 7]


def test_one_mark_per_execution_with_steps_per_execution(tmp_path):
    x, y = _arrays(16 * 32)
    model = _model()
    model.compile("sgd", "mse", steps_per_execution=4)
    cb = StepTimeLogger(tmp_path, profile_steps=10, profile_every_s=300)  # traced, however short
    model.fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[cb])
    (trace,) = cb.traces
    assert (trace.steps, trace.step_source, trace.notes) == (12, "host markers", ())  # 3 executions of 4 steps
    (path,) = _kept(str(tmp_path / "train"))
    marks = steptime.trace_steps(xspace.load(path))
    assert marks.steps == 3 and marks.source == "host markers"


def test_a_short_last_execution_counts_the_steps_it_ran(tmp_path):
    # 15 steps per epoch in calls of 4: Keras numbers the short last call's batch end 15, as if it ran 4 steps.
    # Traces still end where a call of the fit ends, counted in the steps that ran: 4, 8, 12, 15 per epoch.
    x, y = _arrays(16 * 15)
    model = _model()
    model.compile("sgd", "mse", steps_per_execution=4)
    cb = StepTimeLogger(tmp_path, profile_steps=8, warmup_steps=4, profile_every_s=1e-3)
    model.fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[cb])
    assert cb.wait()
    assert int(model.optimizer.iterations.numpy()) == 30
    traced = [s for s, _ in read_scalars(str(tmp_path / "train"))["step_time/step_sec"]]
    assert len(traced) >= 2 and set(traced) <= {4, 8, 12, 15, 19, 23, 27, 30}, traced


def _step_rows(tool_json):
    """The rows of the per-step table in an xprof tool's JSON (overview page, input-pipeline analyzer)."""
    tables = json.loads(tool_json)
    (table,) = [t for t in tables if any(c.get("id") == "stepnum" for c in t.get("cols", []))]
    return table["rows"]


def test_xprof_finds_the_marked_steps_and_the_slow_stage_is_logged(tmp_path):
    raw_to_tool_data = pytest.importorskip("xprof.convert.raw_to_tool_data")
    x, y = _arrays(16 * 30)

    def sleepy(a):
        time.sleep(0.003)
        return a

    slow = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
    slow = slow.map(lambda a, b: (tf.ensure_shape(tf.numpy_function(sleepy, [a], tf.float32), (None, 8)), b))
    cb = StepTimeLogger(tmp_path, profile_steps=8, profile_every_s=300)
    _model().fit(slow, epochs=2, verbose=0, callbacks=[cb])
    (trace,) = cb.traces
    (path,) = _kept(str(tmp_path / "train"))
    # The trace marks exactly its 8 steps, numbered by the global step each starts at (the second epoch's).
    space = xspace.load(path)
    assert steptime.trace_steps(space).steps == trace.steps == 8
    numbers = sorted(
        e.stats["step_num"]
        for e in xspace.events(xspace.planes(space)["/host:CPU"], stats=True)
        if e.name == steptime.STEP_MARKER
    )
    assert numbers == list(range(31, 39))
    for tool in ("overview_page", "input_pipeline_analyzer"):
        data, _ = raw_to_tool_data.xspace_to_tool_data([path], tool, {})
        assert len(_step_rows(data)) > 0, tool
    # The slow stage, as a text summary at the trace's step.
    ((step, text),) = read_texts(str(tmp_path / "train"))["step_time/input_stage"]
    stage = read_input_stage_markdown(text)
    assert step == 39 and (stage.name, stage.path) == (trace.input_stage.name, trace.input_stage.path)
    assert stage.sec_per_step == pytest.approx(trace.input_stage.sec_per_step, rel=1e-5)
    assert "Map" in trace.input_stage.name
    # The hint follows the measured share, whatever share the machine's load gives: it is there exactly when the
    # share reaches the threshold, and then it is the hint for this breakdown.
    bound = trace.share("input") >= steptime.BOUND_SHARE
    assert ("input-bound" in text) == bound, (trace.share("input"), text)
    if bound:
        assert text.endswith(f"\n\n{input_hint(trace)}.")
