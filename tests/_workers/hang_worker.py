"""Launch test worker: a plain Keras script with its own callbacks only, whose worker 1 gets stuck in Python.

Usage: hang_worker.py OUT --call (fit | evaluate | predict) [--no-keras]

Imports nothing from keras_gpu and passes no `keras_gpu.Heartbeat`: under
`keras-gpu launch --hang-timeout` the launcher's bootstrap must make the
call report progress by itself. Each worker writes `OUT/pid_w<rank>` first.
Worker 0 runs the call again and again (a few ms per batch); worker 1 blocks
forever in its own batch-end callback, in epoch 2 after batch 5 of `fit`, or
after batch 5 of `evaluate` or `predict`, and writes the wall-clock time to
`OUT/stuck_at` first. With `--no-keras` every worker only sleeps (a script
that never enters fit, evaluate or predict).
"""

from __future__ import annotations

import argparse
import os
import threading
import time

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--call", choices=("fit", "evaluate", "predict"), default="fit")
parser.add_argument("--no-keras", action="store_true")
args = parser.parse_args()
rank = int(os.environ["KERAS_GPU_WORKER_INDEX"])
with open(os.path.join(args.out, f"pid_w{rank}"), "w") as f:
    f.write(str(os.getpid()))
if args.no_keras:
    time.sleep(300)
    raise SystemExit(0)

import keras
import numpy as np

never = threading.Event()
STUCK_EPOCH, STUCK_BATCH = 1, 4  # 0-based, as Keras passes them: epoch 2, after batch 5


class Stuck(keras.callbacks.Callback):
    """The script's own callback: slows worker 0 a little and blocks worker 1 for good."""

    def __init__(self):
        super().__init__()
        self.epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def _batch_end(self, batch, logs=None):
        if rank == 1 and batch == STUCK_BATCH and (args.call != "fit" or self.epoch == STUCK_EPOCH):
            with open(os.path.join(args.out, "stuck_at"), "w") as f:
                f.write(repr(time.time()))
            never.wait()
        time.sleep(0.005)

    on_train_batch_end = on_test_batch_end = on_predict_batch_end = _batch_end


rs = np.random.RandomState(0)
x = rs.rand(64, 4).astype("float32")
y = x[:, :1].copy()
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile(keras.optimizers.SGD(0.01), "mse")
for _ in range(10**6):
    if args.call == "fit":
        model.fit(x, y, batch_size=8, epochs=10**6, verbose=0, callbacks=[Stuck(), keras.callbacks.History()])
    elif args.call == "evaluate":
        model.evaluate(x, y, batch_size=8, verbose=0, callbacks=[Stuck()])
    else:
        model.predict(x, batch_size=8, verbose=0, callbacks=[Stuck()])
