"""One run of `keras-gpu scale` or `keras-gpu tune` inside the user's process: the one injection into `fit`.

The worker bootstrap (`keras_gpu.cli._worker`) calls `install_from_env`
before the script runs, where either command started it (the child
protocol: `keras_gpu.hooks.study_env`). It wraps Keras' own `fit` (the
backend trainer's, which every model's `fit` reaches:
`keras_gpu.core.keras_private.wrap_fit`) when the script imports Keras,
and for `keras-gpu tune` installs the change's import-time parts
(`keras_gpu.hooks.tune_private.install`). Each `fit` of the script then:

1. gets the change applied to the model it trains and the data it is given
   (`keras_gpu.hooks.tune_private.apply`; `{}` for `keras-gpu scale` and
   the script as written), with what it was given recorded;
2. runs with two more callbacks: the process's one window
   (`keras_gpu.hooks.scale_window.ScaleWindow`, which stops training once
   its steps are measured) and the losses (`keras_gpu.hooks.run_record.RunRecord`);
3. once Keras' `fit` has returned (every callback's `on_train_end` has
   run) or raised, writes the run's one record, `worker<i>.json`: the
   window (or the steps trained where `fit` ended first), what the run
   trained, what applied and what did not, and the error where `fit`
   raised; then, where the window closed, ends the process
   (`os._exit(0)`), so that the rest of a long script does not run. The
   record is complete before the process ends: nothing races it.

A `fit` inside a `fit` (a callback's own) runs as written.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import sys
from collections.abc import Callable
from typing import Any

from keras_gpu.core import keras_private
from keras_gpu.core.atomic_file import replace_atomically
from keras_gpu.hooks.study_env import StudySettings, result_path, settings_from_env

__all__ = ["Study", "finish", "install_from_env"]

_ACTIVE: list[Study] = []  # the process's one study (install_from_env's)


def install_from_env() -> bool:
    """Join the study the environment names (see the module's text); returns whether there was one."""
    settings = settings_from_env()
    if settings is None:
        return False
    if not _ACTIVE:
        _ACTIVE.append(Study(settings))
        _ACTIVE[0].install()
    return True


def finish() -> None:
    """After the script ran to its end: where no `fit` was measured because Keras' import went past the hook, say so.

    The run's record then names the finder (the command shows that line
    instead of "the script never called fit").
    """
    if _ACTIVE and _ACTIVE[0].record is None:
        missed = keras_private.missed_import("keras")
        if missed:
            _ACTIVE[0].write_error(f"keras-gpu could not reach the script's fit: {missed}")


class Study:
    """This process's part in one run of a study.

    Args:
        settings: The run's settings (folder, window, tool, change).
        exit_when_done: End the process once the window's record is written.
    """

    def __init__(self, settings: StudySettings, exit_when_done: bool = True) -> None:
        self.settings = settings
        self.exit_when_done = exit_when_done
        self.record: dict[str, Any] | None = None
        self._window: Any = None
        self._depth = 0

    @property
    def window(self) -> Any:
        """The process's one `ScaleWindow`, made at the first `fit` (importing it imports Keras)."""
        if self._window is None:
            from keras_gpu.hooks.scale_window import ScaleWindow

            self._window = ScaleWindow(self.settings)
        return self._window

    def install(self) -> None:
        """Wrap Keras' `fit`, now or when the script imports Keras; for `tune`, the change's import-time parts."""
        if self.settings.tool == "tune":
            from keras_gpu.hooks import tune_private

            tune_private.install(self.settings.change)
        keras_private.wrap_fit(self.wrap)

    def wrap(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """Keras' `fit`, measured (see the module's text)."""
        signature = inspect.signature(original)

        @functools.wraps(original)
        def fit(model: Any, *args: Any, **kwargs: Any) -> Any:
            if self._depth or self.window.result is not None:
                return original(model, *args, **kwargs)
            self._depth += 1
            try:
                bound = signature.bind(model, *args, **kwargs)
                bound.apply_defaults()
                return self._fit(original, model, dict(bound.arguments))
            finally:
                self._depth -= 1

        return fit

    def _fit(self, original: Callable[..., Any], model: Any, arguments: dict[str, Any]) -> Any:
        from keras_gpu.hooks import tune_private
        from keras_gpu.hooks.run_record import RunRecord

        refused = self._refusal()
        if refused:
            self._write(model, None, None, refused)
            raise RuntimeError(refused)
        applied = tune_private.apply(model, arguments, self.settings.change)
        record = RunRecord()
        applied.arguments["callbacks"] = _with(applied.arguments.get("callbacks"), [self.window, record], model)
        try:
            history = original(**applied.arguments)
        except Exception as exc:
            self._write(model, record, applied, _error(exc))  # the row says what failed; the script's handling stays
            raise
        finally:
            for undo in applied.undo:
                undo()
        self._write(model, record, applied)
        if self.window.result is not None and self.exit_when_done:
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            os._exit(0)
        return history

    def write_error(self, error: str) -> None:
        """A record of a run that measured nothing, saying why."""
        self._write(None, None, None, error)

    def _refusal(self) -> str | None:
        """Why this backend cannot run the study (`keras-gpu scale` on PyTorch), or `None`."""
        from keras_gpu.core import backend

        if self.settings.tool == "scale" and backend.name() not in ("tensorflow", "jax"):
            return (
                f"keras-gpu scale needs Keras' TensorFlow or JAX backend (keras_gpu.make_strategy() spreads the model "
                f"over replicas there), not {backend.name()!r}: set KERAS_BACKEND=jax or KERAS_BACKEND=tensorflow"
            )
        return None

    def _write(self, model: Any, record: Any, applied: Any, error: str | None = None) -> None:
        """The run's one record (see the module's text), replaced whole."""
        outcome = self._window.outcome if self._window is not None else None
        out: dict[str, Any] = dict(outcome or {"status": "failed" if error else "short", "steps_trained": 0})
        run: dict[str, Any] = {"change": dict(self.settings.change)}
        if record is not None:
            run.update(record.describe(model))
        if applied is not None:
            run.update(facts=applied.facts, applied=applied.applied, not_applied=applied.not_applied)
        out["run"] = run
        if error:
            out["status"], out["error"] = "failed", error
        self.record = out
        path = result_path(self.settings.folder, self.settings.worker)

        def write(tmp: str) -> None:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(out, f)

        replace_atomically(path, write)


def _with(callbacks: Any, ours: list[Any], model: Any) -> Any:
    """`fit`'s `callbacks` with `ours` after the script's (a new list; a `CallbackList` the script built gets them)."""
    import keras

    if isinstance(callbacks, keras.callbacks.CallbackList):
        for callback in ours:
            callback.set_model(model)
            callbacks.callbacks.append(callback)
        return callbacks
    if callbacks is None:
        return list(ours)
    return [*(callbacks if isinstance(callbacks, (list, tuple)) else [callbacks]), *ours]


def _error(exc: BaseException) -> str:
    message = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {message[0] if message else ''}"[:300]
