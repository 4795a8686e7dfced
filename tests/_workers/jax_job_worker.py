"""One JAX job for tests/backends/test_jax_multiprocess.py, run alone or under `keras-gpu launch`.

    python jax_job_worker.py OUT_DIR

Writes `OUT_DIR/attempt_<restart>/result_<rank>.json`. Three fits, each from
the same initial weights, with the script of the README: `make_strategy()`,
build and compile in its scope, `fit(x, y, batch_size=GLOBAL)` outside it:

1. NumPy input (shuffled), with ThroughputLogger, StepTimeLogger,
   ModelCheckpoint and a stopwatch; then `evaluate` and `predict`;
2. the same batches from a `keras.utils.PyDataset`;
3. NumPy input with BackupAndRestore. With `KILL_AT_EPOCH=E`, on the first
   attempt of a launched job, worker 1 kills itself (SIGKILL) when epoch E
   begins, once the chief's backup of epoch E-1 is on disk.

With `KERAS_INITIALIZE_ON_RESTART=1`, a restarted attempt joins the job with
`keras.distribution.initialize()` (no arguments) before `make_strategy()`.
With `LOAD_CHECKPOINT=PATH`, the weights of that checkpoint are loaded and
reported at the end.
"""

import json
import os
import signal
import sys
import time

import keras_gpu

if os.environ.get("KERAS_INITIALIZE_ON_RESTART") and os.environ.get("KERAS_GPU_RESTART_COUNT") == "1":
    import keras

    keras.distribution.initialize()  # no arguments: the launcher's KERAS_DISTRIBUTION_* variables
strategy = keras_gpu.make_strategy()

import keras
import numpy as np

from tests._callbacks import TrainingPhases

GLOBAL, N, EPOCHS = 64, 64 * 24, 2
out_dir = sys.argv[1]
rank = int(os.environ.get("KERAS_GPU_WORKER_INDEX", "0"))
attempt = os.path.join(out_dir, f"attempt_{os.environ.get('KERAS_GPU_RESTART_COUNT', 'single')}")
os.makedirs(attempt, exist_ok=True)
launched = "KERAS_GPU_WORKER_INDEX" in os.environ

rng = np.random.default_rng(0)
x = rng.normal(size=(N, 16)).astype("float32")
y = (x @ rng.normal(size=(16, 4))).astype("float32")
keras.utils.set_random_seed(7)


def build():
    with strategy.scope():
        model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="tanh"), keras.layers.Dense(4)])
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", metrics=["mae"])
    return model


def weights(model):
    return [np.asarray(w).tolist() for w in model.get_weights()]



class Batches(keras.utils.PyDataset):
    def __len__(self):
        return N // GLOBAL

    def __getitem__(self, i):
        return x[i * GLOBAL : (i + 1) * GLOBAL], y[i * GLOBAL : (i + 1) * GLOBAL]


class KillWorker1(keras.callbacks.Callback):
    def __init__(self, epoch, backup_dir):
        super().__init__()
        self.epoch, self.metadata = epoch, os.path.join(backup_dir, "training_metadata.json")

    def on_epoch_begin(self, epoch, logs=None):
        if epoch != self.epoch or rank != 1:
            return
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the chief's backup of the previous epoch must be complete
            try:
                with open(self.metadata) as f:  # Keras writes the next epoch to run, after the weights
                    if json.load(f).get("epoch", -1) >= epoch:
                        break
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGKILL)


model = build()
initial = model.get_weights()
result = {"replicas": strategy.num_replicas_in_sync, "kind": strategy.kind, "rank": rank,
          # keras_gpu's own reading of the place, without TensorFlow: from the process group and from the strategy
          "place": [keras_gpu.is_chief(), keras_gpu.worker_index(), keras_gpu.is_chief(strategy), keras_gpu.worker_index(strategy)]}

watch = TrainingPhases()
throughput = keras_gpu.ThroughputLogger(os.path.join(attempt, "logs"), every_n_steps=2)
checkpoint = keras_gpu.ModelCheckpoint(os.path.join(attempt, f"ckpt_{rank}.weights.h5"), save_weights_only=True)
step_time = keras_gpu.StepTimeLogger(os.path.join(attempt, "logs"), profile_every_s=0)
model.fit(x, y, batch_size=GLOBAL, epochs=EPOCHS, verbose=0, callbacks=[watch, throughput, step_time, checkpoint])
result.update(
    numpy=weights(model), stopwatch=watch.train, summary=throughput.summary, writes_checkpoints=checkpoint.writes_checkpoints,
    evaluate=model.evaluate(x, y, batch_size=GLOBAL, verbose=0),
    predict=model.predict(x[: 4 * GLOBAL], batch_size=GLOBAL, verbose=0).tolist(),
)

model.set_weights(initial)
counted = keras_gpu.ThroughputLogger(os.path.join(attempt, "logs_pydataset"))  # no batch size known: counted
model.fit(Batches(), epochs=EPOCHS, verbose=0, callbacks=[counted])
result.update(pydataset=weights(model), pydataset_summary=counted.summary)

model = build()
model.set_weights(initial)
backup_dir = os.path.join(out_dir, "backup")
callbacks = [keras_gpu.BackupAndRestore(backup_dir)]
if launched and os.environ.get("KILL_AT_EPOCH") and os.environ.get("KERAS_GPU_RESTART_COUNT") == "0":
    callbacks.append(KillWorker1(int(os.environ["KILL_AT_EPOCH"]), backup_dir))
history = model.fit(x, y, batch_size=GLOBAL, epochs=4, shuffle=False, verbose=0, callbacks=callbacks)
result.update(resumed=weights(model), resumed_epochs=len(history.history.get("loss", [])))

if os.environ.get("LOAD_CHECKPOINT"):
    model.load_weights(os.environ["LOAD_CHECKPOINT"])
    result["checkpoint"] = weights(model)
with open(os.path.join(attempt, f"result_{rank}.json"), "w") as f:
    json.dump(result, f)
