"""Reliability test worker: multi-worker `fit` with progress records, made to fail on demand.

Usage: train_worker.py OUT --epochs E [--die-at EPOCH] [--backup] [--batch-sleep S] [--log-dir DIR]

Run under `keras-gpu launch`. Each worker of attempt `a` (KERAS_GPU_RESTART_COUNT)
writes, under OUT:

- `pids/a<a>_w<rank>.pid`: its pid, before TensorFlow starts;
- `records/a<a>_w<rank>.jsonl`: one JSON line when training begins
  (`{"event": "begin", "initial_epoch", "weights", "writes_backup"}`) and one
  per finished epoch (`{"event": "epoch", "epoch", "loss", "weights"}`), each
  flushed and synced, where `weights` is a SHA-1 of the model's weights;
- `done/w<rank>.json` when `fit` returned.

`--die-at EPOCH` makes worker 1 of attempt 0 kill itself with SIGKILL when
that epoch begins. `--backup` adds `keras_gpu.BackupAndRestore(OUT/backup)`;
`--log-dir` adds `keras_gpu.callbacks(DIR)`; `--batch-sleep` slows each step
down so that a test can act while the job trains.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import time


def _append(path: str, record: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--epochs", type=int, required=True)
    parser.add_argument("--die-at", type=int, default=None)
    parser.add_argument("--backup", action="store_true")
    parser.add_argument("--batch-sleep", type=float, default=0.0)
    parser.add_argument("--log-dir", default=None)
    args = parser.parse_args()

    rank = int(os.environ["KERAS_GPU_WORKER_INDEX"])
    attempt = int(os.environ["KERAS_GPU_RESTART_COUNT"])
    for sub in ("pids", "records", "done"):
        os.makedirs(os.path.join(args.out, sub), exist_ok=True)
    with open(os.path.join(args.out, "pids", f"a{attempt}_w{rank}.pid"), "w") as f:
        f.write(str(os.getpid()))
    records = os.path.join(args.out, "records", f"a{attempt}_w{rank}.jsonl")

    import keras
    import numpy as np
    import tensorflow as tf

    import keras_gpu

    strategy = keras_gpu.make_strategy("multiworker", startup_timeout=60)

    def weights_hash(model) -> str:
        digest = hashlib.sha1()
        for w in model.get_weights():
            digest.update(np.ascontiguousarray(w).tobytes())
        return digest.hexdigest()

    class Record(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            _append(
                records,
                {
                    "event": "begin",
                    "initial_epoch": int(getattr(self.model, "_initial_epoch", 0) or 0),
                    "weights": weights_hash(self.model),
                    "writes_backup": backup.writes_backup if backup is not None else None,
                },
            )

        def on_epoch_begin(self, epoch, logs=None):
            if attempt == 0 and rank == 1 and epoch == args.die_at:
                os.kill(os.getpid(), signal.SIGKILL)

        def on_train_batch_end(self, batch, logs=None):
            if args.batch_sleep:
                time.sleep(args.batch_sleep)

        def on_epoch_end(self, epoch, logs=None):
            _append(records, {"event": "epoch", "epoch": epoch, "loss": float(logs["loss"]), "weights": weights_hash(self.model)})

    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 8)).astype("float32")
    y = (x @ rng.normal(size=(8, 1))).astype("float32")
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).with_options(options)

    keras.utils.set_random_seed(1)
    with strategy.scope():
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
        model.compile(keras.optimizers.SGD(0.02), "mse")

    callbacks = []
    backup = None
    if args.backup:
        from keras_gpu import BackupAndRestore

        backup = BackupAndRestore(os.path.join(args.out, "backup"))
        callbacks.append(backup)
    if args.log_dir:
        callbacks.extend(keras_gpu.callbacks(args.log_dir, batch_size=32))
    # Last: "begin" sees the restored state, and an epoch is recorded after the others flushed it.
    callbacks.append(Record())
    history = model.fit(dataset, epochs=args.epochs, verbose=0, shuffle=False, callbacks=callbacks)
    with open(os.path.join(args.out, "done", f"w{rank}.json"), "w") as f:
        json.dump({"attempt": attempt, "loss": history.history["loss"]}, f)


if __name__ == "__main__":
    main()
