"""`keras-gpu launch`: run N local copies of a script as one multi-worker job (TensorFlow or JAX).

```
keras-gpu launch -n 2 train.py --epochs 3
keras-gpu launch -n 2 --cpu-replicas 2 -m mypackage.train --epochs 3
```

Each worker is `python train.py ...` (or `python -m module ...`) in its own
process group, with these environment variables set:

- `TF_CONFIG`: `{"cluster": {"worker": ["127.0.0.1:p0", ...]}, "task":
  {"type": "worker", "index": i}}` on free loopback ports, which
  `keras_gpu.make_strategy()` and `tf.distribute.MultiWorkerMirroredStrategy`
  read;
- `KERAS_DISTRIBUTION_JOB_ADDRESSES` (the same addresses, comma-separated),
  `KERAS_DISTRIBUTION_NUM_PROCESSES` (`N`) and `KERAS_DISTRIBUTION_PROCESS_ID`
  (`i`), which `keras.distribution.initialize()` reads when called without
  arguments: on Keras' JAX backend, worker 0 is the coordinator of
  `jax.distributed` (`keras_gpu.make_strategy()` reads TF_CONFIG to the same
  effect);
- `KERAS_GPU_WORKER_INDEX`: the worker's rank `i` (0 is the chief);
- `KERAS_GPU_NUM_WORKERS`: the number of workers `N`;
- `KERAS_GPU_RESTART_COUNT`: how many times the job was restarted before this
  attempt (0 on the first one), and `KERAS_GPU_MAX_RESTARTS`: `--max-restarts`;
- `PYTHONUNBUFFERED=1` (unless already set), so output arrives line by line.

Every line a worker writes to stdout or stderr is echoed to the launcher's
stdout or stderr with a `[worker i] ` prefix; lines are never mixed.

The job fails as a whole: when one worker exits non-zero or is killed, the
others get SIGTERM, then SIGKILL after `--grace-period` seconds, and the
launcher exits with that worker's status (`128 + signal` for a signal). Each
stopped worker's end is logged too. TensorFlow's coordination service catches
SIGTERM in a multi-worker process, so a worker blocked in a collective on a
dead peer is ended by that SIGKILL: a failed job always ends within about
`--grace-period` seconds.

With `--max-restarts R` a failed job is restarted as a whole, up to `R` times
(like `torchrun --max-restarts`): every worker is stopped, then all `N` are
started again on new free ports with `KERAS_GPU_RESTART_COUNT` raised by one.
Training resumes where the script makes it (e.g. with
`keras.callbacks.BackupAndRestore`); the launcher exits 0 as soon as one
attempt succeeds, and with the last failure's status when none did. A
SIGINT, SIGTERM or SIGHUP to the launcher is forwarded to every worker's
process group with the same escalation, and the launcher exits with
`128 + signal`. Processes a worker started in its process group are stopped
with it, and any still running when the job ends are killed. On Linux each
worker also gets SIGKILL when the launcher dies, even by SIGKILL, so no worker
outlives it (processes the worker started are then its own business).

Every worker starts through the bootstrap `keras_gpu.cli._worker`, which
splits its CPU (`--cpu-replicas`), runs the script as `__main__`, and stays
behind as a small supervisor process: TensorFlow's coordination service
catches and ignores SIGTERM in a multi-worker process (and holds Python's
interpreter lock while it waits for peers), so the supervisor ends a worker
that is still running half a `--grace-period` after the signal, and ends by
that signal itself. A worker that ignores the signal (SIG_IGN) is left to the
SIGKILL after `--grace-period`.

With `--hang-timeout SECONDS` (off by default), a job whose workers stop
making progress is ended too. Each worker gets `KERAS_GPU_PROGRESS_FILE`, a
file of its own, and the bootstrap adds a `keras_gpu.Heartbeat` to every
`fit`, `evaluate` and `predict` of the script, whatever callbacks it passes
(see `keras_gpu.hooks.progress`): a daemon thread keeps the file up to date with
the number of finished batches and the call, epoch and batch the worker is
in. When a worker inside `fit`, `evaluate` or `predict` finishes no batch for
SECONDS, the launcher logs which workers stopped progressing and where each
was (e.g. `worker 1 stuck in fit, epoch 2, after batch 17`, then its main
thread's frame), stops every worker (SIGTERM, SIGKILL after
`--grace-period`) and exits with 124, or restarts the job when
`--max-restarts` allows. A worker stuck in Python, in its input pipeline, in
a native call (a profiler stop that never returns) or in a collective waiting
for such a peer is caught this way, where TensorFlow's coordination service
only notices a process that stopped answering altogether. While no worker
has entered `fit`, `evaluate` or `predict` (start-up, data loading, a custom
training loop) nothing is judged, and the launcher says so while the job
runs, `max(2 * SECONDS, 10)` seconds after the start.

`WorkerGroup` holds the process management on its own, so that the restart
loop starts a fresh group for every attempt.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TextIO

from keras_gpu.core.log import logger
from keras_gpu.core.backend import require_tensorflow
from keras_gpu.cli import UsageError
from keras_gpu.cli._worker import ENV_STOP_DELAY
from keras_gpu.hooks.progress import ENV_HANG_TIMEOUT, ENV_PROGRESS_FILE, Progress, read_progress

__all__ = [
    "EXIT_HANG",
    "ENV_MAX_RESTARTS",
    "ENV_NUM_WORKERS",
    "ENV_RESTART_COUNT",
    "ENV_WORKER_INDEX",
    "HangWatch",
    "WorkerExit",
    "WorkerGroup",
    "add_parser",
    "free_loopback_ports",
    "run",
    "worker_command",
    "worker_env",
]

ENV_WORKER_INDEX = "KERAS_GPU_WORKER_INDEX"
"""Environment variable holding a launched worker's rank (0 to N-1)."""
ENV_NUM_WORKERS = "KERAS_GPU_NUM_WORKERS"
"""Environment variable holding the number of launched workers."""
ENV_RESTART_COUNT = "KERAS_GPU_RESTART_COUNT"
"""Environment variable holding how many times the job was restarted before this attempt (0 first)."""
ENV_MAX_RESTARTS = "KERAS_GPU_MAX_RESTARTS"
"""Environment variable holding the launcher's `--max-restarts`."""
EXIT_HANG = 124
"""The launcher's exit status when `--hang-timeout` ended the job (as `timeout(1)` uses)."""

_LOOPBACK = "127.0.0.1"
_MAX_WORKERS = 1024  # one machine; more would exhaust its processes and loopback ports
_MAX_CPU_REPLICAS = 4096  # configure_devices' bound on logical devices
_MAX_LINE = 1 << 16  # longer lines are passed on in chunks of this many bytes
_PR_SET_PDEATHSIG = 1
_MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_FORWARDED_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)


# --------------------------------------------------------------------------- CLI


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register `keras-gpu launch`."""
    parser = subparsers.add_parser(
        "launch",
        help="run N local workers of a script as one multi-worker job",
        usage=(
            "%(prog)s -n N [--cpu-replicas K] [--grace-period SECONDS] [--max-restarts R] [--hang-timeout SECONDS] "
            "(SCRIPT | -m MODULE) [ARGS ...]"
        ),
        description=(
            "Start N worker processes of a Python script (or `-m module`) on this machine, each with its "
            "own TF_CONFIG on free 127.0.0.1 ports, and stop all of them when one fails (restarting them all "
            f"up to --max-restarts times). Workers also get {ENV_WORKER_INDEX} (their rank), {ENV_NUM_WORKERS} "
            f"(N), {ENV_RESTART_COUNT} (restarts so far) and {ENV_MAX_RESTARTS} in their environment."
        ),
        epilog=(
            "Everything after the script (or the module name) is passed to the workers unchanged. "
            "Each worker's output lines are prefixed with `[worker i]`. When a worker fails the others are "
            "stopped and the exit status is that worker's (128 + signal if a signal killed it), unless restarts "
            "are left; SIGINT or SIGTERM to the launcher is forwarded to all workers, never restarts them, and "
            f"gives 128 + signal; {EXIT_HANG} means --hang-timeout ended the job; 0 means every worker of one "
            "attempt exited 0."
        ),
    )
    parser.add_argument(
        "-n",
        "--nproc",
        type=_int_at_least(1, "-n", _MAX_WORKERS),
        required=True,
        metavar="N",
        help=f"number of workers (1 to {_MAX_WORKERS})",
    )
    parser.add_argument(
        "--cpu-replicas",
        type=_int_at_least(1, "--cpu-replicas", _MAX_CPU_REPLICAS),
        default=None,
        metavar="K",
        help="split each worker's CPU into K logical devices before the script runs",
    )
    parser.add_argument(
        "--grace-period",
        type=_float_at_least(0.0, "--grace-period"),
        default=5.0,
        metavar="SECONDS",
        help="how long stopped workers get after SIGTERM (or the forwarded signal) before SIGKILL (default: 5)",
    )
    parser.add_argument(
        "--max-restarts",
        type=_int_at_least(0, "--max-restarts"),
        default=0,
        metavar="R",
        help=(
            "when a worker fails, stop every worker and start all of them again on new ports, at most R times "
            f"(default: 0); workers read the attempt number from {ENV_RESTART_COUNT} and resume from their own "
            "checkpoints, e.g. keras.callbacks.BackupAndRestore"
        ),
    )
    parser.add_argument(
        "--hang-timeout",
        type=_float_at_least(0.0, "--hang-timeout"),
        default=0.0,
        metavar="SECONDS",
        help=(
            "end the job when a worker inside fit/evaluate/predict finishes no batch for this long, naming it "
            f"(exit status {EXIT_HANG}; restarts count it as a failure); every fit, evaluate and predict of the "
            "workers reports its batches, whatever callbacks the script passes. Default: 0, off. Make it longer "
            "than the slowest step plus any epoch-end work (validation, checkpoints)"
        ),
    )
    parser.add_argument(
        "-m",
        dest="module",
        nargs=argparse.REMAINDER,
        default=None,
        metavar="MODULE",
        help="run a module as `python -m MODULE` instead of a script",
    )
    parser.add_argument("target", nargs=argparse.REMAINDER, metavar="SCRIPT [ARGS]", help="the script and its arguments")


def run(args: argparse.Namespace) -> int:
    """Run `keras-gpu launch` and return its exit status."""
    if os.environ.get("KERAS_BACKEND", "tensorflow").strip() in ("", "tensorflow"):  # JAX workers need no TensorFlow
        require_tensorflow("keras-gpu launch")
    target, is_module, script_args = _resolve_target(args)
    n = args.nproc
    max_restarts = getattr(args, "max_restarts", 0)
    hang_timeout = getattr(args, "hang_timeout", 0.0) or None
    command = worker_command(target, script_args, module=is_module, cpu_replicas=args.cpu_replicas)
    if os.environ.get("TF_CONFIG", "").strip():
        logger.warning("TF_CONFIG is set in the environment; each worker gets its own TF_CONFIG instead.")
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
                command, n, restart, max_restarts, args.grace_period, stop_requested, force, received, hang_timeout
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
            ", ".join(f"{_LOOPBACK}:{p}" for p in ports),
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
                "received %s; stopping %d worker(s) (SIGKILL after %gs)", _signal_name(signum), n, grace_period
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
        text += f" (it was still running {grace_period:g}s after {_signal_name(sent)})"
    return text


def _resolve_target(args: argparse.Namespace) -> tuple[str, bool, list[str]]:
    """Return `(script or module, is_module, arguments)` from the parsed command line."""
    target = list(args.target)
    if target and target[0] == "--":
        target = target[1:]
    if args.module is not None:  # `-m` takes the rest of the command line, so `target` is empty here
        if not args.module:
            raise UsageError("`-m` needs a module name, e.g. `keras-gpu launch -n 2 -m mypackage.train`.")
        name, *rest = args.module
        if not _MODULE_NAME.match(name):
            raise UsageError(f"`-m` needs a dotted module name like `mypackage.train`. Received: -m {name!r}")
        return name, True, rest
    if not target:
        raise UsageError("no script given: use `keras-gpu launch -n N script.py [args...]` or `-m MODULE`.")
    script, *rest = target
    if script.startswith("-"):
        raise UsageError(f"unknown option {script!r}; options go before the script. Received: {script!r}")
    if not Path(script).exists():
        raise UsageError(f"the script does not exist (looked in {os.getcwd()}). Received: script={script!r}")
    return script, False, rest


def _int_at_least(minimum: int, name: str, maximum: int | None = None) -> Callable[[str], int]:
    bounds = f">= {minimum}" if maximum is None else f"from {minimum} to {maximum}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer {bounds}. Received: {name}={text}") from None
        if value < minimum or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"must be an integer {bounds}. Received: {name}={text}")
        return value

    return parse


def _float_at_least(minimum: float, name: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not value >= minimum or value == float("inf"):
            raise argparse.ArgumentTypeError(f"must be a finite number >= {minimum:g}. Received: {name}={text}")
        return value

    return parse


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


# ------------------------------------------------------------- job description


def free_loopback_ports(n: int) -> list[int]:
    """Return `n` distinct TCP ports that were free on 127.0.0.1 a moment ago.

    All `n` sockets are bound at once, so the ports are distinct; they are
    closed before returning, so another process could take one in between.
    """
    sockets: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(s)
            s.bind((_LOOPBACK, 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def worker_command(
    target: str,
    args: Sequence[str] = (),
    *,
    module: bool = False,
    cpu_replicas: int | None = None,
    python: str | None = None,
) -> list[str]:
    """The command line of one worker.

    Args:
        target: The script path, or the module name when `module` is True.
        args: Arguments passed to the script.
        module: Run `target` like `python -m target`.
        cpu_replicas: When set, the bootstrap splits the CPU into this many
            logical devices before the script starts.
        python: The interpreter (default `sys.executable`).

    Every worker runs through the `keras_gpu.cli._worker` bootstrap, which
    supervises it (so that it stops when told) and, under `--hang-timeout`,
    makes its `fit`, `evaluate` and `predict` report progress.
    """
    python = python or sys.executable
    run_target = ["-m", target] if module else [target]
    replicas = [] if cpu_replicas is None else ["--cpu-replicas", str(cpu_replicas)]
    return [python, "-m", "keras_gpu.cli._worker", *replicas, "--", *run_target, *args]


def worker_env(
    base: Mapping[str, str], index: int, ports: Sequence[int], *, restart_count: int = 0, max_restarts: int = 0
) -> dict[str, str]:
    """The environment of worker `index` in a job on loopback `ports` (one per worker).

    Args:
        base: The environment to start from (usually `os.environ`).
        index: The worker's rank.
        ports: One loopback port per worker.
        restart_count: How many times the job was restarted before this attempt.
        max_restarts: The launcher's `--max-restarts`.
    """
    env = dict(base)
    env["TF_CONFIG"] = json.dumps(
        {
            "cluster": {"worker": [f"{_LOOPBACK}:{p}" for p in ports]},
            "task": {"type": "worker", "index": index},
        }
    )
    # What `keras.distribution.initialize()` reads when called without arguments (JAX: worker 0 coordinates).
    env["KERAS_DISTRIBUTION_JOB_ADDRESSES"] = ",".join(f"{_LOOPBACK}:{p}" for p in ports)
    env["KERAS_DISTRIBUTION_NUM_PROCESSES"] = str(len(ports))
    env["KERAS_DISTRIBUTION_PROCESS_ID"] = str(index)
    env[ENV_WORKER_INDEX] = str(index)
    env[ENV_NUM_WORKERS] = str(len(ports))
    env[ENV_RESTART_COUNT] = str(restart_count)
    env[ENV_MAX_RESTARTS] = str(max_restarts)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


# --------------------------------------------------------- process management


@dataclass(frozen=True)
class WorkerExit:
    """How one worker ended.

    Attributes:
        index: The worker's rank.
        returncode: As in `subprocess.Popen.returncode`: the exit status, or
            `-N` when signal `N` killed it.
    """

    index: int
    returncode: int
    hung: bool = False

    @property
    def exit_code(self) -> int:
        """The status a shell would report: the exit status, or `128 + N` for signal `N`."""
        return 128 - self.returncode if self.returncode < 0 else self.returncode

    def describe(self) -> str:
        """E.g. `"worker 1 exited with code 3"` or `"worker 1 was killed by SIGKILL"`."""
        if self.hung:
            return f"worker {self.index} stopped making progress (--hang-timeout)"
        if self.returncode < 0:
            return f"worker {self.index} was killed by {_signal_name(-self.returncode)}"
        return f"worker {self.index} exited with code {self.returncode}"


class HangWatch:
    """Decides from the workers' progress files whether the job stopped making progress.

    A worker is judged while its file says it is active (inside `fit`,
    `evaluate` or `predict`) and its process runs. It has stalled when its
    batch count has not changed for `timeout` seconds of the launcher's own
    clock, counted from the first reading that showed it active with that
    count. Files are read at most every `min(0.5, timeout / 10)` seconds.
    When one worker has stalled, every judged worker idle for at least half
    the timeout is reported with it (the peers of a stuck worker wait in a
    collective), fewest batches first, then one in Python before one waiting
    inside TensorFlow.

    While no worker has been active for `quiet_after` seconds since the watch
    was made, it logs one warning saying that nothing is judged yet.

    Args:
        paths: One progress file per worker, by rank.
        timeout: The `--hang-timeout` in seconds.
        clock: The monotonic clock (seconds).
        quiet_after: Seconds without any active worker before the warning;
            default `max(2 * timeout, 10)`.
    """

    def __init__(
        self,
        paths: Sequence[str],
        timeout: float,
        clock: Callable[[], float] = time.monotonic,
        quiet_after: float | None = None,
    ) -> None:
        self._paths = list(paths)
        self._timeout = float(timeout)
        self._clock = clock
        self._started = clock()
        self._quiet_after = max(2 * self._timeout, 10.0) if quiet_after is None else float(quiet_after)
        self._since: list[tuple[int, float] | None] = [None] * len(self._paths)
        self._latest: list[Progress | None] = [None] * len(self._paths)
        self._next_read = 0.0
        self.seen_any = False
        """Whether any worker has written a progress file."""
        self.seen_active = False
        """Whether any worker has been inside `fit`, `evaluate` or `predict`."""
        self.warned_quiet = False
        """Whether the nothing-judged-yet warning was logged."""
        self.stalled: list[tuple[int, Progress]] = []
        """The stalled workers once `__call__` returned True, the likely cause first."""

    def __call__(self, codes: Sequence[int | None]) -> bool:
        """Read the files when due; True when an active, running worker has stalled."""
        now = self._clock()
        if now < self._next_read:
            return False
        self._next_read = now + min(0.5, self._timeout / 10)
        idle_for: dict[int, float] = {}
        for rank, path in enumerate(self._paths):
            progress = read_progress(path)
            if progress is None:
                continue
            self.seen_any = True
            self._latest[rank] = progress
            running = rank >= len(codes) or codes[rank] is None
            if not (progress.active and running):
                self._since[rank] = None
                continue
            self.seen_active = True
            since = self._since[rank]
            if since is None or since[0] != progress.steps:
                self._since[rank] = since = (progress.steps, now)
            idle_for[rank] = now - since[1]
        if not self.seen_active and not self.warned_quiet and now - self._started >= self._quiet_after:
            self.warned_quiet = True
            logger.warning(
                "--hang-timeout: %gs after the start no worker has entered fit, evaluate or predict, so none is "
                "judged yet (start-up, data loading and custom training loops are not watched; a worker waiting for "
                "its peers is bounded by make_strategy's startup_timeout)",
                self._quiet_after,
            )
        if not idle_for or max(idle_for.values()) < self._timeout:
            return False
        # Peers of a stuck worker stop within moments of it: report every worker idle for half the timeout,
        # fewest batches first, then one in Python before one waiting inside TensorFlow.
        stalled = [(rank, self._latest[rank]) for rank, idle in idle_for.items() if idle >= self._timeout / 2]
        self.stalled = sorted(stalled, key=lambda item: (item[1].steps, item[1].in_tensorflow, item[0]))
        return True

    def describe(self) -> str:
        """The message naming the stalled workers and where each was, and the likely cause when one stands out."""
        parts = []
        for rank, p in self.stalled:
            position = p.position()
            stuck = f" stuck in {position}" if position else ""
            parts.append(
                f"worker {rank}{stuck} ({p.steps} batch(es) done; "
                f"{'waiting inside TensorFlow' if p.in_tensorflow else 'in Python'} at {p.where or 'unknown'})"
            )
        ranks = ", ".join(str(rank) for rank, _ in self.stalled)
        text = f"no progress for {self._timeout:g}s (--hang-timeout) on worker(s) {ranks}: {'; '.join(parts)}"
        key = [(p.steps, p.in_tensorflow) for _, p in self.stalled]
        if len(key) > 1 and key[0] != key[1]:
            first, progress = self.stalled[0]
            why = "the fewest batches" if key[0][0] < key[1][0] else "in Python while the others wait inside TensorFlow"
            text += f". Worker {first} stopped first ({why})"
        elif len(key) == 1:
            text += f". Worker {self.stalled[0][0]} stopped making progress"
        return text


class WorkerGroup:
    """Worker processes that are started, watched and stopped together.

    Each worker runs in its own process group (so a signal reaches the
    processes it started too), with stdin from `/dev/null`. On Linux it also
    receives SIGKILL if the thread that called `start()` dies, so call
    `start()` from a thread that lives as long as the workers (the main
    thread). Every stdout/stderr line of worker `i` is written to `stdout` /
    `stderr` with the prefix `[worker i] `, one whole line at a time.

    A group runs once: to restart a job, `stop()` it and build a new one.

    Args:
        commands: One command line per worker.
        envs: One environment per worker.
        cwd: Working directory of the workers (default: the current one).
        stdout: Where worker stdout lines go (default: `sys.stdout` at `start()`).
        stderr: Where worker stderr lines go (default: `sys.stderr` at `start()`).
    """

    def __init__(
        self,
        commands: Sequence[Sequence[str]],
        envs: Sequence[Mapping[str, str]],
        *,
        cwd: str | os.PathLike[str] | None = None,
        stdout: TextIO | None = None,
        stderr: TextIO | None = None,
    ) -> None:
        if not commands:
            raise ValueError(f"`commands` must hold at least one command. Received: commands={commands!r}")
        if len(envs) != len(commands):
            raise ValueError(
                f"`envs` must hold one environment per command: got {len(envs)} for {len(commands)} commands."
            )
        self._commands = [list(c) for c in commands]
        self._envs = [dict(e) for e in envs]
        self._cwd = cwd
        self._stdout = stdout
        self._stderr = stderr
        self._procs: list[subprocess.Popen[bytes]] = []
        self._readers: list[threading.Thread] = []
        self._write_lock = threading.Lock()
        self._started = False

    @property
    def pids(self) -> list[int]:
        """The process ids of the started workers, by rank."""
        return [p.pid for p in self._procs]

    def start(self) -> None:
        """Start every worker, then the threads that copy their output.

        If a worker cannot be started, the ones already running are killed and
        the error is raised.
        """
        if self._started:
            raise RuntimeError("This WorkerGroup was already started; create a new one to run the job again.")
        self._started = True
        stdout = self._stdout or sys.stdout
        stderr = self._stderr or sys.stderr
        preexec = _make_preexec(os.getpid())
        try:
            # All processes are forked before any reader thread exists, so no
            # thread holds a lock while a child runs `preexec`.
            for command, env in zip(self._commands, self._envs):
                self._procs.append(
                    subprocess.Popen(
                        command,
                        env=env,
                        cwd=self._cwd,
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        preexec_fn=preexec,
                    )
                )
        except BaseException:
            self.stop(signal.SIGKILL, 0.0)
            raise
        for index, proc in enumerate(self._procs):
            for pipe, out in ((proc.stdout, stdout), (proc.stderr, stderr)):
                thread = threading.Thread(
                    target=self._pump,
                    args=(pipe, out, f"[worker {index}] "),
                    name=f"keras-gpu-launch-output-{index}",
                    daemon=True,
                )
                thread.start()
                self._readers.append(thread)

    def poll(self) -> list[int | None]:
        """Each worker's `returncode`, or `None` while it runs. Does not reap them."""
        return [_peek_returncode(p) for p in self._procs]

    def wait(
        self,
        stop_event: threading.Event | None = None,
        poll_interval: float = 0.05,
        *,
        watch: Callable[[list[int | None]], bool] | None = None,
    ) -> WorkerExit | None:
        """Block until a worker fails, all succeed, `stop_event` is set, or `watch` says to stop.

        `watch`, when given, is called with `poll()`'s result on every poll
        and ends the wait by returning True.

        Returns:
            The failed worker (the lowest rank if several are found failed at
            once), or `None` when every worker exited 0 or `stop_event` was set.
        """
        if not self._procs:
            raise RuntimeError("WorkerGroup.wait() was called before start().")
        while True:
            codes = self.poll()
            for index, code in enumerate(codes):
                if code is not None and code != 0:
                    return WorkerExit(index, code)
            if all(code == 0 for code in codes):
                return None
            if watch is not None and watch(codes):
                return None
            if stop_event is not None:
                if stop_event.wait(poll_interval):
                    return None
            else:
                time.sleep(poll_interval)

    def stop(
        self, sig: int = signal.SIGTERM, grace_period: float = 5.0, *, force: threading.Event | None = None
    ) -> list[WorkerExit]:
        """Stop every worker and the processes in its group, and reap them.

        Sends `sig` to each worker's process group, waits up to
        `grace_period` seconds (less if `force` gets set) for the workers to
        exit, then sends SIGKILL to every group. Safe to call more than once.

        Returns:
            How each worker ended, by rank.
        """
        live = [p for p in self._procs if p.returncode is None]
        if live:
            for proc in live:
                _signal_group(proc, sig)
            deadline = time.monotonic() + grace_period
            while time.monotonic() < deadline and not (force is not None and force.is_set()):
                if all(_peek_returncode(p) is not None for p in live):
                    break
                time.sleep(0.02)
            for proc in live:  # also catches processes a worker started and left behind
                _signal_group(proc, signal.SIGKILL)
            for proc in live:
                proc.wait()
        deadline = time.monotonic() + 5.0  # a pipe a runaway grandchild holds open must not block us
        for thread in self._readers:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        return [WorkerExit(i, p.returncode) for i, p in enumerate(self._procs) if p.returncode is not None]

    def __enter__(self) -> WorkerGroup:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop(signal.SIGKILL, 0.0)

    def _pump(self, pipe: IO[bytes], out: TextIO | None, prefix: str) -> None:
        """Copy `pipe` to `out` line by line with `prefix`; keep draining if `out` breaks."""
        try:
            while True:
                chunk = pipe.readline(_MAX_LINE)
                if not chunk:
                    return
                if out is None:
                    continue
                text = chunk.decode("utf-8", "replace")
                if not text.endswith("\n"):
                    text += "\n"
                try:
                    with self._write_lock:
                        out.write(prefix + text)
                        out.flush()
                except (OSError, ValueError):
                    out = None  # e.g. the launcher's stdout was a pipe that closed
        except (OSError, ValueError):
            return
        finally:
            with contextlib.suppress(OSError):
                pipe.close()


def _peek_returncode(proc: subprocess.Popen[bytes]) -> int | None:
    """The returncode of `proc` if it has exited, without reaping it.

    Leaving an exited worker unreaped keeps its pid, and so its process-group
    id, reserved until `WorkerGroup.stop`, so signalling the group never hits
    an unrelated process that reused the id.
    """
    if proc.returncode is not None:
        return proc.returncode
    if not hasattr(os, "waitid"):  # pragma: no cover - platforms without waitid
        return proc.poll()
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # pragma: no cover - reaped elsewhere
        return proc.poll()
    if info is None:
        return None
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    """Send `sig` to the process group that `proc` leads, unless it was already reaped."""
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def _make_preexec(parent_pid: int) -> Callable[[], None]:
    """The function a worker runs between fork and exec: new process group, parent-death signal."""
    prctl = _load_prctl()

    def preexec() -> None:
        os.setpgid(0, 0)
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() != parent_pid:  # the launcher died before the signal was armed
                os.kill(os.getpid(), signal.SIGKILL)

    return preexec


def _load_prctl() -> Callable[..., int] | None:
    """`prctl(2)` from the C library on Linux, resolved in the parent; `None` elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # pragma: no cover - exotic libc
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
