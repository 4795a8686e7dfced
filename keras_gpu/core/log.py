"""The package logger, its fallback output, and a once-only log helper.

keras-gpu reports through `logging.getLogger("keras_gpu")` at INFO and above.
So that its one-line explanations (the strategy `auto` picked, skipped GPU
options, end-of-training summaries) are seen in a plain script, the logger is
at INFO and carries a fallback handler that writes to stderr only while the
application has configured no logging of its own: once the root logger has a
handler, or the `keras_gpu` logger gets one, the application decides where
the records go and the fallback stays silent. Set the level of the
`keras_gpu` logger to WARNING to hide the INFO lines.

Messages meant to appear once appear once per process (`log_once`,
`process_once`), however many `fit` calls and callback instances there
are. A message that tells the user what to pass names the call they wrote
(`call_with`): `keras_gpu.callbacks(batch_size=...)` for callbacks the
factory made (`made_by_factory`), `ThroughputLogger(batch_size=...)`
for one built by hand.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Iterable
from typing import TypeVar

__all__ = ["Once", "PrefixFormatter", "call_with", "log_once", "logger", "made_by_factory", "process_once"]

_PREFIX = "keras-gpu: "

logger = logging.getLogger("keras_gpu")


class PrefixFormatter(logging.Formatter):
    """Prefix each message with `keras-gpu: ` unless it already starts with it."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        return text if text.startswith(_PREFIX) else _PREFIX + text


class _FallbackHandler(logging.Handler):
    """Writes records to the current `sys.stderr` while nothing else would show them."""

    def emit(self, record: logging.LogRecord) -> None:
        if logging.getLogger().handlers or any(h is not self for h in logger.handlers):
            return
        try:
            sys.stderr.write(self.format(record) + "\n")
        except Exception:  # noqa: BLE001 - logging must never raise into the caller
            self.handleError(record)


if not any(isinstance(h, _FallbackHandler) for h in logger.handlers):
    _handler = _FallbackHandler(logging.INFO)
    _handler.setFormatter(PrefixFormatter())
    logger.addHandler(_handler)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)

class Once:
    """Logs each message key once within one scope: the process (`log_once`), or one object.

    A callback that should repeat a hint for each new instance keeps its own
    `Once()`; thread-safe.
    """

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def first(self, key: str) -> bool:
        """True the first time `key` is seen in this scope, False afterwards."""
        with self._lock:
            if key in self._seen:
                return False
            self._seen.add(key)
            return True

    def log(self, level: int, key: str, msg: str, *args: object) -> bool:
        """Log `msg % args` at `level` the first time `key` is seen; True when it was emitted."""
        if not self.first(key):
            return False
        logger.log(level, msg, *args)
        return True


_process = Once()


def log_once(level: int, key: str, msg: str, *args: object) -> bool:
    """Log ``msg`` at ``level`` the first time ``key`` is seen in this process.

    Returns True when the message was emitted.
    """
    return _process.log(level, key, msg, *args)


def process_once() -> Once:
    """The process's scope of `log_once`, for a callback whose hints appear once per process."""
    return _process


_FACTORY = "keras_gpu.callbacks"
_MADE_BY = "_keras_gpu_made_by"
_C = TypeVar("_C", bound=Iterable)


def made_by_factory(callbacks: _C) -> _C:
    """Mark `callbacks` as made by `keras_gpu.callbacks()`, so their messages name that call; returns them."""
    for callback in callbacks:
        setattr(callback, _MADE_BY, _FACTORY)
    return callbacks


def call_with(callback: object, *names: str, **values: object) -> str:
    """The call, in the user's words, that passes `names` (as `name=...`) and `values` (as `name=value`).

    `` `keras_gpu.callbacks(batch_size=...)` `` for a callback the factory
    made, `` `ThroughputLogger(batch_size=...)` `` for one built by hand.
    """
    owner = getattr(callback, _MADE_BY, None) or type(callback).__name__
    arguments = [f"{name}=..." for name in names] + [f"{name}={value!r}" for name, value in values.items()]
    return f"`{owner}({', '.join(arguments)})`"
