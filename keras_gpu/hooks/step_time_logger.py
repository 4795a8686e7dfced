"""`StepTimeLogger`: a measured step-time breakdown (input, compute, communication, other), sampled from profiler traces."""

from __future__ import annotations

import dataclasses
import logging
import os
import queue
import shutil
import tempfile
import threading
import time
from typing import Any

from keras_gpu.hooks import step_probe
from keras_gpu.meters import step_time as steptime
from keras_gpu.core import topology
from keras_gpu.output import tags as _tags
from keras_gpu.core import backend as _backend
from keras_gpu.meters import xspace
from keras_gpu.meters.cluster_view import ROW_FIELDS, ClusterSummary, straggler_over, straggler_sentence, summarize_rows
from keras_gpu.core.checks import check_bool, check_positive
from keras_gpu.core.log import Once, logger
from keras_gpu.hooks._base import LoggingCallback

__all__ = ["StepTimeLogger", "check_profile_every_s"]

_INF = float("inf")
_PROFILE_SUBDIR = os.path.join("plugins", "profile")
#: Seconds between the cluster view's gathers within an epoch (the chief turns
#: it into a count of steps that every worker adopts).
CLUSTER_EVERY_S = 30.0
#: An epoch's end gathers what the probe measured once at least this many
#: steps went by since the last gather (a count, so every worker decides alike).
_MIN_GATHER_STEPS = 5


class StepTimeLogger(LoggingCallback):
    """Logs where each training step's time goes, measured on a few traced steps at a time.

    Every `profile_every_s` seconds it traces `profile_steps` training steps
    with the backend's profiler (TensorFlow's, or JAX's), starting and
    stopping at batch ends. The first trace comes after warm-up: at the end of
    the first execution of the second epoch, or after `warmup_steps` steps of
    the first epoch, whichever comes first, so any `fit` of two or more
    epochs gets at least one sample. A trace holds `profile_steps` steps: one
    that the epoch's end would cut short waits for the next epoch's first
    batch end (where the epoch's length is known: `steps_per_epoch`, a
    dataset of known length, or the previous epoch's), unless the epoch is
    too short for it (then it holds the steps after the epoch's first batch
    end) or no epoch follows. A trace never runs past the epoch's last batch
    end.

    Each traced step is marked for the profiler from one batch end to the
    next (`tf.profiler.experimental.Trace("train", step_num=n, _r=1)`, or
    JAX's `StepTraceAnnotation`; `n` is the global step the step starts at,
    one mark per call of the train function), so TensorBoard's Profile tab
    finds the steps, and the breakdown covers exactly the marked steps: the
    time after an epoch's last batch end (Keras' epoch-end work, stopping a
    `PyDataset`'s workers, slow epoch-end callbacks) is never step time.
    Outside traced steps nothing is marked. The trace is parsed on a
    background thread, never on the training thread; the traces stay in the
    run's `plugins/profile/` directory, where TensorBoard's Profile tab opens
    them, and only the newest `max_traces` are kept.

    Tags, in seconds per step, at the step where the trace ended, on the
    step axis of `ThroughputLogger` (the optimizer's iterations when `fit`
    began, plus the steps `fit` has run; see :mod:`keras_gpu.meters.step_time` for
    how each instant is attributed):

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
      really ran (`<i>` is the global replica index);
    * `step_time/input_stage` (text, Markdown): the input stage with the most
      self time, in ms per batch (a tf.data stage such as `ParallelMapV2`, or
      the Python input that reads a `PyDataset` or generator on JAX), and the
      input-bound hint with what to try.

    At the end of `fit` one INFO line gives the last breakdown and the hints
    that follow from it ("input-bound: 62% of each step waits for input"),
    and :attr:`last` holds it. Where the profiler is not available or fails,
    one warning says so and training goes on.

    **Multi-worker TensorFlow jobs** are measured without the profiler, on
    every worker, by default: a probe inside each training step
    (:mod:`keras_gpu.hooks.step_probe`: `tf.timestamp()` where the worker's own
    forward and backward pass starts, where its gradients are ready for the
    all-reduce, and where the step ends) sums each worker's compute, its
    waiting in the reductions, and the host and input time between steps.
    At each epoch's end, and every `CLUSTER_EVERY_S` (30 s) within an
    epoch, one small all-gather through the strategy's own collectives, at a
    step every worker reaches, brings every worker's figures to every worker:
    the same `step_time/*` tags as above on each worker's run (over every
    step of the window; `input_sec` only where each call of the train
    function runs one step), and on the chief the cluster view:

    * `cluster/slowest_worker`: the worker with the most busy time per step
      (compute, input and host time: not waiting for its peers);
    * `cluster/imbalance`: its busy time over the other workers' median,
      minus 1 (a straggler from 0.1 on);
    * `cluster/workers_reporting`, and `cluster/{busy,input,communication}_sec/
      {min,median,max}` across the workers, in seconds per step.

    The end-of-fit line on the chief names the straggler.

    Args:
        log_dir: Directory shared with the other callbacks.
        profile_every_s: Seconds between traces (after the first); `0` turns
            tracing off.
        profile_steps: Training steps per trace (rounded up to whole
            executions with `steps_per_execution > 1`).
        warmup_steps: Steps of the first epoch after which its first trace
            may start.
        max_traces: Traces kept in `plugins/profile/`; older ones are deleted.
        multiworker_tracing: Also trace with TensorFlow's profiler in
            multi-worker jobs, for a diagnosis run: the `step_time/*` tags
            then come from the traces (the cluster view still comes from the
            probe). Off by default, because TensorFlow's profiler (2.21, and
            earlier releases) corrupts the heap when a trace stops in a
            multi-worker process: a non-chief CPU worker over loopback died in
            22 of 453 stops of 5-step traces (about 5%; the chief 0 of 507, a
            single process 0 of 200), a crash in `TraceMeRecorder::Consume`.
            Measure it on your machine with `python -m
            benchmarks.profiler_crash_rate`.
        per_worker_runs: Whether a worker other than the chief writes its own
            run (`log_dir/worker_k/train`). `None`: yes in jobs of up to 16
            workers; above that only the chief writes.

    Attributes:
        last: The last :class:`keras_gpu.meters.step_time.StepTime`, or `None`.
        traces: Breakdowns logged in this `fit`, oldest first.
        cluster: In multi-worker TensorFlow jobs, what each all-gather brought (:class:`keras_gpu.meters.cluster_view.ClusterSummary`,
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
        self._cluster_fit: _ClusterFit | None = None
        self._probe: step_probe.StepProbe | None = None
        self._once = Once()
        self._parser: _Parser | None = None
        self._first_step = 0

    # -- Keras hooks ------------------------------------------------------------

    def set_model(self, model):
        super().set_model(model)
        # Before `fit` builds its train function: the probe must be in the step that function runs.
        self._probe = None
        try:
            task = _backend.task_info(model)
            if task.num_workers > 1 and _backend.name() == "tensorflow":
                reason = step_probe.unavailable_reason(model)
                if reason is not None:
                    self._once.log(logging.INFO, "no-probe", "keras-gpu: no cluster view in this fit: %s.", reason)
                    return
                self._probe = step_probe.install(model, len(_backend.replica_devices(model)))
            elif task.num_workers > 1:
                self._once.log(logging.INFO, "no-probe", "keras-gpu: no cluster view in this fit: the step probe "
                               "runs on the TensorFlow backend only (this is %s).", _backend.name())
        except Exception as exc:  # noqa: BLE001 - a monitoring failure must not stop training
            logger.warning("keras-gpu: the cluster view is off: %s: %s", type(exc).__name__, exc)

    def on_train_begin(self, logs=None):
        self._fit = self._cluster_fit = None
        self.last, self.traces, self.cluster = None, [], []
        self._open()
        self._first_step = self._initial_step()  # ThroughputLogger's step axis: this plus the steps run
        task = self._task
        workers = task.num_workers if task is not None else 1
        tensorflow = _backend.name() == "tensorflow"
        try:
            if workers > 1 and tensorflow:
                self._cluster_fit = self._probe_cluster(workers)
        except Exception as exc:  # noqa: BLE001 - a monitoring failure must not stop training
            logger.warning("keras-gpu: the cluster view is off for this fit: %s: %s", type(exc).__name__, exc)
        if self.profile_every_s == 0:
            return
        if workers > 1 and tensorflow and not self.multiworker_tracing:
            return  # the probe measures every worker; TensorFlow's profiler is not safe here
        profiler = _profiler()
        if profiler is None:
            from keras_gpu.core.log import log_once  # once per process, however many fits

            log_once(
                logging.INFO,
                f"step_time:no-profiler:{_backend.name()}",
                "keras-gpu: StepTimeLogger logs no step-time breakdown on the %s backend: its profiler does not write "
                "the trace format keras-gpu reads (TensorFlow and JAX do).",
                _backend.name(),
            )
            return
        try:
            params = self.params or {}
            self._fit = _Fit(
                profiler,
                self._replicas(),
                self.warmup_steps,
                self.profile_steps,
                epochs=params.get("epochs"),
                epoch_steps=params.get("steps"),
                steps_per_execution=_steps_per_execution(self.model),
            )
        except Exception as exc:  # noqa: BLE001 - a monitoring failure must not stop training
            logger.warning("keras-gpu: StepTimeLogger is off for this fit: %s: %s", type(exc).__name__, exc)

    def on_epoch_begin(self, epoch, logs=None):
        fit = self._fit
        if fit is not None:
            fit.epoch_begin(epoch)
        cluster = self._cluster_fit
        if cluster is not None:
            cluster.probe.epoch_begin()

    def on_train_batch_begin(self, batch, logs=None):
        cluster = self._cluster_fit
        if cluster is not None:
            cluster.probe.batch_begin()

    def on_train_batch_end(self, batch, logs=None):
        cluster = self._cluster_fit
        if cluster is not None:
            cluster.last_batch = batch
            if batch >= cluster.next_batch:
                self._cluster_event(cluster, batch)
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
        cluster = self._cluster_fit
        if cluster is not None:
            # A point every worker reaches; whether to gather is a count of steps, alike on every worker.
            if cluster.warm and cluster.step_of(cluster.last_batch) - cluster.gathered_at >= _MIN_GATHER_STEPS:
                self._cluster_gather(cluster)
            cluster.epoch_end()

    def on_train_end(self, logs=None):
        fit, self._fit = self._fit, None
        cluster, self._cluster_fit = self._cluster_fit, None
        if fit is not None and fit.tracing:
            self._stop(fit)
        if self._parser is not None:
            parser, self._parser = self._parser, None
            parser.close()
        if fit is not None:
            self._log_summary(fit)
        elif cluster is not None and self.last is not None:
            self._log_breakdown(self.last, [])
        if cluster is not None:
            self._log_cluster()
        self._close()

    # -- the schedule, in steps of this fit (the same on every worker) ----------------

    def _event(self, fit: _Fit, batch: int) -> None:
        step = fit.step_of(batch)
        if fit.tracing:  # every batch end of a trace: the end of one marked step, the start of the next
            fit.t_end = time.perf_counter()
            fit.end_mark()
            if step >= fit.stop_at:
                self._stop(fit)
            else:
                fit.begin_mark(self._first_step + step)
        elif fit.start_at is not None and step >= fit.start_at:
            if fit.fits(batch):
                self._start(fit, batch)
            else:
                fit.start_at = fit.base + fit.epoch_steps + 1  # the next epoch's first batch end holds it
        fit.schedule()

    # -- tracing ------------------------------------------------------------------

    def _start(self, fit: _Fit, batch: int) -> None:
        fit.start_at = None
        fit.first = False
        fit.tracing = True
        fit.start_step = fit.step_of(batch)
        fit.stop_at = fit.start_step + self.profile_steps
        if fit.epoch_steps is not None:  # never past the epoch's last batch end
            fit.stop_at = min(fit.stop_at, fit.base + fit.epoch_steps)
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
        fit.t_start = fit.t_end = time.perf_counter()
        if fit.staging:
            fit.begin_mark(self._first_step + fit.start_step)

    def _stop(self, fit: _Fit) -> None:
        """Stop the trace at its last batch end (called there, or at the epoch's end, validation's or fit's).

        A mark opened at the last batch end for a step that never came (the
        epoch ended) is closed after the profiler stopped, so the trace never
        records it.
        """
        fit.tracing = False
        now = time.perf_counter()
        steps = fit.step_of(fit.last_batch) - fit.start_step
        wall = fit.t_end - fit.t_start  # batch end to batch end
        stop_step = fit.start_step + steps
        # profile_every_s in steps, at this fit's pace so far (validation and callbacks included).
        period = max(1, round(self.profile_every_s * stop_step / (now - fit.t0))) if now > fit.t0 else None
        if period is not None:
            fit.start_at = stop_step + period
        if not fit.staging:
            return
        try:
            fit.profiler.stop()
        except Exception as exc:  # noqa: BLE001
            fit.end_mark()
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
        fit.end_mark()
        job = _Job(
            profile_dir=os.path.join(self.run_dir, _PROFILE_SUBDIR),
            staging=fit.staging,
            keep=self._writer is not None,
            steps=steps,
            wall_sec=wall,
            step=self._first_step + stop_step,
            steps_per_mark=fit.steps_per_execution,
            num_replicas=len(fit.replicas),
            labels=tuple(label for label, _ in fit.replicas),
            gpu_replicas=fit.gpu_replicas,
        )
        if self._parser is None:
            self._parser = _Parser(self)
        self._parser.submit(job)

    # -- the cluster view (multi-worker TensorFlow: the step probe) -------------------------

    def _probe_cluster(self, workers: int) -> _ClusterFit | None:
        """Set up the gather of the probe that `set_model` installed; `None` where there is none."""
        probe = self._probe
        if probe is None:
            return None
        from keras_gpu.hooks.gather import RowGather

        return _ClusterFit(probe, RowGather(self._strategy(), len(ROW_FIELDS), workers), self._replicas())

    def _cluster_event(self, cluster: _ClusterFit, batch: int) -> None:
        if not cluster.warm:
            # The fit's first step (tracing, first runs of every op) stays out of every window.
            cluster.probe.reset()
            cluster.warm = True
            cluster.gathered_at = cluster.step_of(batch)
            cluster.t_window = time.perf_counter()
        elif cluster.gather_at is not None and cluster.step_of(batch) >= cluster.gather_at:
            self._cluster_gather(cluster)
        cluster.schedule()

    def _cluster_gather(self, cluster: _ClusterFit) -> None:
        """All-gather every worker's probe window (a step every worker reaches); the chief logs the summary."""
        step = cluster.step_of(cluster.last_batch)
        now = time.perf_counter()
        steps, elapsed = step - cluster.gathered_at, now - cluster.t_window
        cluster.gathered_at, cluster.t_window, cluster.gather_at = step, now, None
        window = cluster.probe.read()
        row = [float("nan")] * (len(ROW_FIELDS) - 1)
        if window is not None:
            row = [
                1.0, window.step_sec, window.input_sec, window.compute_sec, window.communication_sec,
                window.host_sec, window.busy_sec, float(window.steps),
            ]
            if not self.multiworker_tracing:
                self._write(_as_step_time(window), [label for label, _ in cluster.replicas], self._first_step + step)
        # This worker's proposal for the next gather, in steps at its pace: the chief's is adopted.
        row.append(float(max(1, round(CLUSTER_EVERY_S * steps / elapsed))) if steps > 0 and elapsed > 0 else 0.0)
        try:
            rows = cluster.gather(row)
        except Exception as exc:  # noqa: BLE001 - the cluster view must not stop training
            self._cluster_fit = None
            self._once.log(
                logging.WARNING,
                "gather-failed",
                "keras-gpu: StepTimeLogger could not gather the workers' measurements (%s: %s); the cluster view is "
                "off for this fit.",
                type(exc).__name__,
                exc,
            )
            return
        period = int(rows[0][-1]) if rows and rows[0][-1] > 0 else None
        if period is not None:
            cluster.gather_at = step + period
        summary = summarize_rows(rows)
        self.cluster.append(summary)
        if self._task is not None and self._task.is_chief and self._writer is not None and summary is not None:
            self._writer.scalars(summary.values(), self._first_step + step)

    def _log_cluster(self) -> None:
        """The chief's end-of-fit line: the straggler, from the last gather."""
        summaries = [c for c in self.cluster if c is not None]
        if not summaries or self._task is None or not self._task.is_chief:
            return
        last = summaries[-1]
        straggler, imbalance = straggler_over([(c.slowest_worker, c.imbalance) for c in summaries])
        logger.info(
            "keras-gpu: cluster view (%d of %d workers, busy %.3g-%.3g ms per step, %d gathers): %s.",
            last.reporting,
            last.workers,
            1e3 * last.busy[0],
            1e3 * last.busy[2],
            len(summaries),
            straggler_sentence(straggler, imbalance),
        )

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
                steps_per_mark=job.steps_per_mark,
            )
            if result.compute_sec == 0 and result.input_sec == 0 and result.communication_sec == 0:
                self._once.log(
                    logging.WARNING,
                    "empty-trace",
                    "keras-gpu: StepTimeLogger found no training ops in the profiler trace; no breakdown is logged.",
                )
                return
            self._write(result, job.labels, job.step)
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

    def _write(self, result: steptime.StepTime, labels: Any, step: int) -> None:
        values = {
            _tags.STEP_SEC.name(): result.step_sec,
            _tags.STEP_TRACED_STEPS.name(): float(result.steps),
            _tags.STEP_INPUT_SEC.name(): result.input_sec,
            _tags.STEP_COMPUTE_SEC.name(): result.compute_sec,
            _tags.STEP_COMMUNICATION_SEC.name(): result.communication_sec,
            _tags.STEP_OTHER_SEC.name(): result.other_sec,
        }
        if result.input_sec != result.input_sec:  # not measured (the probe with several steps per call)
            del values[_tags.STEP_INPUT_SEC.name()]
        for label, replica in zip(labels, result.replicas):
            values[_tags.REPLICA_COMPUTE_SEC.name(replica=label)] = replica.compute_sec
            if result.source != "probe":
                values[_tags.REPLICA_COMMUNICATION_SEC.name(replica=label)] = replica.communication_sec
        writer = self._writer
        if writer is not None:
            writer.scalars(values, step)
            stage = steptime.input_stage_markdown(result)
            if stage is not None:
                writer.text(_tags.STEP_INPUT_STAGE.name(), stage, step)
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
        if self.last is None:
            logger.info(
                "keras-gpu: StepTimeLogger traced no step in this fit (the first trace comes after warm-up: at the "
                "second epoch, or after %d steps of the first).",
                self.warmup_steps,
            )
            return
        self._log_breakdown(
            self.last, [f"replica {label.split('_', 1)[0]} ({topology.short_device(d)})" for label, d in fit.replicas]
        )

    def _log_breakdown(self, last: steptime.StepTime, labels: list[str]) -> None:
        if last.source == "probe":
            hints = steptime.verdict(dataclasses.replace(last, input_sec=float("nan")))
            if last.share("input") >= steptime.BOUND_SHARE:
                hints.insert(
                    0,
                    f"{last.share('input'):.0%} of each step passes before the step starts (the batch, and every "
                    "worker's check that each has one); if the cluster view names no straggler, the input pipeline "
                    "is the likely cause",
                )
        else:
            hints = steptime.verdict(last, labels) if labels else steptime.verdict(last)
        measured = "probed steps" if last.source == "probe" else "traced steps"
        logger.info(
            "keras-gpu: StepTimeLogger: %.3g ms per step over %d %s: input %s, compute %.0f%%, "
            "communication %.0f%%, other %.0f%%.%s",
            1e3 * last.step_sec,
            last.steps,
            measured,
            "not measured" if last.input_sec != last.input_sec else f"{100 * last.share('input'):.0f}%",
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
    """Start and stop one backend's profiler, writing XSpace traces under `run_dir/plugins/profile/`.

    `mark(n)` is the step marker for the step that starts at global step `n`
    (:func:`keras_gpu.meters.step_time.step_marker`): a context manager, entered and
    exited on the training thread.
    """

    def __init__(self, start: Any, stop: Any, mark: Any) -> None:
        self.start, self.stop, self.mark = start, stop, mark


def _profiler() -> _Profiler | None:
    """The profiler of the running Keras backend, or `None` where none writes XSpace traces."""
    name = _backend.name()
    if name == "tensorflow":
        import tensorflow as tf

        def tf_mark(n: int) -> Any:
            marker, stats = steptime.step_marker(n)
            return tf.profiler.experimental.Trace(marker, **stats)

        return _Profiler(
            lambda d: tf.profiler.experimental.start(d), lambda: tf.profiler.experimental.stop(), tf_mark
        )
    if name == "jax":
        import jax

        def jax_mark(n: int) -> Any:
            marker, stats = steptime.step_marker(n)  # StepTraceAnnotation adds `_r=1` itself
            return jax.profiler.StepTraceAnnotation(marker, step_num=stats["step_num"])

        return _Profiler(lambda d: jax.profiler.start_trace(d), lambda: jax.profiler.stop_trace(), jax_mark)
    return None


def _steps_per_execution(model: Any) -> int:
    """Keras' `steps_per_execution` of `model` (1 where it has none)."""
    value = getattr(model, "steps_per_execution", 1)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


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
        *,
        epochs: int | None = None,
        epoch_steps: int | None = None,
        steps_per_execution: int = 1,
    ) -> None:
        self.profiler = profiler
        self.profiler_ok = True
        self.replicas = replicas
        gpus = [topology.parse_device(d) for _, d in replicas]
        self.gpu_replicas = topology.trace_gpu_replicas(  # logical GPUs -> the physical GPUs a trace names
            [d for _, d in replicas],
            topology.gpu_layout() if _backend.name() == "tensorflow" and any(g and g.device_type == "GPU" for g in gpus) else None,
        )
        self.steps_per_execution = steps_per_execution
        # A trace's steps, in whole executions.
        self.profile_steps = -(-profile_steps // steps_per_execution) * steps_per_execution
        self.epochs = epochs if isinstance(epochs, int) and epochs > 0 else None
        # Steps per epoch where Keras knows them; else learned from the previous epoch.
        self.known_steps = epoch_steps if isinstance(epoch_steps, int) and epoch_steps > 0 else None
        self.epoch_steps: int | None = self.known_steps
        self.epoch = 0
        self.mark: Any = None  # the open step marker of a trace
        self.t_end = 0.0
        self.base = 0  # steps of this fit before the current epoch
        self.last_batch = -1
        self.start_at: int | None = warmup_steps  # the first trace: after warm-up ...
        self.first = True
        self.stop_at = 0
        self.tracing = False
        self.staging = ""
        self.start_step = 0
        self.t_start = 0.0
        self.next_batch: float = _INF
        self.t0 = time.perf_counter()

    def step_of(self, batch: int) -> int:
        """Steps of this fit done at the end of `batch` of the current epoch."""
        return self.base + batch + 1

    def epoch_begin(self, epoch: int) -> None:
        self.last_batch = -1
        self.epoch = epoch
        if epoch > 0 and self.first and self.start_at is not None:
            self.start_at = min(self.start_at, self.base + 1)  # ... or at the second epoch's first batch end
        self.schedule()

    def epoch_end(self) -> None:
        if self.known_steps is None and self.last_batch >= 0:
            self.epoch_steps = self.last_batch + 1
        self.base += self.last_batch + 1
        self.last_batch = -1

    def fits(self, batch: int) -> bool:
        """Whether a trace starting at the end of `batch` holds as many steps as any trace in this epoch could.

        Where the epoch's length is unknown, or no epoch follows, it does.
        """
        n = self.epoch_steps
        if n is None:
            return True
        left = n - (batch + 1)  # steps after this batch end
        if left <= 0:
            return False
        last_epoch = self.epochs is not None and self.epoch >= self.epochs - 1
        return left >= min(self.profile_steps, n - self.steps_per_execution) or last_epoch

    def begin_mark(self, step: int) -> None:
        """Open the marker of the step that starts at global step `step` (while tracing)."""
        if self.staging:
            self.mark = self.profiler.mark(step)
            self.mark.__enter__()

    def end_mark(self) -> None:
        """Close the open step marker, if any."""
        mark, self.mark = self.mark, None
        if mark is not None:
            mark.__exit__(None, None, None)

    def schedule(self) -> None:
        """The next batch (of this epoch) whose end has something to do: every one while tracing."""
        if self.tracing:
            self.next_batch = 0
        else:
            self.next_batch = self.start_at - self.base - 1 if self.start_at is not None else _INF


class _ClusterFit:
    """The cluster view's state in one multi-worker `fit`: the probe, the gather, and when to gather next.

    Every decision is a count of this fit's steps, so every worker gathers at
    the same steps.
    """

    def __init__(self, probe: step_probe.StepProbe, gather: Any, replicas: list[tuple[str, str]]) -> None:
        self.probe = probe
        self.gather = gather
        self.replicas = replicas
        self.base = 0  # steps of this fit before the current epoch
        self.last_batch = -1
        self.warm = False  # the first batch end starts the first window
        self.gathered_at = 0  # the step of the last gather (or of the first window's start)
        self.t_window = 0.0
        self.gather_at: int | None = None  # the next gather within an epoch, once the chief proposed a period
        self.next_batch: float = 0

    def step_of(self, batch: int) -> int:
        return self.base + batch + 1

    def epoch_end(self) -> None:
        self.base += self.last_batch + 1
        self.last_batch = -1
        self.schedule()

    def schedule(self) -> None:
        if not self.warm:
            self.next_batch = 0
        elif self.gather_at is None:
            self.next_batch = _INF
        else:
            self.next_batch = self.gather_at - self.base - 1


def _as_step_time(window: step_probe.ProbeWindow) -> steptime.StepTime:
    """A probe window as the breakdown every other source gives (`other` is the host time)."""
    return steptime.StepTime(
        steps=window.steps,
        step_sec=window.step_sec,
        input_sec=window.input_sec,
        compute_sec=window.compute_sec,
        communication_sec=window.communication_sec,
        other_sec=window.host_sec,
        replicas=tuple(steptime.ReplicaTime(c, 0.0) for c in window.replica_compute_sec),
        source="probe",
        host_sec=window.host_sec,
    )


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
