"""Progress files: how a launched worker tells `keras-gpu launch --hang-timeout` that it is still training.

With `--hang-timeout SECONDS`, the launcher gives worker `i` the environment
variable `KERAS_GPU_PROGRESS_FILE` (a path of its own) and watches that file.
Inside the worker, `keras_gpu.Heartbeat` counts finished batches (train, test
and predict) in memory, and a daemon thread of `ProgressWriter`
rewrites the file a few times per timeout with the count, the call, epoch
and batch the worker is in, and where its main thread is. The training
thread only sets ints under a lock: it does no I/O and no device work.
Batch ends may run on Keras' thread pool (JAX, PyTorch), concurrently and
out of order: each counts once, and each call's position only moves
forward. Workers started by
`keras-gpu launch` get a `Heartbeat` in every `fit`, `evaluate` and
`predict` without asking (see `keras_gpu.cli._worker`).

"Progress" is a finished batch. While the worker is inside `fit`,
`evaluate` or `predict` it is *active*; the launcher ends the job when an
active worker's count has not moved for `--hang-timeout` seconds. Between
calls (loading data, saving, user code) the worker is idle and not judged.
This module imports neither Keras nor TensorFlow, so the launcher can read
the files.

File format (JSON, replaced atomically): `{"pid": int, "steps": int,
"active": bool, "phase": str, "epoch": int | null, "batch": int | null,
"where": str, "in_tensorflow": bool, "runtime": str, "input": str,
"last_batch_wall": float | null, "wall": float}`, where `phase` is the
innermost running call (`"fit"`, `"evaluate"`, `"predict"`, or `""`), `epoch`
the `fit` epoch and `batch` the batches finished in the current epoch or
call, both counted from 1 as Keras' progress bar shows them; `where` is the
innermost frame of the main thread as `file:line in function` and
`in_tensorflow` says whether that frame is inside TensorFlow (waiting on a
collective or the input pipeline) rather than in Python code; `runtime` names
the library the frame is in (`"TensorFlow"`, `"JAX"`, `"PyTorch"`, or `""`
for Python code). `input` is where the script's own input code runs when a
thread is inside it, called from the input pipeline (a tf.data
`py_function` or generator, a `PyDataset.__getitem__`, a generator fed to
`fit`), else `""`. `last_batch_wall` is the wall-clock time (`time.time()`)
the last batch ended, or the call began, as the training thread noted it.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from keras_gpu.core import frames

__all__ = [
    "ENV_HANG_TIMEOUT",
    "ENV_PROGRESS_FILE",
    "Progress",
    "ProgressWriter",
    "read_progress",
    "writer_from_env",
]

ENV_PROGRESS_FILE = "KERAS_GPU_PROGRESS_FILE"
"""Environment variable naming the file a launched worker reports its progress to."""
ENV_HANG_TIMEOUT = "KERAS_GPU_HANG_TIMEOUT"
"""Environment variable holding the launcher's `--hang-timeout` in seconds."""

_MIN_INTERVAL_S = 0.1
_MAX_INTERVAL_S = 5.0


@dataclass(frozen=True)
class Progress:
    """One reading of a worker's progress file.

    Attributes:
        pid: The worker's process id.
        steps: Batches finished so far (train, test and predict).
        active: Whether the worker is inside `fit`, `evaluate` or `predict`.
        where: The innermost frame of its main thread, `file:line in function`.
        in_tensorflow: Whether that frame is inside TensorFlow.
        phase: The innermost running call, `"fit"`, `"evaluate"` or
            `"predict"`; `""` when unknown or between calls.
        epoch: The `fit` epoch it is in, from 1; `None` outside `fit`.
        batch: Batches finished in the current epoch (or `evaluate` /
            `predict` call), from 1; `None` before the first.
        parent: The call `phase` runs inside, e.g. `"fit"` for validation.
        runtime: The library the main thread waits in (`"TensorFlow"`,
            `"JAX"`, `"PyTorch"`), or `""` in Python code.
        input_where: Where the script's input code runs, called from the
            input pipeline (`file:line in function`); `""` when it does not.
        last_batch_wall: When the last batch ended (or the call began), as
            `time.time()`; `None` when unknown.
    """

    pid: int
    steps: int
    active: bool
    where: str
    in_tensorflow: bool
    phase: str = ""
    epoch: int | None = None
    batch: int | None = None
    parent: str = ""
    runtime: str = ""
    input_where: str = ""
    last_batch_wall: float | None = None

    def waiting(self) -> str:
        """What the worker was doing, e.g. `"in its input pipeline at ..."` or `"waiting inside JAX at ..."`."""
        if self.input_where:
            return f"in its input pipeline at {self.input_where}"
        runtime = self.runtime or ("TensorFlow" if self.in_tensorflow else "")
        if runtime:
            return f"waiting inside {runtime} (a collective, the device or its input) at {self.where or 'unknown'}"
        return f"in Python at {self.where or 'unknown'}"

    def position(self) -> str:
        """Where the worker was in words, e.g. `"fit, epoch 2, after batch 17"`; `""` when unknown."""
        if not self.phase:
            return ""
        parts = [self.phase]
        if self.parent:
            parts[0] += f" (inside {self.parent})"
        if self.epoch is not None:
            parts.append(f"epoch {self.epoch}")
        parts.append(f"after batch {self.batch}" if self.batch else "before its first batch")
        return ", ".join(parts)


def read_progress(path: str | os.PathLike[str]) -> Progress | None:
    """The progress in `path`, or `None` when the file is absent or not (yet) valid."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        return Progress(
            pid=int(data["pid"]),
            steps=int(data["steps"]),
            active=bool(data["active"]),
            where=str(data.get("where", "")),
            in_tensorflow=bool(data.get("in_tensorflow", False)),
            phase=str(data.get("phase") or ""),
            epoch=_optional_int(data.get("epoch")),
            batch=_optional_int(data.get("batch")),
            parent=str(data.get("parent") or ""),
            runtime=str(data.get("runtime") or ""),
            input_where=str(data.get("input") or ""),
            last_batch_wall=_optional_float(data.get("last_batch_wall")),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


class ProgressWriter:
    """Counts finished batches and rewrites a progress file from a daemon thread.

    `step()`, `epoch()`, `begin()` and `end()` are what the training thread
    (or, for `step()`, Keras' thread pool) calls; they only change ints and
    a short list, under a lock. The thread writes every `interval` seconds,
    and once at `start()`: the training thread never touches the file.

    Args:
        path: The progress file.
        interval: Seconds between writes.
    """

    def __init__(self, path: str | os.PathLike[str], interval: float) -> None:
        self._path = os.fspath(path)
        self._interval = float(interval)
        self._steps = 0
        self._depth = 0
        self._calls: list[list[Any]] = []  # [phase, batch] per running call, innermost last
        self._epoch: int | None = None
        self._last_wall: float | None = None
        self._main = threading.main_thread()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._count_lock = threading.Lock()  # the counts: batch ends may run on Keras' pool, concurrently
        self._stopped = threading.Event()

    def start(self) -> None:
        """Start the writer thread (once)."""
        with self._lock:
            if self._thread is not None:
                return
            self._write()
            self._thread = threading.Thread(target=self._run, name="keras-gpu-progress", daemon=True)
            self._thread.start()

    def begin(self, phase: str = "") -> None:
        """A `fit`, `evaluate` or `predict` call started (calls may nest: validation runs inside `fit`)."""
        now = time.time()
        with self._count_lock:
            self._depth += 1
            self._calls.append([phase, None])
            self._last_wall = now
            if phase == "fit":
                self._epoch = None

    def end(self) -> None:
        """The innermost running call ended."""
        with self._count_lock:
            self._depth = max(0, self._depth - 1)
            if self._calls:
                phase, _ = self._calls.pop()
                if phase == "fit":
                    self._epoch = None

    def epoch(self, epoch: int) -> None:
        """`fit` started epoch `epoch` (counted from 1)."""
        with self._count_lock:
            self._epoch = epoch
            if self._calls:
                self._calls[-1][1] = None

    def step(self, batch: int | None = None, phase: str | None = None) -> None:
        """One batch (or one execution of `steps_per_execution` batches) finished.

        Safe from any thread, in any order: a batch end that runs after a
        later one leaves the position where the later one put it.

        Args:
            batch: Batches finished in the current epoch or call, from 1.
            phase: The call the batch belongs to (`"fit"`, `"evaluate"`,
                `"predict"`): its innermost running call takes the position
                (a training batch end that runs late, after validation
                began, is `fit`'s). `None`: the innermost call.
        """
        now = time.time()  # a clock read, no I/O: the launcher compares when each worker's last batch ended
        with self._count_lock:
            self._steps += 1
            self._last_wall = now
            if batch is None:
                return
            call = next((c for c in reversed(self._calls) if phase is None or c[0] == phase), None)
            if call is not None and (call[1] is None or batch > call[1]):
                call[1] = batch

    @property
    def steps(self) -> int:
        """Batches counted so far."""
        return self._steps

    def stop(self) -> None:
        """Stop the writer thread after its current write (the file keeps its last record); waits for it."""
        self._stopped.set()
        with self._lock:
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        while not self._stopped.wait(self._interval):
            self._write()

    def _write(self) -> None:
        where, in_tf, runtime = _main_thread_frame(self._main)
        with self._count_lock:  # a snapshot: the training thread and Keras' pool may change them meanwhile
            calls = [list(c) for c in self._calls]
            steps, depth, epoch, last_wall = self._steps, self._depth, self._epoch, self._last_wall
        phase, batch = calls[-1] if calls else ("", None)
        parent = calls[-2][0] if len(calls) > 1 else ""
        record = {
            "pid": os.getpid(),
            "steps": steps,
            "active": depth > 0,
            "phase": phase,
            "parent": parent,
            "epoch": epoch if "fit" in (phase, parent) else None,
            "batch": batch,
            "where": where,
            "in_tensorflow": in_tf,
            "runtime": runtime,
            "input": _input_frame(),
            "last_batch_wall": last_wall,
            "wall": time.time(),
        }
        tmp = f"{self._path}.tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(record, f)
            os.replace(tmp, self._path)
        except OSError:  # the launcher's directory went away: nothing to report to
            pass


_RUNTIMES = (("tensorflow", "TensorFlow"), ("jax", "JAX"), ("jaxlib", "JAX"), ("torch", "PyTorch"))
# Frames of the input pipelines that call the script's own input code.
_PIPELINE = (
    f"{os.sep}keras{os.sep}src{os.sep}trainers{os.sep}data_adapters{os.sep}",
    f"{os.sep}tensorflow{os.sep}python{os.sep}ops{os.sep}script_ops.py",
    f"{os.sep}tensorflow{os.sep}python{os.sep}data{os.sep}",
)


def _runtime_of(filename: str) -> str:
    """The runtime library a frame's file belongs to, or `""`."""
    parts = filename.split(os.sep)
    for package, name in _RUNTIMES:
        if package in parts:
            return name
    return ""


def _main_thread_frame(main: threading.Thread) -> tuple[str, bool, str]:
    """Where the main thread is: its innermost frame outside installed libraries, whether it is inside TensorFlow, and its runtime."""
    frame = frames.current_frames().get(main.ident) if main.ident is not None else None
    if frame is None:
        return "", False, ""
    in_tf = f"{os.sep}tensorflow{os.sep}" in frame.f_code.co_filename
    runtime = _runtime_of(frame.f_code.co_filename)
    innermost = frame
    skipped = (*_library_dirs(), __file__, frames.__file__)
    while frame is not None and frame.f_code.co_filename.startswith(skipped):
        frame = frame.f_back
    shown = frame or innermost
    text = f"{shown.f_code.co_filename}:{shown.f_lineno} in {shown.f_code.co_name}"
    if shown is not innermost:
        text += f" (innermost: {os.path.basename(innermost.f_code.co_filename)}:{innermost.f_lineno} in {innermost.f_code.co_name})"
    return text, in_tf, runtime


def _input_frame() -> str:
    """Where the script's own code runs inside an input pipeline, on any thread; `""` when it does not.

    A thread counts when a frame of the input machinery (Keras' data
    adapters, tf.data and its `py_function`) calls, further in, a frame
    outside installed libraries: the script's `__getitem__`, generator or
    mapped function. Idle pipeline threads wait in library code and do not.
    """
    skipped = (*_library_dirs(), os.path.dirname(os.path.dirname(__file__)))
    for frame in frames.current_frames().values():
        stack = []
        while frame is not None:
            stack.append(frame)
            frame = frame.f_back
        stack.reverse()  # outermost first
        inside = False
        for f in stack:
            name = f.f_code.co_filename
            if any(marker in name for marker in _PIPELINE):
                inside = True
            elif inside and not name.startswith(skipped) and not name.startswith("<"):
                return f"{name}:{f.f_lineno} in {f.f_code.co_name}"
    return ""


def _library_dirs() -> tuple[str, ...]:
    import sysconfig

    paths = sysconfig.get_paths()
    return tuple(sorted({paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}))


_shared: ProgressWriter | None = None
_shared_lock = threading.Lock()


def writer_from_env(environ: Mapping[str, str] | None = None) -> ProgressWriter | None:
    """This process's one `ProgressWriter`, started, when the launcher asked for one; else `None`."""
    global _shared
    env = os.environ if environ is None else environ
    path = env.get(ENV_PROGRESS_FILE, "").strip()
    if not path:
        return None
    with _shared_lock:
        if _shared is None:
            _shared = ProgressWriter(path, _interval(env.get(ENV_HANG_TIMEOUT)))
            _shared.start()
        return _shared


def _interval(timeout: Any) -> float:
    try:
        seconds = float(timeout)
    except (TypeError, ValueError):
        return 1.0
    if not seconds > 0:
        return 1.0
    return min(_MAX_INTERVAL_S, max(_MIN_INTERVAL_S, seconds / 10))
