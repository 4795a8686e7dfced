"""The logged rates and epoch times against a stopwatch in the same process, for every input kind.

The stopwatch is a plain callback placed before `ThroughputLogger`; it knows
nothing of windows or meters. From the second epoch on, the time the logged
rates imply (steps in a window over its steps/s) must be within 2% of the
stopwatch's training phase, and the `time/` tags within 2% of its epoch and
training times. Validation, a few milliseconds here, is bracketed instead of
compared within a share: a second stopwatch after `ThroughputLogger` gives
the earliest and latest instants its hooks can have read, so the logged
validation time must lie between the two stopwatches' readings, however long
a loaded machine takes between hooks.
"""

from __future__ import annotations

import json
import textwrap
import time

import numpy as np
import pytest

from tests._util import run_python

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from keras_gpu.hooks.throughput_logger import ThroughputLogger
from keras_gpu.output.reader import read_scalars

EPOCHS, BATCH, N = 3, 32, 40 * 32 - 20  # 40 steps per epoch, the last one short


class Stopwatch(keras.callbacks.Callback):
    """Epoch, training-phase and validation wall times, read with `time.perf_counter`."""

    def __init__(self):
        super().__init__()
        self.epochs, self.train, self.validation = [], [], []
        self.val_spans = []  # per epoch: (first on_test_begin, last on_test_end)
        self._epoch_t0 = self._last = self._val_t0 = None
        self._val = 0.0
        self._span = None

    def on_epoch_begin(self, epoch, logs=None):
        t = time.perf_counter()
        if self._epoch_t0 is not None:
            self.epochs.append(t - self._epoch_t0)
        self._epoch_t0, self._val = t, 0.0

    def on_train_batch_end(self, batch, logs=None):
        self._last = time.perf_counter()

    def on_test_begin(self, logs=None):
        self._val_t0 = time.perf_counter()
        if self._span is None:
            self._span = [self._val_t0, None]

    def on_test_end(self, logs=None):
        t = time.perf_counter()
        self._val += t - self._val_t0
        self._span[1] = t

    def on_epoch_end(self, epoch, logs=None):
        self.train.append(self._last - self._epoch_t0)
        self.validation.append(self._val)
        self.val_spans.append(tuple(self._span) if self._span else None)
        self._span = None

    def on_train_end(self, logs=None):
        self.epochs.append(time.perf_counter() - self._epoch_t0)


class SlowEpochEnd(keras.callbacks.Callback):
    """Epoch-end work (a checkpoint, say) that belongs to `time/other_sec`."""

    def on_epoch_end(self, epoch, logs=None):
        time.sleep(0.03)


def _model(steps_per_execution=1):
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(128, activation="relu"), keras.layers.Dense(10)])
    model.compile("sgd", "mse", steps_per_execution=steps_per_execution)
    return model


def _arrays(n):
    rng = np.random.default_rng(0)
    return rng.random((n, 32), dtype=np.float32), rng.random((n, 10), dtype=np.float32)


class _Sequence(keras.utils.PyDataset):
    def __init__(self, x, y):
        super().__init__()
        self.x, self.y = x, y

    def __len__(self):
        return -(-len(self.x) // BATCH)  # noqa: PLE0303 - a ceiling division, never negative

    def __getitem__(self, i):
        return self.x[i * BATCH : (i + 1) * BATCH], self.y[i * BATCH : (i + 1) * BATCH]


def _inputs(kind):
    x, y = _arrays(N)
    if kind == "numpy":
        return dict(x=x, y=y, batch_size=BATCH, shuffle=True), {}
    if kind == "tf_data":
        ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(N).batch(BATCH).prefetch(2)
        return dict(x=ds), {}
    if kind == "generator":

        def gen():
            while True:
                for i in range(0, N - BATCH + 1, BATCH):
                    yield x[i : i + BATCH], y[i : i + BATCH]

        return dict(x=gen(), steps_per_epoch=39), {"batch_size": BATCH}
    if kind == "py_dataset":
        return dict(x=_Sequence(x, y)), {"batch_size": BATCH, "samples_per_epoch": N}
    raise ValueError(kind)


def _implied_train_times(scalars, epoch_end_steps):
    """Per epoch, the seconds the logged rates imply: each window's steps over its steps/s."""
    out, prev, i = [0.0 for _ in epoch_end_steps], 0, 0
    for step, rate in scalars["throughput/steps_per_sec"]:
        while step > epoch_end_steps[i]:
            i += 1
        out[i] += (step - prev) / rate
        prev = step
    return out


def _check_against_stopwatch(scalars, watch, epochs=EPOCHS, after=None):
    values = {tag: [v for _, v in points] for tag, points in scalars.items()}
    end_steps = [s for s, _ in scalars["time/train_sec"]]
    assert len(end_steps) == epochs and len(watch.train) == epochs
    implied = _implied_train_times(scalars, end_steps)
    for e in range(1, epochs):  # the first epoch includes tracing, and is checked for accounting only
        assert implied[e] == pytest.approx(watch.train[e], rel=0.02), (e, implied, watch.train)
        assert values["time/train_sec"][e] == pytest.approx(watch.train[e], rel=0.02)
        if after is None:
            assert values["time/validation_sec"][e] == pytest.approx(watch.validation[e], rel=0.02, abs=2e-4)
        else:  # one validation per epoch, read by the logger between the two stopwatches' hooks
            (b0, e0), (b1, e1) = watch.val_spans[e], after.val_spans[e]
            assert e0 - b1 - 1e-6 <= values["time/validation_sec"][e] <= e1 - b0 + 1e-6, (e, watch.val_spans)
        assert values["time/epoch_sec"][e] == pytest.approx(watch.epochs[e], rel=0.02)
    for e in range(epochs):
        parts = values["time/train_sec"][e] + values["time/validation_sec"][e] + values["time/other_sec"][e]
        assert parts == pytest.approx(values["time/epoch_sec"][e], rel=0.02)
        assert values["time/first_step_sec"][e] < values["time/train_sec"][e]


@pytest.mark.parametrize("kind", ["numpy", "tf_data", "generator", "py_dataset"])
def test_rates_and_epoch_times_match_a_stopwatch(tmp_path, kind):
    fit_kwargs, logger_kwargs = _inputs(kind)
    watch, after = Stopwatch(), Stopwatch()
    cb = ThroughputLogger(tmp_path, **logger_kwargs)
    xv, yv = _arrays(200)
    _model().fit(
        **fit_kwargs,
        epochs=EPOCHS,
        validation_data=(xv, yv),
        verbose=0,
        callbacks=[watch, cb, after, SlowEpochEnd()],
    )
    scalars = read_scalars(str(tmp_path / "train"))
    _check_against_stopwatch(scalars, watch, after=after)
    # Epoch-end work lands in other_sec, validation in validation_sec: neither is in the rates.
    assert all(v >= 0.03 for _, v in scalars["time/other_sec"])
    assert all(v > 0 for _, v in scalars["time/validation_sec"])
    # The summary's wall-clock rate covers the training phases only.
    s = cb.summary
    assert s["train_seconds"] == pytest.approx(sum(watch.train), rel=0.02)
    assert s["steps_per_sec"] == pytest.approx(s["steps"] / sum(watch.train), rel=0.02)
    if "samples_per_sec" in scalars:
        assert s["samples_per_sec"] == pytest.approx(s["samples"] / sum(watch.train), rel=0.02)


def test_steps_per_execution_matches_a_stopwatch(tmp_path):
    x, y = _arrays(N)
    watch, after = Stopwatch(), Stopwatch()
    cb = ThroughputLogger(tmp_path, every_n_steps=8)
    _model(steps_per_execution=4).fit(
        x, y, batch_size=BATCH, epochs=EPOCHS, validation_data=_arrays(100), verbose=0, callbacks=[watch, cb, after]
    )
    _check_against_stopwatch(read_scalars(str(tmp_path / "train")), watch, after=after)


def test_mirrored_strategy_matches_a_stopwatch(tmp_path):
    code = f"""
    import json, time, numpy as np, keras_gpu
    keras_gpu.configure_devices(cpu_devices=2)
    import keras
    from tests.test_throughput_truth import Stopwatch, _arrays, _model
    strategy = keras_gpu.make_strategy("mirrored")
    with strategy.scope():
        model = _model()
    x, y = _arrays({N})
    watch, after = Stopwatch(), Stopwatch()
    model.fit(x, y, batch_size={BATCH}, epochs={EPOCHS}, validation_data=_arrays(100), verbose=0,
              callbacks=[watch, keras_gpu.ThroughputLogger({str(tmp_path)!r}), after])
    print("WATCH", json.dumps([dict(epochs=w.epochs, train=w.train, validation=w.validation, val_spans=w.val_spans)
                               for w in (watch, after)]))
    """
    proc = run_python(textwrap.dedent(code), timeout=240)
    watches = []
    for data in json.loads(proc.stdout.split("WATCH", 1)[1]):
        w = Stopwatch()
        w.epochs, w.train, w.validation, w.val_spans = data["epochs"], data["train"], data["validation"], data["val_spans"]
        watches.append(w)
    _check_against_stopwatch(read_scalars(str(tmp_path / "train")), watches[0], after=watches[1])
