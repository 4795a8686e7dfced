"""On JAX and PyTorch too, the epoch's samples/s, MFU and peak host memory reach History and CSVLogger.

One child process per backend fits a small model with `keras_gpu.callbacks()`
followed by a stopwatch callback, `History` and `CSVLogger`; the samples/s
each epoch logs, times the stopwatch's training phase, is the samples trained.
"""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests._util import run_python

pytestmark = [
    pytest.mark.backend,
    pytest.mark.skipif(
        importlib.util.find_spec("tensorflow") is not None, reason="TensorFlow is installed; these tests need it absent"
    ),
]

_CHILD = """
import csv, json, os, tempfile, time
import numpy as np
import keras
import keras_gpu

SAMPLES, BATCH, EPOCHS = 1003, 10, 3

class Stopwatch(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.phases = []
    def on_epoch_begin(self, epoch, logs=None):
        self.t0 = time.perf_counter()
    def on_train_batch_end(self, batch, logs=None):
        self.last = time.perf_counter()
    def on_epoch_end(self, epoch, logs=None):
        self.phases.append(self.last - self.t0)

keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
x = np.random.default_rng(0).normal(size=(SAMPLES, 16)).astype("float32")
y = np.zeros((SAMPLES, 1), "float32")
out = tempfile.mkdtemp()
stopwatch, history = Stopwatch(), keras.callbacks.History()
kg = keras_gpu.callbacks(os.path.join(out, "runs"), flops_per_sample=1e6, peak_flops=1e12)
model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, verbose=0,
          callbacks=[stopwatch, *kg, history, keras.callbacks.CSVLogger(os.path.join(out, "log.csv"))])
with open(os.path.join(out, "log.csv"), newline="") as f:
    rows = list(csv.DictReader(f))
print("RESULT" + json.dumps({"history": history.history, "phases": stopwatch.phases, "rows": rows}))
"""


@pytest.mark.parametrize(
    "backend",
    [pytest.param(b, marks=pytest.mark.skipif(importlib.util.find_spec(b) is None, reason=f"no {b}")) for b in ("jax", "torch")],
)
def test_history_and_csv_logger_get_the_epoch_values(backend):
    proc = run_python(_CHILD, env={"KERAS_BACKEND": backend}, timeout=300)
    result = json.loads(proc.stdout.split("RESULT", 1)[1])
    history, rows = result["history"], result["rows"]
    rates = history["throughput/samples_per_sec"]
    assert len(rates) == len(result["phases"]) == len(rows) == 3
    for rate, phase in zip(rates, result["phases"]):
        assert rate * phase == pytest.approx(1003, rel=0.1)
    assert history["throughput/mfu"] == pytest.approx([r * 1e6 / 1e12 for r in rates])
    assert len(history["throughput/steady_samples_per_sec"]) == 3
    assert all(p > 0 for p in history["memory/host/peak_rss_bytes"])
    assert [float(r["throughput/samples_per_sec"]) for r in rows] == pytest.approx(rates)
