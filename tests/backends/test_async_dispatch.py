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
from keras_gpu.hooks.run_record import RunRecord

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
    "RunRecord": RunRecord(),  # what `keras-gpu scale` and `keras-gpu tune` add to the fit they time
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
# `keras-gpu scale`'s window over batches of varying sizes: steps 5 to 14 of the fit, counted as they were taken.
from keras_gpu.hooks.study_env import StudySettings
from keras_gpu.hooks.scale_window import ScaleWindow

sizes = [8 + i % 3 for i in range(40)]
def uneven():
    start = 0
    for size in sizes:
        yield x[start : start + size], y[start : start + size]
        start += size

scale = ScaleWindow(StudySettings(tempfile.mkdtemp(), warmup=5, steps=10))
model().fit(uneven(), steps_per_epoch=40, epochs=1, verbose=0, callbacks=[scale])

# Every keras-gpu callback with a batch end at once, the state syncs each made noted: Keras' `Callback.model`
# syncs the JAX training state, and from the pool that races the step on the training thread.
pool_syncs = []
if keras.backend.backend() == "jax":
    from keras.src.backend.jax.trainer import JAXTrainer

    _sync = JAXTrainer.jax_state_sync
    def noted_sync(self):
        if threading.current_thread() is not threading.main_thread():
            pool_syncs.append(threading.current_thread().name)
        return _sync(self)
    JAXTrainer.jax_state_sync = noted_sync
every = [
    *keras_gpu.callbacks(os.path.join(out, "every")),
    keras_gpu.ModelCheckpoint(os.path.join(out, "e.weights.h5"), save_weights_only=True),
    keras_gpu.BackupAndRestore(os.path.join(out, "every-backup")),
    ScaleWindow(StudySettings(tempfile.mkdtemp(), warmup=30, steps=200)),
    Watch(),
]
history = model().fit(x, y, batch_size=BATCH, epochs=5, verbose=0, callbacks=every)

# A progress bar keeps the dispatch: Keras decides it before it adds its ProgbarLogger (Keras 3.15).
progress = {}
for verbose in (1, 2):
    seen = Watch()
    model().fit(x[:200], y[:200], batch_size=BATCH, epochs=1, verbose=verbose,
                callbacks=[*keras_gpu.callbacks(os.path.join(out, f"verbose{verbose}")), seen])
    progress[verbose] = bool(seen.threads) and threading.get_ident() not in seen.threads

print("RESULT" + json.dumps({
    "progress_bar_async": progress,
    "every": {"epochs": len(history.history["loss"]), "stopped_by_scale": every[-2].result["steps"],
              "pool_syncs": len(pool_syncs), "async": every[-1].threads != {threading.get_ident()}},
    "scale": {k: scale.result[k] for k in ("steps", "steps_trained", "samples")} | {"sizes": sizes},
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
def test_a_progress_bar_keeps_the_dispatch_asynchronous(results, backend):
    # Keras 3.15 decides the dispatch before it adds its ProgbarLogger: with verbose=1 or 2 the batch ends of the
    # default set still run on the pool (what docs/how-to/use-on-jax.md says).
    assert results[backend]["progress_bar_async"] == {"1": True, "2": True}


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


@pytest.mark.parametrize("backend", BACKENDS)
def test_counted_batches_are_exact_when_the_training_thread_runs_ahead(results, backend):
    # 101 batches per pass, the last of 3 samples; the counter is read as it stood at each batch end looked at:
    # PyTorch's trainer takes a step's batch before its batch begin, JAX's inside the step.
    assert results[backend]["generator"] == {"steps": 101 * 3, "samples": 1003 * 3}


@pytest.mark.parametrize("backend", BACKENDS)
def test_scale_window_counts_the_batches_of_its_own_steps(results, backend):
    scale = results[backend]["scale"]
    # A window of 10 steps from step 5, between batch ends: later where the pool took a later batch end first.
    start = scale["steps_trained"] - scale["steps"]
    assert start >= 5 and scale["steps"] >= 10 and scale["steps_trained"] <= 40
    assert scale["samples"] == sum(scale["sizes"][start : scale["steps_trained"]])


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_callback_runs_on_the_pool_without_touching_the_training_state(results, backend):
    # Per-epoch checkpoints and backups, the default set and `keras-gpu scale`'s window (which stops the fit
    # from a batch end) in one fit: on JAX a state sync from the pool made `fit` fail ("Array has been deleted").
    every = results[backend]["every"]
    assert every["async"]
    assert every["pool_syncs"] == 0
    assert every["stopped_by_scale"] >= 200  # a batch end the pool took late is covered by a later one
    assert every["epochs"] == 3  # of 5, 101 steps each: the window of steps 30 to 229 stopped the fit in the third
