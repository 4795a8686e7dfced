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


class TrainedSamples(keras.metrics.Metric):
    """Samples in the batches the train steps took this epoch: each step adds its `y`'s first dimension.

    An independent count of what the model trained on, taken inside the step,
    to check the samples keras-gpu logs against.
    """

    def __init__(self, name="trained_samples"):
        super().__init__(name=name)
        self.total = self.add_variable((), initializer="zeros", name="total")

    def update_state(self, y_true, y_pred, sample_weight=None):
        self.total.assign_add(keras.ops.cast(keras.ops.shape(y_true)[0], self.total.dtype))

    def result(self):
        return keras.ops.convert_to_tensor(self.total)


class StopsSettled(keras.callbacks.Callback):
    """At each epoch's end, wait until no profiler stop of `StepTimeLogger` is under way (an epoch end that long).

    `StepTimeLogger` never makes training wait for its last trace's stop: a trace
    that comes due while one is stopping is put off, and where the epoch has no
    room left for it, to a later epoch. Placed after it, this makes the test's
    epoch ends outlast every stop, so that which epochs get traced does not
    depend on how fast the machine stops the profiler.
    """

    def on_epoch_end(self, epoch, logs=None):
        from keras_gpu.hooks import step_time_trace

        deadline = time.monotonic() + 120
        while step_time_trace._STOPS.busy() and time.monotonic() < deadline:
            time.sleep(0.01)
