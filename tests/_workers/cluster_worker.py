"""Cluster-view test worker: a multi-worker `fit` with StepTimeLogger, one worker made slow on demand.

Usage: cluster_worker.py LOG_DIR MODE OUT   (run under `keras-gpu launch`)

MODE:
- `balanced`: every worker does the same work;
- `compute`: worker 1's model runs eight extra 384x384 matmuls per step (no
  extra variables, so the collectives still match);
- `host`: a callback on worker 1 sleeps 15 ms after every step;
- `ladder`: worker k sleeps 4*k ms after every step (each worker's figures differ);
- `tracefail`: worker 1 cannot read its traces (its breakdown is "not available").

Each worker writes OUT/w<rank>.json: its own last breakdown and what it
received at each gather.
"""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> None:
    log_dir, mode, out = sys.argv[1], sys.argv[2], sys.argv[3]
    import keras_gpu

    strategy = keras_gpu.make_strategy("multiworker")
    import keras
    import numpy as np
    import tensorflow as tf

    from keras_gpu.loggers import step_time

    rank = keras_gpu.worker_index(strategy)
    if mode == "tracefail" and rank == 1:

        def unreadable(path):
            raise OSError("injected: this worker cannot read its trace")

        step_time.xspace.load = unreadable

    class Extra(keras.layers.Layer):
        """Eight matmuls whose result is multiplied by 0: more work, same variables."""

        def compute_output_shape(self, shape):
            return shape

        def call(self, x):
            m = tf.random.uniform((384, 384))
            for _ in range(8):
                m = tf.matmul(m, m) / 384.0
            return x + 0.0 * tf.reduce_sum(m)

    class Sleep(keras.callbacks.Callback):
        def __init__(self, seconds):
            super().__init__()
            self.seconds = seconds

        def on_train_batch_end(self, batch, logs=None):
            time.sleep(self.seconds)

    with strategy.scope():
        # Steps of several ms of real compute, so that host jitter stays small beside them.
        layers = [keras.Input((256,))]
        if mode == "compute" and rank == 1:
            layers.append(Extra())
        layers += [keras.layers.Dense(512, activation="relu"), keras.layers.Dense(10)]
        model = keras.Sequential(layers)
        model.compile("sgd", "mse")
    rng = np.random.default_rng(0)
    x, y = rng.random((256 * 64, 256), dtype=np.float32), rng.random((256 * 64, 10), dtype=np.float32)
    cb = step_time.StepTimeLogger(log_dir, profile_steps=20, multiworker_tracing=True)
    callbacks = [cb]
    if mode == "host" and rank == 1:
        callbacks.append(Sleep(0.015))
    if mode == "ladder":
        callbacks.append(Sleep(0.004 * rank))
    model.fit(x, y, batch_size=256, epochs=3, verbose=0, callbacks=callbacks)
    record = {
        "rank": rank,
        "last": None if cb.last is None else cb.last.as_dict(),
        "cluster": [
            None
            if c is None
            else {
                "slowest_worker": c.slowest_worker,
                "imbalance": c.imbalance,
                "reporting": c.reporting,
                "rows": {str(k): v for k, v in c.rows.items()},
            }
            for c in cb.cluster
        ],
    }
    with open(os.path.join(out, f"w{rank}.json"), "w") as f:
        json.dump(record, f)


if __name__ == "__main__":
    main()
