"""Writes `tests/data/tf_run`: a small run that TensorFlow wrote, for reading back without TensorFlow.

Run from the repository root with TensorFlow installed::

    KERAS_BACKEND=tensorflow python tests/data/make_tf_run.py

A two-epoch fit of a small MLP on the TensorFlow backend, with
`keras_gpu.callbacks()` (throughput, memory and one step-time trace; no
placement, whose graph would make the files large) and Keras' own
`TensorBoard` callback in the same `log_dir`, so the run holds events that
`tf.summary` wrote as well as keras-gpu's. The profiler's trace files are
removed afterwards: the report reads the event files only.
"""

from __future__ import annotations

import os
import shutil

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras
import numpy as np

import keras_gpu

HERE = os.path.dirname(os.path.abspath(__file__))
LOG_DIR = os.path.join(HERE, "tf_run")


def main() -> None:
    shutil.rmtree(LOG_DIR, ignore_errors=True)
    rng = np.random.default_rng(0)
    x = rng.random((2048, 32), dtype=np.float32)
    y = rng.random((2048, 4), dtype=np.float32)
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(4)])
    model.compile("sgd", "mse")
    cbs = [
        *keras_gpu.callbacks(LOG_DIR, placement=False, every_s=0.05, profile_every_s=1.0),
        keras.callbacks.TensorBoard(LOG_DIR, write_graph=False, profile_batch=0),
    ]
    step_time = next(c for c in cbs if isinstance(c, keras_gpu.StepTimeLogger))
    step_time.warmup_steps, step_time.profile_steps = 10, 10
    model.fit(x, y, batch_size=32, epochs=2, verbose=0, callbacks=cbs)
    shutil.rmtree(os.path.join(LOG_DIR, "train", "plugins"), ignore_errors=True)


if __name__ == "__main__":
    main()
