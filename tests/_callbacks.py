"""Keras callbacks shared by tests and their worker scripts (imported in the child processes too)."""

from __future__ import annotations

import time

import keras


class TrainingPhases(keras.callbacks.Callback):
    """The training phase of each epoch, by `time.perf_counter`: from its start to its last batch end.

    Attributes:
        train: Seconds per epoch, in order.
    """

    def __init__(self):
        super().__init__()
        self.train = []

    def on_epoch_begin(self, epoch, logs=None):
        self.t0 = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.last = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.train.append(self.last - self.t0)
