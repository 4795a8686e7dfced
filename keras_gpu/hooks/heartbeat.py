"""`keras_gpu.Heartbeat`: report training progress to `keras-gpu launch --hang-timeout`.

See `keras_gpu.hooks.progress` for what progress means and how the launcher reads it.
"""

from __future__ import annotations

import keras

from keras_gpu.hooks.progress import ProgressWriter, writer_from_env

__all__ = ["Heartbeat"]


class Heartbeat(keras.callbacks.Callback):
    """Count finished batches for `keras-gpu launch --hang-timeout`; does nothing elsewhere.

    Under `keras-gpu launch --hang-timeout SECONDS`, the launcher ends the job
    when a worker inside `fit`, `evaluate` or `predict` finishes no batch for
    that long, naming the call, epoch and batch it was in. This callback is
    what tells it that batches finish: each hook sets an int in memory, and a
    daemon thread writes them to the worker's progress file a few times per
    timeout. It logs nothing and does no I/O on the training thread. Without
    the launcher's `--hang-timeout` it is a no-op.

    Workers started by `keras-gpu launch` get one in every `fit`, `evaluate`
    and `predict` without asking; adding it yourself there changes nothing
    (it is not added twice). Add it where a script's workers are started
    some other way with `KERAS_GPU_PROGRESS_FILE` set.

    Attributes:
        writer: The process's progress writer, or `None` when not launched
            with `--hang-timeout`.

    Examples:
        >>> import numpy as np
        >>> import keras
        >>> import keras_gpu
        >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        >>> model.compile(optimizer="sgd", loss="mse")
        >>> x, y = np.zeros((16, 4), "float32"), np.zeros((16, 1), "float32")
        >>> heartbeat = keras_gpu.Heartbeat()
        >>> _ = model.fit(x, y, batch_size=4, epochs=1, callbacks=[heartbeat], verbose=0)
        >>> # not started by `keras-gpu launch --hang-timeout`: a no-op
        >>> heartbeat.writer is None
        True
    """

    async_safe = True  # only sets ints, safe on Keras' pool in any order; keeps Keras' asynchronous batch hooks

    def __init__(self) -> None:
        super().__init__()
        self.writer: ProgressWriter | None = writer_from_env()

    def on_train_begin(self, logs=None) -> None:
        if self.writer is not None:
            self.writer.begin("fit")

    def on_test_begin(self, logs=None) -> None:
        if self.writer is not None:
            self.writer.begin("evaluate")

    def on_predict_begin(self, logs=None) -> None:
        if self.writer is not None:
            self.writer.begin("predict")

    def on_epoch_begin(self, epoch, logs=None) -> None:
        if self.writer is not None:
            self.writer.epoch(epoch + 1)

    def _end(self, logs=None) -> None:
        if self.writer is not None:
            self.writer.end()

    def on_train_batch_end(self, batch, logs=None) -> None:
        if self.writer is not None:
            self.writer.step(batch + 1, "fit")

    def on_test_batch_end(self, batch, logs=None) -> None:
        if self.writer is not None:
            self.writer.step(batch + 1, "evaluate")

    def on_predict_batch_end(self, batch, logs=None) -> None:
        if self.writer is not None:
            self.writer.step(batch + 1, "predict")

    on_train_end = on_test_end = on_predict_end = _end
