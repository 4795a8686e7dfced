"""A job of N workers under `keras-gpu launch` where one worker is slow: the cluster view must name it.

    straggler_worker.py OUT_DIR SLOW SLEEP_S [EPOCHS]

Runs on whichever backend `KERAS_BACKEND` names: TensorFlow (the multi-worker
strategy) or JAX (one process per worker), with `keras_gpu.make_strategy()`.
A small MLP trains on in-memory data, 24 steps per epoch; worker `SLOW` (-1:
none) sleeps `SLEEP_S` after every step (host time between steps, a
callback, as a slow data loader or logger would). Every epoch's end shares
the rows (`EPOCH_SHARE_S` = 0), so a fit of `EPOCHS` epochs has `EPOCHS`
gathers. Each worker writes OUT_DIR/w<rank>.json: each gather's slowest
worker and the workers standing out, the verdict over the fit, and the
process's peak resident memory.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time

out_dir, slow, sleep_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
epochs = int(sys.argv[4]) if len(sys.argv) > 4 else 4
t0 = time.perf_counter()

import keras_gpu

strategy = keras_gpu.make_strategy()

import keras
import numpy as np

from keras_gpu.hooks import step_time_cluster
from keras_gpu.meters.cluster_view import verdict_over

step_time_cluster.EPOCH_SHARE_S = 0.0  # a gather at every epoch's end, however short the epoch
rank = keras_gpu.worker_index(strategy) or 0
GLOBAL, STEPS = 64, 24
rng = np.random.default_rng(0)
x = rng.normal(size=(GLOBAL * STEPS, 32)).astype("float32")
y = (x @ rng.normal(size=(32, 8))).astype("float32")


class Sleep(keras.callbacks.Callback):
    """Host time between steps on the slow worker only."""

    def on_train_batch_end(self, batch, logs=None):
        if rank == slow:
            time.sleep(sleep_s)


with strategy.scope():
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(8)])
    model.compile(optimizer="sgd", loss="mse")
step_time = keras_gpu.StepTimeLogger(os.path.join(out_dir, "logs"), profile_every_s=0)
model.fit(x, y, batch_size=GLOBAL, epochs=epochs, verbose=0, callbacks=[step_time, Sleep()])
gathers = [g for g in step_time.cluster if g is not None]
verdict = verdict_over(gathers)
record = {
    "rank": rank,
    "backend": keras.backend.backend(),
    "seconds": time.perf_counter() - t0,
    "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    "gathers": [
        {"slowest": g.slowest_worker, "reporting": g.reporting, "workers": g.workers,
         "out": [[w.worker, w.part, w.score] for w in g.outliers], "threshold": g.threshold,
         "busy_ms": [1e3 * v for v in g.busy]}
        for g in gathers
    ],
    "straggler": verdict.straggler,
    "part": verdict.part,
    "clear_gathers": verdict.clear_gathers,
    "sentence": verdict.sentence,
}
with open(os.path.join(out_dir, f"w{rank}.json"), "w") as f:
    json.dump(record, f)
