"""The package logger and a once-only warning helper."""

from __future__ import annotations

import logging
import threading

logger = logging.getLogger("keras_gpu")

_seen: set[str] = set()
_seen_lock = threading.Lock()


def log_once(level: int, key: str, msg: str, *args: object) -> bool:
    """Log ``msg`` at ``level`` the first time ``key`` is seen in this process.

    Returns True when the message was emitted.
    """
    with _seen_lock:
        if key in _seen:
            return False
        _seen.add(key)
    logger.log(level, msg, *args)
    return True
