"""`keras-gpu launch`: worker processes started, watched and stopped together.

`WorkerGroup` runs one attempt's workers, each in its own process
group, copies their output line by line with a `[worker i] ` prefix and stops
them (the signal, then SIGKILL after the grace period); `WorkerExit`
says how one worker ended.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, TextIO

__all__ = ["WorkerExit", "WorkerGroup", "signal_name"]

_MAX_LINE = 1 << 16  # longer lines are passed on in chunks of this many bytes
_PR_SET_PDEATHSIG = 1


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
            return f"worker {self.index} was killed by {signal_name(-self.returncode)}"
        return f"worker {self.index} exited with code {self.returncode}"


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


def signal_name(signum: int) -> str:
    """The name of `signum` (`"SIGTERM"`), or `"signal N"` for a number without one."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
