"""A trace's step-time breakdown, read in a child process: the training process's threads keep the interpreter.

Reading a profiler trace is seconds of Python over millions of events (a
9 MB TensorFlow trace of an LSTM took 4 to 8 s on a loaded 2-core CPU). On a
thread of the training process that work holds the interpreter's lock
against the training thread: each time the training thread hands the lock
back to call TensorFlow, JAX or PyTorch, it waits up to the switch interval
(5 ms) to get it again, and a loop of small TensorFlow calls ran 4 times
slower while a trace was read beside it (1.9 times slower with the same
read in a child process, at load 18 on 2 cores, where the two processes
only share the cores). So `analyze_file` reads the trace in a fresh
interpreter that imports only keras-gpu's meters (no Keras, no backend),
and hands back the `keras_gpu.meters.step_time.StepTime`.

Run as `python -m keras_gpu.meters.trace_child`: it reads a pickled
`(path, keyword arguments of analyze)` on stdin and writes a pickled
`("ok", StepTime)` or `("error", type name, message)` on stdout.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from typing import Any

from keras_gpu.meters import step_time as steptime
from keras_gpu.meters import xspace

__all__ = ["TraceReadError", "analyze_file", "analyze_here"]


class TraceReadError(RuntimeError):
    """The child could not read the trace; the message names the error it met (`DecodeError: ...`)."""


def analyze_here(path: str, **kwargs: Any) -> steptime.StepTime:
    """The breakdown of the trace at `path` (`keras_gpu.meters.step_time.analyze`'s keywords), in this process."""
    return steptime.analyze(xspace.load(path), **kwargs)


def analyze_file(path: str, *, timeout: float = 900.0, **kwargs: Any) -> steptime.StepTime:
    """The breakdown of the trace at `path`, read in a child process (see the module's docstring).

    Where no child can be started (no Python executable, say, in an
    embedded interpreter), it reads the trace in this process.

    Args:
        path: An `.xplane.pb` file.
        timeout: Seconds the child may take; then it is killed.
        **kwargs: `keras_gpu.meters.step_time.analyze`'s keywords.

    Raises:
        TraceReadError: The child failed to read the trace, or ran out of time.

    Examples:
        >>> import pathlib
        >>> from keras_gpu.meters.trace_child import analyze_file
        >>> fixture = pathlib.Path("tests/data/h200_jax_small_mlp.xplane.pb")
        >>> if fixture.exists():  # from the repository's root
        ...     step = analyze_file(str(fixture))
        ...     assert step.steps == 19
    """
    env = dict(os.environ)
    # The same keras-gpu as this process, wherever it was found.
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", __name__],
            input=pickle.dumps((path, kwargs)),
            capture_output=True,
            env=env,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise TraceReadError(f"reading the trace took more than {timeout:g} s") from exc
    except OSError:  # no interpreter to start: read it here
        return analyze_here(path, **kwargs)
    try:
        reply = pickle.loads(proc.stdout)
    except Exception as exc:  # the child died before it answered (an empty or cut reply)
        tail = proc.stderr.decode(errors="replace").strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
        raise TraceReadError(f"the trace reader stopped: {tail[0]}") from exc
    if reply[0] == "ok":
        return reply[1]
    raise TraceReadError(f"{reply[1]}: {reply[2]}")


def _main() -> None:
    path, kwargs = pickle.loads(sys.stdin.buffer.read())
    try:
        reply: tuple[Any, ...] = ("ok", analyze_here(path, **kwargs))
    except Exception as exc:  # noqa: BLE001 - every failure goes back to the parent, named
        reply = ("error", type(exc).__name__, str(exc))
    sys.stdout.buffer.write(pickle.dumps(reply))
    sys.stdout.buffer.flush()


if __name__ == "__main__":
    _main()
