"""`keras_gpu.Heartbeat`: report training progress to `keras-gpu launch --hang-timeout`.

See `keras_gpu.progress` for what progress means and how the launcher reads it.
"""

from __future__ import annotations

import keras

from keras_gpu.progress import ProgressWriter, writer_from_env

__all__ = ["Heartbeat"]


class Heartbeat(keras.callbacks.Callback):
    """Count finished batches for `keras-gpu launch --hang-timeout`; does nothing elsewhere.

    Under `keras-gpu launch --hang-timeout SECONDS`, the launcher ends the job
    when a worker inside `fit`, `evaluate` or `predict` finishes no batch for
    that long. This callback is what tells it that batches finish: each batch
    hook adds one to an in-memory count, and a daemon thread writes the count
    to the worker's progress file a few times per timeout. It logs nothing
    and does no I/O on the training thread. Without the launcher's
    `--hang-timeout` it is a no-op.

    Add it to every `fit`, `evaluate` and `predict` of every worker.

    Attributes:
        writer: The process's progress writer, or `None` when not launched
            with `--hang-timeout`.
    """

    def __init__(self) -> None:
        super().__init__()
        self.writer: ProgressWriter | None = writer_from_env()

    def _begin(self, logs=None) -> None:
        if self.writer is not None:
            self.writer.begin()

    def _end(self, logs=None) -> None:
        if self.writer is not None:
            self.writer.end()

    def _step(self, batch, logs=None) -> None:
        if self.writer is not None:
            self.writer.step()

    on_train_begin = on_test_begin = on_predict_begin = _begin
    on_train_end = on_test_end = on_predict_end = _end
    on_train_batch_end = on_test_batch_end = on_predict_batch_end = _step
