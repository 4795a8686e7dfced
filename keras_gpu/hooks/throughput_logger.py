"""`ThroughputLogger`: samples/s, steps/s, per-replica rates, TFLOP/s and MFU in TensorBoard.

The callback times and feeds `keras_gpu.meters.throughput.ThroughputMeter`,
and writes its records under their tags (the one place a window or an epoch's
times become `throughput/*` and `time/*` values; `keras_gpu.output.tag_records`
reads them back). What it meters each `fit` with (the data schedule, the sample
counter, the FLOPs) is settled once per fit by `keras_gpu.hooks.throughput_setup`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from keras_gpu.core import backend
from keras_gpu.core.checks import check_bool, check_positive
from keras_gpu.core.log import call_with, logger, process_once
from keras_gpu.hooks import throughput_setup as _setup
from keras_gpu.hooks._base import LoggingCallback, read_step
from keras_gpu.hooks.fit_introspection import FitData, inspect_fit
from keras_gpu.hooks.throughput_setup import CompileWatch, KerasCount, watch_compiles
from keras_gpu.meters import model_flops
from keras_gpu.meters.throughput import ThroughputMeter
from keras_gpu.meters.throughput_compiles import BeginClock
from keras_gpu.meters.throughput_records import EpochRates, EpochTimes, FirstExecution, Window
from keras_gpu.output import tags as _tags

__all__ = ["ThroughputLogger"]

_INF = float("inf")


class ThroughputLogger(LoggingCallback):
    """Logs training throughput, achieved FLOP/s, MFU and where each epoch's time goes.

    Rates are wall-clock rates, the ones a stopwatch gives: each epoch's
    training phase runs from the epoch's start to the end of its last training
    step, first execution (tracing, warm-up, iterator start) included, and
    logging windows tile it with no gap. Validation and epoch-end work are
    left out of the rates and logged apart. The steady rates leave out the
    first execution and every execution that compiled a new batch shape
    (`keras_gpu.hooks.throughput_setup`).

    One point per window, on the
    global-step axis (the optimizer's iteration count when `fit` starts, plus
    the steps counted since), and once per epoch, at the global step of the
    epoch's last training step (written when the next epoch starts, or when
    training ends): the `throughput/` and `time/` groups of the
    [tag reference](../tags.md#throughput), with each tag's unit and meaning.
    TFLOP/s needs the FLOPs per sample and MFU the peak FLOP/s: known for a
    GPU in the table of `keras_gpu.meters.flops`, or given as
    `peak_flops`.

    Samples are counted exactly, including a short last batch, batches split
    unevenly over replicas, and `steps_per_execution > 1`, for every input
    `fit` takes, without `batch_size=`: from the running `fit`'s data where it
    says the batch size (arrays, `tf.data` with a static batch dimension);
    else on TensorFlow from Keras' own count, or a counting probe in the
    training step where that count cannot be read; on JAX and PyTorch from the
    batches `fit`'s epoch iterator yields. How each is read, and its limits:
    [how throughput is measured](../throughput.md#throughputlogger).

    In a multi-worker TensorFlow job each worker's count (Keras' or the
    probe's) holds its own replicas' samples; the global count is that times the number of workers,
    exact where the workers' batches are the same size (every full batch),
    and off by the difference where a short last batch splits unevenly over
    workers: an exact sum would need a collective per window. Where no count
    is possible, one warning names the argument to pass and only steps/s and
    `first_step_sec` are logged, never guessed numbers. `batch_size=` and
    `samples_per_epoch=` override what is read or counted. With a static
    batch size, for finite data of unknown length with `steps_per_execution >
    1`, the epoch's last execution may stop early without saying so: windows
    then close one execution late, and the last execution's step count is
    taken from the optimizer's iteration count at the end of the epoch.

    Training FLOPs per sample are 3 x the forward FLOPs, counted once per model
    from its traced forward graph (multiply-add = 2 FLOPs, matmul-like ops
    only; see `keras_gpu.meters.flops`). Each worker logs its own view to its own
    run directory.

    Keras' dispatch mode is kept: the callback is `async_safe`, so on the
    backends that run batch-end hooks on a thread pool (JAX and PyTorch)
    `fit` stays asynchronous. There a batch end takes a lock, a comparison,
    a store and a clock read; it does more only at the batch ends a window
    or the epoch's last step asks for (where the epoch's length is unknown,
    at every one). Hooks that Keras runs late and out of order are taken in
    batch order: a batch end older than one already taken is covered by it.

    A batch end says that its step is done, not when, so on those backends
    the executions the steady rates leave out (each epoch's first, those JAX
    compiled, one that runs a new batch size) are timed on the training
    thread, from their batch begins, which run in order and on time: an
    execution runs from its batch begin to the next one's
    (`keras_gpu.meters.throughput_compiles.BeginClock`; its samples are the
    batch counter's readings at those begins). On TensorFlow, whose batch
    ends run on the training thread, each execution ends at its batch end.
    Validation is timed from its start or the training phase's last step,
    whichever is later, so an asynchronous step still finishing when
    validation starts counts as training. A point is handed to the writer's
    background thread.

    At the end of every epoch the current, partial window is closed, so short
    epochs still get a point. At the end of training one INFO line gives the
    wall-clock rates over the whole run and the time of the `fit` (from the
    first keras-gpu callback's `on_train_begin` to the last one's
    `on_train_end`, so the end-of-fit work of every keras-gpu callback
    counts; logged when the last one ends), and `summary` holds the
    numbers.

    Args:
        log_dir: Directory shared with Keras' `TensorBoard` callback; this
            worker writes to its `train` run (see `keras_gpu.callbacks`).
        every_n_steps: Close a window every this many training steps.
        every_s: Close a window every this many seconds (default: 5.0 when
            `every_n_steps` is not given). Pass only one of the two.
        batch_size: Samples per step, all replicas on all workers (the batch
            size given to `fit`). Overrides what is read from the data or
            counted; every batch is then taken as full unless
            `samples_per_epoch` says otherwise.
        samples_per_epoch: Samples in one pass over the training data. With
            the batch size it tells how big the last, short batch is.
        flops_per_sample: Training FLOPs per sample (forward and backward),
            overriding the count from the graph.
        peak_flops: Peak FLOP/s of one replica's device, for devices not in the
            table (CPUs, MIG slices, other GPUs) or to override it.
        per_worker_runs: Whether a worker other than the chief writes its own
            run (`log_dir/worker_k/train`). `None`: yes in jobs of up to 16
            workers; above that only the chief writes.
        epoch_logs: Whether each epoch's `throughput/samples_per_sec`,
            `throughput/steady_samples_per_sec` and `throughput/mfu` (where
            measured) are added to Keras' epoch `logs`, so that `History`, the
            progress bar, `CSVLogger` and any callback after this one in the
            list (W&B's, MLflow's) record them.
        tokens_per_sample: Tokens per sample (a text model's sequence
            length): logs `throughput/tokens_per_sec`, samples/s times it.

    Raises:
        TypeError: An argument has the wrong type (e.g. `batch_size="64"`, or
            a `log_dir` that is not a path).
        ValueError: A number is out of range, the `log_dir` is empty, or both
            `every_n_steps` and `every_s` are given.

    Attributes:
        summary: After `fit`: totals and mean rates (see
            `keras_gpu.meters.throughput.ThroughputMeter.summary`), and
            `flops_uncounted_ops`: the ops whose matrix products the FLOP
            count left out (TFLOP/s and MFU are then lower bounds, marked
            `>=` in the end-of-fit line); empty when none.
        async_safe: True: Keras may run `on_train_batch_end` on its thread
            pool (see above).

    Examples:
        >>> import tempfile
        >>> import numpy as np
        >>> import keras
        >>> import keras_gpu
        >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        >>> model.compile(optimizer="sgd", loss="mse")
        >>> x, y = np.zeros((14, 4), "float32"), np.zeros((14, 1), "float32")
        >>> with tempfile.TemporaryDirectory() as log_dir:
        ...     throughput = keras_gpu.ThroughputLogger(log_dir, every_n_steps=2)
        ...     _ = model.fit(x, y, batch_size=4, epochs=1, callbacks=[throughput], verbose=0)
        >>> # the last batch holds 2 samples
        >>> throughput.summary["steps"], throughput.summary["samples"]
        (4, 14)

    """

    async_safe = True

    def __init__(
        self,
        log_dir: str | os.PathLike,
        *,
        every_n_steps: int | None = None,
        every_s: float | None = None,
        batch_size: int | None = None,
        samples_per_epoch: int | None = None,
        flops_per_sample: float | None = None,
        peak_flops: float | None = None,
        per_worker_runs: bool | None = None,
        epoch_logs: bool = True,
        tokens_per_sample: float | None = None,
    ) -> None:
        super().__init__(log_dir, per_worker_runs)
        self.epoch_logs = check_bool("epoch_logs", epoch_logs)
        self.every_n_steps = check_positive("every_n_steps", every_n_steps, integer=True, allow_none=True)
        # keras_gpu.callbacks() checked the every_s it forwards.
        self.every_s = check_positive("every_s", every_s, allow_none=True)
        if every_n_steps is not None and every_s is not None:
            raise ValueError(
                "Pass only one of `every_n_steps` (windows by steps) and `every_s` (windows by time). "
                f"Received: every_n_steps={every_n_steps!r}, every_s={every_s!r}"
            )
        self.batch_size = check_positive("batch_size", batch_size, integer=True, allow_none=True)
        self.samples_per_epoch = check_positive("samples_per_epoch", samples_per_epoch, integer=True, allow_none=True)
        self.flops_per_sample = check_positive("flops_per_sample", flops_per_sample, allow_none=True)
        self.peak_flops = check_positive("peak_flops", peak_flops, allow_none=True)
        self.tokens_per_sample = check_positive("tokens_per_sample", tokens_per_sample, allow_none=True)
        self.summary: dict[str, Any] | None = None
        self._fit: _ThroughputFit | None = None
        self._next_check: float = _INF  # the next batch end that does anything (inf outside an epoch)
        self._last_batch = -1  # Keras' index of the latest batch end taken
        self._last_end_t = _INF  # when it ran, where batch ends run on Keras' pool (else not read)
        self._begun = -1  # Keras' index of the latest batch begin (the training thread's)
        # JAX's and PyTorch's batch counter; its counts read at batch begins, by the last batch they cover.
        self._batch_counter: Any = None
        self._counts: dict[int, tuple[int | None, int | None]] = {}
        self._looking: int | None = None  # the batch end being looked at
        # Batch ends may run on Keras' thread pool, concurrently: every reader and writer of the fit's state
        # after `on_train_begin` holds it.
        self._lock = threading.RLock()  # re-entered by a compile the FLOP count's trace reports
        self._in_order = False  # batch ends on the training thread only (TensorFlow's backend): no lock needed
        self._once = process_once()  # its hints appear once per process, however many fits

    # -- Keras hooks ------------------------------------------------------------

    def set_model(self, model):
        super().set_model(model)
        # Before `fit` builds its train function: a counting probe must be in the step that function runs.
        if self.batch_size is not None:
            return
        try:
            _setup.install_probe(model)
        except Exception as exc:  # noqa: BLE001 - a monitoring failure must not stop training
            logger.debug("keras-gpu: ThroughputLogger could not install its sample count: %s: %s", type(exc).__name__, exc)

    def on_train_begin(self, logs=None):
        t0 = time.perf_counter()
        self._close_fit()  # a fit that raised left its compile watch open
        self.summary = None
        self._open()
        self._in_order = backend.batch_ends_in_order()
        try:
            self._fit = self._start_fit(t0)
        except Exception as exc:  # noqa: BLE001 - a monitoring failure must not stop training
            logger.warning(
                "keras-gpu: ThroughputLogger is off for this fit: setting it up failed (%s: %s).", type(exc).__name__, exc
            )

    def on_epoch_begin(self, epoch, logs=None):
        fit = self._fit
        if fit is None:
            return
        t = time.perf_counter()
        with self._lock:  # the previous epoch's batch ends all ran (Keras waits for them at its end)
            # The previous epoch ends, and this one starts, at the same instant: the
            # work below (a write, a step-count read) is wall time of this epoch.
            self._write_epoch(fit.meter.epoch_close(t))
            if not fit.meter.exact_steps:
                fit.epoch_iterations = read_step(self.model, None)
            if fit.keras_count is not None:
                fit.keras_count.epoch_begin()
            fit.meter.epoch_begin(t, fit.epoch_last)
            self._last_batch = self._begun = -1
            self._last_end_t = _INF
            fit.training, fit.ended = True, False
            fit.validation.clear()
            self._next_check = fit.meter.next_look
            self._counts.clear()  # an epoch stopped early leaves counts its batch ends never looked at
            counter = self._batch_counter
            if counter is not None:
                counter.epoch_begin()
            if fit.clock is not None:  # the training thread times what the steady rate leaves out
                fit.clock.epoch_begin(t, counter() if counter is not None else None)
                watch = fit.meter.compile_watch if fit.compiles is None else -1  # JAX tells its compiles
                fit.new_size_begin = watch + 1 if watch >= 0 else -1

    def on_train_batch_begin(self, batch, logs=None):
        # Always on the training thread, in order and on time: what needs the order of the steps, and the times of
        # the executions the steady rate leaves out, are noted here.
        self._begun = batch
        fit = self._fit
        if fit is None:
            return
        clock = fit.clock
        if clock is not None:  # batch ends run on Keras' pool, late and out of order
            t = time.perf_counter()
            counter = self._batch_counter
            if counter is not None:
                through, counts = counter.taken_in_epoch - 1, counter()  # the batches of this epoch up to `through`
                if through >= self._next_check:  # a batch end the meter looks at
                    with self._lock:
                        self._counts[through] = counts
                left = clock.begin(batch, t, through, counts)
            else:
                left = clock.begin(batch, t)
            if batch == fit.new_size_begin:
                clock.leave_out_current()  # it runs the pass's short last batch, a size new to the fit
            if left is not None:
                with self._lock:
                    fit.meter.leave_out(left)
        if fit.flops_later is not None and _built(self.model):
            with self._lock:  # batch ends on the pool do not count on the training thread
                self._count_flops_now(fit)

    def on_train_batch_end(self, batch, logs=None):
        if self._in_order:  # TensorFlow: Keras runs every batch end on the training thread, in order
            self._last_batch = batch
            if batch >= self._next_check:
                self._check(self._fit, batch)
            return
        # Keras may call this on its thread pool, concurrently and out of order (`async_safe`).
        with self._lock:
            if batch <= self._last_batch:
                return  # a later batch end, taken already, covers this one
            self._last_batch = batch
            self._last_end_t = time.perf_counter()  # off the training thread: an epoch may stop after it
            if batch >= self._next_check:
                self._check(self._fit, batch)

    def on_test_begin(self, logs=None):
        fit = self._fit
        if fit is not None:
            with self._lock:
                fit.training = False  # compiles from here on are validation's
                fit.validation.append([time.perf_counter(), None])

    def on_test_end(self, logs=None):
        fit = self._fit
        if fit is not None:
            with self._lock:
                if fit.validation and fit.validation[-1][1] is None:
                    fit.validation[-1][1] = time.perf_counter()
                    if fit.ended:  # validation after the training phase was closed (an epoch-end callback's)
                        self._add_validation(fit)

    def on_epoch_end(self, epoch, logs=None):
        fit = self._fit
        if fit is not None:
            with self._lock:
                self._end_training_phase(fit)
                if self.epoch_logs and logs is not None:
                    rates = fit.meter.epoch_rates()
                    if rates is not None:
                        logs.update(_epoch_log_values(rates))  # read by History, the progress bar, CSVLogger, ...
        if self._writer is not None:
            # Once per epoch, so that a worker killed later loses no finished epoch.
            self._writer.flush()

    def on_train_end(self, logs=None):
        fit = self._fit
        if fit is not None:
            with self._lock:
                self._end_training_phase(fit)
                t = time.perf_counter()
                self._write_epoch(fit.meter.epoch_close(t))
                summary = self.summary = fit.meter.summary()
                summary["flops_uncounted_ops"] = fit.uncounted
            summary["fit_seconds"] = t - fit.t0  # until the callbacks after this one end (below)

            def log(seconds: float) -> None:
                if seconds == seconds:
                    summary["fit_seconds"] = seconds
                self._log_summary(summary)

            self._at_fit_end(log)
        self._close_fit()
        self._close()

    def _close_fit(self) -> None:
        fit, self._fit, self._next_check = self._fit, None, _INF
        if fit is not None and fit.compiles is not None:
            fit.compiles.close()

    def _compiled(self) -> None:
        """A `CompileWatch`'s callback, on the training thread: the execution begun last compiled."""
        fit = self._fit
        if fit is not None and fit.training and fit.clock is not None:
            fit.clock.leave_out_current()  # timed from its batch begin to the next (the training thread's clock)

    # -- the batch ends that do something ------------------------------------------

    def _check(self, fit: _ThroughputFit, batch: int) -> None:
        """A batch end the meter or a compile asked to look at (`ThroughputMeter.look`), with the lock held."""
        if fit.flops_later is not None and threading.get_ident() == fit.thread:
            self._count_flops_now(fit)  # inside the first execution, which the steady rates leave out
        t = time.perf_counter()
        if fit.keras_count is not None and batch >= fit.keras_count.last_index:
            fit.keras_count.epoch_end()  # the epoch's last step: Keras' count read before anything resets it
        meter = fit.meter
        self._looking = batch
        self._write(meter.look(batch, t))
        self._looking = None
        for through in [b for b in self._counts if b <= batch]:
            del self._counts[through]
        if meter.counter_failed:
            self._counter_failed(fit)
        self._next_check = meter.next_look

    # -- writing ------------------------------------------------------------------

    def _end_training_phase(self, fit: _ThroughputFit) -> None:
        """Close the epoch's training phase at its last batch end (once per epoch), with the lock held.

        Called at the epoch's end, after every batch end of the epoch ran
        (Keras waits for its thread pool there), and at the end of training.
        """
        if fit.ended:
            return
        fit.ended = True
        meter = fit.meter
        epoch_steps = None
        if not meter.exact_steps and fit.epoch_iterations is not None:
            now = read_step(self.model, None)
            epoch_steps = None if now is None else now - fit.epoch_iterations
        now = time.perf_counter()
        if fit.validation:  # an epoch stopped early at a batch end not looked at: it ended before validation began
            now = min(now, fit.validation[0][0])
        now = min(now, self._last_end_t)  # on Keras' pool: when the last batch end ran
        left_open = fit.clock.close() if fit.clock is not None else None
        windows = meter.epoch_end(self._last_batch, now, epoch_steps, left_open)
        self._next_check = _INF
        self._add_validation(fit)
        if meter.counter_failed:
            self._counter_failed(fit)
        if windows:
            self._write(windows)

    @staticmethod
    def _add_validation(fit: _ThroughputFit) -> None:
        """Hand the meter the validations that ended, each from its start or the training phase's end."""
        done = [span for span in fit.validation if span[1] is not None]
        for t0, t1 in done:
            fit.meter.validation(t0, t1)
        fit.validation[:] = [span for span in fit.validation if span[1] is None]

    def _counter_failed(self, fit: _ThroughputFit) -> None:
        if fit.warned_counter:
            return
        fit.warned_counter = True
        reason = fit.keras_count.lost_reason if fit.keras_count is not None else None
        if reason is not None:
            _setup.count_in_step_next(self.model)
            self._once.log(
                logging.WARNING,
                "throughput:keras-count-lost",
                "keras-gpu: ThroughputLogger counts the samples with Keras' loss tracker, which %s, so samples/s is "
                "not logged from here on in this fit (the next fit of this model counts them in its training step); "
                "pass %s to log it.",
                reason,
                call_with(self, "batch_size"),
            )
            return
        self._once.log(
            logging.WARNING,
            "throughput:counter-failed",
            "keras-gpu: ThroughputLogger's sample count saw fewer steps than Keras ran (was the train function built "
            "before the callbacks were set?), so samples/s is not logged from here on; pass %s to log it.",
            call_with(self, "batch_size"),
        )

    def _write(self, events: list[Window | FirstExecution]) -> None:
        writer = self._writer
        if writer is None:
            return
        for event in events:
            if isinstance(event, FirstExecution):
                continue  # logged with the epoch's other times (time/first_step_sec)
            writer.scalars(_rate_values(event, "window"), event.step)

    def _write_epoch(self, times: EpochTimes | None) -> None:
        writer = self._writer
        if times is None or writer is None:
            return
        values = _epoch_values(times)
        writer.scalars(values, times.step)  # flushed by the writer's thread, and when fit ends

    # -- set-up ---------------------------------------------------------------------

    def _start_fit(self, t0: float) -> _ThroughputFit:
        """This fit's meter, built from its data schedule, sample counter and FLOPs, and the fit's state."""
        model = self.model
        strategy = self._strategy()  # None off the TensorFlow backend
        if strategy is not None:
            self._warn_steps_per_execution(strategy)
        data = inspect_fit(model)
        counter = None
        if self.batch_size is None and (data is None or data.batch_size is None or data.last_batch_size is None):
            counter = self._counter(data)
        # JAX's and PyTorch's batch counter counts the batches the training thread took, which may run ahead of
        # the batch ends Keras runs on its pool: it is read at batch begins, on the training thread.
        self._batch_counter = counter if counter is not None and not backend.batch_ends_in_order() else None
        self._counts.clear()
        schedule = _setup.fit_schedule(
            model,
            data,
            batch_size=self.batch_size,
            samples_per_epoch=self.samples_per_epoch,
            counted=counter is not None,
            caller=self,
            once=self._once,
        )
        num_replicas = backend.num_replicas(model)
        devices = list(backend.replica_devices(model))
        flops = peak = None
        later = None
        if schedule.counts_samples or counter is not None:
            if self.flops_per_sample is None and not _built(model):
                # Counting traces the model; on a model not built yet that trace would create its weights, and
                # the training step would then be traced another number of times (and draw seeds taken while
                # tracing differently) than without keras-gpu. The first step builds it; count after it.
                later = (data, devices)
            else:
                flops, peak = self._flops(model, data, devices, num_replicas)
        meter = ThroughputMeter(
            schedule,
            every_n_steps=self.every_n_steps,
            every_s=self.every_s,
            num_replicas=num_replicas,
            flops_per_sample=flops,
            peak_flops=peak,
            initial_step=self._initial_step(),
            counter=self._counts_at_look if self._batch_counter is not None else counter,
            tokens_per_sample=self.tokens_per_sample,
        )
        fit = _ThroughputFit(meter, t0)
        fit.flops_later = later
        if flops is not None:
            fit.uncounted = self._uncounted_ops()
        if not backend.batch_ends_in_order():
            # Batch ends run on Keras' pool, late and out of order: the training thread times the executions left
            # out of the steady rate, and JAX tells which executions compiled.
            fit.clock = BeginClock(every_reading=self._batch_counter is not None)
            meter.left_out_told = True
            fit.compiles = watch_compiles(self._compiled)
        steps = (self.params or {}).get("steps")
        if isinstance(counter, KerasCount):
            fit.keras_count = counter
            fit.epoch_last = counter.last_index
        elif isinstance(steps, int) and not isinstance(steps, bool) and steps > 0:
            fit.epoch_last = steps - 1
        return fit

    def _flops(self, model: Any, data: FitData | None, devices: list[Any], num_replicas: int) -> tuple[Any, Any]:
        """Training FLOPs per sample and the replicas' summed peak FLOP/s (each `None` where unknown)."""
        once = self._once
        flops = _setup.flops_per_sample(model, data, given=self.flops_per_sample, caller=self, once=once)
        peak = None
        if flops is not None:
            peak = _setup.peak_flops_total(model, devices, num_replicas, given=self.peak_flops, caller=self, once=once)
        return flops, peak

    def _count_flops_now(self, fit: _ThroughputFit) -> None:
        """The FLOP count put off at fit's start, once the first step has built the model."""
        data, devices = fit.flops_later
        fit.flops_later = None
        meter = fit.meter
        training, fit.training = fit.training, False  # the count's own trace is no training compile
        try:
            meter.flops_per_sample, meter.peak_flops = self._flops(self.model, data, devices, meter.num_replicas)
            fit.uncounted = self._uncounted_ops()
        except Exception as exc:  # noqa: BLE001 - a monitoring failure must not stop training
            logger.debug("keras-gpu: ThroughputLogger could not count FLOPs: %s: %s", type(exc).__name__, exc)
        finally:
            fit.training = training

    def _counts_at_look(self) -> tuple[int | None, int | None]:
        """The batch counter through the batch end looked at, no batch past it (the meter's counter; lock held).

        Read on the training thread at the batch begin where the counter had taken exactly the batches up to
        that batch end (`on_train_batch_begin`: PyTorch's own begin, JAX's next); else now, where no such
        begin ran: no batch past it has been taken (a begin that would take one stores first, under the same
        lock).
        """
        counts = self._counts.get(self._looking)
        return counts if counts is not None else self._batch_counter()

    def _uncounted_ops(self) -> tuple[str, ...]:
        """The ops the FLOP count of the model left out (its FLOPs are then a lower bound); none when given."""
        if self.flops_per_sample is not None:
            return ()
        return model_flops.flops_uncounted_ops(self.model)

    def _counter(self, data: FitData | None = None) -> Any:
        """Running totals `(steps, samples)` of this fit, global, where the batch size is not known; else `None`."""
        task = self._task
        workers = max(1, task.num_workers) if task is not None else 1
        return _setup.choose_counter(self.model, data, workers=workers)

    def _warn_steps_per_execution(self, strategy: Any) -> None:
        from keras_gpu.setup.keras_compat import warn_steps_per_execution

        spe = getattr(self.model, "steps_per_execution", 1)
        try:
            warn_steps_per_execution(strategy, spe, jit_compile=getattr(self.model, "jit_compile", False) is True)
        except Exception as exc:  # noqa: BLE001 - a diagnostic must not stop training
            logger.debug("keras-gpu: steps_per_execution check failed: %s", exc)

    # -- helpers --------------------------------------------------------------------

    def _log_summary(self, s: dict[str, Any]) -> None:
        fit_time = f"{s['fit_seconds']:.2f} s of fit"
        if not s["measured_seconds"]:
            logger.info(
                "keras-gpu: ThroughputLogger: %d steps in %d epoch(s) and %s; no training step finished, so no rate.",
                s["steps"],
                s["epochs"],
                fit_time,
            )
            return
        rate = f"{s['steps_per_sec']:.2f} steps/s"
        if s["samples_per_sec"] is not None:
            rate = (
                f"{s['samples_per_sec']:.1f} samples/s ({s['samples_per_sec_per_replica']:.1f} per replica), " + rate
            )
        parts = [f"wall-clock training rate {rate}"]
        steady = s["steady_samples_per_sec"] if s["samples_per_sec"] is not None else s["steady_steps_per_sec"]
        if steady is not None:
            unit = "samples/s" if s["samples_per_sec"] is not None else "steps/s"
            parts.append(f"steady state {steady:.1f} {unit} (first execution of each epoch and compiles left out)")
        bound = ">= " if s.get("flops_uncounted_ops") else ""  # FLOPs the count left out: lower bounds
        if s["tflops_per_sec"] is not None:
            parts.append(f"{bound}{s['tflops_per_sec']:.4g} TFLOP/s")
        if s["mfu"] is not None:
            steady_mfu = "" if s["steady_mfu"] is None else f"steady {bound}{100 * s['steady_mfu']:.2f}%, "
            parts.append(f"MFU {steady_mfu}wall clock {bound}{100 * s['mfu']:.2f}%")
        if bound and s["tflops_per_sec"] is not None:
            parts.append(f"lower bounds: the FLOP count leaves out {', '.join(s['flops_uncounted_ops'])}")
        samples = "" if s["samples"] is None else f", {s['samples']} samples"
        logger.info(
            "keras-gpu: ThroughputLogger: %s; %d epoch(s), %d steps%s in %s (training %.2f s, validation %.2f s, "
            "other %.2f s).",
            "; ".join(parts),
            s["epochs"],
            s["steps"],
            samples,
            fit_time,
            s["train_seconds"],
            s["validation_seconds"],
            s["other_seconds"],
        )


class _ThroughputFit:
    """What one `fit` call meters with beside its meter: the sources of its counts and the compiles noted.

    The per-batch state is the meter's (`ThroughputMeter.look`). Read and
    written with the callback's lock held, except `training` and
    `compiled_at`'s appends, which the training thread owns.
    """

    __slots__ = (
        "clock", "compiles", "ended", "epoch_iterations", "epoch_last", "flops_later", "keras_count", "meter",
        "new_size_begin", "t0", "thread", "training", "uncounted", "validation", "warned_counter",
    )

    def __init__(self, meter: ThroughputMeter, t0: float) -> None:
        self.meter = meter
        self.t0 = t0  # when fit's callbacks started (on_train_begin)
        self.thread = threading.get_ident()  # the training thread
        self.epoch_last: int | None = None  # Keras' batch index of the epoch's last step, where known
        self.epoch_iterations: int | None = None
        self.warned_counter = False
        self.keras_count: KerasCount | None = None
        self.compiles: CompileWatch | None = None  # the backend's compiles on the training thread, where it tells
        # The training thread's clock of the executions left out of the steady rate, where batch ends run on a pool.
        self.clock: BeginClock | None = None
        self.new_size_begin = -1  # Keras' batch index where the execution that runs a new batch size begins
        self.training = False  # in an epoch's training phase (validation's compiles are not training's)
        self.ended = True  # the epoch's training phase was closed (`_end_training_phase`)
        self.validation: list[list[Any]] = []  # `[start, end or None]` of each validation not yet handed over
        # FLOPs counted after the first step, where the model was not built at fit's start: `(fit data, devices)`.
        self.flops_later: tuple[Any, list[Any]] | None = None
        self.uncounted: tuple[str, ...] = ()  # ops the FLOP count left out: FLOP/s and MFU are lower bounds


def _built(model: Any) -> bool:
    """Whether `model` and the layers it tracks have their weights (a trace of it creates none)."""
    if not getattr(model, "built", False):
        return False
    return all(getattr(layer, "built", True) for layer in getattr(model, "layers", ()) or ())


# -- records as tag values (read back by keras_gpu.output.tag_records) -----------------


def _rate_values(record: Any, kind: str) -> dict[str, float]:
    """The rates `record` holds for the tags of `kind` (`keras_gpu.output.tags.rates`), by tag name; where measured."""
    return {t.name(): v for t in _tags.rates(kind) if (v := getattr(record, t.field)) is not None}


def _epoch_values(times: EpochTimes) -> dict[str, float]:
    """An epoch's times (and its steady rates, where known) by tag name."""
    return {
        _tags.EPOCH_SEC.name(): times.epoch_sec,
        _tags.TRAIN_SEC.name(): times.train_sec,
        _tags.FIRST_STEP_SEC.name(): times.first_step_sec,
        _tags.VALIDATION_SEC.name(): times.validation_sec,
        _tags.OTHER_EPOCH_SEC.name(): times.other_sec,
        **_rate_values(times, "epoch"),
    }


def _epoch_log_values(rates: EpochRates) -> dict[str, float]:
    """An epoch's rates for Keras' epoch `logs` (History, the progress bar, CSVLogger), by tag name; where measured."""
    return {t.name(): v for t in _tags.TAGS if t.epoch_log and (v := getattr(rates, t.field)) is not None}
