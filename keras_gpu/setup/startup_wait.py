"""No silent waits at start-up: a task waiting for its peers says which, and where, at most every 30 s.

`waiting for worker:0 at 10.0.0.5:2222 (30 s of 600 s)`. On TensorFlow the
line comes from the peer watcher process (`keras_gpu.setup.cluster_peers`),
because TensorFlow holds the interpreter lock while it waits; on JAX from
`WaitNotes`, a daemon thread beside `jax.distributed.initialize`.
`KERAS_GPU_WAIT_LOG_S` changes the interval (tests shorten it).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from types import TracebackType

from keras_gpu.core.log import logger

__all__ = ["ENV_WAIT_LOG_S", "WaitNotes", "wait_interval", "waiting_line"]

ENV_WAIT_LOG_S = "KERAS_GPU_WAIT_LOG_S"
"""Environment variable: seconds between two waiting lines (default 30)."""

_DEFAULT_S = 30.0


def wait_interval() -> float:
    """Seconds between two waiting lines: `KERAS_GPU_WAIT_LOG_S` when it is a positive number, else 30."""
    try:
        seconds = float(os.environ.get(ENV_WAIT_LOG_S, ""))
    except ValueError:
        return _DEFAULT_S
    return seconds if 0 < seconds < float("inf") else _DEFAULT_S


def waiting_line(what: str, elapsed: float, timeout: float) -> str:
    """E.g. `make_strategy: waiting for worker:0 at 10.0.0.5:2222 (30 s of 600 s)`."""
    return f"make_strategy: waiting for {what} ({elapsed:.0f} s of {timeout:g} s)"


class WaitNotes:
    """A daemon thread that logs `waiting_line(describe(), ...)` every `wait_interval()` seconds until the block ends.

    Args:
        describe: What the task waits for, asked at each line (e.g.
            `"worker:0 at 127.0.0.1:2222"`).
        timeout: The wait's bound in seconds, shown in the line.
        on_timeout: Logged once as an error when the block still runs
            `timeout` seconds after it began (for waits that end the
            process, not with an exception, when they time out).
    """

    def __init__(self, describe: Callable[[], str], timeout: float, on_timeout: str = "") -> None:
        self._describe = describe
        self._timeout = timeout
        self._on_timeout = on_timeout
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> WaitNotes:
        started = time.monotonic()
        interval = wait_interval()

        def run() -> None:
            next_line, late = started + interval, started + self._timeout
            while not self._done.wait(max(0.0, min(next_line, late) - time.monotonic())):
                now = time.monotonic()
                if now >= late and self._on_timeout:
                    logger.error("%s Still waiting for %s.", self._on_timeout, self._describe())
                    late = float("inf")
                if now >= next_line:
                    next_line += interval
                    logger.warning("%s", waiting_line(self._describe(), now - started, self._timeout))

        self._thread = threading.Thread(target=run, name="keras-gpu-startup-wait", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self._done.set()
