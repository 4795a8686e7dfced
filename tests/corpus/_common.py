"""What every corpus program is made of: its record, the in-step sample count, and a custom `train_step` per backend."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import keras
import numpy as np

from tests._callbacks import TrainedSamples

__all__ = ["EPOCHS", "Built", "CustomStep", "Program", "TrainedSamples", "rng", "uniform"]

EPOCHS = 2


@dataclass
class Built:
    """One program, ready to fit.

    Attributes:
        model: The compiled model; its metrics hold a `TrainedSamples`.
        fit: `fit` keyword arguments besides `epochs`, `verbose` and `callbacks`.
        samples: Samples the data holds over `EPOCHS` epochs, counted by hand.
        input: What feeds it: "arrays", "tf.data", "generator", "pydataset" or "dataloader".
    """

    model: keras.Model
    fit: dict[str, Any]
    samples: int
    input: str


@dataclass(frozen=True)
class Program:
    """A small program of a real shape (where it runs: `tests.corpus.CATALOG`).

    Attributes:
        name: Its key in the corpus.
        build: Builds the model and its data (after the runner seeded every generator).
        forward_flops: Forward FLOPs per sample, counted by hand (multiply-add = 2; matmul-like ops only).
        policy: A global dtype policy it needs ("mixed_float16"), reset after it.
    """

    name: str
    build: Callable[[], Built]
    forward_flops: int
    policy: str | None = None


def rng() -> np.random.Generator:
    """A data generator of its own, so data never draws from NumPy's global state."""
    return np.random.default_rng(7)


def uniform(gen: np.random.Generator, *shape: int) -> np.ndarray:
    return gen.random(shape, dtype=np.float32)


class CustomStep(keras.Model):
    """A subclassed model with its own `train_step` on each backend (as the Keras guides write them).

    Subclasses define `call`; the step minimises the mean squared error of
    `call(x, training=True)` against `y`, with the backend's own gradients
    (a `GradientTape`, `jax.value_and_grad` over `stateless_call`, or
    `loss.backward()`), and updates a loss mean and a `TrainedSamples`.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.loss_mean = keras.metrics.Mean(name="loss")
        self.trained = TrainedSamples()

    @property
    def metrics(self):
        return [self.loss_mean, self.trained]

    def train_step(self, *args):
        backend = keras.backend.backend()
        if backend == "jax":
            return self._jax_step(*args)
        if backend == "torch":
            return self._torch_step(*args)
        return self._tf_step(*args)

    def _error(self, y, y_pred):
        return keras.ops.mean(keras.ops.square(y - y_pred))

    def _tf_step(self, data):
        import tensorflow as tf

        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self._error(y, y_pred)
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply(grads, self.trainable_variables)
        self.loss_mean.update_state(loss)
        self.trained.update_state(y, y_pred)
        return {"loss": self.loss_mean.result(), "trained_samples": self.trained.result()}

    def _torch_step(self, data):
        import torch

        x, y = data
        self.zero_grad()
        y_pred = self(x, training=True)
        loss = self._error(y, y_pred)
        loss.backward()
        grads = [v.value.grad for v in self.trainable_variables]
        with torch.no_grad():
            self.optimizer.apply(grads, self.trainable_variables)
        self.loss_mean.update_state(loss)
        self.trained.update_state(y, y_pred)
        return {"loss": self.loss_mean.result(), "trained_samples": self.trained.result()}

    def _jax_loss(self, trainable, non_trainable, x, y):
        y_pred, non_trainable = self.stateless_call(trainable, non_trainable, x, training=True)
        return self._error(y, y_pred), (y_pred, non_trainable)

    def _jax_step(self, state, data):
        import jax

        trainable, non_trainable, optimizer_vars, metric_vars = state
        x, y = data
        (loss, (y_pred, non_trainable)), grads = jax.value_and_grad(self._jax_loss, has_aux=True)(
            trainable, non_trainable, x, y
        )
        trainable, optimizer_vars = self.optimizer.stateless_apply(optimizer_vars, grads, trainable)
        n = len(self.loss_mean.variables)
        loss_vars = self.loss_mean.stateless_update_state(metric_vars[:n], loss)
        trained_vars = self.trained.stateless_update_state(metric_vars[n:], y, y_pred)
        logs = {
            "loss": self.loss_mean.stateless_result(loss_vars),
            "trained_samples": self.trained.stateless_result(trained_vars),
        }
        return logs, (trainable, non_trainable, optimizer_vars, [*loss_vars, *trained_vars])
