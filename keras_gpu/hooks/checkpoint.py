"""`keras_gpu.ModelCheckpoint`: `keras.callbacks.ModelCheckpoint` for multi-worker jobs.

Keras 3's `ModelCheckpoint` has no notion of workers: every worker of a
`MultiWorkerMirroredStrategy` job writes the same file. On one machine (or
shared storage) they race on it, and HDF5's file lock ends the job with
`BlockingIOError: Unable to synchronously create file (unable to lock file)`.

This subclass lets only the chief write. Every worker still runs the same
training, so the chief's file holds the weights all of them share (except
BatchNormalization's moving statistics, which Keras does not aggregate across
workers; use `BatchNormalization(synchronized=True)`).
"""

from __future__ import annotations

from typing import Any

import keras

from keras_gpu.core import backend

__all__ = ["ModelCheckpoint"]


class ModelCheckpoint(keras.callbacks.ModelCheckpoint):
    """`ModelCheckpoint` that writes on the chief only; on other workers it does nothing.

    Takes the same arguments as `keras.callbacks.ModelCheckpoint`. Whether
    this process is the chief (the `"chief"` task, else worker 0) is read from
    the model's strategy (on JAX: process 0 of `jax.distributed`) when training
    begins. In a single process it behaves
    exactly like Keras' own. Saving reads each variable's local copy and runs
    no collective, so the chief never waits for its peers while it writes.

    Attributes:
        writes_checkpoints: Whether this process writes checkpoints; `None`
            before training begins.
    """

    def __init__(self, filepath: Any, **kwargs: Any) -> None:
        super().__init__(filepath, **kwargs)
        self.writes_checkpoints: bool | None = None

    def on_train_begin(self, logs=None):
        self.writes_checkpoints = backend.task_info(self.model).is_chief
        super().on_train_begin(logs)

    def on_train_batch_end(self, batch, logs=None):
        if self.writes_checkpoints:
            with backend.writing_alone():
                super().on_train_batch_end(batch, logs)

    def on_epoch_end(self, epoch, logs=None):
        if self.writes_checkpoints:
            with backend.writing_alone():
                super().on_epoch_end(epoch, logs)

    def on_train_end(self, logs=None):
        if self.writes_checkpoints:
            with backend.writing_alone():
                super().on_train_end(logs)
