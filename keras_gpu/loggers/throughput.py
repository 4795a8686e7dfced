"""`ThroughputLogger`: samples/s, steps/s, per-replica rates, TFLOP/s and MFU in TensorBoard."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from keras_gpu import flops as _flops
from keras_gpu._fit_introspection import FitData, inspect_fit
from keras_gpu._log import logger
from keras_gpu.loggers._base import LoggingCallback, check_positive
from keras_gpu.throughput import DataSchedule, FirstExecution, ThroughputMeter, Window

__all__ = ["ThroughputLogger"]

_INF = float("inf")
_PREFIX = "throughput/"


class ThroughputLogger(LoggingCallback):
    """Logs training throughput, achieved FLOP/s and MFU to TensorBoard.

    One point per logging window, on the global-step axis (the optimizer's
    iteration count when `fit` starts, plus the steps counted since). Tags:

    * `throughput/samples_per_sec`: samples per second, all replicas on all
      workers (the global batch size times steps per second).
    * `throughput/steps_per_sec`: training steps per second.
    * `throughput/samples_per_sec_per_replica`: samples per second per
      replica, i.e. the global rate divided by the number of replicas.
    * `throughput/replica_<i>_<TYPE>_<n>/samples_per_sec`: one series per
      replica of this worker, named by its global replica index and device
      (e.g. `replica_0_GPU_0`; in multi-worker training the index is
      `worker_rank * replicas_per_worker + local_index`). In synchronous data
      parallelism every replica processes the same share of each global batch
      (for a short last batch, the mean share), so these equal the
      per-replica rate; they show which devices take part.
    * `throughput/tflops_per_sec`: achieved model FLOP/s of all replicas, in
      TFLOP/s (1e12 FLOP/s): training FLOPs per sample times samples/s.
    * `throughput/mfu`: model FLOPs utilisation, 0..1: achieved FLOP/s over
      the summed dense peak FLOP/s of all replica devices for the model's
      compute dtype. Logged only where the peak is known (a GPU in the
      table of :mod:`keras_gpu.flops`, or `peak_flops`).
    * `throughput/first_step_sec`: seconds from the start of each epoch to the
      end of its first execution (tracing, warm-up, iterator creation), once
      per epoch. This first execution is kept out of every rate: rates are
      measured from its end. Its steps still count.

    Samples are counted exactly, including a short last batch and
    `steps_per_execution > 1`. The batch size is read from the running `fit`
    (arrays, and `tf.data` datasets with a static batch dimension); when it
    cannot be known, one warning names the argument to pass and only steps/s
    and `first_step_sec` are logged, never guessed numbers. For finite data of
    unknown length (e.g. `tf.data` after `filter`) with `steps_per_execution >
    1`, the epoch's last execution may stop early without saying so: windows
    then close one execution late, and the last execution's step count is
    taken from the optimizer's iteration count at the end of the epoch.

    Training FLOPs per sample are 3 x the forward FLOPs, counted once per model
    from its traced forward graph (multiply-add = 2 FLOPs, matmul-like ops
    only; see :mod:`keras_gpu.flops`). Each worker logs its own view to its own
    run directory. The training thread pays one timestamp and two comparisons
    per batch; everything else happens once per window, and the time spent
    writing a point is left out of the next window's rates.

    At the end of every epoch the current, partial window is closed, so short
    epochs still get a point. At the end of training one INFO line gives the
    mean rates over the whole run, and :attr:`summary` holds the numbers.

    Args:
        log_dir: Directory shared with Keras' `TensorBoard` callback; this
            worker writes to its `train` run (see `keras_gpu.callbacks`).
        every_n_steps: Close a window every this many training steps.
        every_s: Close a window every this many seconds (default: 5.0 when
            `every_n_steps` is not given). Pass only one of the two.
        batch_size: Samples per step, all replicas on all workers (the batch
            size given to `fit`). Overrides what is read from the data; needed
            for inputs the callback cannot read (generators, `PyDataset`,
            `tf.data` without a static batch dimension).
        samples_per_epoch: Samples in one pass over the training data. With
            the batch size it tells how big the last, short batch is.
        flops_per_sample: Training FLOPs per sample (forward and backward),
            overriding the count from the graph.
        peak_flops: Peak FLOP/s of one replica's device, for devices not in the
            table (CPUs, MIG slices, other GPUs) or to override it.

    Attributes:
        summary: After `fit`: totals and mean rates (see
            :meth:`keras_gpu.throughput.ThroughputMeter.summary`).
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
    ) -> None:
        super().__init__(log_dir)
        self.every_n_steps = check_positive("every_n_steps", every_n_steps, integer=True, allow_none=True)
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
        self._meter: ThroughputMeter | None = None
        self._replica_tags: tuple[str, ...] = ()
        self._said: set[str] = set()
        self._next_batch: float = _INF
        self._next_time: float = _INF
        self._last_batch = -1
        self._last_t = 0.0
        self._epoch_iterations: int | None = None

    # -- Keras hooks ------------------------------------------------------------

    def on_train_begin(self, logs=None):
        self._meter = None
        self._next_batch = self._next_time = _INF
        self.summary = None
        self._open()
        try:
            self._meter = self._build_meter()
        except Exception as exc:  # noqa: BLE001 - a monitoring failure must not stop training
            logger.warning(
                "keras-gpu: ThroughputLogger is off for this fit: setting it up failed (%s: %s).", type(exc).__name__, exc
            )

    def on_epoch_begin(self, epoch, logs=None):
        meter = self._meter
        if meter is None:
            return
        if not meter.schedule.exact_steps:
            self._epoch_iterations = self._iterations()
        t = time.perf_counter()
        meter.epoch_begin(t)
        self._last_batch, self._last_t = -1, t
        self._next_batch, self._next_time = meter.next_batch, meter.next_time

    def on_train_batch_end(self, batch, logs=None):
        t = time.perf_counter()
        if batch >= self._next_batch or t >= self._next_time:
            self._window_boundary(batch, t)
        self._last_batch = batch
        self._last_t = t

    def on_epoch_end(self, epoch, logs=None):
        meter = self._meter
        if meter is None:
            return
        epoch_steps = None
        if not meter.schedule.exact_steps and self._epoch_iterations is not None:
            now = self._iterations()
            epoch_steps = None if now is None else now - self._epoch_iterations
        self._emit(meter.epoch_end(self._last_batch, self._last_t, epoch_steps))
        self._next_batch = self._next_time = _INF
        if self._writer is not None:
            self._writer.flush()

    def on_train_end(self, logs=None):
        meter = self._meter
        if meter is not None:
            self.summary = meter.summary()
            self._log_summary(self.summary)
        self._meter = None
        self._next_batch = self._next_time = _INF
        self._close()

    # -- window handling ----------------------------------------------------------

    def _window_boundary(self, batch: int, t: float) -> None:
        meter = self._meter
        if meter is None:
            self._next_batch = self._next_time = _INF
            return
        self._emit(meter.execution_end(batch, t, self._last_batch, self._last_t))
        # Writing is logging, not training: keep its time out of the next window.
        meter.exclude(time.perf_counter() - t)
        self._next_batch, self._next_time = meter.next_batch, meter.next_time

    def _emit(self, events: list[Window | FirstExecution]) -> None:
        writer = self._writer
        if writer is None:
            return
        for event in events:
            if isinstance(event, FirstExecution):
                writer.scalars({_PREFIX + "first_step_sec": event.seconds}, event.step)
                continue
            values = {_PREFIX + "steps_per_sec": event.steps_per_sec}
            if event.samples_per_sec is not None:
                values[_PREFIX + "samples_per_sec"] = event.samples_per_sec
                values[_PREFIX + "samples_per_sec_per_replica"] = event.samples_per_sec_per_replica
                for tag in self._replica_tags:
                    values[tag] = event.samples_per_sec_per_replica
            if event.tflops_per_sec is not None:
                values[_PREFIX + "tflops_per_sec"] = event.tflops_per_sec
            if event.mfu is not None:
                values[_PREFIX + "mfu"] = event.mfu
            writer.scalars(values, event.step)

    # -- set-up ---------------------------------------------------------------------

    def _build_meter(self) -> ThroughputMeter:
        model = self.model
        strategy = self._strategy()
        self._warn_steps_per_execution(strategy)
        fit = inspect_fit(model)
        schedule = self._schedule(fit)
        num_replicas = int(getattr(strategy, "num_replicas_in_sync", 1) or 1)
        devices = _local_replica_devices(strategy)
        rank = (self._task.worker_index or 0) if self._task is not None else 0
        self._replica_tags = _replica_tags(rank, devices)
        flops_per_sample = None
        if schedule.counts_samples:
            flops_per_sample = self._flops_per_sample(model, fit)
        peak = None
        if flops_per_sample is not None:
            peak = self._peak_total(model, devices, num_replicas)
        return ThroughputMeter(
            schedule,
            every_n_steps=self.every_n_steps,
            every_s=self.every_s,
            num_replicas=num_replicas,
            flops_per_sample=flops_per_sample,
            peak_flops=peak,
            initial_step=self._initial_step(),
        )

    def _schedule(self, fit: FitData | None) -> DataSchedule:
        data = fit or FitData(steps_per_execution=_int_attr(self.model, "steps_per_execution") or 1)
        batch = self.batch_size or data.batch_size
        last, batches = data.last_batch_size, data.batches_per_pass
        if self.batch_size is not None and data.batch_size is not None and self.batch_size != data.batch_size:
            self._say(
                logging.WARNING,
                "batch-mismatch",
                "keras-gpu: ThroughputLogger(batch_size=%d) differs from the batch size of the training data (%d); "
                "using %d. `batch_size` is the global batch: all replicas on all workers.",
                self.batch_size,
                data.batch_size,
                self.batch_size,
            )
            last = self.batch_size
        elif self.batch_size is not None and last is None:
            last = self.batch_size
            if not data.infinite and self.samples_per_epoch is None:
                self._say(
                    logging.INFO,
                    "assume-full",
                    "keras-gpu: ThroughputLogger assumes every batch holds batch_size=%d samples; pass "
                    "`samples_per_epoch=` too if the last batch of each epoch is shorter.",
                    self.batch_size,
                )
        if self.samples_per_epoch is not None and batch is not None:
            if data.infinite:
                self._say(
                    logging.WARNING,
                    "samples-infinite",
                    "keras-gpu: ThroughputLogger ignores samples_per_epoch=%d: the training data repeats forever, "
                    "so every batch is full.",
                    self.samples_per_epoch,
                )
            else:
                explicit = DataSchedule.from_samples(self.samples_per_epoch, batch)
                if batches is not None and batches != explicit.batches_per_pass:
                    self._say(
                        logging.WARNING,
                        "samples-mismatch",
                        "keras-gpu: ThroughputLogger(samples_per_epoch=%d) with batch size %d gives %d batches per "
                        "pass, but the training data has %d; using samples_per_epoch.",
                        self.samples_per_epoch,
                        batch,
                        explicit.batches_per_pass,
                        batches,
                    )
                last, batches = explicit.last_batch_size, explicit.batches_per_pass
        if batch is None or last is None:
            batch = last = None
            self._say(
                logging.WARNING,
                "no-batch",
                "keras-gpu: ThroughputLogger cannot tell how many samples each step processes (training data: %s%s), "
                "so it logs only steps/s. Pass `batch_size=` (the global batch size, all replicas) to "
                "ThroughputLogger, and `samples_per_epoch=` if the last batch of each epoch is short, to log "
                "samples/s, TFLOP/s and MFU.",
                data.adapter,
                " without a static batch dimension" if data.adapter == "TFDatasetAdapter" else "",
            )
        return DataSchedule(
            batch_size=batch,
            last_batch_size=last,
            batches_per_pass=batches,
            infinite=data.infinite and batches is None,
            steps_per_epoch=data.steps_per_epoch,
            steps_per_execution=data.steps_per_execution,
        )

    def _flops_per_sample(self, model: Any, fit: FitData | None) -> float | None:
        if self.flops_per_sample is not None:
            return float(self.flops_per_sample)
        value = _flops.training_flops_per_sample(model)
        if value is None and fit is not None and fit.x_spec is not None:
            value = _flops.training_flops_per_sample(model, fit.x_spec)
        if value is None:
            self._say(
                logging.INFO,
                "no-flops",
                "keras-gpu: ThroughputLogger could not count the FLOPs of model %r from its graph, so "
                "throughput/tflops_per_sec and throughput/mfu are not logged; pass `flops_per_sample=` "
                "(training FLOPs per sample, about 3x the forward FLOPs) to log them.",
                getattr(model, "name", "?"),
            )
        return value

    def _peak_total(self, model: Any, devices: list[str], num_replicas: int) -> float | None:
        if self.peak_flops is not None:
            return float(self.peak_flops) * num_replicas
        kinds = {_device_kind(d) for d in devices}
        dtype = _flops.compute_dtype(model)
        if kinds != {"GPU"}:
            self._say(
                logging.INFO,
                "no-peak",
                "keras-gpu: ThroughputLogger logs no throughput/mfu: no peak FLOP/s is known for %s devices. "
                "Pass `peak_flops=` (peak FLOP/s of one replica's device) to log it.",
                "/".join(sorted(kinds)),
            )
            return None
        local, names = _gpu_peak_local(devices, dtype)
        if local is None:
            self._say(
                logging.INFO,
                "no-peak",
                "keras-gpu: ThroughputLogger logs no throughput/mfu: no %s peak FLOP/s is known for %s. "
                "Pass `peak_flops=` (peak FLOP/s of one replica's device) to log it.",
                dtype,
                ", ".join(sorted(set(names))) or "this GPU",
            )
            return None
        return local * max(1, num_replicas // max(1, len(devices)))

    def _warn_steps_per_execution(self, strategy: Any) -> None:
        from keras_gpu._keras_compat import warn_steps_per_execution

        spe = getattr(self.model, "steps_per_execution", 1)
        try:
            warn_steps_per_execution(strategy, spe, jit_compile=getattr(self.model, "jit_compile", False) is True)
        except Exception as exc:  # noqa: BLE001 - a diagnostic must not stop training
            logger.debug("keras-gpu: steps_per_execution check failed: %s", exc)

    # -- helpers --------------------------------------------------------------------

    def _iterations(self) -> int | None:
        """The optimizer's step count (a device read: only at epoch boundaries)."""
        optimizer = getattr(self.model, "optimizer", None)
        iterations = getattr(optimizer, "iterations", None)
        if iterations is None:
            return None
        try:
            import keras

            return int(keras.ops.convert_to_numpy(iterations))
        except Exception:  # noqa: BLE001
            return None

    def _say(self, level: int, key: str, msg: str, *args: Any) -> None:
        """Log a message once per callback."""
        if key not in self._said:
            self._said.add(key)
            logger.log(level, msg, *args)

    def _log_summary(self, s: dict[str, Any]) -> None:
        if not s["measured_seconds"]:
            logger.info(
                "keras-gpu: ThroughputLogger: %d steps in %d epoch(s), too few to measure a rate beyond the "
                "first execution of each epoch.",
                s["steps"],
                s["epochs"],
            )
            return
        parts = [f"{s['steps_per_sec']:.2f} steps/s"]
        if s["samples_per_sec"] is not None:
            parts.insert(0, f"{s['samples_per_sec']:.1f} samples/s ({s['samples_per_sec_per_replica']:.1f} per replica)")
        if s["tflops_per_sec"] is not None:
            parts.append(f"{s['tflops_per_sec']:.4g} TFLOP/s")
        if s["mfu"] is not None:
            parts.append(f"MFU {100 * s['mfu']:.2f}%")
        samples = "" if s["samples"] is None else f", {s['samples']} samples"
        logger.info(
            "keras-gpu: ThroughputLogger: %d epoch(s), %d steps%s; mean over the run (first execution of each "
            "epoch excluded): %s.",
            s["epochs"],
            s["steps"],
            samples,
            ", ".join(parts),
        )


def _int_attr(obj: Any, name: str) -> int | None:
    value = getattr(obj, name, None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _local_replica_devices(strategy: Any) -> list[str]:
    """Device strings of this worker's replicas, in replica order."""
    extended = getattr(strategy, "extended", None)
    devices: list[str] = []
    try:
        devices = [str(d) for d in extended.worker_devices]
    except (AttributeError, RuntimeError, NotImplementedError, TypeError):
        devices = [str(d) for d in (getattr(extended, "_devices", None) or ())]
    if not devices:
        import tensorflow as tf

        gpus = tf.config.list_logical_devices("GPU")
        devices = [gpus[0].name if gpus else "/device:CPU:0"]
    return devices


def _device_spec(device: str) -> tuple[str, int]:
    import tensorflow as tf

    try:
        spec = tf.DeviceSpec.from_string(device)
    except (ValueError, TypeError):
        return "device", 0
    return (spec.device_type or "device").upper(), int(spec.device_index or 0)


def _device_kind(device: str) -> str:
    return _device_spec(device)[0]


def _device_label(device: str) -> str:
    kind, index = _device_spec(device)
    return f"{kind}_{index}"


def _replica_tags(worker_rank: int, devices: list[str]) -> tuple[str, ...]:
    """Per-replica tags: global replica index (rank * replicas per worker + local index) and device."""
    return tuple(
        f"{_PREFIX}replica_{worker_rank * len(devices) + i}_{_device_label(d)}/samples_per_sec"
        for i, d in enumerate(devices)
    )


def _gpu_peak_local(devices: list[str], dtype: str) -> tuple[float | None, list[str]]:
    """Summed peak FLOP/s of the GPUs this worker's replicas run on, and the GPU names."""
    import tensorflow as tf

    names = []
    for device in tf.config.get_visible_devices("GPU"):  # in logical-device order
        try:
            names.append(str(tf.config.experimental.get_device_details(device).get("device_name", "")))
        except Exception:  # noqa: BLE001
            names.append("")
    n_logical = len(tf.config.list_logical_devices("GPU"))
    return _sum_gpu_peaks([_device_spec(d)[1] for d in devices], names, n_logical, dtype)


def _sum_gpu_peaks(
    indices: list[int], names: list[str], n_logical: int, dtype: str
) -> tuple[float | None, list[str]]:
    """Summed peak of the GPUs used by replicas on logical GPUs `indices`.

    With one logical GPU per visible GPU, replica `GPU:i` runs on GPU `i`.
    With virtual GPUs (more logical than physical), replicas share GPUs; each
    GPU in use counts once, assuming replicas fill GPUs in order.
    """
    if not names:
        return None, []
    if n_logical == len(names):
        used = [names[i] if 0 <= i < len(names) else "" for i in indices]
    else:
        used = names[: min(len(indices), len(names))]
    peaks = [_flops.peak_flops(n, dtype) for n in used]
    if not peaks or any(p is None for p in peaks):
        return None, used
    return float(sum(peaks)), used
