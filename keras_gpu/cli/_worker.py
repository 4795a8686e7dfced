"""Worker bootstrap of `keras-gpu launch`: every launched worker starts here.

```
python -m keras_gpu.cli._worker [--cpu-replicas K] -- script.py [args...]
python -m keras_gpu.cli._worker [--cpu-replicas K] -- -m module [args...]
```

The bootstrap forks once. The child runs the script (or module) as
`__main__` with the `sys.argv` and `sys.path[0]` that plain `python` would
give it, after:

- splitting the process's CPU into `K` logical devices (`--cpu-replicas`),
  which must happen before TensorFlow initialises its devices;
- when the launcher watches for hangs (`KERAS_GPU_PROGRESS_FILE` is set),
  arranging that every Keras `CallbackList` holds a `keras_gpu.Heartbeat`, so
  `fit`, `evaluate` and `predict` report progress whatever callbacks the
  script passes (never twice: a list that has one already is left alone).
  Keras is patched when the script imports it, on any backend; the bootstrap
  imports neither Keras nor TensorFlow itself;
- under `keras-gpu scale` or `keras-gpu tune` (`KERAS_GPU_STUDY_DIR` is
  set), joining the run (`keras_gpu.hooks.study.install_from_env`): Keras'
  own `fit` is wrapped when the script imports Keras; it applies the run's
  change, measures the window, writes the run's record and ends the worker.

A script that raises prints its traceback from its own frame on, without
the bootstrap's and `runpy`'s frames above it (through `sys.excepthook`,
so a hook the script set still prints it), and exits with status 1.

The parent stays a small supervisor without TensorFlow or JAX, so that the
worker stops when told, and ends when its script failed. A script that
raises (or exits non-zero) has the child report its exit status to the
supervisor through a pipe before the interpreter's exit handlers run; a
child still running `KERAS_GPU_STOP_DELAY` seconds later (JAX's exit-time
`jax.distributed` shutdown waits up to minutes for peers that are blocked in
a collective on it) is killed, and the supervisor exits with the reported
status, so the launcher sees `worker i exited with code N` at once.
TensorFlow's coordination service (and JAX's preemption service) catches
SIGTERM in a multi-worker process and ignores it, and while it waits for the cluster's
tasks to register it holds Python's interpreter lock, so no Python handler
can run in the worker. The supervisor gets the launcher's SIGTERM (or SIGINT,
SIGHUP) with the rest of the worker's process group, or alone, and passes it
on to the worker (which may so see it twice); it waits up to
`KERAS_GPU_STOP_DELAY` seconds (half the launcher's `--grace-period`) for the
worker to end on its own, then kills it and ends by the same signal. A worker
that ignores the signal (`SIG_IGN`) is left to the launcher's SIGKILL. The
supervisor exits with the worker's status, or dies by the signal that
killed it; the worker gets SIGKILL if the supervisor dies.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import runpy
import signal
import sys
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["ENV_STOP_DELAY", "main"]

ENV_STOP_DELAY = "KERAS_GPU_STOP_DELAY"
"""Environment variable: seconds the supervisor gives a signalled worker before it kills it."""

_MAX_REPLICAS = 4096  # configure_devices' bound on logical devices
_DEFAULT_STOP_DELAY_S = 2.5
_STOP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGINT", "SIGHUP") if hasattr(signal, n))
_PR_SET_PDEATHSIG = 1
_USAGE = "usage: python -m keras_gpu.cli._worker [--cpu-replicas K] -- (script.py | -m module) [args...]"


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the bootstrap's arguments, fork the supervisor, then run the target in the child."""
    argv = list(sys.argv[1:] if argv is None else argv)
    replicas, target = _parse(argv)
    report = _supervise_child() if hasattr(os, "fork") else None
    from keras_gpu.hooks.progress import ENV_PROGRESS_FILE

    if os.environ.get(ENV_PROGRESS_FILE, "").strip():
        install_heartbeat()
    from keras_gpu.hooks.study import install_from_env

    install_from_env()  # `keras-gpu scale` and `keras-gpu tune` (nothing elsewhere)
    if replicas is not None:
        _split_cpu(replicas)
    try:
        _run_target(target)
        from keras_gpu.hooks.study import finish

        finish()
    except SystemExit as exc:
        _report_failure(report, _exit_status(exc.code))
        raise
    except Exception as exc:  # noqa: BLE001 - printed from the script's own frame, as Python would print it
        _report_failure(report, 1)
        tb = _user_frames(exc.__traceback__)
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
        raise SystemExit(1) from None
    except BaseException:
        _report_failure(report, 1)
        raise


def _user_frames(tb: Any) -> Any:
    """`tb` without its leading frames of this bootstrap and of `runpy` (all of it where nothing else is left)."""
    first = tb
    while tb is not None and _is_bootstrap(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    return tb if tb is not None else first


def _is_bootstrap(filename: str) -> bool:
    return os.path.abspath(filename) == os.path.abspath(__file__) or filename in (runpy.__file__, "<frozen runpy>")


def _exit_status(code: object) -> int:
    """The status `raise SystemExit(code)` ends the interpreter with."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    return 1  # a message: printed, then status 1


def _report_failure(report: int | None, status: int) -> None:
    """Tell the supervisor that the script failed with `status`, before the interpreter's exit handlers run.

    JAX's exit handler waits at `jax.distributed`'s shutdown barrier for every
    peer (up to its shutdown timeout) while a peer may wait in a collective
    for this process: the supervisor ends a reported worker that is still
    running after the stop delay, with the reported status.
    """
    if report is None or status == 0:
        return
    with contextlib.suppress(OSError):
        os.write(report, bytes([status]))


def _parse(argv: list[str]) -> tuple[int | None, list[str]]:
    replicas: int | None = None
    rest = argv
    if rest[:1] == ["--cpu-replicas"]:
        if len(rest) < 2:
            raise SystemExit(f"{_USAGE}\nReceived: {argv!r}")
        try:
            replicas = int(rest[1])
        except ValueError:
            replicas = 0
        if not 1 <= replicas <= _MAX_REPLICAS:
            raise SystemExit(
                f"--cpu-replicas must be an integer from 1 to {_MAX_REPLICAS}. Received: --cpu-replicas {rest[1]!r}"
            )
        rest = rest[2:]
    if len(rest) < 2 or rest[0] != "--":
        raise SystemExit(f"{_USAGE}\nReceived: {argv!r}")
    target = rest[1:]
    if target[0] == "-m" and len(target) < 2:
        raise SystemExit(f"`-m` needs a module name.\n{_USAGE}")
    return replicas, target


def _split_cpu(replicas: int) -> None:
    """Give this process `replicas` logical CPU devices."""
    from keras_gpu.setup.devices import configure_devices

    configure_devices(cpu_devices=replicas)


def _run_target(target: list[str]) -> None:
    """Run `script.py args...` or `-m module args...` as `__main__`."""
    if target[0] == "-m":
        module, args = target[1], target[2:]
        sys.argv = [module, *args]  # run_module replaces argv[0] with the module's file
        sys.path[0] = os.getcwd()
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        script, args = target[0], target[1:]
        sys.argv = [script, *args]
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        runpy.run_path(script, run_name="__main__")


# ------------------------------------------------------------------ progress in every fit/evaluate/predict


def install_heartbeat() -> None:
    """Make every Keras `CallbackList` of this process hold a `keras_gpu.Heartbeat`.

    Wraps `CallbackList.__init__` now when Keras is imported, else when the
    script imports it (an import hook that imports nothing itself, so the
    script still chooses the backend): see `keras_private.wrap_callback_lists`.
    """
    from keras_gpu.core import keras_private

    keras_private.wrap_callback_lists(_with_heartbeat)


def _with_heartbeat(callbacks: Any) -> Any:
    """`callbacks` plus a `Heartbeat` unless it holds one already (a new list; the caller's stays as it was)."""
    from keras_gpu.hooks.heartbeat import Heartbeat

    if callbacks is None:
        items: list[Any] = []
    elif isinstance(callbacks, (list, tuple)):
        items = list(callbacks)
    else:
        items = [callbacks]
    if any(isinstance(c, Heartbeat) for c in items):
        return callbacks
    return [*items, Heartbeat()]


# ------------------------------------------------------------------ the supervisor


def _supervise_child() -> int:
    """Fork; return in the child (the write end of its failure report), and never return in the parent.

    The parent supervises the child. Signals are blocked across the fork so
    that none is lost or handled by the wrong process before each side has
    set up its own handling.
    """
    parent = os.getpid()
    read_end, write_end = os.pipe()
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    child = os.fork()
    if child == 0:
        os.close(read_end)
        os.set_inheritable(write_end, False)  # the script's own subprocesses do not hold it
        _die_with_parent(parent)
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        return write_end
    os.close(write_end)
    os.set_blocking(read_end, False)
    received: list[int] = []
    for signum in _STOP_SIGNALS:
        signal.signal(signum, lambda s, _f: received.append(s))
    signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    status = _wait(child, received, read_end)
    _exit_like(status)
    raise AssertionError("unreachable")  # pragma: no cover - _exit_like ends the process


def _die_with_parent(parent: int) -> None:
    """In the child: SIGKILL when the supervisor dies (Linux), and at once if it already has."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGKILL)


def _wait(child: int, received: list[int], report: int | None = None) -> int:
    """Wait for the child and return its wait status.

    Once a stop signal arrived, the child gets the stop delay, then SIGKILL.
    Once it reported a failure (`report`, see `_report_failure`), it gets the
    stop delay to end on its own; then it is killed and the reported exit
    status is returned.
    """
    deadline: float | None = None
    failed: int | None = None
    failed_by: float | None = None
    while True:
        try:
            pid, status = os.waitpid(child, os.WNOHANG)
        except ChildProcessError:  # pragma: no cover - reaped elsewhere
            return 0
        if pid == child:
            return status
        if report is not None and failed is None:
            failed = _read_report(report)
            if failed is not None:
                failed_by = time.monotonic() + _stop_delay()
        if failed_by is not None and time.monotonic() >= failed_by and not received:
            _note(
                f"the script failed (exit status {failed}) but its process did not end within {_stop_delay():g}s "
                f"({_exit_wait(child)}); ending it"
            )
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
            return failed << 8  # the wait status of a process that exited with `failed`
        if received and deadline is None:
            if not _ignores(child, received[0]):
                with contextlib.suppress(ProcessLookupError):  # a signal sent to the supervisor alone reaches the worker too
                    os.kill(child, received[0])
                deadline = time.monotonic() + _stop_delay()
            else:
                received.clear()  # the worker chose to ignore it; the launcher's SIGKILL decides
        if deadline is not None and time.monotonic() >= deadline:
            signum = received[0]
            _note(f"the worker did not end within {_stop_delay():g}s of {signal.Signals(signum).name} ({_catcher(child)}); ending it")
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
            return signum  # the wait status of a process killed by `signum`: the supervisor ends by it
        time.sleep(0.02)


def _read_report(report: int) -> int | None:
    """The exit status the child reported, or None while it reported none."""
    try:
        data = os.read(report, 1)
    except (BlockingIOError, InterruptedError):
        return None
    except OSError:
        return None
    return data[0] if data else None


def _runtime(pid: int) -> str | None:
    """`"TensorFlow"` or `"JAX"`: the runtime whose library process `pid` has loaded (from /proc), else None."""
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
            maps = f.read()
    except OSError:
        return None
    if "libtensorflow_framework" in maps or "_pywrap_tensorflow" in maps:
        return "TensorFlow"
    if "jaxlib" in maps:
        return "JAX"
    return None


def _catcher(pid: int) -> str:
    """Why a signalled worker may not end, in the words of the runtime it runs."""
    runtime = _runtime(pid)
    if runtime == "JAX":
        return "JAX's preemption service catches SIGTERM in a multi-process job, and a collective waits for its peers"
    if runtime == "TensorFlow":
        return "TensorFlow catches SIGTERM in a multi-worker process and holds the interpreter while it waits for the cluster"
    return "it catches or outlasts the signal"


def _exit_wait(pid: int) -> str:
    """What a failed worker's process is likely waiting for at exit."""
    if _runtime(pid) == "JAX":
        return "JAX's exit-time jax.distributed shutdown waits for every peer"
    return "an exit handler or a thread of the script is still running"


def _ignores(pid: int, signum: int) -> bool:
    """Whether process `pid` ignores `signum` (its `SigIgn` mask in /proc), e.g. a worker that set SIG_IGN."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("SigIgn:"):
                    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except (OSError, ValueError):
        pass
    return False


def _stop_delay() -> float:
    try:
        delay = float(os.environ.get(ENV_STOP_DELAY, ""))
    except ValueError:
        return _DEFAULT_STOP_DELAY_S
    return delay if 0 <= delay < float("inf") else _DEFAULT_STOP_DELAY_S


def _note(text: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"keras-gpu: {text}\n")
        sys.stderr.flush()


def _exit_like(status: int) -> None:
    """End this process the way the child ended: the same exit status, or death by the same signal."""
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()
        with contextlib.suppress(OSError, ValueError):  # SIGKILL and SIGSTOP have no handler to reset
            signal.signal(signum, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum])
        os.kill(os.getpid(), signum)
        time.sleep(1)  # the signal ends the process; a signal that does not (e.g. SIGCHLD) falls through
        os._exit(128 + signum)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


if __name__ == "__main__":
    main()
