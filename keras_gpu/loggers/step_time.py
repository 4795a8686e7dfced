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
from keras_gpu.cluster_view import ROW_FIELDS, ClusterSummary, summarize_rows
from keras_gpu._checks import check_bool, check_positive
from keras_gpu._log import Once, logger
from keras_gpu.loggers._base import LoggingCallback, read_step

__all__ = ["StepTimeLogger", "check_profile_every_s"]

_INF = float("inf")
_PROFILE_SUBDIR = os.path.join("plugins", "profile")
#: Steps between the end of a trace and the all-gather of its breakdown: time
#: for the parser thread, which the training thread never waits for.
_GATHER_DELAY_STEPS = 100


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
        multiworker_tracing: Trace in multi-worker TensorFlow jobs too. Off by
            default: TensorFlow's profiler (2.21, and earlier releases) can
            corrupt the heap when a trace stops in a multi-worker process
            (a crash in `TraceMeRecorder::Consume`, reproduced with
            `tf.profiler.experimental.start`/`stop` alone, in a few percent of
            traces on CPU workers over loopback). When on, every worker traces
            the same steps and the chief logs the cluster view (`cluster/*`:
            the slowest worker and the imbalance; see
            :mod:`keras_gpu.cluster_view`).
        per_worker_runs: Whether a worker other than the chief writes its own
            run (`log_dir/worker_k/train`). `None`: yes in jobs of up to 16
            workers; above that only the chief writes.

    Attributes:
        last: The last :class:`keras_gpu.steptime.StepTime`, or `None`.
        traces: Breakdowns logged in this `fit`, oldest first.
        cluster: In multi-worker jobs with `multiworker_tracing`, what each
            all-gather brought (:class:`keras_gpu.cluster_view.ClusterSummary`,
            or `None` when no worker had a breakdown ready).
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
        multiworker_tracing: bool = False,
        per_worker_runs: bool | None = None,
    ) -> None:
        super().__init__(log_dir, per_worker_runs)
        self.profile_every_s = check_profile_every_s(profile_every_s)
        self.profile_steps = check_positive("profile_steps", profile_steps, integer=True)
        self.warmup_steps = check_positive("warmup_steps", warmup_steps, integer=True)
        self.max_traces = check_positive("max_traces", max_traces, integer=True)
        self.multiworker_tracing = check_bool("multiworker_tracing", multiworker_tracing)
        self.last: steptime.StepTime | None = None
        self.traces: list[steptime.StepTime] = []
        self.cluster: list[ClusterSummary | None] = []
        self._fit: _Fit | None = None
        self._once = Once()
        self._parser: _Parser | None = None

    # -- Keras hooks ------------------------------------------------------------

    def on_train_begin(self, logs=None):
        self._fit = None
        self.last, self.traces, self.cluster = None, [], []
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
            task = self._task
            workers = task.num_workers if task is not None else 1
            gather = None
            if workers > 1 and _backend.name() == "tensorflow" and not self.multiworker_tracing:
                self._once.log(
                    logging.INFO,
                    "multiworker-off",
                    "keras-gpu: StepTimeLogger does not trace in multi-worker TensorFlow jobs by default: TensorFlow's "
                    "profiler can crash a worker when a trace stops there (heap corruption in "
                    "TraceMeRecorder::Consume). Pass StepTimeLogger(multiworker_tracing=True) to trace anyway.",
                )
                return
            if workers > 1:
                from keras_gpu.gather import RowGather

                gather = RowGather(self._strategy(), len(ROW_FIELDS), workers)
            self._fit = _Fit(profiler, self._replicas(), self.warmup_steps, self.profile_steps, gather)
        except Exception as exc:  # noqa: BLE001 - a monitoring failure must not stop training
            logger.warning("keras-gpu: StepTimeLogger is off for this fit: %s: %s", type(exc).__name__, exc)

    def on_epoch_begin(self, epoch, logs=None):
        fit = self._fit
        if fit is not None:
            fit.epoch_begin(epoch)

    def on_train_batch_end(self, batch, logs=None):
        fit = self._fit
        if fit is None:
            return
        fit.last_batch = batch
        if batch >= fit.next_batch:
            self._event(fit, batch)

    def on_test_begin(self, logs=None):
        if self._fit is not None and self._fit.tracing:
            self._stop(self._fit)

    def on_epoch_end(self, epoch, logs=None):
        fit = self._fit
        if fit is not None:
            if fit.tracing:
                self._stop(fit)
            fit.epoch_end()

    def on_train_end(self, logs=None):
        fit, self._fit = self._fit, None
        if fit is not None and fit.tracing:
            self._stop(fit)
        if self._parser is not None:
            parser, self._parser = self._parser, None
            parser.close()
        if fit is not None and fit.gather_at is not None:
            # A point every worker reaches: gather what the last trace measured.
            self._gather(fit)
        if fit is not None:
            self._log_summary(fit)
        self._close()

    # -- the schedule, in steps of this fit (the same on every worker) ----------------

    def _event(self, fit: _Fit, batch: int) -> None:
        step = fit.step_of(batch)
        if fit.tracing:
            if step >= fit.stop_at:
                self._stop(fit)
        elif fit.start_at is not None and step >= fit.start_at:
            self._start(fit, batch)
        if fit.gather_at is not None and step >= fit.gather_at:
            self._gather(fit)
        fit.schedule()

    # -- tracing ------------------------------------------------------------------

    def _start(self, fit: _Fit, batch: int) -> None:
        fit.start_at = None
        fit.first = False
        fit.tracing = True
        fit.start_step = fit.step_of(batch)
        fit.stop_at = fit.start_step + self.profile_steps
        # The profilers name a trace's directory by the second it ends in, so
        # each trace goes to a directory of its own first; the parser thread
        # moves it under plugins/profile/ with a name no other trace has.
        staging = tempfile.mkdtemp(prefix="keras-gpu-trace-")
        fit.staging = staging
        try:
            if not fit.profiler_ok:
                raise RuntimeError("the profiler failed earlier in this fit")
            fit.profiler.start(staging)
        except Exception as exc:  # noqa: BLE001 - another profiler session, a missing plugin, ...
            shutil.rmtree(staging, ignore_errors=True)
            fit.staging = ""
            if fit.profiler_ok:
                fit.profiler_ok = False
                self._once.log(
                    logging.WARNING,
                    "start-failed",
                    "keras-gpu: StepTimeLogger could not start the profiler (%s: %s), so no step-time breakdown is "
                    "logged in this fit. Is another profiler running (e.g. TensorBoard(profile_batch=...))?",
                    type(exc).__name__,
                    str(exc).strip().splitlines()[0] if str(exc).strip() else "",
                )
        fit.t_start = time.perf_counter()

    def _stop(self, fit: _Fit) -> None:
        fit.tracing = False
        now = time.perf_counter()
        steps = fit.step_of(fit.last_batch) - fit.start_step
        wall = now - fit.t_start
        stop_step = fit.start_step + steps
        # profile_every_s in steps, at this fit's pace so far (validation and callbacks included).
        period = max(1, round(self.profile_every_s * stop_step / (now - fit.t0))) if now > fit.t0 else None
        if fit.gather is not None:
            fit.proposed_period = period
            fit.gather_at = stop_step + _GATHER_DELAY_STEPS
            fit.pending = None
        elif period is not None:
            fit.start_at = stop_step + period
        if not fit.staging:
            return
        try:
            fit.profiler.stop()
        except Exception as exc:  # noqa: BLE001
            fit.profiler_ok = False
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
            keep=self._writer is not None,
            steps=steps,
            wall_sec=wall,
            step=read_step(self.model),
            num_replicas=len(fit.replicas),
            labels=tuple(label for label, _ in fit.replicas),
            gpu_replicas=fit.gpu_replicas,
            fit=fit,
        )
        if self._parser is None:
            self._parser = _Parser(self)
        self._parser.submit(job)

    # -- the cluster view ---------------------------------------------------------------

    def _gather(self, fit: _Fit) -> None:
        """All-gather every worker's last breakdown (a step every worker reaches); the chief logs the summary."""
        fit.gather_at = None
        result = fit.pending
        row = [float("nan")] * (len(ROW_FIELDS) - 1)
        if result is not None:
            row = [
                1.0, result.step_sec, result.input_sec, result.compute_sec, result.communication_sec,
                result.other_sec, result.busy_sec, float(result.steps),
            ]
        row.append(float(fit.proposed_period or 0))
        try:
            rows = fit.gather(row)
        except Exception as exc:  # noqa: BLE001 - the cluster view must not stop training
            fit.gather_failed(exc)
            self._once.log(
                logging.WARNING,
                "gather-failed",
                "keras-gpu: StepTimeLogger could not gather the workers' breakdowns (%s: %s); the cluster view is off "
                "for this fit.",
                type(exc).__name__,
                exc,
            )
            return
        # Every worker adopts the chief's trace period, so the next traces stay in step.
        period = int(rows[0][-1]) if rows and rows[0][-1] > 0 else None
        if period is not None:
            fit.start_at = fit.step_of(fit.last_batch) + 1 + max(0, period - _GATHER_DELAY_STEPS)
        summary = summarize_rows(rows)
        self.cluster.append(summary)
        if self._task is not None and self._task.is_chief and self._writer is not None and summary is not None:
            self._writer.scalars(summary.values(), read_step(self.model))

    # -- on the parser thread -------------------------------------------------------

    def _handle(self, job: _Job) -> None:
        try:
            if job.steps < 1 or job.wall_sec <= 0:
                return  # nothing to learn from a trace of no complete step
            paths = xspace.find_traces(job.staging)
            if not paths:
                raise FileNotFoundError(f"the profiler wrote no .xplane.pb file under {job.staging}")
            space = xspace.load(paths[-1])
            if job.keep:  # only runs that are written keep their traces
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
            job.fit.pending = result
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
            if job.keep:
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
    """The state of one `fit`: where it is in steps, and the next trace, stop and gather.

    Every target is a count of this fit's training steps, so that every worker
    of a job starts and stops its traces, and gathers, at the same steps.
    """

    def __init__(
        self,
        profiler: _Profiler,
        replicas: list[tuple[str, str]],
        warmup_steps: int,
        profile_steps: int,
        gather: Any = None,
    ) -> None:
        self.profiler = profiler
        self.profiler_ok = True
        self.replicas = replicas
        gpus = [topology.parse_device(d) for _, d in replicas]
        self.gpu_replicas = {g.index: i for i, g in enumerate(gpus) if g is not None and g.device_type == "GPU"}
        self.gather = gather
        self.profile_steps = profile_steps
        self.base = 0  # steps of this fit before the current epoch
        self.last_batch = -1
        self.start_at: int | None = warmup_steps  # the first trace: after warm-up ...
        self.first = True
        self.stop_at = 0
        self.gather_at: int | None = None
        self.tracing = False
        self.staging = ""
        self.start_step = 0
        self.t_start = 0.0
        self.pending: steptime.StepTime | None = None  # the last trace's breakdown, for the gather
        self.proposed_period: int | None = None
        self.next_batch: float = _INF
        self.t0 = time.perf_counter()

    def step_of(self, batch: int) -> int:
        """Steps of this fit done at the end of `batch` of the current epoch."""
        return self.base + batch + 1

    def epoch_begin(self, epoch: int) -> None:
        self.last_batch = -1
        if epoch > 0 and self.first and self.start_at is not None:
            self.start_at = min(self.start_at, self.base + 1)  # ... or at the second epoch's first batch end
        self.schedule()

    def epoch_end(self) -> None:
        self.base += self.last_batch + 1
        self.last_batch = -1

    def schedule(self) -> None:
        """The next batch (of this epoch) whose end has something to do."""
        targets = [t for t in (self.stop_at if self.tracing else None, self.start_at, self.gather_at) if t is not None]
        self.next_batch = min(targets) - self.base - 1 if targets else _INF

    def gather_failed(self, exc: Exception) -> None:
        self.gather = None
        self.gather_at = None


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

    def close(self, timeout: float = 30.0) -> None:
        """Handle what was submitted (at most `timeout` s), then end the thread."""
        self._queue.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
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
