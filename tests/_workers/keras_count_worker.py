"""Fit small models whose samples `ThroughputLogger` reads from Keras' own count, or counts with the step probe.

Run with `main(LOG_DIR)` on TensorFlow (two logical CPUs). Every case holds
1003 samples a pass in `tf.data` batches of 10 (a dynamic batch dimension,
a short last batch of 3) and trains 2 epochs. Prints one `RESULT` JSON line:
per case the true sample count, what the event file implies (see
`tests._util.implied_samples`), the fit summary's samples, and
`source`: `"keras"` where the model trained with no probe in its step
(Keras' count was read), `"probe"` where the counting probe was installed.
"""

from __future__ import annotations

import json
import logging
import os
import sys

import tensorflow as tf

(_cpu,) = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(_cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import keras
import numpy as np

from keras_gpu.hooks import step_probe
from keras_gpu.hooks.factory import ThroughputLogger
from tests._util import implied_samples as implied

N, BATCH, EPOCHS = 1003, 10, 2
FULL = EPOCHS * N
rng = np.random.default_rng(0)
X = rng.random((N, 8), dtype=np.float32)
Y = rng.random((N, 1), dtype=np.float32)
DS = tf.data.Dataset.from_tensor_slices((X, Y))
VAL = tf.data.Dataset.from_tensor_slices((X[:95], Y[:95])).batch(BATCH)  # 10 batches, the last of 5


def layers():
    return [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]


def plain(strategy=None):
    with strategy.scope() if strategy is not None else _null():
        model = keras.Sequential(layers())
        model.compile("sgd", "mse")
    return model


class OwnStep(keras.Sequential):
    """A model whose class overrides `train_step` (it still calls Keras' step)."""

    def train_step(self, data):
        return super().train_step(data)


def own_step():
    model = OwnStep(layers())
    model.compile("sgd", "mse")
    return model


class EvaluateAtEpochEnd(keras.callbacks.Callback):
    """Placed before the logger: `evaluate` at each epoch's end resets Keras' count before the logger's hook."""

    def on_epoch_end(self, epoch, logs=None):
        self.model.evaluate(VAL, verbose=0)


class ResetMidEpoch(keras.callbacks.Callback):
    """Placed before the logger: resets the model's metrics in the middle of the first epoch."""

    def __init__(self, done=False):
        super().__init__()
        self.done = done

    def on_train_batch_end(self, batch, logs=None):
        if batch == 50 and not self.done:
            self.done = True
            self.model.reset_metrics()


def _null():
    import contextlib

    return contextlib.nullcontext()


def cases():
    """`name -> (model, fit kwargs, callbacks before the logger)`."""
    mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    unknown = DS.batch(BATCH).filter(lambda x, y: tf.constant(True))
    return {
        "validation_known_length": lambda: (plain(), {"x": DS.batch(BATCH), "validation_data": VAL}, []),
        "evaluate_callback_known_length": lambda: (plain(), {"x": DS.batch(BATCH)}, [EvaluateAtEpochEnd()]),
        "validation_unknown_length": lambda: (plain(), {"x": unknown, "validation_data": VAL}, []),
        "own_train_step": lambda: (own_step(), {"x": DS.batch(BATCH), "validation_data": VAL}, []),
        "mirrored_dynamic": lambda: (plain(mirrored), {"x": DS.batch(BATCH), "validation_data": VAL}, []),
        "mirrored_unknown_length": lambda: (plain(mirrored), {"x": unknown}, []),
        "reset_mid_epoch": lambda: (plain(), {"x": DS.batch(BATCH)}, [ResetMidEpoch()]),
    }


def main(log_dir: str) -> None:
    sys.setswitchinterval(1e-3)
    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record):
            messages.append(record.getMessage())

    logging.getLogger("keras_gpu").addHandler(Collect(logging.WARNING))
    results = {}
    made = cases()
    reset = {}
    made["reset_mid_epoch_next_fit"] = lambda: (reset["model"], {"x": DS.batch(BATCH)}, [ResetMidEpoch(done=True)])
    for name, make in made.items():
        model, fit_kwargs, before = make()
        if name == "reset_mid_epoch":
            reset["model"] = model
        run_dir = os.path.join(log_dir, name)
        logger = ThroughputLogger(run_dir, every_n_steps=30)
        start = len(messages)
        model.fit(epochs=EPOCHS, verbose=0, callbacks=[*before, logger], **fit_kwargs)
        samples, _, points = implied(os.path.join(run_dir, "train"))
        results[name] = {
            "truth": FULL,
            "implied": samples,
            "points": points,
            "summary_samples": logger.summary["samples"],
            "summary_steps": logger.summary["steps"],
            "source": "probe" if step_probe.installed(model) is not None else "keras",
            "warnings": messages[start:],
        }
    print("RESULT", json.dumps({"results": results}))
