"""keras-gpu keeps Keras' asynchronous batch dispatch on JAX and PyTorch, and its numbers stay exact there.

On backends Keras marks thread-safe, with `verbose=0`, `CallbackList` runs
`on_train_batch_end` on a thread pool and the training thread does not wait
for each step, unless a callback overrides a batch-end hook without
`async_safe = True`. One child process per backend checks that every
keras-gpu callback, and the default set, leaves that mode as found, that the
batch ends really ran off the training thread, and that the counts are exact
and the rates agree with a stopwatch that is itself asynchronous-safe.
"""

from __future__ import annotations

import pytest

from tests.backends._common import BACKENDS, WITHOUT_TENSORFLOW, results_per_backend

pytestmark = WITHOUT_TENSORFLOW

_CHILD = """
import json, os, tempfile, threading, time
import numpy as np
import keras
import keras_gpu

SAMPLES, BATCH, EPOCHS = 1003, 10, 3
out = tempfile.mkdtemp()

def model():
    keras.utils.set_random_seed(0)
    m = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
    m.compile(optimizer="sgd", loss="mse")
    return m

class Watch(keras.callbacks.Callback):
    # Asynchronous-safe: it only notes which thread ran each batch end, and times epochs on the training thread.
    async_safe = True
    def __init__(self):
        super().__init__()
        self.threads, self.phases = set(), []
    def on_epoch_begin(self, epoch, logs=None):
        self.t0 = time.perf_counter()
    def on_train_batch_end(self, batch, logs=None):
        self.threads.add(threading.get_ident())
    def on_epoch_end(self, epoch, logs=None):
        self.phases.append(time.perf_counter() - self.t0)  # Keras waited for every step and batch end

m = model()
each = {
    "ThroughputLogger": keras_gpu.ThroughputLogger(os.path.join(out, "t")),
    "MemoryLogger": keras_gpu.MemoryLogger(os.path.join(out, "m")),
    "StepTimeLogger": keras_gpu.StepTimeLogger(os.path.join(out, "s")),
    "ModelCheckpoint(epoch)": keras_gpu.ModelCheckpoint(os.path.join(out, "c.weights.h5"), save_weights_only=True),
    "ModelCheckpoint(batches)": keras_gpu.ModelCheckpoint(os.path.join(out, "b.weights.h5"), save_weights_only=True,
                                                          save_freq=5),
    "BackupAndRestore": keras_gpu.BackupAndRestore(os.path.join(out, "backup")),
    "default set": keras_gpu.callbacks(os.path.join(out, "d")),
}
modes = {name: keras.callbacks.CallbackList(cb if isinstance(cb, list) else [cb], model=m)._async_train
         for name, cb in each.items()}

x = np.random.default_rng(0).normal(size=(SAMPLES, 16)).astype("float32")
y = np.zeros((SAMPLES, 1), "float32")
watch = Watch()
kg = keras_gpu.callbacks(os.path.join(out, "runs"))
m.fit(x, y, batch_size=BATCH, epochs=EPOCHS, verbose=0, callbacks=[*kg, watch])
throughput = next(cb for cb in kg if isinstance(cb, keras_gpu.ThroughputLogger))

# A generator: the batch size is not known before fit, so the batches the training thread takes are counted,
# while Keras' pool runs the batch ends behind it.
def batches():
    for _ in range(EPOCHS):
        for i in range(0, SAMPLES, BATCH):
            yield x[i : i + BATCH], y[i : i + BATCH]

counted = keras_gpu.ThroughputLogger(os.path.join(out, "gen"), every_n_steps=7)
model().fit(batches(), steps_per_epoch=101, epochs=EPOCHS, verbose=0, callbacks=[counted, Watch()])
print("RESULT" + json.dumps({
    "generator": {k: counted.summary[k] for k in ("steps", "samples")},
    "modes": modes,
    "batch_end_threads": len(watch.threads),
    "on_training_thread": threading.get_ident() in watch.threads,
    "phases": watch.phases,
    "summary": {k: throughput.summary[k] for k in ("steps", "samples", "epochs", "train_seconds")},
}))
"""


@pytest.fixture(scope="module")
def results():
    return results_per_backend(_CHILD)


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_callback_keeps_keras_dispatch_asynchronous(results, backend):
    modes = results[backend]["modes"]
    # A checkpoint saved every few batches saves from the batch end, as Keras' own does: synchronous.
    assert modes.pop("ModelCheckpoint(batches)") is False
    assert modes == dict.fromkeys(modes, True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_batch_ends_run_on_keras_thread_pool_with_the_default_set(results, backend):
    result = results[backend]
    assert result["batch_end_threads"] >= 1
    assert not result["on_training_thread"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_counts_are_exact_and_rates_agree_with_a_stopwatch(results, backend):
    result = results[backend]
    summary = result["summary"]
    assert (summary["steps"], summary["samples"], summary["epochs"]) == (101 * 3, 1003 * 3, 3)
    # Each training phase ends when its last step finished, before the epoch's end the stopwatch reads.
    total = sum(result["phases"])
    assert 0 < summary["train_seconds"] <= total
    assert summary["train_seconds"] == pytest.approx(total, rel=0.25)


@pytest.mark.parametrize("backend", BACKENDS[:1])  # jax: PyTorch's generator fits count short, dispatch aside
def test_counted_batches_are_exact_when_the_training_thread_runs_ahead(results, backend):
    # 101 batches per pass, the last of 3 samples; the counter is read as it stood at each batch end looked at.
    assert results[backend]["generator"] == {"steps": 101 * 3, "samples": 1003 * 3}
