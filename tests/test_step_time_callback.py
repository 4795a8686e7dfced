"""`StepTimeLogger` on real `fit` runs: measured input, compute and per-replica shares, its schedule, its failures."""

from __future__ import annotations

import json
import logging
import os
import textwrap
import time

import numpy as np
import pytest

from tests._util import run_python

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from keras_gpu.hooks import trace_read
from keras_gpu.hooks.step_time_logger import StepTimeLogger
from keras_gpu.output.reader import read_scalars

PARTS = ("input_sec", "compute_sec", "communication_sec", "transfer_sec", "other_sec")


def _arrays(n, features=32):
    rng = np.random.default_rng(0)
    return rng.random((n, features), dtype=np.float32), rng.random((n, 10), dtype=np.float32)


def _traces(run_dir):
    profile = os.path.join(run_dir, "plugins", "profile")
    return sorted(os.listdir(profile)) if os.path.isdir(profile) else []


def test_input_bound_fit_waits_for_input(tmp_path, caplog):
    # ~1 ms of compute per step, 40 ms of host work per batch in the input pipeline: on a loaded 2-core machine
    # the rest of the step stretches with the load (25 ms at load 12), the sleep does not.
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)])
    model.compile("sgd", "mse")
    x, y = _arrays(64 * 16)

    def slow(a):
        time.sleep(0.04)
        return a

    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)
    ds = ds.map(lambda a, b: (tf.ensure_shape(tf.numpy_function(slow, [a], tf.float32), (None, 32)), b))
    # Truly sequential: tf.data would otherwise run the map ahead of the steps, and how far ahead depends on the
    # machine's load, not on the pipeline (its input share then varies from run to run).
    options = tf.data.Options()
    options.experimental_optimization.map_parallelization = False
    options.experimental_optimization.inject_prefetch = False
    ds = ds.with_options(options)
    cb = StepTimeLogger(tmp_path, profile_steps=8, profile_every_s=300)  # traced, however short
    caplog.set_level(logging.INFO, logger="keras_gpu")
    model.fit(ds, epochs=2, verbose=0, callbacks=[cb])
    assert cb.last is not None and cb.last.steps == 8
    assert cb.last.share("input") >= 0.5
    lines = [r.getMessage() for r in caplog.records if "StepTimeLogger:" in r.getMessage()]
    assert len(lines) == 1 and f"input-bound: {cb.last.share('input'):.0%} of each step waits for input" in lines[0]


def test_cached_prefetched_compute_bound_fit_does_not_wait_for_input(tmp_path, caplog):
    model = keras.Sequential(
        [keras.Input((256,)), keras.layers.Dense(1024, activation="relu"), keras.layers.Dense(1024), keras.layers.Dense(10)]
    )
    model.compile("sgd", "mse")
    x, y = _arrays(256 * 12, features=256)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(256).cache().prefetch(tf.data.AUTOTUNE)
    cb = StepTimeLogger(tmp_path, profile_steps=6, profile_every_s=300)
    caplog.set_level(logging.INFO, logger="keras_gpu")
    model.fit(ds, epochs=2, verbose=0, callbacks=[cb])
    assert cb.last.share("input") <= 0.2
    assert cb.last.share("compute") >= 0.5
    assert not [r for r in caplog.records if "input-bound" in r.getMessage()]


def test_default_schedule_tags_and_trace_files(tmp_path):
    # The default schedule, set explicitly (a fit this short is not traced by default): a 2-epoch fit gets
    # one trace, at the start of its second epoch.
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)])
    model.compile("sgd", "mse")
    x, y = _arrays(32 * 30)
    cb = StepTimeLogger(tmp_path, profile_every_s=StepTimeLogger.DEFAULT_PROFILE_EVERY_S)
    model.fit(x, y, batch_size=32, epochs=2, verbose=0, callbacks=[cb])
    assert len(cb.traces) == 1 and cb.last.steps == 20
    run = os.path.join(tmp_path, "train")
    scalars = read_scalars(run)
    assert {t for t in scalars if t.startswith("step_time/")} == {
        "step_time/step_sec",
        "step_time/traced_steps",
        *(f"step_time/{p}" for p in PARTS),
        "step_time/host_sec",
        "step_time/replica_0_CPU_0/compute_sec",
        "step_time/replica_0_CPU_0/communication_sec",
    }
    # One point, at the global step where the trace ended (epoch 2's 1st execution + 20 steps).
    assert [s for s, _ in scalars["step_time/step_sec"]] == [30 + 1 + 20]
    (_, step), *_ = scalars["step_time/step_sec"]
    assert sum(scalars[f"step_time/{p}"][0][1] for p in PARTS) == pytest.approx(step, rel=1e-6)
    # The trace stays where TensorBoard's Profile tab looks for it.
    (trace,) = _traces(run)
    assert any(f.endswith(".xplane.pb") for f in os.listdir(os.path.join(run, "plugins", "profile", trace)))


def test_step_time_matches_a_stopwatch(tmp_path):
    # Two stopwatches around the logger read every batch end: `before` ahead of
    # its hook, `after` behind it. Over the traced steps they time exactly
    # what a step costs: from the batch end where tracing started (the
    # profiler's start-up call, no training time, done) to the batch end where
    # it stops (before the profiler's stop). 40 traced steps (about 50 ms), so
    # the first traced step's profiler warm-up and a loaded machine's pauses,
    # which both clocks see alike, stay far inside the tolerance.
    class Watch(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.ends = []

        def on_train_batch_end(self, batch, logs=None):
            self.ends.append(time.perf_counter())

    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)])
    model.compile("sgd", "mse")
    x, y = _arrays(32 * 60)
    before, after = Watch(), Watch()
    cb = StepTimeLogger(tmp_path, profile_steps=40, warmup_steps=1000, profile_every_s=300)
    model.fit(x, y, batch_size=32, epochs=2, verbose=0, callbacks=[before, cb, after])
    assert cb.last is not None and cb.last.steps == 40
    # The breakdown is logged at the global step where the trace stopped: the
    # optimizer had run `stop + 1` steps after the batch end of index `stop`.
    ((logged_step, _),) = read_scalars(os.path.join(tmp_path, "train"))["step_time/step_sec"]
    stop = int(logged_step) - 1
    begin = stop - cb.last.steps
    assert begin >= 60  # in the second epoch, after warm-up
    stopwatch = (before.ends[stop] - after.ends[begin]) / cb.last.steps
    assert cb.last.step_sec == pytest.approx(stopwatch, rel=0.1)


def test_tracing_off_and_bounded_traces(tmp_path):
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
    model.compile("sgd", "mse")
    x, y = np.ones((64, 8), np.float32), np.ones((64, 4), np.float32)
    off = StepTimeLogger(tmp_path / "off", profile_every_s=0)
    model.fit(x, y, batch_size=8, epochs=3, verbose=0, callbacks=[off])
    assert off.last is None and not _traces(tmp_path / "off" / "train")

    class Slow(keras.callbacks.Callback):  # keeps traces of different epochs in different seconds
        def on_epoch_end(self, epoch, logs=None):
            time.sleep(0.6)

    cb = StepTimeLogger(tmp_path / "on", profile_every_s=0.5, profile_steps=2, max_traces=2)
    model.fit(x, y, batch_size=8, epochs=5, verbose=0, callbacks=[cb, Slow()])
    assert len(cb.traces) >= 3
    assert len(_traces(tmp_path / "on" / "train")) == 2


def test_a_busy_profiler_costs_one_warning_and_training_goes_on(tmp_path, caplog):
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
    model.compile("sgd", "mse")
    x, y = np.ones((64, 8), np.float32), np.ones((64, 4), np.float32)
    caplog.set_level(logging.INFO, logger="keras_gpu")
    tf.profiler.experimental.start(str(tmp_path / "other"))  # e.g. TensorBoard(profile_batch=...)
    try:
        cb = StepTimeLogger(tmp_path, profile_steps=2, profile_every_s=0.01)
        history = model.fit(x, y, batch_size=8, epochs=3, verbose=0, callbacks=[cb])
    finally:
        tf.profiler.experimental.stop()
    assert len(history.history["loss"]) == 3 and cb.last is None
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "could not start the profiler" in warnings[0].getMessage()


def test_an_unreadable_trace_costs_one_warning(tmp_path, caplog, monkeypatch):
    def broken(path, **kwargs):
        raise OSError("disk read error")

    monkeypatch.setattr(trace_read, "analyze_file", broken)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
    model.compile("sgd", "mse")
    x, y = np.ones((64, 8), np.float32), np.ones((64, 4), np.float32)
    caplog.set_level(logging.INFO, logger="keras_gpu")
    cb = StepTimeLogger(tmp_path, profile_steps=2, profile_every_s=0.01)
    history = model.fit(x, y, batch_size=8, epochs=4, verbose=0, callbacks=[cb])
    assert len(history.history["loss"]) == 4 and cb.last is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "disk read error" in warnings[0]


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match=r"Received: profile_every_s=-1"):
        StepTimeLogger(tmp_path, profile_every_s=-1)
    with pytest.raises(ValueError, match=r"Received: profile_steps=0"):
        StepTimeLogger(tmp_path, profile_steps=0)
    with pytest.raises(TypeError, match=r"Received: max_traces=1.5"):
        StepTimeLogger(tmp_path, max_traces=1.5)


@pytest.mark.slow
def test_mirrored_replica_with_extra_work_is_named(tmp_path):
    # Replica 1 runs eight 256x256 matmuls per step inside a tf.cond that only
    # it takes: no extra variables, so the strategy's reductions still match.
    code = f"""
    import json, logging, numpy as np, keras_gpu
    keras_gpu.configure_devices(cpu_devices=2)
    import tensorflow as tf, keras
    from keras_gpu.hooks.step_time_logger import StepTimeLogger

    class Lopsided(keras.layers.Layer):
        def compute_output_shape(self, shape):
            return shape

        def call(self, x):
            ctx = tf.distribute.get_replica_context()
            if ctx is None:
                return x

            def heavy():
                m = tf.random.uniform((256, 256))
                for _ in range(8):
                    m = tf.matmul(m, m) / 256.0
                return x + 0.0 * tf.reduce_sum(m)

            return tf.cond(tf.equal(ctx.replica_id_in_sync_group, 1), heavy, lambda: x)

    records = []
    handler = logging.Handler()
    handler.emit = lambda r: records.append(r.getMessage())
    logging.getLogger("keras_gpu").addHandler(handler)
    strategy = keras_gpu.make_strategy("mirrored")
    with strategy.scope():
        model = keras.Sequential([keras.Input((32,)), Lopsided(), keras.layers.Dense(64, activation="relu"),
                                  keras.layers.Dense(10)])
        model.compile("sgd", "mse")
    rng = np.random.default_rng(0)
    x, y = rng.random((64 * 20, 32), dtype=np.float32), rng.random((64 * 20, 10), dtype=np.float32)
    cb = StepTimeLogger({str(tmp_path)!r}, profile_steps=8, profile_every_s=300)
    model.fit(x, y, batch_size=64, epochs=2, verbose=0, callbacks=[cb])
    print("RESULT", json.dumps(dict(last=cb.last.as_dict(), lines=[m for m in records if "StepTimeLogger:" in m])))
    """
    proc = run_python(textwrap.dedent(code), timeout=240)
    result = json.loads(proc.stdout.split("RESULT", 1)[1])
    r0, r1 = (r["compute_sec"] for r in result["last"]["replicas"])
    assert r1 >= 1.5 * r0
    (line,) = result["lines"]
    assert "slow replica: replica 1 (CPU:1)" in line
    scalars = read_scalars(str(tmp_path / "train"))
    assert scalars["step_time/replica_1_CPU_1/compute_sec"][0][1] == pytest.approx(r1)
