"""`StepTimeLogger`: a measured step-time breakdown (input, compute, communication, other), sampled from profiler traces."""

from __future__ import annotations

import logging
import os
import queue
import shutil
import tempfile
import threading
import time
from typing import Any

from keras_gpu import steptime, topology
from keras_gpu import tags as _tags
from keras_gpu import backend as _backend
from keras_gpu import xspace
from keras_gpu._checks import check_positive
from keras_gpu._log import Once, logger
from keras_gpu.loggers._base import LoggingCallback, read_step

__all__ = ["StepTimeLogger", "check_profile_every_s"]

_INF = float("inf")
_PROFILE_SUBDIR = os.path.join("plugins", "profile")


class StepTimeLogger(LoggingCallback):
    """Logs where each training step's time goes, measured on a few traced steps at a time.

    Every `profile_every_s` seconds it traces `profile_steps` training steps
    with the backend's profiler (TensorFlow's, or JAX's), starting and
    stopping at batch ends. The first trace comes after warm-up: at the end of
    the first execution of the second epoch, or after `warmup_steps` steps of
    the first epoch, whichever comes first, so any `fit` of two or more
    epochs gets at least one sample. A trace stops early at the end of the
    epoch's training phase (before validation). The trace is parsed on a
    background thread, never on the training thread; the traces stay in the
    run's `plugins/profile/` directory, where TensorBoard's Profile tab opens
    them, and only the newest `max_traces` are kept.

    Tags, in seconds per step, at the global step where the trace ended
    (see :mod:`keras_gpu.steptime` for how each instant is attributed):

    * `step_time/step_sec`: measured wall time per traced step
      (`step_time/traced_steps`: how many steps were traced);
    * `step_time/input_sec`: waiting for the input pipeline;
    * `step_time/compute_sec`: at least one replica device computing;
    * `step_time/communication_sec`: reductions and transfers while no
      device computed;
    * `step_time/other_sec`: host-side overhead and idle time;
      `input + compute + communication + other = step`;
    * `step_time/replica_<i>_<DEV>_<n>/compute_sec` and
      `.../communication_sec`: each replica's own busy time, by where its ops
      really ran (`<i>` is the global replica index).

    At the end of `fit` one INFO line gives the last breakdown and the hints
    that follow from it ("input-bound: 62% of each step waits for input"),
    and :attr:`last` holds it. Where the profiler is not available or fails,
    one warning says so and training goes on.

    Args:
        log_dir: Directory shared with the other callbacks.
        profile_every_s: Seconds between traces (after the first); `0` turns
            tracing off.
        profile_steps: Training steps per trace (rounded up to whole
            executions with `steps_per_execution > 1`).
        warmup_steps: Steps of the first epoch after which its first trace
            may start.
        max_traces: Traces kept in `plugins/profile/`; older ones are deleted.

    Attributes:
        last: The last :class:`keras_gpu.steptime.StepTime`, or `None`.
        traces: Breakdowns logged in this `fit`, oldest first.
    """

    DEFAULT_PROFILE_EVERY_S = 300.0

    def __init__(
        self,
        log_dir: str | os.PathLike,
        *,
        profile_every_s: float = DEFAULT_PROFILE_EVERY_S,
        profile_steps: int = 20,
        warmup_steps: int = 50,
        max_traces: int = 5,
    ) -> None:
        super().__init__(log_dir)
        self.profile_every_s = check_profile_every_s(profile_every_s)
        self.profile_steps = check_positive("profile_steps", profile_steps, integer=True)
        self.warmup_steps = check_positive("warmup_steps", warmup_steps, integer=True)
        self.max_traces = check_positive("max_traces", max_traces, integer=True)
        self.last: steptime.StepTime | None = None
        self.traces: list[steptime.StepTime] = []
        self._fit: _Fit | None = None
        self._once = Once()
        self._parser: _Parser | None = None

    # -- Keras hooks ------------------------------------------------------------

    def on_train_begin(self, logs=None):
        self._fit = None
        self.last, self.traces = None, []
        self._open()
        if self.profile_every_s == 0:
            return
        profiler = _profiler()
        if profiler is None:
            self._once.log(
                logging.INFO,
                "no-profiler",
                "keras-gpu: StepTimeLogger logs no step-time breakdown on the %s backend: its profiler does not write "
                "the trace format keras-gpu reads (TensorFlow and JAX do).",
                _backend.name(),
            )
            return
        try:
            self._fit = _Fit(profiler, self._replicas(), self.warmup_steps)
        except Exception as exc:  # noqa: BLE001 - a monitoring failure must not stop training
            logger.warning("keras-gpu: StepTimeLogger is off for this fit: %s: %s", type(exc).__name__, exc)

    def on_epoch_begin(self, epoch, logs=None):
        fit = self._fit
        if fit is not None and fit.arm_batch != _INF:
            fit.arm_batch = 0 if epoch > 0 else fit.arm_batch

    def on_train_batch_end(self, batch, logs=None):
        fit = self._fit
        if fit is None:
            return
        if fit.tracing:
            fit.last_batch, fit.last_t = batch, time.perf_counter()
            if batch >= fit.stop_batch:
                self._stop(fit)
        elif batch >= fit.arm_batch and time.perf_counter() >= fit.next_time:
            self._start(fit, batch)

    def on_test_begin(self, logs=None):
        if self._fit is not None and self._fit.tracing:
            self._stop(self._fit)

    def on_epoch_end(self, epoch, logs=None):
        if self._fit is not None and self._fit.tracing:
            self._stop(self._fit)

    def on_train_end(self, logs=None):
        fit, self._fit = self._fit, None
        if fit is not None and fit.tracing:
            self._stop(fit)
        if self._parser is not None:
            self._parser.drain()
        if fit is not None:
            self._log_summary(fit)
        self._close()

    # -- tracing ------------------------------------------------------------------

    def _start(self, fit: _Fit, batch: int) -> None:
        # The profilers name a trace's directory by the second it ends in, so
        # each trace goes to a directory of its own first; the parser thread
        # moves it under plugins/profile/ with a name no other trace has.
        staging = tempfile.mkdtemp(prefix="keras-gpu-trace-")
        try:
            fit.profiler.start(staging)
        except Exception as exc:  # noqa: BLE001 - another profiler session, a missing plugin, ...
            shutil.rmtree(staging, ignore_errors=True)
            fit.arm_batch = _INF
            self._once.log(
                logging.WARNING,
                "start-failed",
                "keras-gpu: StepTimeLogger could not start the profiler (%s: %s), so no step-time breakdown is "
                "logged in this fit. Is another profiler running (e.g. TensorBoard(profile_batch=...))?",
                type(exc).__name__,
                str(exc).strip().splitlines()[0] if str(exc).strip() else "",
            )
            return
        fit.tracing = True
        fit.staging = staging
        fit.start_batch = fit.last_batch = batch
        fit.stop_batch = batch + self.profile_steps
        fit.t_start = fit.last_t = time.perf_counter()

    def _stop(self, fit: _Fit) -> None:
        fit.tracing = False
        steps, wall = fit.last_batch - fit.start_batch, fit.last_t - fit.t_start
        fit.next_time = time.perf_counter() + self.profile_every_s
        try:
            fit.profiler.stop()
        except Exception as exc:  # noqa: BLE001
            fit.arm_batch = _INF
            self._once.log(
                logging.WARNING,
                "stop-failed",
                "keras-gpu: StepTimeLogger could not stop the profiler (%s: %s); tracing is off for this fit.",
                type(exc).__name__,
                exc,
            )
            shutil.rmtree(fit.staging, ignore_errors=True)
            return
        job = _Job(
            profile_dir=os.path.join(self.run_dir, _PROFILE_SUBDIR),
            staging=fit.staging,
            steps=steps,
            wall_sec=wall,
            step=read_step(self.model),
            num_replicas=len(fit.replicas),
            labels=tuple(label for label, _ in fit.replicas),
            gpu_replicas=fit.gpu_replicas,
        )
        if self._parser is None:
            self._parser = _Parser(self)
        self._parser.submit(job)

    # -- on the parser thread -------------------------------------------------------

    def _handle(self, job: _Job) -> None:
        try:
            if job.steps < 1 or job.wall_sec <= 0:
                return  # nothing to learn from a trace of no complete step
            paths = xspace.find_traces(job.staging)
            if not paths:
                raise FileNotFoundError(f"the profiler wrote no .xplane.pb file under {job.staging}")
            space = xspace.load(paths[-1])
            _keep(os.path.dirname(paths[-1]), job.profile_dir)
            result = steptime.analyze(
                space,
                steps=job.steps,
                wall_sec=job.wall_sec,
                num_replicas=job.num_replicas,
                gpu_replicas=job.gpu_replicas,
            )
            if result.compute_sec == 0 and result.input_sec == 0 and result.communication_sec == 0:
                self._once.log(
                    logging.WARNING,
                    "empty-trace",
                    "keras-gpu: StepTimeLogger found no training ops in the profiler trace; no breakdown is logged.",
                )
                return
            self._write(result, job)
        except Exception as exc:  # noqa: BLE001 - a bad trace costs one warning, never training
            self._once.log(
                logging.WARNING,
                "parse-failed",
                "keras-gpu: StepTimeLogger could not read a profiler trace (%s: %s); training goes on.",
                type(exc).__name__,
                exc,
            )
        finally:
            shutil.rmtree(job.staging, ignore_errors=True)
            _prune(job.profile_dir, self.max_traces)

    def _write(self, result: steptime.StepTime, job: _Job) -> None:
        values = {
            _tags.STEP_SEC.name(): result.step_sec,
            _tags.STEP_TRACED_STEPS.name(): float(result.steps),
            _tags.STEP_INPUT_SEC.name(): result.input_sec,
            _tags.STEP_COMPUTE_SEC.name(): result.compute_sec,
            _tags.STEP_COMMUNICATION_SEC.name(): result.communication_sec,
            _tags.STEP_OTHER_SEC.name(): result.other_sec,
        }
        for label, replica in zip(job.labels, result.replicas):
            values[_tags.REPLICA_COMPUTE_SEC.name(replica=label)] = replica.compute_sec
            values[_tags.REPLICA_COMMUNICATION_SEC.name(replica=label)] = replica.communication_sec
        writer = self._writer
        if writer is not None:
            writer.scalars(values, job.step)
        self.last = result
        self.traces.append(result)

    # -- set-up and summary -------------------------------------------------------------

    def _replicas(self) -> list[tuple[str, str]]:
        """`(tag label, device)` per local replica: `<global index>_<DEV>_<n>`."""
        devices = list(_backend.replica_devices(self.model))
        rank = (self._task.worker_index or 0) if self._task is not None else 0
        return [
            (f"{rank * len(devices) + i}_{topology.device_label(d)}", d) for i, d in enumerate(devices)
        ]

    def _log_summary(self, fit: _Fit) -> None:
        last = self.last
        if last is None:
            logger.info(
                "keras-gpu: StepTimeLogger traced no step in this fit (the first trace comes after warm-up: at the "
                "second epoch, or after %d steps of the first).",
                self.warmup_steps,
            )
            return
        labels = [f"replica {label.split('_', 1)[0]} ({topology.short_device(d)})" for label, d in fit.replicas]
        hints = steptime.verdict(last, labels)
        logger.info(
            "keras-gpu: StepTimeLogger: %.3g ms per step over %d traced steps: input %.0f%%, compute %.0f%%, "
            "communication %.0f%%, other %.0f%%.%s",
            1e3 * last.step_sec,
            last.steps,
            100 * last.share("input"),
            100 * last.share("compute"),
            100 * last.share("communication"),
            100 * last.share("other"),
            "".join(f" Hint: {h}." for h in hints),
        )


def check_profile_every_s(value: Any) -> float:
    """Validate `profile_every_s`: a positive, finite number of seconds, or 0 for no tracing."""
    if not isinstance(value, bool) and isinstance(value, (int, float)) and value == 0:
        return 0.0
    try:
        return float(check_positive("profile_every_s", value))
    except ValueError:
        raise ValueError(
            "`profile_every_s` must be a positive, finite number of seconds, or 0 to turn tracing off. "
            f"Received: profile_every_s={value!r}"
        ) from None


class _Profiler:
    """Start and stop one backend's profiler, writing XSpace traces under `run_dir/plugins/profile/`."""

    def __init__(self, start: Any, stop: Any) -> None:
        self.start, self.stop = start, stop


def _profiler() -> _Profiler | None:
    """The profiler of the running Keras backend, or `None` where none writes XSpace traces."""
    name = _backend.name()
    if name == "tensorflow":
        import tensorflow as tf

        return _Profiler(lambda d: tf.profiler.experimental.start(d), lambda: tf.profiler.experimental.stop())
    if name == "jax":
        import jax

        return _Profiler(lambda d: jax.profiler.start_trace(d), lambda: jax.profiler.stop_trace())
    return None


class _Fit:
    """The state of one `fit`: the profiler, the replicas, and the trace in progress."""

    def __init__(self, profiler: _Profiler, replicas: list[tuple[str, str]], warmup_steps: int) -> None:
        self.profiler = profiler
        self.replicas = replicas
        gpus = [topology.parse_device(d) for _, d in replicas]
        self.gpu_replicas = {g.index: i for i, g in enumerate(gpus) if g is not None and g.device_type == "GPU"}
        self.arm_batch: float = warmup_steps - 1  # the first epoch: after warm-up
        self.next_time: float = -_INF  # the first trace waits for no clock
        self.tracing = False
        self.staging = ""
        self.start_batch = self.stop_batch = self.last_batch = 0
        self.t_start = self.last_t = 0.0


class _Job:
    """One finished trace, for the parser thread."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


class _Parser:
    """One background thread that reads finished traces in order and logs their breakdown."""

    def __init__(self, owner: StepTimeLogger) -> None:
        self._owner = owner
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="keras-gpu-step-time", daemon=True)
        self._thread.start()

    def submit(self, job: _Job) -> None:
        self._queue.put(job)

    def drain(self, timeout: float = 30.0) -> None:
        """Wait (at most `timeout` s) until every submitted trace is handled."""
        done = threading.Event()
        self._queue.put(_Job(_done=done))
        done.wait(timeout)

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            done = job.__dict__.get("_done")
            if done is not None:
                done.set()
                continue
            self._owner._handle(job)


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
