"""No silent waits at start-up: a task waiting for its peers says which, and where, at most every 30 s.

`waiting for worker:0 at 10.0.0.5:2222 (30 s of 600 s)`. On TensorFlow the
line comes from the peer watcher process (`keras_gpu.setup.cluster_peers`),
because TensorFlow holds the interpreter lock while it waits; on JAX from
:class:`WaitNotes`, a daemon thread beside `jax.distributed.initialize`.
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
    """

    def __init__(self, describe: Callable[[], str], timeout: float) -> None:
        self._describe = describe
        self._timeout = timeout
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> WaitNotes:
        started = time.monotonic()
        interval = wait_interval()

        def run() -> None:
            while not self._done.wait(interval):
                logger.warning("%s", waiting_line(self._describe(), time.monotonic() - started, self._timeout))

        self._thread = threading.Thread(target=run, name="keras-gpu-startup-wait", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self._done.set()
