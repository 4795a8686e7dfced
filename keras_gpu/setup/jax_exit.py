"""How a multi-process JAX job ends when one of its processes fails.

JAX registers an exit handler that calls `jax.distributed.shutdown()`, a
barrier that waits for every process of the job (up to its shutdown timeout,
300 s by default in jax 0.10). A process whose script raised therefore
waits there for peers that are themselves blocked in a collective on it,
and nothing ends for minutes.

`join_timeouts` gives `jax.distributed.initialize` shorter timeouts,
and `end_promptly_on_failure` makes a process whose script ended by an
uncaught exception exit at once with status 1, before JAX's exit handler:
its peers' next collective then fails (gloo: "Connection reset by peer")
and they end too, or the coordination service notices the dead process
within the heartbeat timeout and ends them. A process that ends by
`sys.exit(N)` still goes through the barrier, bounded by the shutdown
timeout; when every peer then fails the barrier, the coordination service
aborts them all (status 134).
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
from typing import Any

from keras_gpu.core.log import logger

__all__ = ["HEARTBEAT_TIMEOUT_S", "SHUTDOWN_TIMEOUT_S", "end_promptly_on_failure", "join_timeouts"]

HEARTBEAT_TIMEOUT_S = 30
"""Seconds after which JAX's coordination service declares a silent process dead and ends the job (JAX: 100)."""

SHUTDOWN_TIMEOUT_S = 120
"""Seconds a process ending normally waits at JAX's exit-time barrier for its peers (JAX: 300)."""

_state: dict[str, Any] = {"installed": False, "failed": False}


def join_timeouts() -> dict[str, int]:
    """The keyword arguments of `jax.distributed.initialize` that bound how long a failed job waits."""
    return {"heartbeat_timeout_seconds": HEARTBEAT_TIMEOUT_S, "shutdown_timeout_seconds": SHUTDOWN_TIMEOUT_S}


def end_promptly_on_failure() -> None:
    """After an uncaught exception, end this process before JAX's exit-time shutdown barrier.

    Chains `sys.excepthook` (the traceback is printed as before) and
    registers an exit handler that runs before JAX's own (exit handlers run
    in reverse order of registration, and JAX registered its handler when it
    was imported). Installed once per process.
    """
    if _state["installed"]:
        return
    _state["installed"] = True
    previous = sys.excepthook

    def excepthook(kind: type[BaseException], value: BaseException, traceback: Any) -> None:
        if not issubclass(kind, KeyboardInterrupt):
            _state["failed"] = True
        previous(kind, value, traceback)

    sys.excepthook = excepthook
    atexit.register(_exit_now_if_failed)


def _exit_now_if_failed() -> None:
    if not _state["failed"]:
        return
    logger.error(
        "keras-gpu: this process failed; it exits now with status 1 instead of waiting at JAX's exit-time "
        "jax.distributed shutdown for its peers, which end when their next collective fails or within the "
        "%ds heartbeat timeout",
        HEARTBEAT_TIMEOUT_S,
    )
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os._exit(1)
