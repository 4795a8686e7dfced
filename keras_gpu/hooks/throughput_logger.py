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
import time
from typing import Any

from keras_gpu.core import backend
from keras_gpu.core.checks import check_bool, check_positive
from keras_gpu.core.log import call_with, logger, process_once
from keras_gpu.hooks import throughput_setup as _setup
from keras_gpu.hooks._base import LoggingCallback, read_step
from keras_gpu.hooks.fit_introspection import FitData, inspect_fit
from keras_gpu.hooks.throughput_setup import CompileWatch, KerasCount, watch_compiles
from keras_gpu.meters.throughput import ThroughputMeter
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
    run directory. The training thread pays a store and a comparison
    per batch; everything else happens once per window, and a point is handed
    to the writer's background thread.

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

    Raises:
        TypeError: An argument has the wrong type (e.g. `batch_size="64"`, or
            a `log_dir` that is not a path).
        ValueError: A number is out of range, the `log_dir` is empty, or both
            `every_n_steps` and `every_s` are given.

    Attributes:
        summary: After `fit`: totals and mean rates (see
            `keras_gpu.meters.throughput.ThroughputMeter.summary`).

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
        self.summary: dict[str, Any] | None = None
        self._count_with: str | None = None  # "probe": never Keras' own count (benchmarks compare the two)
        self._fit: _ThroughputFit | None = None
        self._next_check: float = _INF  # the next batch end that does anything (inf outside an epoch)
        self._last_batch = -1  # Keras' index of the last batch end
        self._once = process_once()  # its hints appear once per process, however many fits

    # -- Keras hooks ------------------------------------------------------------

    def set_model(self, model):
        super().set_model(model)
        # Before `fit` builds its train function: a counting probe must be in the step that function runs.
        if self.batch_size is not None:
            return
        try:
            _setup.install_probe(model, probe_only=self._count_with == "probe")
        except Exception as exc:  # noqa: BLE001 - a monitoring failure must not stop training
            logger.debug("keras-gpu: ThroughputLogger could not install its sample count: %s: %s", type(exc).__name__, exc)

    def on_train_begin(self, logs=None):
        t0 = time.perf_counter()
        self._close_fit()  # a fit that raised left its compile watch open
        self.summary = None
        self._open()
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
        # The previous epoch ends, and this one starts, at the same instant: the
        # work below (a write, a step-count read) is wall time of this epoch.
        self._write_epoch(fit.meter.epoch_close(t))
        if not fit.meter.exact_steps:
            fit.epoch_iterations = read_step(self.model, None)
        if fit.keras_count is not None:
            fit.keras_count.epoch_begin()
        fit.meter.epoch_begin(t)
        self._last_batch = fit.checked_batch = fit.prev_batch = -1
        fit.checked_t = fit.prev_t = t
        fit.next_batch, fit.next_time = fit.meter.next_batch, fit.meter.next_time
        fit.watch = fit.meter.compile_watch
        if fit.compiles is not None:
            fit.compiles_seen = fit.compiles.count  # compiles in validation and epoch-end work are not training's
            if fit.epoch_last < _INF:  # time the batch end before the epoch's last execution (a short batch?)
                fit.watch = int(fit.epoch_last) - fit.meter.schedule.steps_per_execution
        self._next_check = 0  # the first execution

    def on_train_batch_end(self, batch, logs=None):
        # The training thread's whole per-batch cost: a store and a comparison.
        # On the callback itself, not on the fit's state: one object touched (inf outside a fit).
        self._last_batch = batch
        if batch >= self._next_check:
            self._check(self._fit, batch)

    def on_test_begin(self, logs=None):
        if self._fit is not None:
            self._end_training_phase(self._fit)
            self._fit.meter.validation_begin(time.perf_counter())

    def on_test_end(self, logs=None):
        if self._fit is not None:
            self._fit.meter.validation_end(time.perf_counter())

    def on_epoch_end(self, epoch, logs=None):
        fit = self._fit
        if fit is not None:
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
            self._end_training_phase(fit)
            t = time.perf_counter()
            self._write_epoch(fit.meter.epoch_close(t))
            summary = self.summary = fit.meter.summary()
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

    def _compiled(self) -> None:  # a CompileWatch's callback, on the training thread: look at the next batch end
        self._next_check = 0

    # -- the batch ends that do something ------------------------------------------

    def _check(self, fit: _ThroughputFit, batch: int) -> None:
        """A batch end the fit asked for: a window's end, the epoch's last step, or a look at the clock.

        Windows by time (`every_s`) close at the first batch end at or after
        their end: the clock is read at batch ends chosen from the pace so far,
        each halfway to the window's end in steps, so a few reads per window
        find it within a step. Where the epoch's length is unknown, every batch
        end reads the clock (its last batch end is the training phase's end).
        """
        if fit.flops_later is not None:
            self._count_flops_now(fit)  # inside the first execution, which the steady rates leave out
        t = time.perf_counter()
        fit.prev_batch, fit.prev_t = fit.checked_batch, fit.checked_t
        fit.checked_batch, fit.checked_t = batch, t
        if batch >= fit.epoch_last and fit.keras_count is not None:
            fit.keras_count.epoch_end()  # the epoch's last step: Keras' count read before anything resets it
        if (compiles := fit.compiles) is not None:  # JAX's compiles since the last look (a host counter: cheap)
            (fit.meter.execution_compiled if compiles.count != fit.compiles_seen else fit.meter.account)(batch, t)
        if batch >= fit.next_batch or t >= fit.next_time:
            self._write(fit.meter.execution_end(batch, t, fit.prev_batch, fit.prev_t))
            fit.next_batch, fit.next_time = fit.meter.next_batch, fit.meter.next_time
            if fit.meter.counter_failed:
                self._counter_failed(fit)
        if compiles is not None:
            fit.compiles_seen = compiles.count  # after this look's own work (a FLOP count traces)
        self._next_check = self._next_batch_end(fit, batch, t)

    @staticmethod
    def _next_batch_end(fit: _ThroughputFit, batch: int, t: float) -> float:
        if fit.epoch_last == _INF:
            return batch + 1
        nxt = min(fit.next_batch, fit.epoch_last)
        if fit.watch > batch:
            nxt = min(nxt, fit.watch)
        if fit.next_time < _INF:
            steps, seconds = batch - fit.prev_batch, t - fit.prev_t
            ahead = 1
            if steps > 0 and seconds > 0:
                ahead = max(1, int((fit.next_time - t) * steps / seconds / 2))
            nxt = min(nxt, batch + ahead)
        return nxt

    # -- writing ------------------------------------------------------------------

    def _end_training_phase(self, fit: _ThroughputFit) -> None:
        """Close the epoch's training phase at its last batch end (once per epoch)."""
        meter = fit.meter
        epoch_steps = None
        if not meter.exact_steps and fit.epoch_iterations is not None:
            now = read_step(self.model, None)
            epoch_steps = None if now is None else now - fit.epoch_iterations
        if fit.checked_batch == self._last_batch:
            last_t, prev_batch, prev_t = fit.checked_t, fit.prev_batch, fit.prev_t
        else:  # the epoch stopped early (`stop_training`) at a batch end that was not looked at: now
            last_t, prev_batch, prev_t = time.perf_counter(), fit.checked_batch, fit.checked_t
            if fit.compiles is not None and fit.compiles.count != fit.compiles_seen:
                meter.execution_compiled(self._last_batch, last_t)
        windows = meter.epoch_end(self._last_batch, last_t, epoch_steps, prev_batch, prev_t)
        fit.next_batch = fit.next_time = self._next_check = _INF
        if meter.counter_failed:
            self._counter_failed(fit)
        if windows:
            self._write(windows)

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
            values = _window_values(event)
            writer.scalars(values, event.step)

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
            counter=counter,
        )
        fit = _ThroughputFit(meter, t0)
        fit.flops_later = later
        if counter is not None and meter.exact_steps:  # the schedule cannot tell which execution runs a new shape
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
        try:
            meter.flops_per_sample, meter.peak_flops = self._flops(self.model, data, devices, meter.num_replicas)
        except Exception as exc:  # noqa: BLE001 - a monitoring failure must not stop training
            logger.debug("keras-gpu: ThroughputLogger could not count FLOPs: %s: %s", type(exc).__name__, exc)

    def _counter(self, data: FitData | None = None) -> Any:
        """Running totals `(steps, samples)` of this fit, global, where the batch size is not known; else `None`."""
        task = self._task
        workers = max(1, task.num_workers) if task is not None else 1
        return _setup.choose_counter(self.model, data, workers=workers, probe_only=self._count_with == "probe")

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
        if s["tflops_per_sec"] is not None:
            parts.append(f"{s['tflops_per_sec']:.4g} TFLOP/s")
        if s["mfu"] is not None:
            parts.append(f"MFU {100 * s['mfu']:.2f}%")
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
    """The state of one `fit` call: the meter and the per-batch thresholds it asks for."""

    __slots__ = (
        "checked_batch", "checked_t", "compiles", "compiles_seen", "epoch_iterations", "epoch_last", "flops_later",
        "keras_count", "meter", "next_batch", "next_time", "prev_batch", "prev_t", "t0", "warned_counter", "watch",
    )

    def __init__(self, meter: ThroughputMeter, t0: float) -> None:
        self.meter = meter
        self.t0 = t0  # when fit's callbacks started (on_train_begin)
        self.next_batch: float = _INF
        self.next_time: float = _INF
        self.checked_batch = self.prev_batch = -1  # the last two batch ends looked at, and their times
        self.checked_t = self.prev_t = t0
        self.watch = -1  # the batch end before an execution that may compile (a new batch shape)
        self.epoch_last: float = _INF  # Keras' batch index of the epoch's last step, where known
        self.epoch_iterations: int | None = None
        self.warned_counter = False
        self.keras_count: KerasCount | None = None
        self.compiles: CompileWatch | None = None  # the backend's compiles on the training thread, where it tells
        self.compiles_seen = 0  # its count at the last batch end looked at
        # FLOPs counted after the first step, where the model was not built at fit's start: `(fit data, devices)`.
        self.flops_later: tuple[Any, list[Any]] | None = None


def _built(model: Any) -> bool:
    """Whether `model` and the layers it tracks have their weights (a trace of it creates none)."""
    if not getattr(model, "built", False):
        return False
    return all(getattr(layer, "built", True) for layer in getattr(model, "layers", ()) or ())


# -- records as tag values (read back by keras_gpu.output.tag_records) -----------------


def _window_values(window: Window) -> dict[str, float]:
    """A window's rates by tag name; samples, TFLOP/s and MFU only where they were measured."""
    values = {_tags.STEPS_PER_SEC.name(): window.steps_per_sec}
    if window.samples_per_sec is not None:
        values[_tags.SAMPLES_PER_SEC.name()] = window.samples_per_sec
        values[_tags.SAMPLES_PER_SEC_PER_REPLICA.name()] = window.samples_per_sec_per_replica
    if window.tflops_per_sec is not None:
        values[_tags.TFLOPS_PER_SEC.name()] = window.tflops_per_sec
    if window.mfu is not None:
        values[_tags.MFU.name()] = window.mfu
    return values


def _epoch_values(times: EpochTimes) -> dict[str, float]:
    """An epoch's times (and its steady rates, where known) by tag name."""
    values = {
        _tags.EPOCH_SEC.name(): times.epoch_sec,
        _tags.TRAIN_SEC.name(): times.train_sec,
        _tags.FIRST_STEP_SEC.name(): times.first_step_sec,
        _tags.VALIDATION_SEC.name(): times.validation_sec,
        _tags.OTHER_EPOCH_SEC.name(): times.other_sec,
    }
    if times.steady_steps_per_sec is not None:
        values[_tags.STEADY_STEPS_PER_SEC.name()] = times.steady_steps_per_sec
    if times.steady_samples_per_sec is not None:
        values[_tags.STEADY_SAMPLES_PER_SEC.name()] = times.steady_samples_per_sec
    return values


def _epoch_log_values(rates: EpochRates) -> dict[str, float]:
    """An epoch's rates for Keras' epoch `logs` (History, the progress bar, CSVLogger), by tag name; where measured."""
    values = {}
    if rates.samples_per_sec is not None:
        values[_tags.SAMPLES_PER_SEC.name()] = rates.samples_per_sec
    if rates.steady_samples_per_sec is not None:
        values[_tags.STEADY_SAMPLES_PER_SEC.name()] = rates.steady_samples_per_sec
    if rates.mfu is not None:
        values[_tags.MFU.name()] = rates.mfu
    return values
