"""What every keras-gpu callback shares: argument checks, the run directory and the writer."""

from __future__ import annotations

import os
from typing import Any

import keras

from keras_gpu import backend
from keras_gpu.cluster import ClusterInfo
from keras_gpu._checks import check_log_dir, check_positive  # kept importable from here
from keras_gpu.loggers import _writer
from keras_gpu.loggers._layout import write_layout

__all__ = ["LoggingCallback", "check_log_dir", "check_positive", "read_step"]


def read_step(model: Any, fallback: int = 0) -> int:
    """The optimizer's iteration count (the global step), or `fallback` when it has none yet.

    Reads the backend variable directly: one small device-to-host copy, safe
    from any thread.
    """
    iterations = getattr(getattr(model, "optimizer", None), "iterations", None)
    if iterations is None:
        return fallback
    try:
        value = getattr(iterations, "value", iterations)  # the backend variable behind a Keras variable
        if hasattr(value, "numpy"):
            return int(value.numpy())
        return int(keras.ops.convert_to_numpy(iterations))
    except Exception:  # noqa: BLE001 - an unbuilt optimizer has no value yet
        return fallback


class LoggingCallback(keras.callbacks.Callback):
    """Base class: resolves this worker's run directory and holds the shared writer per `fit`.

    Subclasses call :meth:`_open` from `on_train_begin` and :meth:`_close`
    from `on_train_end`.
    """

    def __init__(self, log_dir: str | os.PathLike) -> None:
        super().__init__()
        self.log_dir = check_log_dir(log_dir)
        self._writer: _writer.SummaryWriter | None = None
        self._task: ClusterInfo | None = None
        self.run_dir: str | None = None

    def _strategy(self) -> Any:
        """The model's `tf.distribute.Strategy` on the TensorFlow backend; None on the others."""
        return backend.strategy(self.model)

    def _open(self) -> _writer.SummaryWriter:
        """Resolve the run directory, prove it writable, and take the shared writer."""
        if self._writer is not None:  # a previous fit ended without on_train_end (interrupted)
            self._close()
        self._task = backend.task_info(self.model)
        self.run_dir = _writer.run_dir(self.log_dir, self._task)
        _writer.check_writable(self.run_dir, received=self.log_dir)
        self._writer = _writer.acquire(self.run_dir)
        write_layout(self._writer)
        return self._writer

    def _close(self) -> None:
        if self._writer is not None:
            writer, self._writer = self._writer, None
            _writer.release(writer)

    def _initial_step(self) -> int:
        """The optimizer's iteration count: the global step this `fit` starts from."""
        return read_step(self.model)
