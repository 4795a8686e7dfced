"""`TraceJob` and `read_trace`: a finished trace of `StepTimeLogger`, read on the parser thread and kept under the run."""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass

from keras_gpu.core.log import Once
from keras_gpu.hooks import device_profiler
from keras_gpu.meters import step_time as steptime
from keras_gpu.meters import xspace
from keras_gpu.meters.trace_child import analyze_file

__all__ = ["TraceJob", "read_trace"]


@dataclass(frozen=True)
class TraceJob:
    """One finished trace, for the parser thread.

    Attributes:
        profile_dir: Where the run keeps its traces (`run_dir/plugins/profile`).
        staging: The trace's own directory, where the profiler wrote it.
        keep: Whether the trace is kept in `profile_dir` (the run is written).
        steps: Training steps traced, as the schedule counted them.
        wall_sec: Their wall time, batch end to batch end, in seconds.
        step: The global step the breakdown is logged at (where the trace ended).
        steps_per_mark: Training steps in each marked step (`steps_per_execution`).
        num_replicas: This worker's replicas.
        labels: Per local replica, its tag label (`<global index>_<DEV>_<n>`).
        gpu_replicas: `{GPU index in the trace: local replicas on it}`.
        expect_device: `"GPU"` where the replicas run on GPUs (a trace without GPU activity then says so).
        write: Where its breakdown goes, `write(breakdown, labels, step)`
            (the output of the `fit` that traced it).
        stop_profiler: Waits for the profiler's stop, under way on a thread
            of its own (or done already, inline), before the trace can be read
            (on the parser thread): returns whether the profiler stopped and
            wrote the trace. `None`: it had stopped before the job was made.
    """

    profile_dir: str
    staging: str
    keep: bool
    steps: int
    wall_sec: float
    step: int
    steps_per_mark: int
    num_replicas: int
    labels: tuple[str, ...]
    gpu_replicas: dict[int, tuple[int, ...]]
    write: Callable[[steptime.StepTime, tuple[str, ...], int], None] | None = None
    stop_profiler: Callable[[], bool] | None = None
    expect_device: str | None = None


def read_trace(
    job: TraceJob, once: Once, max_traces: int, write: Callable[[steptime.StepTime, tuple[str, ...], int], None]
) -> None:
    """Read a finished trace (on the parser thread, in a child process) and `write(breakdown, labels, step)`.

    The trace is read in a child process (`keras_gpu.meters.trace_child`),
    so that the reading never holds the interpreter against the training
    thread. A trace of no complete step is skipped; one without training ops, or one
    that cannot be read, costs one warning (per `once` scope). A GPU job's
    trace without GPU activity (`StepTime.unmeasured`) is written with what
    it measured, and turns tracing off in this process with one warning
    (`keras_gpu.hooks.device_profiler`). The trace moves
    under `job.profile_dir` where the run is written, which keeps the newest
    `max_traces`; its staging directory is removed.
    """
    try:
        if job.steps < 1 or job.wall_sec <= 0:
            return  # nothing to learn from a trace of no complete step
        paths = xspace.find_traces(job.staging)
        if not paths:
            raise FileNotFoundError(f"the profiler wrote no .xplane.pb file under {job.staging}")
        result = analyze_file(
            paths[-1],
            steps=job.steps,
            wall_sec=job.wall_sec,
            num_replicas=job.num_replicas,
            gpu_replicas=job.gpu_replicas,
            steps_per_mark=job.steps_per_mark,
            expect_device=job.expect_device,
        )
        if job.keep:  # only runs that are written keep their traces
            _keep(os.path.dirname(paths[-1]), job.profile_dir)
        if result.unmeasured:
            device_profiler.turn_off(result.unmeasured)
        elif result.compute_sec == 0 and result.input_sec == 0 and result.communication_sec == 0:
            once.log(
                logging.WARNING,
                "empty-trace",
                "keras-gpu: StepTimeLogger found no training ops in the profiler trace; no breakdown is logged.",
            )
            return
        write(result, job.labels, job.step)
    except Exception as exc:  # noqa: BLE001 - a bad trace costs one warning, never training
        once.log(
            logging.WARNING,
            "parse-failed",
            "keras-gpu: StepTimeLogger could not read a profiler trace (%s: %s); training goes on.",
            type(exc).__name__,
            exc,
        )
    finally:
        shutil.rmtree(job.staging, ignore_errors=True)
        if job.keep:
            _prune(job.profile_dir, max_traces)


def _keep(session_dir: str, profile_dir: str) -> str:
    """Move a trace's directory under `profile_dir`, under a name no other trace has there."""
    os.makedirs(profile_dir, exist_ok=True)
    name = os.path.basename(session_dir.rstrip(os.sep))
    target, n = os.path.join(profile_dir, name), 1
    while os.path.exists(target):
        n += 1
        target = os.path.join(profile_dir, f"{name}_{n}")
    shutil.move(session_dir, target)
    return target


def _subdirs(path: str) -> list[str]:
    try:
        return sorted(e.name for e in os.scandir(path) if e.is_dir())
    except OSError:
        return []


def _prune(profile_dir: str, keep: int) -> None:
    """Delete all but the newest `keep` trace directories."""
    names = _subdirs(profile_dir)
    paths = sorted((os.path.join(profile_dir, n) for n in names), key=lambda p: (os.path.getmtime(p), p))
    for path in paths[: max(0, len(paths) - keep)]:
        shutil.rmtree(path, ignore_errors=True)
