"""What every keras-gpu callback shares: argument checks, the run directory and the writer."""

from __future__ import annotations

import os
from typing import Any

import keras

from keras_gpu.loggers import _writer
from keras_gpu.loggers._layout import write_layout
from keras_gpu.cluster import ClusterInfo, task_info

__all__ = ["LoggingCallback", "check_log_dir", "check_positive", "read_step"]


def check_log_dir(log_dir: Any) -> str:
    """Validate a `log_dir` argument and return it as a string."""
    if isinstance(log_dir, bool) or not isinstance(log_dir, (str, os.PathLike)):
        raise TypeError(f"`log_dir` must be a path (str or os.PathLike). Received: log_dir={log_dir!r}")
    path = os.fspath(log_dir)
    if not isinstance(path, str) or not path.strip():
        raise ValueError(f"`log_dir` must be a non-empty path. Received: log_dir={log_dir!r}")
    return path


def check_positive(
    name: str, value: Any, *, integer: bool = False, allow_none: bool = False, minimum: float = 0.0
) -> Any:
    """Validate a positive, finite number argument (at least `minimum`); returns it unchanged."""
    if value is None and allow_none:
        return None
    kinds = (int,) if integer else (int, float)
    ok = not isinstance(value, bool) and isinstance(value, kinds)
    if ok and not integer:
        try:
            ok = minimum <= float(value) < float("inf") and value > 0
        except OverflowError:  # an int beyond the float range
            ok = False
    elif ok:
        ok = value >= max(minimum, 1)
    if not ok:
        what = "a positive integer" if integer else "a positive, finite number"
        if minimum > 0 and not integer:
            what += f" of at least {minimum:g}"
        suffix = " or None" if allow_none else ""
        raise ValueError(f"`{name}` must be {what}{suffix}. Received: {name}={value!r}")
    return value


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
        import tensorflow as tf

        return getattr(self.model, "distribute_strategy", None) or tf.distribute.get_strategy()

    def _open(self) -> _writer.SummaryWriter:
        """Resolve the run directory, prove it writable, and take the shared writer."""
        if self._writer is not None:  # a previous fit ended without on_train_end (interrupted)
            self._close()
        self._task = task_info(self._strategy())
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
