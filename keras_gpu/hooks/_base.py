"""What every keras-gpu callback shares: its shared options checked once, the run directory and the writer."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, overload

import keras

from keras_gpu.core import backend
from keras_gpu.core.checks import check_bool, check_log_dir
from keras_gpu.core.cluster import ClusterInfo
from keras_gpu.core.log import log_once, logger
from keras_gpu.output import writer as _writer

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

    Examples:
        >>> import keras
        >>> from keras_gpu.hooks._base import read_step
        >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        >>> read_step(model), read_step(model, None)  # no optimizer yet
        (0, None)
    """
    iterations = getattr(getattr(model, "optimizer", None), "iterations", None)
    if iterations is None:
        return fallback
    try:
        value = iterations.value  # the backend variable behind a Keras variable (raises while not initialised)
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
    each checks them with `checked` (the factory before it builds any
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


@dataclass
class _FitSpan:
    t0: float
    members: set[int] = field(default_factory=set)
    then: list[Callable[[float], None]] = field(default_factory=list)


class _FitClock:
    """How long each `fit` really took: from the first keras-gpu callback's `on_train_begin` to the last's `on_train_end`.

    One callback's own two hooks would leave out what the callbacks after it
    do when `fit` ends; each keras-gpu callback of a `fit` joins the span when
    it begins and leaves it when it ends, and what waits for the span's end
    (the end-of-fit line) runs when the last one leaves.
    """

    def __init__(self) -> None:
        self._spans: dict[int, _FitSpan] = {}
        self._lock = threading.Lock()

    def enter(self, model: Any, who: object) -> None:
        """`who` begins a fit of `model` (the first to begin starts the clock; one already in, a new fit)."""
        with self._lock:
            span = self._spans.get(id(model))
            if span is None or id(who) in span.members:  # a new fit (the last one was interrupted)
                span = self._spans[id(model)] = _FitSpan(time.perf_counter())
            span.members.add(id(who))

    def then(self, model: Any, fn: Callable[[float], None]) -> None:
        """Call `fn(seconds of fit)` when the fit's last keras-gpu callback ends (now, outside any fit)."""
        with self._lock:
            span = self._spans.get(id(model))
            if span is not None:
                span.then.append(fn)
                return
        fn(float("nan"))

    def leave(self, model: Any, who: object) -> None:
        """`who` ends its part of the fit; the last one to end stops the clock and runs what waited."""
        with self._lock:
            span = self._spans.get(id(model))
            if span is None or id(who) not in span.members:
                return
            span.members.discard(id(who))
            if span.members:
                return
            del self._spans[id(model)]
        seconds = time.perf_counter() - span.t0
        for fn in span.then:
            try:
                fn(seconds)
            except Exception as exc:  # noqa: BLE001 - a log line must not fail the end of fit
                logger.warning("keras-gpu: an end-of-fit step failed: %s: %s", type(exc).__name__, exc)


_fit_clock = _FitClock()


class LoggingCallback(keras.callbacks.Callback):
    """Base class: resolves this worker's run directory and holds the shared writer per `fit`.

    Subclasses call `_open` from `on_train_begin` and `_close`
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
        default in jobs of more than `PER_WORKER_RUNS_MAX` workers.
        """
        if self._writer is not None:  # a previous fit ended without on_train_end (interrupted)
            self._close()
        _fit_clock.enter(self.model, self)
        self._task = backend.task_info(self.model)
        self.run_dir = _writer.run_dir(self.log_dir, self._task)
        if not self._writes_run(self._task):
            return None
        _writer.check_writable(self.run_dir, received=self.log_dir)
        self._writer = _writer.acquire(self.run_dir)
        self._writer.open()  # before the fit ends: a trace read after it may write while the interpreter exits
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
        """Give the writer back and leave this fit's clock (from `on_train_end`)."""
        if self._writer is not None:
            writer, self._writer = self._writer, None
            _writer.release(writer)
        self._leave_fit()

    def _leave_fit(self) -> None:
        """This callback's part of the fit is over (see `_at_fit_end`)."""
        _fit_clock.leave(self.model, self)

    def _at_fit_end(self, fn: Callable[[float], None]) -> None:
        """Call `fn(seconds)` when every keras-gpu callback of this fit has ended, with the seconds the fit took.

        The fit's time runs from the first keras-gpu callback's `on_train_begin`
        to the last one's `on_train_end`, so the work every callback does at
        the end of `fit` counts.
        """
        _fit_clock.then(self.model, fn)

    def _initial_step(self) -> int:
        """The optimizer's iteration count: the global step this `fit` starts from."""
        return read_step(self.model)
