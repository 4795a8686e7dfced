"""A small two-process Keras job (TensorFlow or JAX) for the fault tests, run under `keras-gpu launch` or by hand.

    python fault_worker.py OUT_DIR

`FAULT` chooses what goes wrong (nothing when unset):

- `raise`: worker 1 raises `RuntimeError("worker 1 fails")` in epoch 1, batch 3;
- `kill`: worker 1 kills itself (SIGKILL) there instead;
- `backup_kills`: the chief kills itself (SIGKILL) inside `BackupAndRestore`'s
  writes: in attempt 0 after the weights of epoch 2 went to the temporary
  file but before the rename, in attempt 1 after the weights of epoch 2 were
  renamed into place but before the metadata was;
- `input`: worker 1's `PyDataset.__getitem__` sleeps at index 4 once the
  dataset's `on_epoch_end` has run (the heartbeat shows epoch 1, after batch 4).

Worker 1 writes the wall-clock time of its fault to `OUT_DIR/fault_at` first.

It trains with `keras_gpu.BackupAndRestore(OUT_DIR/backup)` and a
ThroughputLogger, 4 epochs of 8 global batches, and writes
`OUT_DIR/result_<rank>.json` with the final weights.
"""

import json
import os
import signal
import sys
import time

import keras_gpu

strategy = keras_gpu.make_strategy()

import keras
import numpy as np

GLOBAL, STEPS, EPOCHS = 32, 8, 4
out_dir = sys.argv[1]
rank = int(os.environ.get("KERAS_GPU_WORKER_INDEX", os.environ.get("RANK", "0")))
attempt = int(os.environ.get("KERAS_GPU_RESTART_COUNT", "0"))
fault = os.environ.get("FAULT", "")
rng = np.random.default_rng(0)
x = rng.normal(size=(GLOBAL * STEPS, 8)).astype("float32")
y = (x @ rng.normal(size=(8, 2))).astype("float32")
keras.utils.set_random_seed(3)
with strategy.scope():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="tanh"), keras.layers.Dense(2)])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")


def _stamp():
    with open(os.path.join(out_dir, "fault_at"), "w") as f:
        f.write(repr(time.time()))


class Batches(keras.utils.PyDataset):
    def __init__(self):
        super().__init__()
        self.epoch = 0

    def __len__(self):
        return STEPS

    def __getitem__(self, i):
        if fault == "input" and rank == 1 and self.epoch == 1 and i == 4:
            _stamp()
            time.sleep(3600)  # stuck in its input pipeline
        return x[i * GLOBAL : (i + 1) * GLOBAL], y[i * GLOBAL : (i + 1) * GLOBAL]

    def on_epoch_end(self):
        self.epoch += 1


class Fault(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if fault in ("raise", "kill") and rank == 1 and batch == 2:
            _stamp()
            if fault == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError("worker 1 fails")


if fault == "backup_kills" and rank == 0 and attempt < 2:
    replace, calls = os.replace, []

    def killing_replace(src, dst):
        calls.append(os.path.basename(dst))
        weights = [c for c in calls if c == "latest.weights.h5"]
        if attempt == 0 and len(weights) == 2:  # the temporary file of epoch 2 is written, not yet renamed
            os.kill(os.getpid(), signal.SIGKILL)
        replace(src, dst)
        if attempt == 1 and len(weights) == 1 and calls[-1] == "latest.weights.h5":  # weights renamed, metadata not
            os.kill(os.getpid(), signal.SIGKILL)

    os.replace = killing_replace

callbacks = [keras_gpu.BackupAndRestore(os.path.join(out_dir, "backup")), Fault(),
             keras_gpu.ThroughputLogger(os.path.join(out_dir, "logs"))]
history = model.fit(Batches() if fault == "input" else x, y if fault != "input" else None, batch_size=None if fault == "input" else GLOBAL,
                    epochs=EPOCHS, shuffle=False, verbose=0, callbacks=callbacks)
with open(os.path.join(out_dir, f"result_{rank}.json"), "w") as f:
    json.dump({"weights": [np.asarray(w).tolist() for w in model.get_weights()],
               "epochs_run": len(history.history.get("loss", [])), "attempt": attempt}, f)
