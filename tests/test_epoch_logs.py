"""The epoch's throughput, MFU and peak memory reach Keras' epoch `logs`: History, CSVLogger, the progress bar.

Keras passes one `logs` dict to each callback in list order and appends
History and the progress bar last, so what keras-gpu's callbacks add at epoch
end reaches every callback after them. The values are checked against a
stopwatch and a sample count of this test's own, and the process's peak RSS.
"""

from __future__ import annotations

import csv
import math
import resource
import time

import keras
import numpy as np
import pytest

import keras_gpu

SAMPLES, BATCH, EPOCHS = 1003, 10, 3  # every epoch ends with a batch of 3
FLOPS_PER_SAMPLE, PEAK_FLOPS = 2.0e6, 1.0e12

THROUGHPUT_KEYS = {"throughput/samples_per_sec", "throughput/steady_samples_per_sec", "throughput/mfu"}
HOST_PEAK = "memory/host/peak_rss_bytes"


class _Stopwatch(keras.callbacks.Callback):
    """Each epoch's training phase by its own clock: epoch start to the last batch end."""

    def __init__(self):
        super().__init__()
        self.phases: list[float] = []
        self.rss: list[int] = []

    def on_epoch_begin(self, epoch, logs=None):
        self._t0 = time.perf_counter()
        self._last = None

    def on_train_batch_end(self, batch, logs=None):
        self._last = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.phases.append(self._last - self._t0)
        self.rss.append(_rss_bytes())  # just before keras-gpu's callbacks read theirs


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


class _CountSamples(keras.metrics.Metric):
    """Samples the train step really saw: an independent count, inside the step."""

    def __init__(self):
        super().__init__(name="seen")
        self.n = self.add_variable(shape=(), initializer="zeros", name="n")

    def update_state(self, y_true, y_pred, sample_weight=None):
        self.n.assign_add(keras.ops.cast(keras.ops.shape(y_true)[0], "float32"))

    def result(self):
        return self.n


def _model():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse", metrics=[_CountSamples()])
    return model


def _data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(SAMPLES, 16)).astype("float32"), rng.normal(size=(SAMPLES, 1)).astype("float32")


def _fit(tmp_path, *, epoch_logs=True, verbose=0):
    x, y = _data()
    stopwatch = _Stopwatch()
    history = keras.callbacks.History()
    csv_path = tmp_path / "log.csv"
    kg = keras_gpu.callbacks(
        tmp_path / "runs", placement=False, step_time=False, flops_per_sample=FLOPS_PER_SAMPLE,
        peak_flops=PEAK_FLOPS, epoch_logs=epoch_logs,
    )
    model = _model()
    model.fit(
        x, y, batch_size=BATCH, epochs=EPOCHS, verbose=verbose,
        callbacks=[stopwatch, *kg, history, keras.callbacks.CSVLogger(str(csv_path))],
    )
    return history.history, csv_path, stopwatch


def test_history_and_csv_logger_record_the_epoch_rates_and_peaks(tmp_path):
    hist, csv_path, stopwatch = _fit(tmp_path)
    for key in THROUGHPUT_KEYS | {HOST_PEAK}:
        assert len(hist.get(key, [])) == EPOCHS, (key, sorted(hist))
    for epoch in range(EPOCHS):
        # The samples the rate implies over the stopwatch's training phase are the samples trained.
        seen = hist["seen"][epoch]  # cumulative within an epoch: reset at each epoch's start
        assert seen == SAMPLES
        implied = hist["throughput/samples_per_sec"][epoch] * stopwatch.phases[epoch]
        assert implied == pytest.approx(SAMPLES, rel=0.1)
        # MFU is the rate times FLOPs per sample over the peak (one replica).
        mfu = hist["throughput/mfu"][epoch]
        assert mfu == pytest.approx(hist["throughput/samples_per_sec"][epoch] * FLOPS_PER_SAMPLE / PEAK_FLOPS)
        # The steady rate leaves the first execution out: positive and finite.
        steady = hist["throughput/steady_samples_per_sec"][epoch]
        assert math.isfinite(steady) and steady > 0
    # Peak RSS: at least what was resident a moment before, at most the process's peak after fit (Linux
    # updates ru_maxrss lazily, so the resident set read now counts too), and never decreasing.
    peaks = hist[HOST_PEAK]
    after = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, _rss_bytes())
    for peak, rss in zip(peaks, stopwatch.rss):
        assert 0.99 * rss <= peak <= 1.01 * after
    assert peaks == sorted(peaks)

    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == EPOCHS
    for key in THROUGHPUT_KEYS | {HOST_PEAK}:
        assert [float(r[key]) for r in rows] == pytest.approx(hist[key], rel=1e-6), key


def test_the_progress_bar_shows_them(tmp_path, capsys):
    _fit(tmp_path, verbose=2)
    out = capsys.readouterr().out
    assert out.count("throughput/samples_per_sec") == EPOCHS
    assert out.count(HOST_PEAK) == EPOCHS


def test_epoch_logs_false_adds_nothing(tmp_path):
    hist, csv_path, _ = _fit(tmp_path, epoch_logs=False)
    assert not [k for k in hist if "/" in k]
    assert set(hist) == {"loss", "seen"}
    with open(csv_path, newline="") as f:
        columns = set(next(csv.DictReader(f)))
    assert {"epoch", "loss", "seen"} <= columns and not [c for c in columns if "/" in c]


def test_epoch_logs_is_checked():
    with pytest.raises(TypeError, match="epoch_logs"):
        keras_gpu.callbacks("runs", epoch_logs="yes")
    with pytest.raises(TypeError, match="epoch_logs"):
        keras_gpu.ThroughputLogger("runs", epoch_logs=1)
