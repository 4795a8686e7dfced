"""What every keras-gpu callback shares: its shared options checked once, the run directory and the writer."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, overload

import keras

from keras_gpu.core import backend
from keras_gpu.core.checks import check_bool, check_log_dir
from keras_gpu.core.cluster import ClusterInfo
from keras_gpu.core.log import log_once
from keras_gpu.output import writer as _writer
from keras_gpu.output.layout import write_layout

__all__ = ["PER_WORKER_RUNS_MAX", "LoggingCallback", "RunOptions", "read_step"]

#: Up to this many workers, every worker writes its own run by default; above
#: it, only the chief does (one readable run instead of hundreds).
PER_WORKER_RUNS_MAX = 16


@overload
def read_step(model: Any, fallback: int = 0) -> int: ...
@overload
def read_step(model: Any, fallback: None) -> int | None: ...
def read_step(model: Any, fallback: int | None = 0) -> int | None:
    """The optimizer's iteration count (the global step), or `fallback` when it has none yet.

    keras-gpu's one reader of the optimizer step. Reads the backend variable
    directly: one small device-to-host copy, safe from any thread; call it
    only where a device read is allowed (epoch boundaries, the window's end).

    Example:
        >>> import keras
        >>> from keras_gpu.hooks._base import read_step
        >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        >>> read_step(model), read_step(model, None)  # no optimizer yet
        (0, None)
    """
    iterations = getattr(getattr(model, "optimizer", None), "iterations", None)
    if iterations is None:
        return fallback
    value = getattr(iterations, "value", iterations)  # the backend variable behind a Keras variable
    try:
        return int(value.numpy())
    except Exception:  # noqa: BLE001, S110 - no .numpy() (JAX), or one that needs the host first (a GPU tensor)
        pass
    try:
        return int(keras.ops.convert_to_numpy(iterations))
    except Exception:  # noqa: BLE001 - an unbuilt optimizer has no value yet
        return fallback


@dataclass(frozen=True)
class RunOptions:
    """The options every logging callback shares, checked: where the runs go and which workers write one.

    Declared once for `keras_gpu.callbacks()` and the callbacks it builds:
    each checks them with :meth:`checked` (the factory before it builds any
    callback, so a bad value fails in its name).
    """

    log_dir: str
    per_worker_runs: bool | None = None

    @classmethod
    def checked(cls, log_dir: Any, per_worker_runs: Any = None) -> RunOptions:
        """The record of `log_dir` and `per_worker_runs` as a user passed them, each checked once.

        Raises:
            TypeError, ValueError: `log_dir` is not a non-empty path, or
                `per_worker_runs` is not True, False or None.
        """
        return cls(check_log_dir(log_dir), check_bool("per_worker_runs", per_worker_runs, allow_none=True))


class LoggingCallback(keras.callbacks.Callback):
    """Base class: resolves this worker's run directory and holds the shared writer per `fit`.

    Subclasses call :meth:`_open` from `on_train_begin` and :meth:`_close`
    from `on_train_end`.

    Every callback checks its arguments, also when `keras_gpu.callbacks()`
    built it (the checks return a checked value unchanged).
    """

    def __init__(self, log_dir: str | os.PathLike, per_worker_runs: bool | None = None) -> None:
        super().__init__()
        run = RunOptions.checked(log_dir, per_worker_runs)
        self.log_dir = run.log_dir
        self.per_worker_runs = run.per_worker_runs
        self._writer: _writer.SummaryWriter | None = None
        self._task: ClusterInfo | None = None
        self.run_dir: str | None = None

    def _strategy(self) -> Any:
        """The model's `tf.distribute.Strategy` on the TensorFlow backend; None on the others."""
        return backend.strategy(self.model)

    def _open(self) -> _writer.SummaryWriter | None:
        """Resolve the run directory, prove it writable, and take the shared writer.

        Returns `None`, and writes nothing, on a worker other than the chief
        when per-worker runs are off: by `per_worker_runs=False`, or by
        default in jobs of more than :data:`PER_WORKER_RUNS_MAX` workers.
        """
        if self._writer is not None:  # a previous fit ended without on_train_end (interrupted)
            self._close()
        self._task = backend.task_info(self.model)
        self.run_dir = _writer.run_dir(self.log_dir, self._task)
        if not self._writes_run(self._task):
            return None
        _writer.check_writable(self.run_dir, received=self.log_dir)
        self._writer = _writer.acquire(self.run_dir)
        write_layout(self._writer)
        return self._writer

    def _writes_run(self, task: ClusterInfo) -> bool:
        if task.is_chief or task.num_workers <= 1:
            return True
        wanted = self.per_worker_runs
        if wanted is None:
            wanted = task.num_workers <= PER_WORKER_RUNS_MAX
            if not wanted:
                log_once(
                    logging.INFO,
                    "per-worker-runs-off",
                    "keras-gpu: with %d workers (more than %d) only the chief writes a run; worker %s writes none. "
                    "The chief's run holds the cluster summary. Pass per_worker_runs=True to write every worker's run.",
                    task.num_workers,
                    PER_WORKER_RUNS_MAX,
                    task.worker_index,
                )
        return bool(wanted)

    def _close(self) -> None:
        if self._writer is not None:
            writer, self._writer = self._writer, None
            _writer.release(writer)

    def _initial_step(self) -> int:
        """The optimizer's iteration count: the global step this `fit` starts from."""
        return read_step(self.model)
