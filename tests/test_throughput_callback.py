"""`ThroughputLogger` in real `fit` runs on CPU, read back with TensorBoard's own event reader."""

from __future__ import annotations

import inspect
import json
import logging
import textwrap

import numpy as np
import pytest

from tests import _events
from tests._util import run_python

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from keras_gpu.hooks.fit_introspection import FitData, inspect_fit
from keras_gpu.hooks.throughput_logger import ThroughputLogger
from keras_gpu.meters import flops

N, BATCH = 1000, 64  # 16 batches per epoch, the last one holds 40 samples
MLP_FLOPS = 3 * 2 * (32 * 64 + 64 * 10)  # training FLOPs per sample of _mlp()


def read_scalars(run_dir) -> dict[str, list[tuple[int, float]]]:
    """Every `throughput/` and `time/` scalar in a run directory, as `tag -> [(step, value), ...]` in write order."""
    return _events.read_scalars(run_dir, ("throughput/", "time/"))


@pytest.fixture(autouse=True)
def _fresh_process_scope(monkeypatch):
    """Each test sees keras-gpu's once-per-process messages as a fresh process would."""
    from keras_gpu.core import log as _log

    monkeypatch.setattr(_log, "_process", _log.Once())


def _mlp(steps_per_execution=1):
    inp = keras.Input((32,))
    x = keras.layers.Dense(64, activation="relu")(inp)
    model = keras.Model(inp, keras.layers.Dense(10)(x))
    model.compile("sgd", "mse", steps_per_execution=steps_per_execution)
    return model


def _data(n=N):
    rng = np.random.default_rng(0)
    return rng.random((n, 32), dtype=np.float32), rng.random((n, 10), dtype=np.float32)


@pytest.fixture(scope="module")
def array_runs(tmp_path_factory):
    """Three fits of one model on 1000 samples, batch 64, steps_per_execution=4."""
    root = tmp_path_factory.mktemp("throughput")
    traces = []
    with pytest.MonkeyPatch.context() as mp:
        real = flops._trace_forward_graph

        def counting(model, signature):
            traces.append(model.name)
            return real(model, signature)

        mp.setattr(flops, "_trace_forward_graph", counting)
        model = _mlp(steps_per_execution=4)
        x, y = _data()
        auto = ThroughputLogger(root / "auto", every_n_steps=8)
        explicit = ThroughputLogger(root / "explicit", every_n_steps=8, flops_per_sample=1e6, peak_flops=2e9)
        model.fit(x, y, batch_size=BATCH, epochs=3, verbose=0, callbacks=[auto, explicit])
        first = dict(auto.summary)
        iterations_1 = int(model.optimizer.iterations)
        model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[auto])
        second = dict(auto.summary)
        other = ThroughputLogger(root / "other", every_n_steps=8)
        model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[other])
    return {
        "auto": read_scalars(root / "auto" / "train"),
        "explicit": read_scalars(root / "explicit" / "train"),
        "explicit_summary": explicit.summary,
        "other_summary": other.summary,
        "first": first,
        "second": second,
        "iterations": (iterations_1, int(model.optimizer.iterations)),
        "traces": traces,
    }


def test_tags_and_global_step_axis(array_runs):
    s = array_runs["auto"]
    assert set(s) == {
        "throughput/steps_per_sec",
        "throughput/samples_per_sec",
        "throughput/samples_per_sec_per_replica",
        "throughput/steady_steps_per_sec",
        "throughput/steady_samples_per_sec",
        "throughput/tflops_per_sec",
        "time/epoch_sec",
        "time/train_sec",
        "time/first_step_sec",
        "time/validation_sec",
        "time/other_sec",
    }  # no mfu: no peak is known for a CPU
    # Epochs of 16 steps in executions of 4; windows of 8 steps open at the
    # epoch's start (first execution included) and the epoch's end closes the
    # last one. The second fit continues the axis from the optimizer's 48
    # iterations. Epoch times sit at the step of the epoch's last training step.
    assert [step for step, _ in s["throughput/steps_per_sec"]] == [8, 16, 24, 32, 40, 48, 56, 64]
    assert [step for step, _ in s["time/first_step_sec"]] == [16, 32, 48, 64]
    assert array_runs["iterations"] == (48, 80)
    assert all(v > 0 for _, v in s["time/first_step_sec"])
    for (_, epoch), (_, train), (_, val), (_, other) in zip(
        s["time/epoch_sec"], s["time/train_sec"], s["time/validation_sec"], s["time/other_sec"]
    ):
        assert epoch == pytest.approx(train + val + other) and val == 0.0


def test_samples_counted_exactly_with_short_last_batch(array_runs):
    first, second = array_runs["first"], array_runs["second"]
    assert (first["steps"], first["samples"], first["epochs"]) == (48, 3 * N, 3)
    assert (second["steps"], second["samples"], second["epochs"]) == (16, N, 1)
    assert (first["measured_steps"], first["measured_samples"]) == (48, 3 * N)
    s = array_runs["auto"]
    # Within a window samples/s over steps/s is the samples per step: 64 for the
    # full-batch window, (7 * 64 + 40) / 8 for the one holding the short batch.
    per_step = [a / b for (_, a), (_, b) in zip(s["throughput/samples_per_sec"], s["throughput/steps_per_sec"])]
    assert per_step == pytest.approx([64, 61] * 4)


def test_per_replica_series_and_tflops(array_runs):
    s = array_runs["auto"]
    samples = s["throughput/samples_per_sec"]
    assert s["throughput/samples_per_sec_per_replica"] == samples
    tflops = [v for _, v in s["throughput/tflops_per_sec"]]
    assert tflops == pytest.approx([MLP_FLOPS * v / 1e12 for _, v in samples], rel=1e-6)
    assert array_runs["first"]["flops_per_sample"] == MLP_FLOPS


def test_flops_counted_once_per_model(array_runs):
    # Three fits and two callbacks on one model: traced once, by the first fit.
    assert len(array_runs["traces"]) == 1
    assert array_runs["other_summary"]["flops_per_sample"] == MLP_FLOPS


def test_explicit_flops_and_peak_give_mfu(array_runs):
    s = array_runs["explicit"]
    samples = [v for _, v in s["throughput/samples_per_sec"]]
    assert [v for _, v in s["throughput/tflops_per_sec"]] == pytest.approx([1e6 * v / 1e12 for v in samples], rel=1e-6)
    assert [v for _, v in s["throughput/mfu"]] == pytest.approx([1e6 * v / 2e9 for v in samples], rel=1e-6)
    summary = array_runs["explicit_summary"]
    assert summary["mfu"] == pytest.approx(1e6 * summary["samples_per_sec"] / 2e9)
    assert (summary["samples"], summary["peak_flops"]) == (3 * N, 2e9)


def test_summary_line_is_logged(tmp_path, caplog):
    model = _mlp()
    x, y = _data(256)
    caplog.set_level(logging.INFO, logger="keras_gpu")
    model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[ThroughputLogger(tmp_path, every_n_steps=2)])
    lines = [r.getMessage() for r in caplog.records if "wall-clock training rate" in r.getMessage()]
    assert len(lines) == 1
    assert "8 steps, 256 samples" in lines[0] and "samples/s" in lines[0] and "steps/s" in lines[0]
    # The wall-clock rate comes first, then the total time of the fit.
    assert lines[0].index("wall-clock training rate") < lines[0].index("steady state") < lines[0].index("s of fit")
    no_mfu = [r for r in caplog.records if "no throughput/mfu" in r.getMessage()]
    assert len(no_mfu) == 1 and no_mfu[0].levelno == logging.INFO and "peak_flops=" in no_mfu[0].getMessage()


def test_dataset_without_static_batch_is_counted_by_the_probe(tmp_path, caplog):
    model = _mlp()
    x, y = _data()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
    cb = ThroughputLogger(tmp_path, every_n_steps=4)
    caplog.set_level(logging.INFO, logger="keras_gpu")
    model.fit(ds, epochs=2, verbose=0, callbacks=[cb])
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]
    s = read_scalars(tmp_path / "train")
    assert [step for step, _ in s["throughput/samples_per_sec"]] == [4, 8, 12, 16, 20, 24, 28, 32]
    assert (cb.summary["samples"], cb.summary["steps"]) == (2 * N, 32)


def test_callbacks_set_before_fit_read_keras_count_of_a_dynamic_batch(tmp_path, caplog):
    # A CallbackList made before `fit`: no probe is in the step, but Keras' own step counts the samples.
    model = _mlp()
    x, y = _data()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
    cb = ThroughputLogger(tmp_path, every_n_steps=4)
    callbacks = keras.callbacks.CallbackList([cb], add_history=True, model=model)
    caplog.set_level(logging.WARNING, logger="keras_gpu")
    model.fit(ds, epochs=2, verbose=0, callbacks=callbacks)
    assert not caplog.records
    assert (cb.summary["samples"], cb.summary["steps"]) == (2 * N, 32)


def test_callbacks_set_before_fit_cannot_count_a_dynamic_batch_warn_once_and_log_steps_only(tmp_path, caplog):
    # A CallbackList made before `fit`: set_model ran outside it, so no probe is in the step (its own step).
    class OwnStep(keras.Sequential):
        def train_step(self, data):
            return super().train_step(data)

    model = OwnStep(_mlp().layers)
    model.compile("sgd", "mse")
    x, y = _data()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
    cb = ThroughputLogger(tmp_path, every_n_steps=4)
    callbacks = keras.callbacks.CallbackList([cb], add_history=True, model=model)
    caplog.set_level(logging.INFO, logger="keras_gpu")
    model.fit(ds, epochs=2, verbose=0, callbacks=callbacks)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "batch_size=" in warnings[0].getMessage() and "samples_per_epoch=" in warnings[0].getMessage()
    s = read_scalars(tmp_path / "train")
    assert {t for t in s if t.startswith("throughput/")} == {
        "throughput/steps_per_sec",
        "throughput/steady_steps_per_sec",
    }
    assert [step for step, _ in s["throughput/steps_per_sec"]] == [4, 8, 12, 16, 20, 24, 28, 32]
    assert cb.summary["samples"] is None and cb.summary["steps"] == 32


def test_dataset_with_explicit_batch_and_samples(tmp_path, caplog):
    model = _mlp()
    x, y = _data()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
    cb = ThroughputLogger(tmp_path, every_n_steps=100, batch_size=BATCH, samples_per_epoch=N)
    caplog.set_level(logging.WARNING, logger="keras_gpu")
    model.fit(ds, epochs=2, verbose=0, callbacks=[cb])
    assert not caplog.records
    assert (cb.summary["steps"], cb.summary["samples"]) == (32, 2 * N)
    s = read_scalars(tmp_path / "train")
    per_step = [a / b for (_, a), (_, b) in zip(s["throughput/samples_per_sec"], s["throughput/steps_per_sec"])]
    assert per_step == pytest.approx([N / 16] * 2)  # one window per epoch, first execution included


def test_dataset_of_unknown_length_with_steps_per_execution(tmp_path):
    # `filter` hides the cardinality; `drop_remainder` gives a static batch of 64.
    # 15 batches per epoch in executions of 4: the last one runs 3 steps although
    # its batch index says 15.
    model = _mlp(steps_per_execution=4)
    x, y = _data()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).filter(lambda a, b: True).batch(BATCH, drop_remainder=True)
    cb = ThroughputLogger(tmp_path, every_n_steps=4)
    model.fit(ds, epochs=2, verbose=0, callbacks=[cb])
    assert (cb.summary["steps"], cb.summary["samples"]) == (30, 30 * BATCH)
    assert int(model.optimizer.iterations) == 30
    s = read_scalars(tmp_path / "train")
    assert s["throughput/steps_per_sec"][-1][0] == 30


def test_mirrored_strategy_on_two_logical_cpus(tmp_path):
    code = f"""
    import json, numpy as np, tensorflow as tf
    import keras
    from keras_gpu.hooks.throughput_logger import ThroughputLogger
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        inp = keras.Input((32,))
        x = keras.layers.Dense(64, activation="relu")(inp)
        model = keras.Model(inp, keras.layers.Dense(10)(x))
        model.compile("sgd", "mse")
    rng = np.random.default_rng(0)
    x, y = rng.random(({N}, 32), dtype=np.float32), rng.random(({N}, 10), dtype=np.float32)
    cb = ThroughputLogger({str(tmp_path)!r}, every_n_steps=8)
    model.fit(x, y, batch_size={BATCH}, epochs=2, verbose=0, callbacks=[cb])
    print("SUMMARY", json.dumps(cb.summary))
    """
    proc = run_python(textwrap.dedent(code), timeout=240, logical_cpus=2)
    summary = json.loads(proc.stdout.split("SUMMARY", 1)[1])
    assert (summary["num_replicas"], summary["steps"], summary["samples"]) == (2, 32, 2 * N)
    assert summary["flops_per_sample"] == MLP_FLOPS
    s = read_scalars(tmp_path / "train")
    assert not [t for t in s if t.startswith("throughput/replica_")]  # no per-replica rate that is not measured
    total = [v for _, v in s["throughput/samples_per_sec"]]
    assert [v for _, v in s["throughput/samples_per_sec_per_replica"]] == pytest.approx([t / 2 for t in total])
    assert [step for step, _ in s["throughput/steps_per_sec"]] == [8, 16, 24, 32]


def test_mirrored_from_make_strategy_with_steps_per_execution_and_short_last_batch(tmp_path):
    # keras-team/keras#19246 breaks this combination with a stock MirroredStrategy;
    # make_strategy's mirrored strategy trains it, and the counts stay exact.
    code = f"""
    import json, numpy as np, keras_gpu
    keras_gpu.configure_devices(cpu_devices=2)
    import keras
    strategy = keras_gpu.make_strategy("mirrored")
    with strategy.scope():
        model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)])
        model.compile("sgd", "mse", steps_per_execution=4)
    rng = np.random.default_rng(0)
    x, y = rng.random(({N}, 32), dtype=np.float32), rng.random(({N}, 10), dtype=np.float32)
    cb = keras_gpu.ThroughputLogger({str(tmp_path)!r}, every_n_steps=8)
    model.fit(x, y, batch_size={BATCH}, epochs=2, verbose=0, callbacks=[cb])
    print("SUMMARY", json.dumps(cb.summary), int(model.optimizer.iterations.numpy()))
    """
    proc = run_python(textwrap.dedent(code), timeout=240)
    summary_json, iterations = proc.stdout.split("SUMMARY", 1)[1].rsplit(" ", 1)
    summary = json.loads(summary_json)
    assert (summary["num_replicas"], summary["steps"], summary["samples"]) == (2, 32, 2 * N)
    assert int(iterations) == 32
    s = read_scalars(tmp_path / "train")
    assert [step for step, _ in s["throughput/steps_per_sec"]] == [8, 16, 24, 32]


def test_time_spent_writing_counts_like_any_other_wall_time(tmp_path, monkeypatch):
    import time

    real = ThroughputLogger._write

    def slow_write(self, events):
        time.sleep(0.05)  # a slow disk, on the training thread
        real(self, events)

    monkeypatch.setattr(ThroughputLogger, "_write", slow_write)
    model = _mlp()
    x, y = _data(512)
    cb = ThroughputLogger(tmp_path, every_n_steps=2)
    watch = _Stopwatch()
    model.fit(x, y, batch_size=BATCH, epochs=2, verbose=0, callbacks=[watch, cb])
    # The rate is what the user got, slow writes included: the time it implies
    # for the second epoch's 8 steps is the stopwatch's.
    rates = read_scalars(tmp_path / "train")["throughput/steps_per_sec"]
    implied = sum(2 / v for step, v in rates if step > 8)
    assert implied == pytest.approx(watch.train[1], rel=0.02)


class _Stopwatch(keras.callbacks.Callback):
    """The training phase of each epoch: from its start to its last batch end."""

    def __init__(self):
        super().__init__()
        self.train = []

    def on_epoch_begin(self, epoch, logs=None):
        import time

        self._t0 = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        import time

        self._last = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.train.append(self._last - self._t0)


def test_subclassed_model_flops_from_the_data_spec(tmp_path):
    class Sub(keras.Model):
        def __init__(self):
            super().__init__()
            self.hidden = keras.layers.Dense(16)
            self.out = keras.layers.Dense(10)

        def call(self, x):
            return self.out(self.hidden(x))

    model = Sub()
    model.compile("sgd", "mse")
    x, y = _data(128)
    cb = ThroughputLogger(tmp_path, every_n_steps=2)
    model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[cb])
    assert cb.summary["flops_per_sample"] == 3 * 2 * (32 * 16 + 16 * 10)
    assert "throughput/tflops_per_sec" in read_scalars(tmp_path / "train")


class _Probe(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        self.data = inspect_fit(self.model)
        self.model.stop_training = True


def _inspect(x, y=None, **fit_kwargs) -> FitData:
    model = _mlp(steps_per_execution=fit_kwargs.pop("steps_per_execution", 1))
    probe = _Probe()
    model.fit(x, y, epochs=1, verbose=0, callbacks=[probe], **fit_kwargs)
    return probe.data


def test_introspection_of_arrays():
    x, y = _data()
    data = _inspect(x, y, batch_size=BATCH, steps_per_execution=2)
    assert data.adapter == "ArrayDataAdapter"
    assert (data.batch_size, data.last_batch_size, data.batches_per_pass, data.samples_per_pass) == (64, 40, 16, N)
    assert (data.infinite, data.steps_per_epoch, data.steps_per_execution) == (False, None, 2)
    assert data.x_spec == tf.TensorSpec([None, 32], tf.float32)
    data = _inspect(x[:640], y[:640], batch_size=BATCH)
    assert (data.batch_size, data.last_batch_size, data.batches_per_pass) == (64, 64, 10)


def test_introspection_of_datasets():
    x, y = _data()
    base = tf.data.Dataset.from_tensor_slices((x, y))
    data = _inspect(base.batch(BATCH))
    assert (data.adapter, data.batch_size, data.last_batch_size, data.batches_per_pass) == ("TFDatasetAdapter", None, None, 16)
    assert data.x_spec == tf.TensorSpec([None, 32], tf.float32)
    data = _inspect(base.batch(BATCH, drop_remainder=True))
    assert (data.batch_size, data.last_batch_size, data.batches_per_pass, data.samples_per_pass) == (64, 64, 15, 960)
    data = _inspect(base.batch(BATCH, drop_remainder=True).repeat(), steps_per_epoch=5)
    assert (data.infinite, data.batches_per_pass, data.steps_per_epoch, data.batch_size) == (True, None, 5, 64)
    data = _inspect(base.filter(lambda a, b: True).batch(BATCH))
    assert (data.infinite, data.batches_per_pass, data.batch_size) == (False, None, None)


def test_introspection_outside_fit_is_none():
    assert inspect_fit(_mlp()) is None


def test_generator_input_is_counted_and_batch_size_overrides(tmp_path, caplog):
    x, y = _data(256)

    def gen():
        for i in range(0, 256, 32):
            yield x[i : i + 32], y[i : i + 32]

    caplog.set_level(logging.WARNING, logger="keras_gpu")
    cb = ThroughputLogger(tmp_path, every_n_steps=2)
    _mlp().fit(gen(), epochs=1, verbose=0, callbacks=[cb])
    assert not caplog.records
    assert (cb.summary["steps"], cb.summary["samples"]) == (8, 256)
    cb = ThroughputLogger(tmp_path / "given", every_n_steps=2, batch_size=16, samples_per_epoch=128)
    _mlp().fit(gen(), epochs=1, verbose=0, callbacks=[cb])
    assert (cb.summary["steps"], cb.summary["samples"]) == (8, 128)  # what the user said, not what was counted


def test_hooks_exist_on_keras_callback_with_exact_signatures():
    defined = [name for name in vars(ThroughputLogger) if name.startswith("on_")]
    assert defined, "ThroughputLogger defines no hooks"
    for name in defined:
        assert hasattr(keras.callbacks.Callback, name), f"{name} is not a Keras hook"
        ours = list(inspect.signature(getattr(ThroughputLogger, name)).parameters)
        theirs = list(inspect.signature(getattr(keras.callbacks.Callback, name)).parameters)
        assert ours == theirs, name
    # The per-batch hooks: a store on the training thread at each batch begin, and the cheap batch-end check.
    batch_hooks = [n for n in defined if "batch" in n]
    assert batch_hooks == ["on_train_batch_begin", "on_train_batch_end"]
    assert ThroughputLogger.async_safe is True  # Keras keeps its asynchronous batch-end dispatch


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"every_n_steps": 0}, ValueError, r"Received: every_n_steps=0"),
        ({"every_n_steps": 2.5}, TypeError, r"Received: every_n_steps=2.5"),
        ({"every_s": -1.0}, ValueError, r"Received: every_s=-1.0"),
        ({"every_s": float("inf")}, ValueError, r"Received: every_s=inf"),
        ({"every_n_steps": 10, "every_s": 2.0}, ValueError, r"only one of .*Received: every_n_steps=10, every_s=2.0"),
        ({"batch_size": 0}, ValueError, r"Received: batch_size=0"),
        ({"batch_size": True}, TypeError, r"Received: batch_size=True"),
        ({"samples_per_epoch": -5}, ValueError, r"Received: samples_per_epoch=-5"),
        ({"flops_per_sample": "1e9"}, TypeError, r"Received: flops_per_sample='1e9'"),
        ({"peak_flops": 0}, ValueError, r"Received: peak_flops=0"),
    ],
)
def test_bad_arguments(tmp_path, kwargs, error, match):
    with pytest.raises(error, match=match):
        ThroughputLogger(tmp_path, **kwargs)


def test_bad_log_dir():
    with pytest.raises(TypeError, match=r"Received: log_dir=5"):
        ThroughputLogger(5)


def test_gpu_peaks_are_summed_per_gpu_in_use(monkeypatch):
    from keras_gpu.core import backend
    from keras_gpu.meters import model_flops

    h100, a100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"
    monkeypatch.setattr(backend, "replica_gpus", lambda model: [(0, h100), (1, a100)])
    total, used = model_flops.gpu_peak_flops(None, "bfloat16")
    assert total == pytest.approx(989.5e12 + 312e12) and used == [h100, a100]
    monkeypatch.setattr(backend, "replica_gpus", lambda model: [(0, "Mystery GPU")])
    assert model_flops.gpu_peak_flops(None, "float16") == (None, ["Mystery GPU"])
    monkeypatch.setattr(backend, "replica_gpus", lambda model: [])
    assert model_flops.gpu_peak_flops(None, "float16") == (None, [])


@pytest.mark.gpu
def test_mfu_on_a_real_gpu(tmp_path):
    gpus = tf.config.list_physical_devices("GPU")
    name = tf.config.experimental.get_device_details(gpus[0]).get("device_name", "")
    model = _mlp()
    if flops.peak_flops(name, flops.compute_dtype(model)) is None:
        pytest.skip(f"{name!r} is not in the peak table")
    x, y = _data()
    cb = ThroughputLogger(tmp_path, every_n_steps=4)
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[cb])
    s = read_scalars(tmp_path / "train")
    mfu = [v for _, v in s["throughput/mfu"]]
    assert mfu and all(0 < v < 1 for v in mfu)
    assert cb.summary["peak_flops"] == pytest.approx(flops.peak_flops(name, flops.compute_dtype(model)))


def test_once_per_process_messages_appear_once_in_three_fits_and_name_the_factory(tmp_path, caplog):
    import keras_gpu

    caplog.set_level(logging.INFO, logger="keras_gpu")
    x, y = _data(256)
    for i in range(3):  # a new model and a new set of callbacks for each fit, as scripts do
        cbs = keras_gpu.callbacks(tmp_path / str(i), placement=False, step_time=False)
        _mlp().fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=cbs)
    messages = [r.getMessage() for r in caplog.records]
    (no_mfu,) = [m for m in messages if "logs no throughput/mfu" in m]
    assert "Pass `keras_gpu.callbacks(peak_flops=...)`" in no_mfu
    assert len([m for m in messages if "MemoryLogger found no GPU" in m]) == 1
    assert len([m for m in messages if "wall-clock training rate" in m]) == 3  # the end-of-fit line: each fit's own
    # A callback built by hand is named as such.
    from keras_gpu.core import log as _log

    _log._process = _log.Once()
    _mlp().fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[ThroughputLogger(tmp_path / "hand")])
    (no_mfu,) = [r.getMessage() for r in caplog.records if "logs no throughput/mfu" in r.getMessage()][1:]
    assert "Pass `ThroughputLogger(peak_flops=...)`" in no_mfu


def test_steady_rate_of_the_end_of_fit_line_is_the_reports(tmp_path, caplog):
    from keras_gpu.output.reader import summarize

    class Uneven(keras.callbacks.Callback):  # epochs of different pace: a mean of rates would differ
        def on_train_batch_end(self, batch, logs=None):
            if self.model.optimizer.iterations.numpy() > 16:
                import time

                time.sleep(0.002)

    caplog.set_level(logging.INFO, logger="keras_gpu")
    x, y = _data()
    cb = ThroughputLogger(tmp_path, every_n_steps=4)
    _mlp().fit(x, y, batch_size=BATCH, epochs=3, verbose=0, callbacks=[Uneven(), cb])
    (line,) = [r.getMessage() for r in caplog.records if "wall-clock training rate" in r.getMessage()]
    steady = summarize(str(tmp_path))["runs"][0]["throughput"]["steady_samples_per_sec"]
    assert steady["points"] == 3
    assert f"steady state {cb.summary['steady_samples_per_sec']:.1f} samples/s" in line
    # The same figure; the event file holds float32 values, hence the 1e-6.
    assert steady["mean"] == pytest.approx(cb.summary["steady_samples_per_sec"], rel=1e-6)
    assert steady["mean"] != pytest.approx(steady["median"], rel=1e-3)


class _SlowFirstShortBatch(keras.callbacks.Callback):
    """Stands in for a compile: 0.3 s at the end of the first epoch's short last batch, before ThroughputLogger's hook."""

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if self.epoch == 0 and batch == 15:
            import time

            time.sleep(0.3)


def test_steady_rate_leaves_out_the_execution_of_a_new_batch_size(tmp_path):
    # 1000 samples by 64: 15 full batches, then 40. The execution of the short batch in the first epoch (a compile
    # on JAX, a retrace on TensorFlow) is left out of that epoch's steady rate and counted with its first
    # execution; in the second epoch only the first execution is. Checked by counts: the steady rate times the
    # steady seconds the same epoch logs gives the steps left in.
    from keras_gpu.output.reader import read_scalars

    rng = np.random.default_rng(0)
    x, y = rng.random((1000, 8), dtype=np.float32), rng.random((1000, 1), dtype=np.float32)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    rates = ThroughputLogger(tmp_path, every_s=0.05)
    model.fit(x, y, batch_size=64, epochs=2, verbose=0, callbacks=[_SlowFirstShortBatch(), rates])
    scalars = read_scalars(str(tmp_path / "train"))
    train, first = dict(scalars["time/train_sec"]), dict(scalars["time/first_step_sec"])
    steady = dict(scalars["throughput/steady_steps_per_sec"])
    samples = dict(scalars["throughput/steady_samples_per_sec"])
    assert sorted(train) == [16, 32]
    assert first[16] >= 0.3  # the slow short batch counts with the first execution
    assert steady[16] * (train[16] - first[16]) == pytest.approx(14, rel=1e-4)  # batches 1..14
    assert samples[16] * (train[16] - first[16]) == pytest.approx(14 * 64, rel=1e-4)
    assert steady[32] * (train[32] - first[32]) == pytest.approx(15, rel=1e-4)  # batches 1..15
    assert samples[32] * (train[32] - first[32]) == pytest.approx(14 * 64 + 40, rel=1e-4)


def test_end_of_fit_line_gives_mfu_at_the_steady_rate_beside_the_wall_clock(tmp_path, caplog):
    # The wall-clock MFU holds the first execution (tracing, compiling); the steady one leaves it out.
    caplog.set_level(logging.INFO, logger="keras_gpu")
    x, y = _data()
    cb = ThroughputLogger(tmp_path, every_n_steps=4, flops_per_sample=1e6, peak_flops=1e12)
    _mlp().fit(x, y, batch_size=BATCH, epochs=2, verbose=0, callbacks=[cb])
    s = cb.summary
    assert s["steady_mfu"] == pytest.approx(s["steady_samples_per_sec"] * 1e6 / 1e12)
    assert s["steady_mfu"] > s["mfu"]  # the first executions compiled
    (line,) = [r.getMessage() for r in caplog.records if "wall-clock training rate" in r.getMessage()]
    assert f"MFU steady {100 * s['steady_mfu']:.2f}%, wall clock {100 * s['mfu']:.2f}%" in line
    epoch_points = read_scalars(tmp_path / "train")["throughput/steady_mfu"]
    assert len(epoch_points) == 2 and all(v > 0 for _, v in epoch_points)


def test_tokens_per_sec_is_samples_per_sec_times_the_tokens_per_sample(tmp_path):
    from keras_gpu.output.reader import summarize

    x, y = _data()
    cb = ThroughputLogger(tmp_path, every_n_steps=4, tokens_per_sample=128)
    _mlp().fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[cb])
    s = read_scalars(tmp_path / "train")
    samples, tokens = s["throughput/samples_per_sec"], s["throughput/tokens_per_sec"]
    assert [step for step, _ in tokens] == [step for step, _ in samples]
    assert [v for _, v in tokens] == pytest.approx([128 * v for _, v in samples], rel=1e-6)
    assert summarize(str(tmp_path))["runs"][0]["throughput"]["tokens_per_sec"]["points"] == len(tokens)
    assert "throughput/tokens_per_sec" not in read_scalars(_fit_without_tokens(tmp_path / "none"))


def _fit_without_tokens(log_dir):
    x, y = _data()
    _mlp().fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[ThroughputLogger(log_dir, every_n_steps=4)])
    return log_dir / "train"


@pytest.mark.parametrize("value, error", [(0, ValueError), ("128", TypeError)])
def test_tokens_per_sample_is_checked(tmp_path, value, error):
    with pytest.raises(error, match=rf"tokens_per_sample.*Received: tokens_per_sample={value!r}"):
        ThroughputLogger(tmp_path, tokens_per_sample=value)
