"""`StepTimeLogger`: a measured step-time breakdown (input, compute, communication, transfer, other), sampled from traces.

The trace schedule and the parser thread are in `keras_gpu.hooks.step_time_trace`,
the cluster view of multi-worker jobs in `keras_gpu.hooks.step_time_cluster`;
the tag values come from `keras_gpu.output.step_time_tags`.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import shutil
import threading
import time
from typing import Any

from keras_gpu.core import backend as _backend
from keras_gpu.core import topology
from keras_gpu.core.checks import check_bool, check_positive, fail
from keras_gpu.core.log import Once, log_once, logger
from keras_gpu.hooks import step_probe
from keras_gpu.hooks._base import LoggingCallback
from keras_gpu.hooks.step_time_cluster import (
    CLUSTER_EVERY_S,
    ClusterSchedule,
    install_probe,
    log_cluster,
)
from keras_gpu.hooks.step_time_trace import (
    PROFILE_SUBDIR,
    RETRY_S,
    TraceJob,
    TraceParser,
    TraceSchedule,
    backend_profiler,
    read_trace,
    steps_per_execution,
)
from keras_gpu.hooks.trace_cost import TraceCost, TraceGate, device_kind, trace_costs
from keras_gpu.meters import step_time as steptime
from keras_gpu.meters.cluster_view import ROW_FIELDS, ClusterSummary, verdict_over
from keras_gpu.output import tags as _tags
from keras_gpu.output import writer as _writer
from keras_gpu.output.cluster_text import slowest_markdown
from keras_gpu.output.step_time_tags import cluster_values, step_time_values
from keras_gpu.output.step_time_text import host_work_markdown, input_stage_markdown, kernels_markdown

__all__ = ["CLUSTER_EVERY_S", "END_WAIT_S", "StepTimeLogger", "check_profile_every_s"]

#: Seconds a traced step waits at most for the previous step's batch end (asynchronous dispatch) before the
#: fit stops tracing: a step that long is no step to trace, and `fit` must never hang on keras-gpu.
END_WAIT_S = 60.0


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
    Outside traced steps nothing is marked.

    Keras' dispatch mode is kept (`async_safe`): on JAX and PyTorch with
    `verbose=0` Keras runs batch-end hooks on a thread pool, out of order,
    and the training thread does not wait for each step; there the traces
    start, mark and stop at batch *begins*, on the training thread (a mark
    runs from one batch begin to the next, the step's dispatch and whatever
    the host does until the next one), so a trace ends at a batch begin and
    an epoch's last step is never traced.
    While a trace runs, each traced step begins only once the previous one
    finished (its batch end ran), as in Keras' synchronous loop, so that each
    step's device work falls inside its own mark: the breakdown is that of
    the synchronous step, and only the few traced steps wait (never longer
    than `END_WAIT_S`; the fit then stops tracing, with one warning).

    The profiler stops and the trace is parsed on a background thread, never
    on the training thread (the steps that run meanwhile are outside the
    marks; no trace starts while one is stopping); the traces stay in the
    run's `plugins/profile/` directory, where TensorBoard's Profile tab opens
    them, and only the newest `max_traces` are kept.

    The breakdown is logged at the step where the trace ended, on the step
    axis of `ThroughputLogger` (the optimizer's iterations when `fit` began,
    plus the steps `fit` has run): the `step_time/` group of the
    [tag reference](../tags.md#step_time), with each tag's unit and meaning
    (`keras_gpu.meters.step_time` says how each instant is attributed).

    At the end of `fit` one INFO line gives the last breakdown and the hints
    that follow from it ("input-bound: 62% of each step waits for input"),
    and `last` holds it. Where the profiler is not available or fails,
    one warning says so and training goes on. A GPU job's trace without GPU
    activity (the GPU profiler did not start) logs no device part and says
    so; after it, no trace starts in the process
    (`keras_gpu.hooks.device_profiler`), with one warning. Each trace's
    kernel view and the host's work per step are logged as text summaries.

    **Which fits trace.** A trace costs the profiler's start (on the training
    thread) and stop (beside training): about 0.3 s per fit with JAX on an
    NVIDIA H200, +28% on a fit of 1,500 steps of 0.7 ms. So, unless
    `profile_every_s` is set, a trace starts only where the fit's traces, this
    one included, cost at most 0.5% of the fit
    (`keras_gpu.hooks.trace_cost.TraceGate`, decided where the trace would
    start): the time since `fit` began plus the steps left (steps per epoch x
    epochs) at the pace since the first step ended; where the epoch's length
    is not known yet, the decision waits for the next epoch (in the last, the
    time so far is the fit's length).

    A trace's cost is the mean start plus stop of this process's earlier
    traces on the same backend and device kind (`profiler_cost`), or before
    any the prior in `keras_gpu.hooks.trace_cost.PRIOR_COST_S`. A fit that
    does not trace says why in one INFO line per process and starts no
    profiler. An explicit `profile_every_s` traces whatever it costs, and so
    does every worker of a multi-worker job (they trace the same steps).

    **Multi-worker TensorFlow jobs** are measured without the profiler, on
    every worker, by default: a probe inside each training step
    (`keras_gpu.hooks.step_probe`: `tf.timestamp()` where the worker's own
    forward and backward pass starts, where its gradients are ready for the
    all-reduce, and where the step ends) sums each worker's compute, its
    waiting in the reductions, and the host and input time between steps.

    At each epoch's end, and every `CLUSTER_EVERY_S` (30 s) within an
    epoch (a count of steps the chief proposes), each worker logs the same
    `step_time/*` tags as above on its run (over every step of the window;
    `input_sec` is the worker's own wait for its batch, for any
    `steps_per_execution`; the distributed iterator's check that every
    worker has a batch, a wait for the others, is `communication_sec`)
    and shares its figures.

    In a job of two replicas in all they ride on
    the next training step's gradient all-reduce
    (`keras_gpu.hooks.row_ride`: no collective of its own; each sum is
    one exact addition, so training is unchanged), and at the next batch end
    the chief logs the cluster view, on the step where the window ended; the
    fit's last window, which no step follows, is all-gathered once at the
    fit's end.

    Larger jobs (where more rows in the all-reduce would move the
    ring's chunk boundaries, and so the rounding of the gradient sums), and
    steps that cannot carry the rows (no optimizer all-reduce in a custom
    `train_step`, or gradients neither all float32 nor all float64),
    all-gather the rows at every share, between steps; there a later epoch's
    end shares only once `EPOCH_SHARE_S` (5 s) of steps went by since the
    last share, so that short epochs do not pay a collective each, and the
    fit's end gathers what is left.

    The cluster view is
    the `cluster/` group of the [tag reference](../tags.md#cluster): the
    slowest worker, how much of each step the others wait for it and in
    which part of its busy time, each worker's slowdown against its own best
    window, and the spread across the workers.

    The end-of-fit line on the chief, and the `cluster/verdict` text, name
    the straggler with its part (a worker that stands out of the others'
    spread in most gathers: see `keras_gpu.meters.cluster_view`), and a
    worker, or the cluster as a whole, slowed 1.5x or more against its own
    best window in two gathers or more. Each gather, the chief also logs
    the slowest workers (`cluster/slowest_workers`) and the straggler so
    far (`cluster/straggler`): in a job of any size, a few numbers per
    gather.

    **Multi-process JAX jobs** get the same cluster view, measured on the
    host (`keras_gpu.hooks.step_time_cluster_jax`): each process's host
    time between calls of the train function, its own input wait, and the
    rest of the call as device time (one compiled program: compute, the
    collectives and the wait for the other processes, not told apart), all
    gathered at the same points with one `process_allgather`. Busy time is
    host and input only, so host and input stragglers are named and compute
    stragglers are not; the `step_time/*` tags still come from JAX's
    profiler traces.

    Args:
        log_dir: Directory shared with the other callbacks.
        profile_every_s: Seconds between traces (after the first); `0` turns
            tracing off. `None` (the default): every 300 s, in a fit where
            a trace costs at most 0.5% of it (see "Which fits trace" above);
            a number, `300` included, traces whatever it costs.
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
            benchmarks.studies.profiler_crash_rate`.
        per_worker_runs: Whether a worker other than the chief writes its own
            run (`log_dir/worker_k/train`). `None`: yes in jobs of up to 16
            workers; above that only the chief writes.

    `fit` never waits for a trace to be stopped or parsed: one still pending when
    `fit` ends is finished on the parser's thread, which then writes its
    points and logs the end-of-fit line (before the interpreter exits, at the
    latest); `wait` waits for it.

    Raises:
        TypeError: An argument has the wrong type (e.g. `max_traces="5"`, or
            a `log_dir` that is not a path).
        ValueError: A number is out of range (a negative `profile_every_s`,
            a count below 1), or the `log_dir` is empty.

    Attributes:
        forced: Whether `profile_every_s` was set (traces whatever they cost).
        last: The last `keras_gpu.meters.step_time.StepTime`, or `None`
            (read after `fit`, it waits for the fit's traces).
        traces: Breakdowns logged in this `fit`, oldest first (as `last`).
        cluster: In multi-worker jobs (TensorFlow, JAX), every worker's rows at each share
            (`keras_gpu.meters.cluster_view.ClusterSummary`, or `None` when no worker had a
            breakdown ready), in the order of the steps they end at.

    Examples:
        >>> import tempfile
        >>> import numpy as np
        >>> import keras
        >>> import keras_gpu
        >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        >>> model.compile(optimizer="sgd", loss="mse")
        >>> x, y = np.zeros((16, 4), "float32"), np.zeros((16, 1), "float32")
        >>> with tempfile.TemporaryDirectory() as log_dir:  # trace this short fit too
        ...     step_time = keras_gpu.StepTimeLogger(
        ...         log_dir, profile_every_s=300, warmup_steps=1, profile_steps=2
        ...     )
        ...     _ = model.fit(x, y, batch_size=4, epochs=1, callbacks=[step_time], verbose=0)
        >>> len(step_time.traces), step_time.last.steps  # one trace of two steps
        (1, 2)
    """

    async_safe = True
    """Keras may run `on_train_batch_end` on its thread pool (JAX and PyTorch with `verbose=0`): it keeps doing so."""

    DEFAULT_PROFILE_EVERY_S = 300.0
    NO_TRACING = 0.0
    """The `profile_every_s` that turns tracing off (`keras_gpu.callbacks()` then leaves this callback out)."""

    def __init__(
        self,
        log_dir: str | os.PathLike,
        *,
        profile_every_s: float | None = None,
        profile_steps: int = 20,
        warmup_steps: int = 50,
        max_traces: int = 5,
        multiworker_tracing: bool = False,
        per_worker_runs: bool | None = None,
    ) -> None:
        super().__init__(log_dir, per_worker_runs)
        # keras_gpu.callbacks() checked the profile_every_s it forwards.
        every_s = check_profile_every_s(profile_every_s, allow_none=True)
        self.forced = every_s is not None  # the user's interval: trace whatever it costs
        self.profile_every_s = self.DEFAULT_PROFILE_EVERY_S if every_s is None else every_s
        self.profile_steps = check_positive("profile_steps", profile_steps, integer=True)
        self.warmup_steps = check_positive("warmup_steps", warmup_steps, integer=True)
        self.max_traces = check_positive("max_traces", max_traces, integer=True)
        self.multiworker_tracing = check_bool("multiworker_tracing", multiworker_tracing)
        self.cluster: list[ClusterSummary | None] = []
        self._out: _FitOutput | None = None  # the current (or last) fit's breakdowns
        self._fit: TraceSchedule | None = None
        self._cluster_fit: ClusterSchedule | None = None
        self._probe: step_probe.StepProbe | None = None
        self._once = Once()
        self._parser = TraceParser(self._handle)
        self._first_step = 0
        # Where Keras may run batch ends on its thread pool (every backend but TensorFlow), the schedules are
        # driven from the batch begins, on the training thread; the batch ends only note the latest index.
        self._by_begins = False
        self._last_end = -1
        self._ends = threading.Condition()  # notified at each batch end: a traced step waits for the last one
        self._train_thread = threading.get_ident()
        self._cost_key: tuple[str, str] | None = None  # (backend, device kind) of the last fit that could trace
        self._last_fit: TraceSchedule | None = None

    @property
    def last(self) -> steptime.StepTime | None:
        """The last breakdown of the current or last `fit` (after `fit`, waits for a trace still being parsed)."""
        out = self._settled()
        return None if out is None else out.last

    @property
    def traces(self) -> list[steptime.StepTime]:
        """The breakdowns of the current or last `fit`, oldest first (after `fit`, as `last`)."""
        out = self._settled()
        return [] if out is None else out.traces

    @property
    def profiler_cost(self) -> TraceCost | None:
        """The profiler's measured start and stop in this process, for the backend and device kind of the
        last `fit` (`None` where no trace of theirs was measured): `keras_gpu.hooks.trace_cost.TraceCost`."""
        self._settled()  # the last trace's stop runs on a thread of its own: measured once the fit's output settles
        key = self._cost_key
        return None if key is None else trace_costs().get(key)

    @property
    def no_trace_reason(self) -> str | None:
        """Why the last `fit` started no trace for its cost (`None`: it was not held back by its cost)."""
        fit = self._last_fit
        return None if fit is None else fit.gate.reason

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the last `fit`'s traces are stopped, parsed and written; whether they are.

        `fit` does not wait for them: a trace still stopping or being parsed
        when `fit` ends is finished on background threads, its points written
        and the end-of-fit line logged when it is ready (and before the
        interpreter exits). Reading `last` or `traces` after `fit`
        waits too. Call it before starting a profiler of your own right after
        `fit`: the backend's profiler is one per process.

        Args:
            timeout: Seconds to wait at most; `None` waits as long as it takes.
        """
        out = self._out
        return out is None or not out.ended or out.done.wait(timeout)

    def _settled(self) -> _FitOutput | None:
        out = self._out
        if out is not None and out.ended:
            out.done.wait()
        return out


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
                self._probe = install_probe(model, task.num_workers, task.worker_index or 0)
            elif task.num_workers > 1 and _backend.name() != "jax":
                self._once.log(logging.INFO, "no-probe", "keras-gpu: no cluster view in this fit: it runs on the "
                               "TensorFlow and JAX backends only (this is %s).", _backend.name())
        except Exception as exc:  # noqa: BLE001 - a monitoring failure must not stop training
            logger.warning("keras-gpu: the cluster view is off: %s: %s", type(exc).__name__, exc)

    def on_train_begin(self, logs=None):
        self._fit = self._cluster_fit = self._last_fit = None
        self.cluster = []
        self._open()
        self._out = _FitOutput(self._writer)
        self._first_step = self._initial_step()  # ThroughputLogger's step axis: this plus the steps run
        self._by_begins = not _backend.batch_ends_in_order()
        self._last_end = -1
        self._train_thread = threading.get_ident()
        task = self._task
        workers = task.num_workers if task is not None else 1
        tensorflow = _backend.name() == "tensorflow"
        params = self.params or {}
        epoch_steps = params.get("steps")  # where Keras knows them
        try:
            if workers > 1 and tensorflow:
                self._cluster_fit = self._probe_cluster(workers, epoch_steps)
            elif workers > 1 and _backend.name() == "jax":
                from keras_gpu.hooks.step_time_cluster_jax import jax_schedule

                self._cluster_fit = jax_schedule(self.model, self._replicas(), self._first_step, epoch_steps)
        except Exception as exc:  # noqa: BLE001 - a monitoring failure must not stop training
            logger.warning("keras-gpu: the cluster view is off for this fit: %s: %s", type(exc).__name__, exc)
        if self.profile_every_s == self.NO_TRACING:
            return
        if workers > 1 and tensorflow and not self.multiworker_tracing:
            return  # the probe measures every worker; TensorFlow's profiler is not safe here
        profiler = backend_profiler()
        if profiler is None:
            log_once(  # once per process, however many fits
                logging.INFO,
                f"step_time:no-profiler:{_backend.name()}",
                "keras-gpu: StepTimeLogger logs no step-time breakdown on the %s backend: its profiler does not write "
                "the trace format keras-gpu reads (TensorFlow and JAX do).",
                _backend.name(),
            )
            return
        try:
            replicas = self._replicas()
            # Every worker of a job traces the same steps: no worker decides on its own clock.
            forced = self.forced or workers > 1
            gate = TraceGate(_backend.name(), device_kind(d for _, d in replicas), forced=forced)
            self._fit = TraceSchedule(
                profiler,
                replicas,
                self.warmup_steps,
                self.profile_steps,
                epochs=params.get("epochs"),
                epoch_steps=epoch_steps,
                steps_per_execution=steps_per_execution(self.model),
                profile_every_s=self.profile_every_s,
                first_step=self._first_step,
                once=self._once,
                profile_dir=os.path.join(self.run_dir, PROFILE_SUBDIR),
                keep=self._writer is not None,
                stop_inline=workers > 1 and tensorflow,
                gate=gate,
                # A batch end looked at while a trace is put off: free on TensorFlow; a wait for the last step where
                # the schedule runs at batch begins (`_wait_for_end`), so there only now and then.
                retry_s=RETRY_S if self._by_begins else 0.0,
            )
            self._last_fit, self._cost_key = self._fit, (gate.backend, gate.kind)
        except Exception as exc:  # noqa: BLE001 - a monitoring failure must not stop training
            logger.warning("keras-gpu: StepTimeLogger is off for this fit: %s: %s", type(exc).__name__, exc)

    def on_epoch_begin(self, epoch, logs=None):
        self._last_end = -1
        fit = self._fit
        if fit is not None:
            fit.epoch_begin(epoch)
        cluster = self._cluster_fit
        if cluster is not None:
            cluster.probe.epoch_begin()

    def on_train_batch_begin(self, batch, logs=None):
        # Always on the training thread, in order. Where Keras may run batch ends on its thread pool (every
        # backend but TensorFlow), the traces start, mark and stop here, and JAX's cluster view shares here:
        # the previous execution ended at `batch - 1`.
        cluster = self._cluster_fit
        if cluster is not None:
            if self._by_begins:
                cluster.probe.batch_begin(batch)  # JAX's clock: the calls' order, from the training thread
            else:
                cluster.probe.batch_begin()
            if self._by_begins and cluster.batch_end(batch - 1):
                self._cluster_views(cluster, cluster.at_batch_end(self._own_window(), self._once))
        fit = self._fit
        if fit is None:
            return
        if fit.pace_pending and (batch or fit.base):  # the fit's first step has ended
            fit.pace_pending = False
            fit.gate.note_first_step(fit.base + batch)
        if self._by_begins and fit.stop_loss is not None and batch > 0:
            fit.time_stop(fit.step_of(batch - 1))  # the steps while the last trace's stop runs, and after
        if self._by_begins and batch > 0 and batch - 1 >= fit.next_batch:  # not an epoch's first
            # A trace starts, marks or stops here: the previous step must have finished first, as in Keras'
            # synchronous loop, so that each traced step's device work falls inside its own mark.
            if not self._wait_for_end(batch - 1):
                if fit.tracing:
                    self._submit(fit.stop())
                fit.end_stop_loss()
                self._fit = None
                return
            self._submit(fit.batch_end(batch - 1))

    def on_train_batch_end(self, batch, logs=None):
        # `async_safe`: on every backend but TensorFlow, Keras may call this on its thread pool, out of order.
        if not self._by_begins:  # TensorFlow: always synchronous, on the training thread
            cluster = self._cluster_fit
            if cluster is not None:
                cluster.probe.batch_end()
                if cluster.batch_end(batch):
                    self._cluster_views(cluster, cluster.at_batch_end(self._own_window(), self._once))
            fit = self._fit
            if fit is not None:  # per batch: a store and a comparison; the schedule only where it has work
                fit.last_batch = batch
                if fit.stop_loss is not None:
                    fit.time_stop(fit.step_of(batch))  # the steps while the last trace's stop runs, and after
                if batch >= fit.next_batch:
                    self._submit(fit.batch_end(batch))
            return
        with self._ends:  # the epoch's latest batch end, whatever order the pool runs them in
            if batch > self._last_end:
                self._last_end = batch
                self._ends.notify_all()
        cluster = self._cluster_fit
        if cluster is not None:  # JAX's clock: the step's outputs were ready when its batch end ran
            cluster.probe.ended(batch, time.perf_counter(), threading.get_ident() != self._train_thread)

    def _wait_for_end(self, batch: int) -> bool:
        """Wait until the batch end of `batch` ran (its step finished); False, with one warning, after `END_WAIT_S`."""
        with self._ends:
            if self._ends.wait_for(lambda: self._last_end >= batch, timeout=END_WAIT_S):
                return True
        self._once.log(
            logging.WARNING,
            "end-wait",
            "keras-gpu: StepTimeLogger stops tracing in this fit: the batch end of step %d had not run after %g s.",
            batch,
            END_WAIT_S,
        )
        return False

    def on_test_begin(self, logs=None):
        if self._fit is not None and self._fit.tracing:
            self._submit(self._fit.stop())

    def on_epoch_end(self, epoch, logs=None):
        fit = self._fit
        if fit is not None:
            if fit.tracing:
                self._submit(fit.stop())
            if self._by_begins:
                fit.last_batch = self._last_end  # every batch end of the epoch ran: Keras waits for them here
            fit.epoch_end()
        cluster = self._cluster_fit
        if cluster is not None:
            if self._by_begins:
                cluster.last_batch = self._last_end
            self._cluster_views(cluster, cluster.at_epoch_end(self._own_window(), self._once))
            cluster.epoch_end()
        self._last_end = -1

    def on_train_end(self, logs=None):
        fit, self._fit = self._fit, None
        cluster, self._cluster_fit = self._cluster_fit, None
        if _backend.name() == "jax":
            self._remove_clock()
        if fit is not None:
            if fit.tracing:
                self._submit(fit.stop())
            fit.end_stop_loss()  # the fit's steps are over: a stop still running costs it no more
        out = self._out
        if out is None:  # on_train_end without on_train_begin
            self._close()
            return
        if cluster is not None:  # the fit's last window first: this worker's end-of-fit line reads it
            self._cluster_views(cluster, cluster.at_fit_end(self._once, self._own_window()))
        if fit is None and cluster is not None and out.last is not None:
            self._log_breakdown(out.last, [])
        if cluster is not None:
            sentence = log_cluster(self.cluster, self._task)
            if sentence is not None and self._writer is not None:
                self._writer.text(_tags.CLUSTER_VERDICT.name(), sentence, self._first_step + cluster.base)
        # `fit` returns now: a trace still being parsed is finished on the parser's
        # thread, which then logs the end-of-fit line and gives the writer back.
        self._writer = None
        self._leave_fit()
        out.ended = True
        self._parser.then(lambda: self._finish(out, fit))

    # -- the traces (parsed on the parser thread) ------------------------------------

    def _submit(self, job: TraceJob | None) -> None:
        """Hand a finished trace to the parser thread (bound to this fit's output)."""
        out = self._out
        if job is None:
            return
        # Nowhere to write it (`write=None`): the profiler still stops, and the trace is dropped.
        self._parser.submit(dataclasses.replace(job, write=out.write if out is not None else None))

    def _handle(self, job: TraceJob) -> None:
        if job.stop_profiler is not None and not job.stop_profiler():
            return
        if job.write is not None:
            read_trace(job, self._once, self.max_traces, job.write)
        else:
            shutil.rmtree(job.staging, ignore_errors=True)

    def _finish(self, out: _FitOutput, fit: TraceSchedule | None) -> None:
        """When the fit's last trace is in: its end-of-fit line, and the writer given back."""
        try:
            if fit is not None:
                self._log_summary(fit, out.last)
        finally:
            if out.writer is not None:
                _writer.release(out.writer)
            out.done.set()

    # -- the cluster view (multi-worker TensorFlow: the step probe) -------------------------

    def _probe_cluster(self, workers: int, epoch_steps: int | None) -> ClusterSchedule | None:
        """Set up the sharing of the probe's windows that `set_model` installed; `None` where there is none."""
        probe = self._probe
        if probe is None:
            return None
        from keras_gpu.hooks.gather import RowGather

        worker = (self._task.worker_index or 0) if self._task is not None else 0
        gather = RowGather(self._strategy(), len(ROW_FIELDS), workers, worker)
        return ClusterSchedule(
            probe, gather, self._replicas(), self._first_step, ride=probe.ride, epoch_steps=epoch_steps
        )

    def _own_window(self) -> Any:
        """Where this worker's own probe window goes (nowhere while the profiler measures it, nor on JAX, where
        the profiler's traces give each process's `step_time/*` tags and the clock has no compute to log)."""
        out = self._out
        return None if self.multiworker_tracing or out is None or _backend.name() != "tensorflow" else out.write

    def _remove_clock(self) -> None:
        """Put back the train function the JAX cluster view timed (multi-process JAX fits)."""
        try:
            from keras_gpu.hooks.step_time_cluster_jax import remove_clock

            remove_clock(self.model)
        except Exception as exc:  # noqa: BLE001 - a monitoring failure must not stop training
            logger.warning("keras-gpu: StepTimeLogger could not restore the train function: %s: %s",
                           type(exc).__name__, exc)

    def _cluster_views(self, cluster: ClusterSchedule, views: list[Any]) -> None:
        """Keep the views that became complete; the chief logs them. A schedule that failed ends the view."""
        for step, summary in views:
            self.cluster.append(summary)
            if self._task is not None and self._task.is_chief and self._writer is not None and summary is not None:
                so_far = verdict_over([c for c in self.cluster if c is not None])
                self._writer.scalars(cluster_values(summary, so_far), step)
                table = slowest_markdown(summary.slowest)
                if table is not None:
                    self._writer.text(_tags.CLUSTER_SLOWEST_WORKERS.name(), table, step)
        if cluster.failed:
            self._cluster_fit = None

    # -- set-up and summary -------------------------------------------------------------

    def _replicas(self) -> list[tuple[str, str]]:
        """`(tag label, device)` per local replica: `<global index>_<DEV>_<n>`."""
        devices = list(_backend.replica_devices(self.model))
        rank = (self._task.worker_index or 0) if self._task is not None else 0
        return [
            (f"{rank * len(devices) + i}_{topology.device_label(d)}", d) for i, d in enumerate(devices)
        ]

    def _log_summary(self, fit: TraceSchedule, last: steptime.StepTime | None) -> None:
        if last is None and fit.gate.reason is not None:
            return  # its cost held it back: said once per process
        if last is None:
            logger.info(
                "keras-gpu: StepTimeLogger traced no step in this fit (the first trace comes after warm-up: at the "
                "second epoch, or after %d steps of the first).",
                self.warmup_steps,
            )
            return
        self._log_breakdown(
            last, [f"replica {label.split('_', 1)[0]} ({topology.short_device(d)})" for label, d in fit.replicas]
        )

    def _log_breakdown(self, last: steptime.StepTime, labels: list[str]) -> None:
        # The probe's input is this worker's own wait for its batch: the iterator's check with the other
        # workers is in its communication.
        hints = steptime.verdict(last, labels) if labels else steptime.verdict(last)
        measured = "probed steps" if last.source == "probe" else "traced steps"
        if last.unmeasured:
            logger.info(
                "keras-gpu: StepTimeLogger: %.3g ms per step over %d %s: input %.0f%%; %s.",
                1e3 * last.step_sec, last.steps, measured, 100 * last.share("input"), "; ".join(hints),
            )
            return
        logger.info(
            "keras-gpu: StepTimeLogger: %.3g ms per step over %d %s: input %s, compute %.0f%%, "
            "communication %.0f%%, transfer %.0f%%, other %.0f%% (host %.0f%%).%s",
            1e3 * last.step_sec,
            last.steps,
            measured,
            "not measured" if last.input_sec != last.input_sec else f"{100 * last.share('input'):.0f}%",
            100 * last.share("compute"),
            100 * last.share("communication"),
            100 * last.share("transfer"),
            100 * last.share("other"),
            100 * last.share("host"),
            "".join(f" Hint: {h}." for h in hints),
        )


class _FitOutput:
    """Where one `fit`'s breakdowns go: its writer and its list, whichever thread writes them.

    Bound to one `fit`, so that a trace parsed after its `fit` returned never
    lands in the next `fit` of the same callback.
    """

    def __init__(self, writer: Any) -> None:
        self.writer = writer
        self.last: steptime.StepTime | None = None
        self.traces: list[steptime.StepTime] = []
        self.ended = False  # on_train_end ran
        self.done = threading.Event()  # ... and every trace of this fit is written

    def write(self, result: steptime.StepTime, labels: Any, step: int) -> None:
        writer = self.writer
        if writer is not None:
            writer.scalars(step_time_values(result, labels), step)
            texts = (
                (_tags.STEP_INPUT_STAGE, input_stage_markdown(result)),
                (_tags.STEP_KERNELS, kernels_markdown(result)),
                (_tags.STEP_HOST_WORK, host_work_markdown(result)),
                (_tags.STEP_UNMEASURED, result.unmeasured or None),
            )
            for tag, text in texts:
                if text is not None:
                    writer.text(tag.name(), text, step)
        self.traces.append(result)
        self.last = result


def check_profile_every_s(value: Any, *, allow_none: bool = False) -> float | None:
    """`value` as a float when it is a positive, finite number of seconds, or 0 for no tracing (or None with `allow_none`).

    Raises:
        TypeError: not a number (bools and strings included).
        ValueError: a negative, infinite or NaN number.
    """
    if value is None and allow_none:
        return None
    requirement = "be a positive, finite number of seconds, or 0 to turn tracing off"
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        fail("profile_every_s", requirement, value, TypeError)
    try:
        seconds = float(value)
    except OverflowError:  # an int beyond the float range
        seconds = math.nan
    if not 0 <= seconds < math.inf:
        fail("profile_every_s", requirement, value)
    return seconds or StepTimeLogger.NO_TRACING  # -0.0 too
