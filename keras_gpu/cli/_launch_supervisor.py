"""`keras-gpu launch`: the job's supervisor loop: attempts, restarts, hang detection and signals.

`supervise` runs the job: it starts a `WorkerGroup` per attempt
on new ports, waits for a failure, a hang (`HangWatch`) or a signal,
stops every worker, and restarts the whole job while `--max-restarts`
allows. SIGINT, SIGTERM and SIGHUP to the launcher are forwarded to the
workers and end the job with `128 + signal`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence

from keras_gpu.cli._launch_env import LOOPBACK, free_loopback_ports, worker_env
from keras_gpu.cli._launch_hang import EXIT_HANG, HangWatch
from keras_gpu.cli._launch_workers import WorkerExit, WorkerGroup, signal_name
from keras_gpu.cli._worker import ENV_STOP_DELAY
from keras_gpu.core.log import logger
from keras_gpu.hooks.progress import ENV_HANG_TIMEOUT, ENV_PROGRESS_FILE

__all__ = ["supervise"]

_FORWARDED_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)


def supervise(command: list[str], n: int, max_restarts: int, grace_period: float, hang_timeout: float | None) -> int:
    """Run the job of `n` workers of `command`, restarting it up to `max_restarts` times; return the exit status."""
    received: list[int] = []
    stop_requested = threading.Event()
    force = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        received.append(signum)
        (force if stop_requested.is_set() else stop_requested).set()

    with _signal_handlers(_FORWARDED_SIGNALS, on_signal):
        restart = 0
        while True:
            status = _run_attempt(
                command, n, restart, max_restarts, grace_period, stop_requested, force, received, hang_timeout
            )
            if not isinstance(status, WorkerExit):
                return status
            if restart == max_restarts:
                if max_restarts:
                    logger.error("giving up: the job failed after %d restart(s)", max_restarts)
                return status.exit_code
            restart += 1
            logger.warning("restarting all %d worker(s) on new ports (restart %d of %d)", n, restart, max_restarts)


def _run_attempt(
    command: list[str],
    n: int,
    restart: int,
    max_restarts: int,
    grace_period: float,
    stop_requested: threading.Event,
    force: threading.Event,
    received: list[int],
    hang_timeout: float | None = None,
) -> int | WorkerExit:
    """Run one attempt of the job.

    Returns:
        The launcher's exit status when the job is over (0 on success,
        `128 + signal` when a signal stopped it), or the failed worker when it
        may be restarted.
    """
    if received:  # a signal arrived while the previous attempt was being stopped
        return 128 + received[0]
    ports = free_loopback_ports(n)
    envs = [worker_env(os.environ, i, ports, restart_count=restart, max_restarts=max_restarts) for i in range(n)]
    for env in envs:
        env[ENV_STOP_DELAY] = f"{grace_period / 2:g}"  # the supervisor ends a signalled worker within the grace period
    with contextlib.ExitStack() as stack:
        watch = None
        if hang_timeout:
            folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="keras-gpu-progress-"))
            paths = [os.path.join(folder, f"worker{i}.json") for i in range(n)]
            for env, path in zip(envs, paths):
                env[ENV_PROGRESS_FILE] = path
                env[ENV_HANG_TIMEOUT] = f"{hang_timeout:g}"
            watch = HangWatch(paths, hang_timeout)
        return _run_group(command, n, envs, ports, restart, max_restarts, grace_period, stop_requested, force, received, watch)


def _run_group(
    command: list[str],
    n: int,
    envs: list[dict[str, str]],
    ports: list[int],
    restart: int,
    max_restarts: int,
    grace_period: float,
    stop_requested: threading.Event,
    force: threading.Event,
    received: list[int],
    watch: HangWatch | None,
) -> int | WorkerExit:
    group = WorkerGroup([command] * n, envs)
    try:
        group.start()
        logger.info(
            "started %d worker(s) (pids %s) on %s%s",
            n,
            ", ".join(str(pid) for pid in group.pids),
            ", ".join(f"{LOOPBACK}:{p}" for p in ports),
            f" (restart {restart} of {max_restarts})" if restart else "",
        )
        failure = group.wait(stop_requested, watch=watch)
        if watch is not None and watch.stalled and not received:
            logger.error("%s; stopping all %d worker(s) (SIGTERM, then SIGKILL after %gs)", watch.describe(), n, grace_period)
            exits = group.stop(signal.SIGTERM, grace_period, force=force)
            logger.info("stopped: %s", "; ".join(_describe_stopped(e, grace_period, signal.SIGTERM) for e in exits))
            if received:
                return 128 + received[0]
            return WorkerExit(watch.stalled[0][0], EXIT_HANG, hung=True)
        if received:
            signum = received[0]
            logger.warning(
                "received %s; stopping %d worker(s) (SIGKILL after %gs)", signal_name(signum), n, grace_period
            )
            exits = group.stop(signum, grace_period, force=force)
            logger.info("stopped: %s", "; ".join(_describe_stopped(e, grace_period, signum) for e in exits))
            return 128 + signum
        if failure is None:
            group.stop(signal.SIGTERM, grace_period, force=force)  # reaps leftover children, if any
            logger.info("all %d worker(s) finished successfully", n)
            return 0
        others = n - 1
        logger.error(
            "%s; stopping the other %d worker(s)%s",
            failure.describe(),
            others,
            f" (SIGTERM, then SIGKILL after {grace_period:g}s)" if others else "",
        )
        exits = group.stop(signal.SIGTERM, grace_period, force=force)
        ended = [_describe_stopped(e, grace_period, signal.SIGTERM) for e in exits if e.index != failure.index]
        if ended:
            logger.info("stopped: %s", "; ".join(ended))
        if received:
            return 128 + received[0]
        return failure
    finally:
        group.stop(signal.SIGKILL, 0.0)  # no-op after a clean stop; kills everything on an error


def _describe_stopped(end: WorkerExit, grace_period: float, sent: int) -> str:
    """How a worker that the launcher stopped with signal `sent` ended, e.g. `worker 0 was killed by SIGKILL (...)`."""
    text = end.describe()
    if end.returncode == -signal.SIGKILL and sent != signal.SIGKILL:
        text += f" (it was still running {grace_period:g}s after {signal_name(sent)})"
    return text


@contextlib.contextmanager
def _signal_handlers(signums: Sequence[int], handler: Callable[[int, object], None]) -> Iterator[None]:
    """Install `handler` for `signums` (main thread only) and restore the old handlers on exit."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {s: signal.signal(s, handler) for s in signums}
    try:
        yield
    finally:
        for s, old in saved.items():
            signal.signal(s, old)
