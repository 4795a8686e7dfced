"""The traces of `StepTimeLogger`: when a fit traces (its schedule, in steps), the backend's profiler, and the parser thread.

`TraceSchedule` starts the backend's profiler at a batch end, marks
each traced step, and ends the trace at a later batch end; the finished trace
becomes a `TraceJob`, which `TraceParser` hands to one
background thread to read (`read_trace`, in `keras_gpu.hooks.trace_read`);
`keras_gpu.hooks.trace_cost` says whether a fit may trace. The profiler stops on a
thread of its own (collecting and writing a trace takes about 0.5 s per 10 MB
on TensorFlow, 1 s per 6 MB on JAX here), which the training thread never waits for. Every target is a count of the fit's training
steps, so every worker of a job traces the same steps.
"""

from __future__ import annotations

import collections
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from keras_gpu.core import backend as _backend
from keras_gpu.core import topology
from keras_gpu.core.log import Once, logger
from keras_gpu.hooks import device_profiler
from keras_gpu.hooks.trace_cost import StopLoss, TraceGate, device_kind, record_cost
from keras_gpu.hooks.trace_read import TraceJob, read_trace
from keras_gpu.meters import step_time as steptime

__all__ = [
    "PROFILE_SUBDIR",
    "RETRY_S",
    "STOP_WAIT_S",
    "Profiler",
    "TraceJob",
    "TraceParser",
    "TraceSchedule",
    "backend_profiler",
    "read_trace",
    "steps_done",
    "steps_per_execution",
]

_INF = float("inf")
#: Where a run keeps its traces, under its run directory (TensorBoard's Profile tab opens them there).
PROFILE_SUBDIR = os.path.join("plugins", "profile")


class _Stops:
    """The profiler stops still under way in this process (the profiler is one per process)."""

    def __init__(self) -> None:
        self._idle = threading.Condition()
        self._pending = 0

    def begin(self) -> None:
        with self._idle:
            self._pending += 1

    def end(self) -> None:
        with self._idle:
            self._pending -= 1
            self._idle.notify_all()

    def busy(self) -> bool:
        """Whether a stop is under way (never waits for it)."""
        with self._idle:
            return self._pending > 0


_STOPS = _Stops()
#: How long a trace that comes due while the last trace is still stopping is put off at most; past it, tracing is
#: off for the fit (one warning). The training thread never waits for a stop.
STOP_WAIT_S = 30.0
#: While a stop is under way, a trace that is due is tried again after about this many seconds of steps.
RETRY_S = 0.25


class Profiler:
    """Start and stop one backend's profiler, writing XSpace traces under `run_dir/plugins/profile/`.

    `mark(n)` is the step marker for the step that starts at global step `n`
    (`keras_gpu.meters.step_time.step_marker`): a context manager, entered and
    exited on the training thread.
    """

    def __init__(self, start: Any, stop: Any, mark: Any) -> None:
        self.start, self.stop, self.mark = start, stop, mark


def backend_profiler() -> Profiler | None:
    """The profiler of the running Keras backend, or `None` where none writes XSpace traces."""
    name = _backend.name()
    if name == "tensorflow":
        import tensorflow as tf

        def tf_mark(n: int) -> Any:
            marker, stats = steptime.step_marker(n)
            return tf.profiler.experimental.Trace(marker, **stats)

        return Profiler(lambda d: tf.profiler.experimental.start(d), lambda: tf.profiler.experimental.stop(), tf_mark)
    if name == "jax":
        import jax

        def jax_mark(n: int) -> Any:
            marker, stats = steptime.step_marker(n)  # StepTraceAnnotation adds `_r=1` itself
            return jax.profiler.StepTraceAnnotation(marker, step_num=stats["step_num"])

        return Profiler(lambda d: jax.profiler.start_trace(d), lambda: jax.profiler.stop_trace(), jax_mark)
    return None


def steps_done(batch: int, epoch_steps: int | None) -> int:
    """Training steps of the epoch done at the batch end Keras numbers `batch`.

    With `steps_per_execution = k`, Keras numbers each batch end by the call's
    last step as if the call were whole: 15 steps in calls of 4 end at batches
    3, 7, 11 and 15. Where the epoch's length is known, that caps the count.

    Examples:
        >>> from keras_gpu.hooks.step_time_trace import steps_done
        >>> steps_done(15, 15), steps_done(11, 15), steps_done(15, None)
        (15, 12, 16)
    """
    done = batch + 1
    return min(done, epoch_steps) if epoch_steps is not None else done


def steps_per_execution(model: Any) -> int:
    """Keras' `steps_per_execution` of `model` (1 where it has none)."""
    value = getattr(model, "steps_per_execution", 1)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


class TraceSchedule:
    """The traces of one `fit`: where it is in steps, and the next trace's start and stop.

    Every target is a count of this fit's training steps, so that every worker
    of a job starts and stops its traces at the same steps. The first trace
    starts after `warmup_steps` steps, or at the second epoch's first batch
    end, whichever comes first; the next one `profile_every_s` later, in steps
    at the fit's pace.

    Args:
        profiler: The backend's profiler.
        replicas: `(tag label, device)` per local replica.
        warmup_steps: Steps of the first epoch after which its first trace may start.
        profile_steps: Training steps per trace.
        epochs: The fit's epochs, where known.
        epoch_steps: Steps per epoch, where Keras knows them.
        steps_per_execution: Keras' `steps_per_execution`.
        profile_every_s: Seconds between traces.
        first_step: The global step this fit starts from (the step markers number global steps).
        once: The callback's log-once scope, for the profiler's warnings.
        profile_dir: Where the run keeps its traces.
        keep: Whether traces are kept (the run is written).
        stop_inline: Stop the profiler on the training thread, at the batch
            end that ends a trace, instead of on the parser thread (TensorFlow's
            multi-worker tracing, where stops are unsafe already: see
            `StepTimeLogger(multiworker_tracing=...)`).
        gate: Whether a trace may start (`keras_gpu.hooks.trace_cost.TraceGate`);
            `None`: every trace may (a forced gate, which still records the
            profiler's measured cost).
        retry_s: Seconds of steps after which a trace put off by a stop
            still under way is tried again; 0: at the next batch end (where
            looking at a batch end costs nothing, on TensorFlow).
    """

    def __init__(
        self,
        profiler: Profiler,
        replicas: list[tuple[str, str]],
        warmup_steps: int,
        profile_steps: int,
        *,
        epochs: int | None = None,
        epoch_steps: int | None = None,
        steps_per_execution: int = 1,
        profile_every_s: float = 300.0,
        first_step: int = 0,
        once: Once | None = None,
        profile_dir: str = "",
        keep: bool = False,
        stop_inline: bool = False,
        gate: TraceGate | None = None,
        retry_s: float = RETRY_S,
    ) -> None:
        self.profiler = profiler
        if gate is None:
            gate = TraceGate(_backend.name(), device_kind(d for _, d in replicas), forced=True)
        self.gate = gate
        self.pace_pending = not gate.forced  # the gate wants the end of the fit's first step
        self.traces = 0  # traces started in this fit
        self.start_sec = 0.0  # the last start's measured seconds
        self.stop_loss: StopLoss | None = None  # what the last stop, on its own thread, costs the steps meanwhile
        self.put_off_since: float | None = None  # since when a due trace waits for the last stop (`_put_off`)
        self.retry_s = retry_s
        self.stop_inline = stop_inline
        self.profiler_ok = True
        self.replicas = replicas
        self._gpu_replicas: dict[int, tuple[int, ...]] | None = None  # read at the first trace
        self.steps_per_execution = steps_per_execution
        self.requested_steps = profile_steps
        # A trace's steps, in whole executions.
        self.profile_steps = -(-profile_steps // steps_per_execution) * steps_per_execution
        self.profile_every_s = profile_every_s
        self.first_step = first_step
        self.once = once if once is not None else Once()
        self.profile_dir = profile_dir
        self.keep = keep
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

    @property
    def gpu_replicas(self) -> dict[int, tuple[int, ...]]:
        """`{GPU index in a trace: local replicas on it}` (read once, at the first trace)."""
        if self._gpu_replicas is None:
            devices = [d for _, d in self.replicas]
            gpus = [topology.parse_device(d) for d in devices]
            on_gpus = _backend.name() == "tensorflow" and any(g and g.device_type == "GPU" for g in gpus)
            self._gpu_replicas = topology.trace_gpu_replicas(  # logical GPUs -> the physical GPUs a trace names
                devices, topology.gpu_layout() if on_gpus else None
            )
        return self._gpu_replicas

    def step_of(self, batch: int) -> int:
        """Steps of this fit done at the end of `batch` of the current epoch."""
        return self.base + steps_done(batch, self.known_steps)

    def epoch_begin(self, epoch: int) -> None:
        self.last_batch = -1
        self.epoch = epoch
        if epoch > 0 and (self.first or self.start_at == _INF) and self.start_at is not None:
            # ... or at the second epoch's first batch end (and a trace that waited for the fit's length)
            self.start_at = min(self.start_at, self.base + 1)
        self.schedule()

    def epoch_end(self) -> None:
        self.end_stop_loss()
        if self.known_steps is None and self.last_batch >= 0:
            self.epoch_steps = self.last_batch + 1
        self.base += steps_done(self.last_batch, self.known_steps)
        self.last_batch = -1

    def time_stop(self, steps: int) -> None:
        """On the training thread, `steps` steps done: time them while the last stop's cost is measured."""
        loss = self.stop_loss
        if loss is not None and not loss.step(steps):
            self.stop_loss = None

    def end_stop_loss(self) -> None:
        """The steps timed for the last stop end here (the epoch ended): its cost is recorded as it stands."""
        loss, self.stop_loss = self.stop_loss, None
        if loss is not None:
            loss.abandon()

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

    def batch_end(self, batch: int) -> TraceJob | None:
        """At the end of `batch`: start, mark or stop a trace where one is due; the finished trace, if any."""
        self.last_batch = batch
        if batch < self.next_batch:
            return None
        job = None
        step = self.step_of(batch)
        if self.tracing:  # every batch end of a trace: the end of one marked step, the start of the next
            self.t_end = time.perf_counter()
            self.end_mark()
            if step >= self.stop_at:
                job = self.stop()
            else:
                self.begin_mark(self.first_step + step)
        elif self.start_at is not None and step >= self.start_at:
            if self._put_off(step):
                pass
            elif not self.fits(batch):
                self.start_at = self.base + self.epoch_steps + 1  # the next epoch's first batch end holds it
            else:
                allowed = self.may_trace(step)
                if allowed:
                    self.start(batch)
                else:  # not yet: the next epoch's first batch end knows the fit's length; no: none in this fit
                    self.start_at = _INF if allowed is None else None
        self.schedule()
        return job

    def _put_off(self, step: int) -> bool:
        """Whether the trace due now waits for the last trace's stop, still under way (it is tried again later).

        The profiler is one per process, so a trace cannot start before the
        last one stopped; the training thread never waits for that: the
        trace is tried again about `retry_s` of steps later, and after
        `STOP_WAIT_S` of that, tracing is off for the fit (one warning).
        """
        if not _STOPS.busy():
            self.put_off_since = None
            return False
        now = time.perf_counter()
        if self.put_off_since is None:
            self.put_off_since = now
        elif now - self.put_off_since > STOP_WAIT_S:
            self.start_at = None
            if self.profiler_ok:
                self.profiler_ok = False
                self.once.log(
                    logging.WARNING,
                    "stop-pending",
                    "keras-gpu: StepTimeLogger: the profiler's last stop has not ended after %g s, so no trace "
                    "starts again in this fit; training goes on.",
                    STOP_WAIT_S,
                )
            return True
        pace = (now - self.t0) / step if step > 0 and now > self.t0 else 0.0
        self.start_at = step + (max(1, round(self.retry_s / pace)) if pace > 0 and self.retry_s > 0 else 1)
        return True

    def may_trace(self, step: int) -> bool | None:
        """The one place that says whether this fit may start a trace now, `step` steps in (`None`: not yet).

        The profiler's failures end tracing for the fit, and a trace of this
        process without GPU activity for every later fit
        (`keras_gpu.hooks.device_profiler`); then the gate decides
        (`keras_gpu.hooks.trace_cost.TraceGate`: the trace's cost against the fit's length).
        """
        if not self.profiler_ok or device_profiler.failed():
            return False
        total = self.epochs * self.epoch_steps if self.epochs is not None and self.epoch_steps is not None else None
        last_chance = self.epochs is None or self.epoch >= self.epochs - 1
        return self.gate.allow(step, total, self.traces, last_chance)

    def start(self, batch: int) -> None:
        """Start a trace at the end of `batch` (one warning where the profiler cannot start); `may_trace` decides."""
        self.start_at = None
        self.first = False
        self.tracing = True
        self.start_step = self.step_of(batch)
        self.stop_at = self.start_step + self.requested_steps
        if self.epoch_steps is not None:  # never past the epoch's last batch end
            self.stop_at = min(self.stop_at, self.base + self.epoch_steps)
        # The profilers name a trace's directory by the second it ends in, so
        # each trace goes to a directory of its own first; the parser thread
        # moves it under plugins/profile/ with a name no other trace has.
        self.staging = tempfile.mkdtemp(prefix="keras-gpu-trace-")
        try:
            if not self.profiler_ok:
                raise RuntimeError("the profiler failed earlier in this fit")
            t = time.perf_counter()
            self.profiler.start(self.staging)
            self.start_sec = time.perf_counter() - t
            self.traces += 1
        except Exception as exc:  # noqa: BLE001 - another profiler session, a missing plugin, ...
            shutil.rmtree(self.staging, ignore_errors=True)
            self.staging = ""
            if self.profiler_ok:
                self.profiler_ok = False
                self.once.log(
                    logging.WARNING,
                    "start-failed",
                    "keras-gpu: StepTimeLogger could not start the profiler (%s: %s), so no step-time breakdown is "
                    "logged in this fit. Is another profiler running (e.g. TensorBoard(profile_batch=...))?",
                    type(exc).__name__,
                    str(exc).strip().splitlines()[0] if str(exc).strip() else "",
                )
        self.t_start = self.t_end = time.perf_counter()
        if self.staging:
            self.begin_mark(self.first_step + self.start_step)

    def stop(self) -> TraceJob | None:
        """End the trace at its last batch end (called there, or at the epoch's end, validation's or fit's).

        The profiler itself stops on a thread of its own, so the training
        thread never waits for the trace to be collected and written; the
        steps it runs meanwhile fall outside the trace's step marks, and only
        marked steps count. A mark opened at the last batch end for a step
        that never came (the epoch ended) is closed after the profiler
        stopped, so the trace never records it. A trace that comes due while
        the stop is under way is put off until it ended (`_put_off`).
        Returns the trace for the parser thread; `None` where the profiler
        did not run (or, stopped inline, could not stop).
        """
        self.tracing = False
        now = time.perf_counter()
        steps = self.step_of(self.last_batch) - self.start_step
        wall = self.t_end - self.t_start  # batch end to batch end
        stop_step = self.start_step + steps
        # profile_every_s in steps, at this fit's pace so far (validation and callbacks included).
        period = max(1, round(self.profile_every_s * stop_step / (now - self.t0))) if now > self.t0 else None
        if period is not None:
            self.start_at = stop_step + period
        if not self.staging:
            return None
        stop_profiler = self._stopper(self.mark, self.staging)
        self.mark = None
        if self.stop_inline and not stop_profiler():
            return None
        return TraceJob(
            profile_dir=self.profile_dir,
            staging=self.staging,
            keep=self.keep,
            steps=steps,
            wall_sec=wall,
            step=self.first_step + stop_step,
            steps_per_mark=self.steps_per_execution,
            num_replicas=len(self.replicas),
            labels=tuple(label for label, _ in self.replicas),
            gpu_replicas=self.gpu_replicas,
            stop_profiler=stop_profiler,
            expect_device=device_profiler.expected_device(d for _, d in self.replicas),
        )

    def _stopper(self, mark: Any, staging: str) -> Callable[[], bool]:
        """Stop the profiler now, on a thread of its own, then close `mark`; the returned call waits for it.

        The stop runs at once rather than behind a parse on the parser thread,
        so the next trace never waits for a parse. The thread is not a daemon:
        the trace is written before the interpreter exits.
        """
        _STOPS.begin()
        stopped: list[bool] = []
        start_sec = self.start_sec
        self.end_stop_loss()
        loss = None
        if not self.stop_inline:  # the steps the training thread runs meanwhile tell what the stop costs them
            loss = self.stop_loss = StopLoss(
                self.gate.backend,
                self.gate.kind,
                start_sec,
                t0=time.perf_counter(),
                step0=self.step_of(self.last_batch),
                clock=time.perf_counter,
            )

        def stop_profiler() -> None:
            try:
                t = time.perf_counter()
                self.profiler.stop()
                seconds = time.perf_counter() - t
                if loss is None:  # stopped on the training thread: every second of it is the fit's
                    record_cost(self.gate.backend, self.gate.kind, start_sec, seconds, lost_sec=seconds)
                else:
                    loss.stopped(seconds)
                stopped.append(True)
            except Exception as exc:  # noqa: BLE001
                self.profiler_ok = False
                self.once.log(
                    logging.WARNING,
                    "stop-failed",
                    "keras-gpu: StepTimeLogger could not stop the profiler (%s: %s); tracing is off for this fit.",
                    type(exc).__name__,
                    exc,
                )
                shutil.rmtree(staging, ignore_errors=True)
            finally:
                try:
                    if mark is not None:  # after the stop: no trace records it
                        mark.__exit__(None, None, None)
                finally:
                    _STOPS.end()

        if self.stop_inline:
            stop_profiler()
            return lambda: bool(stopped)
        thread = threading.Thread(target=stop_profiler, name="keras-gpu-profiler-stop", daemon=False)
        thread.start()

        def wait_stopped() -> bool:
            thread.join()
            return bool(stopped)

        return wait_stopped


class TraceParser:
    """Hands finished traces, in order, to `handle` on a background thread, and runs what waits for them.

    The thread exists only while there is work: it starts on the first
    submission and ends when the queue is empty. It is not a daemon thread,
    so a trace still being parsed when the program ends is finished and its
    points written before the interpreter exits (Python joins such threads
    before it flushes the event files at exit); an idle parser holds no
    thread, so an interrupted `fit` never keeps the process alive.
    """

    def __init__(self, handle: Callable[[TraceJob], None]) -> None:
        self._handle = handle
        self._queue: collections.deque[Callable[[], None]] = collections.deque()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def submit(self, job: TraceJob) -> None:
        """Parse `job` after every trace submitted before it."""
        self._put(lambda: self._handle(job))

    def then(self, fn: Callable[[], None]) -> None:
        """Run `fn` once every trace submitted so far is handled: here and now where none is pending."""
        with self._lock:
            if self._thread is None:
                idle = True
            else:
                idle = False
                self._queue.append(fn)
        if idle:
            fn()

    @property
    def busy(self) -> bool:
        """Whether a trace (or what waits for one) is still pending."""
        return self._thread is not None

    def _put(self, item: Callable[[], None]) -> None:
        with self._lock:
            self._queue.append(item)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="keras-gpu-step-time", daemon=False)
                self._thread.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    self._thread = None
                    return
                item = self._queue.popleft()
            try:
                item()
            except Exception as exc:  # noqa: BLE001 - a failure here must not end the parser
                logger.warning("keras-gpu: StepTimeLogger's trace parser failed: %s: %s", type(exc).__name__, exc)
