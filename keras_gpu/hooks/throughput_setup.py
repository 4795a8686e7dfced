"""What `ThroughputLogger` meters a `fit` with, settled once per fit: the data schedule, the sample counter, the FLOPs.

Never per batch. Each part gives the callback one thing for its
`ThroughputMeter`; where a number cannot
be had, one hint (once per process) names the argument to pass.

* The data schedule (`fit_schedule`): from
  `inspect_fit`'s
  `FitData`, overridden by the
  callback's `batch_size=` and `samples_per_epoch=`.
* The sample counter (`choose_counter`), where the batch size is not
  known before `fit` runs: running totals `(steps, samples)` of the fit, all
  workers' samples, read once per window. The first source that applies:
  on TensorFlow Keras' own count (`KerasCount` over
  `keras_gpu.setup.keras_compat.KerasSampleCount`), which needs an
  epoch whose length Keras knows; on TensorFlow otherwise the counting probe
  in the training step (`keras_gpu.hooks.step_probe` with
  `timing=False`), installed by `install_probe` before `fit` builds its
  train function; on JAX and PyTorch the batches the train function takes
  from `fit`'s epoch iterator
  (`keras_gpu.hooks.fit_introspection.count_batches`). What each costs
  and where it is exact: the `ThroughputLogger` docstring.
* Training FLOPs per sample (`flops_per_sample`) and the replicas'
  summed peak FLOP/s (`peak_flops_total`), for `throughput/tflops_per_sec`
  and `throughput/mfu`.
* The backend's own signal that the training thread compiled
  (`watch_compiles`), for leaving compiles out of the steady rate where
  the samples are counted.

Compiles. A batch shape new to the fit (a generator's short last batch, a dynamic
batch dimension) makes JAX trace and compile the train step again: an
execution that takes hundreds of milliseconds where the others take
milliseconds. Where `fit`'s data schedule cannot know the batch sizes
(`ThroughputLogger` counts the samples instead), the compile is seen here,
by the backend, not guessed from the times:

* JAX: `jax.monitoring`'s duration events `/jax/core/compile/*` (in JAX
  0.10: `jaxpr_trace_duration`, `jaxpr_to_mlir_module_duration`,
  `backend_compile_duration`), sent on the thread that traces and compiles,
  on every cache miss (measured: a Keras 3.15 fit fed by a generator whose
  last batch is short sends all three in the execution that runs it, and
  none in the next epoch). A listener counts the events sent on the training
  thread and calls back: O(1), no clock, no device.
* TensorFlow: nothing to watch without `jit_compile=True`. Keras 3 traces
  the train function once per fit, on the data iterator, whose batch
  dimension is dynamic (measured on Keras 3.15: its tracing count stays 1
  through a short last batch, for generators, `tf.data` and arrays, and the
  last execution takes as long as the others). With `jit_compile=True`, XLA
  compiles for each new shape (measured: 191 ms for the short last batch
  against 2.6 ms per step), and TensorFlow has no public signal of it: not
  watched.
* PyTorch: nothing compiles unless `jit_compile=True` (`torch.compile`),
  whose recompiles have no public event; not watched.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from keras_gpu.core import backend, topology
from keras_gpu.core.log import Once, call_with, logger
from keras_gpu.hooks import step_probe
from keras_gpu.hooks.fit_introspection import FitData, count_batches, inspect_fit
from keras_gpu.meters import model_flops
from keras_gpu.meters.throughput_records import DataSchedule

if TYPE_CHECKING:
    from keras_gpu.setup.keras_compat import KerasSampleCount


__all__ = [
    "JAX_COMPILE_EVENTS",
    "PROBE_NEXT",
    "CompileWatch",
    "KerasCount",
    "choose_counter",
    "count_in_step_next",
    "fit_schedule",
    "flops_per_sample",
    "install_probe",
    "keras_count",
    "peak_flops_total",
    "watch_compiles",
]

# -- the data schedule ------------------------------------------------------------------

def fit_schedule(
    model: Any,
    data: FitData | None,
    *,
    batch_size: int | None,
    samples_per_epoch: int | None,
    counted: bool,
    caller: object,
    once: Once,
) -> DataSchedule:
    """The `DataSchedule` of the running fit.

    Args:
        model: The model in `fit`.
        data: What `inspect_fit` found, or `None`.
        batch_size: The user's global batch size, or `None`.
        samples_per_epoch: The user's samples per pass, or `None`.
        counted: Whether a sample counter counts (then an unknown batch size
            needs no hint: the schedule counts steps only).
        caller: The callback, named in the hints.
        once: Scope of the hints.
    """
    data = data or FitData(steps_per_execution=_int_attr(model, "steps_per_execution") or 1)
    batch = batch_size or data.batch_size
    last = _last_batch(data, batch_size, samples_per_epoch, caller, once)
    batches = data.batches_per_pass
    if samples_per_epoch is not None and batch is not None:
        last, batches = _from_samples(data, batch, samples_per_epoch, last, once, caller)
    if (batch is None or last is None) and counted:
        batch = last = None  # the counter counts
    elif batch is None or last is None:
        batch = last = None
        once.log(
            logging.WARNING,
            f"throughput:no-batch:{data.adapter}",
            "keras-gpu: ThroughputLogger cannot tell how many samples each step processes (training data: %s%s), "
            "so it logs only steps/s. Pass %s (the global batch size, all replicas; `samples_per_epoch=` too "
            "if the last batch of each epoch is short) to log samples/s, TFLOP/s and MFU.",
            data.adapter,
            " without a static batch dimension" if data.adapter == "TFDatasetAdapter" else "",
            call_with(caller, "batch_size"),
        )
    return DataSchedule(
        batch_size=batch,
        last_batch_size=last,
        batches_per_pass=batches,
        infinite=data.infinite and batches is None,
        steps_per_epoch=data.steps_per_epoch,
        steps_per_execution=data.steps_per_execution,
    )


def _last_batch(
    data: FitData, batch_size: int | None, samples_per_epoch: int | None, caller: object, once: Once
) -> int | None:
    """The last batch's size from the data, or from the user's `batch_size` (before `samples_per_epoch`)."""
    last = data.last_batch_size
    if batch_size is None:
        return last
    if data.batch_size is not None and batch_size != data.batch_size:
        once.log(
            logging.WARNING,
            "throughput:batch-mismatch",
            "keras-gpu: %s differs from the batch size of the training data (%d); "
            "using %d. `batch_size` is the global batch: all replicas on all workers.",
            call_with(caller, batch_size=batch_size),
            data.batch_size,
            batch_size,
        )
        return batch_size
    if last is None:
        last = batch_size
        if not data.infinite and samples_per_epoch is None:
            once.log(
                logging.INFO,
                "throughput:assume-full",
                "keras-gpu: ThroughputLogger assumes every batch holds batch_size=%d samples; pass "
                "%s if the last batch of each epoch is shorter.",
                batch_size,
                call_with(caller, "batch_size", "samples_per_epoch"),
            )
    return last


def _from_samples(
    data: FitData, batch: int, samples_per_epoch: int, last: int | None, once: Once, caller: object
) -> tuple[int | None, int | None]:
    """`(last batch size, batches per pass)` with the user's `samples_per_epoch` (ignored for infinite data)."""
    batches = data.batches_per_pass
    if data.infinite:
        once.log(
            logging.WARNING,
            "throughput:samples-infinite",
            "keras-gpu: ThroughputLogger ignores samples_per_epoch=%d: the training data repeats forever, "
            "so every batch is full.",
            samples_per_epoch,
        )
        return last, batches
    explicit = DataSchedule.from_samples(samples_per_epoch, batch)
    if batches is not None and batches != explicit.batches_per_pass:
        once.log(
            logging.WARNING,
            "throughput:samples-mismatch",
            "keras-gpu: %s with batch size %d gives %d batches per "
            "pass, but the training data has %d; using samples_per_epoch.",
            call_with(caller, samples_per_epoch=samples_per_epoch),
            batch,
            explicit.batches_per_pass,
            batches,
        )
    return explicit.last_batch_size, explicit.batches_per_pass


def _int_attr(obj: Any, name: str) -> int | None:
    value = getattr(obj, name, None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


# -- the sample counter -----------------------------------------------------------------

#: Set on a model whose Keras count could not be trusted in a fit: its next fit counts in the step.
PROBE_NEXT = "_keras_gpu_count_in_step"


def keras_count(model: Any, data: FitData | None, *, probe_only: bool = False) -> KerasSampleCount | None:
    """Keras' own sample count, where it can be read exactly at the epoch's last batch end; else `None`.

    That needs Keras' default TensorFlow training step and an epoch whose
    length Keras knows (its last batch end is where the count is read:
    validation and callbacks calling `evaluate` reset it after that). A
    model whose count was lost in an earlier fit (reset within an epoch,
    or past 2**24 samples per replica and epoch) counts with the probe, and
    so does every model with `probe_only`.
    """
    if probe_only or data is None or data.num_batches is None:
        return None
    if getattr(model, PROBE_NEXT, False):
        return None
    from keras_gpu.setup.keras_compat import keras_sample_count

    return keras_sample_count(model)


def install_probe(model: Any, *, probe_only: bool = False) -> None:
    """Install the counting probe on `model` where the coming `fit` needs it (TensorFlow only).

    Call it from `set_model`, before `fit` builds its train function: the
    probe must be in the step that function runs. Needed where the batch size
    is not known from `fit`'s data and Keras' own count cannot be read.
    """
    if backend.name() != "tensorflow":
        return
    data = inspect_fit(model)
    counted = data is not None and (data.batch_size is None or data.last_batch_size is None)
    if counted and keras_count(model, data, probe_only=probe_only) is None:
        step_probe.install(model, len(backend.replica_devices(model)), timing=False)


def choose_counter(
    model: Any, data: FitData | None, *, workers: int, probe_only: bool = False
) -> Callable[[], tuple[int | None, int | None]] | None:
    """Running totals `(steps, samples)` of this fit, all workers' samples; `None` where nothing counts.

    Args:
        model: The model in `fit`.
        data: What `keras_gpu.hooks.fit_introspection.inspect_fit` found.
        workers: Workers in the job (each counts its own replicas' samples).
        probe_only: Never Keras' own count (benchmarks compare the two).

    Returns:
        A `KerasCount`, the probe's counts, JAX/PyTorch's batch
        counter, or `None`.
    """
    if backend.name() != "tensorflow":
        return count_batches(model)  # the batches' own shapes: global arrays under a JAX distribution
    probe = step_probe.installed(model)
    source = keras_count(model, data, probe_only=probe_only) if probe is None else None
    if source is not None:
        return KerasCount(source, workers, data.num_batches)
    if probe is None:
        return None

    def counts() -> tuple[int, int]:
        steps, samples = probe.counts()
        return steps, samples * workers  # exact for equal batches on every worker

    return counts


def count_in_step_next(model: Any) -> None:
    """Mark `model` so that its next fit counts its samples in the step (its Keras count was lost)."""
    object.__setattr__(model, PROBE_NEXT, True)


class KerasCount:
    """This fit's running samples from Keras' own per-epoch count (a `KerasSampleCount`).

    Called as a meter's counter: `(None, samples)` (Keras' batch index counts
    the steps), all workers' samples (this worker's times the workers, as
    with the probe). Keras resets its count before each epoch: each epoch's
    reads are deltas from the read in `epoch_begin`, and the read at
    the epoch's last batch end (`epoch_end`) holds until the next
    epoch. A count reset within the epoch (by a callback before this one)
    or past the float's exact range gives `None`: samples not logged from
    then on (`lost_reason` says why).

    Args:
        source: Keras' count of the model in `fit`.
        workers: Workers in the job.
        num_batches: Steps Keras runs per epoch: the count is read at the
            batch end of index `last_index`.
    """

    def __init__(self, source: KerasSampleCount, workers: int, num_batches: int) -> None:
        self._source = source
        self._workers = workers
        self.last_index = num_batches - 1
        self._last = 0.0
        self._total = 0.0
        self._frozen = True  # before the first epoch, the count is the previous fit's or evaluate's
        self._resets = source.resets
        self.lost_reason: str | None = None  # why the count cannot be trusted any more

    def epoch_begin(self) -> None:
        """Start counting an epoch: from Keras' count after its reset before this epoch."""
        self._frozen = False
        self._resets = self._source.resets  # Keras' reset before this epoch is the last allowed
        self._last = sum(self._read())  # 0 after that reset; read, not assumed

    def epoch_end(self) -> None:
        """Read the count at the epoch's last batch end; it holds until the next epoch."""
        self.__call__()
        self._frozen = True

    def __call__(self) -> tuple[None, int | None]:
        if not self._frozen and self.lost_reason is None:
            values = self._read()
            now = sum(values)
            if now < self._last or self._source.resets != self._resets:
                self.lost_reason = "was reset during the epoch (a callback calling `evaluate`?)"
            elif max(values) >= self._source.exact_below:
                self.lost_reason = (
                    f"counts exactly only to {self._source.exact_below:.0f} samples per replica and epoch"
                )
            else:
                self._total += now - self._last
                self._last = now
        return None, (None if self.lost_reason else round(self._total) * self._workers)

    def _read(self) -> list[float]:
        return self._source.read()


# -- FLOPs and peak FLOP/s ---------------------------------------------------------------

def flops_per_sample(
    model: Any, data: FitData | None, *, given: float | None, caller: object, once: Once
) -> float | None:
    """Training FLOPs per sample (forward and backward) of `model`, or `None` where they cannot be counted.

    Args:
        model: The model in `fit`.
        data: The running fit's data: its input spec counts a model not yet
            called.
        given: The user's `flops_per_sample`, which overrides the count.
        caller: The callback, named in the hint.
        once: Scope of the hint.
    """
    if given is not None:
        return float(given)
    value = model_flops.training_flops_per_sample(model)
    spec = None if data is None else data.x_spec if data.x_spec is not None else data.x_shapes
    if value is None and spec is not None:  # a dimension the model leaves to the data (RNN time steps): the data's
        value = model_flops.training_flops_per_sample(model, spec)
    if value is None:
        once.log(
            logging.INFO,
            "throughput:no-flops",
            "keras-gpu: ThroughputLogger could not count the FLOPs of model %r (%s), so "
            "throughput/tflops_per_sec and throughput/mfu are not logged; pass %s "
            "(training FLOPs per sample, about 3x the forward FLOPs) to log them.",
            getattr(model, "name", "?"),
            model_flops.flops_failure(model),
            call_with(caller, "flops_per_sample"),
        )
    return value


def peak_flops_total(
    model: Any, devices: list[str], num_replicas: int, *, given: float | None, caller: object, once: Once
) -> float | None:
    """The summed peak FLOP/s of all `num_replicas` replica devices for `model`'s compute dtype, or `None`.

    Args:
        model: The model in `fit`.
        devices: This worker's replica devices.
        num_replicas: Replicas of all workers.
        given: The user's `peak_flops` of one replica's device, which
            overrides the table of `keras_gpu.meters.flops`.
        caller: The callback, named in the hint.
        once: Scope of the hint.
    """
    if given is not None:
        return float(given) * num_replicas
    kinds = {topology.device_type(d) or "device" for d in devices}
    dtype = backend.compute_dtype(model)
    if kinds != {"GPU"}:
        once.log(
            logging.INFO,
            "throughput:no-peak",
            "keras-gpu: ThroughputLogger logs no throughput/mfu: no peak FLOP/s is known for %s devices. "
            "Pass %s (peak FLOP/s of one replica's device) to log it.",
            "/".join(sorted(kinds)),
            call_with(caller, "peak_flops"),
        )
        return None
    local, names = model_flops.gpu_peak_flops(model, dtype)
    if local is None:
        once.log(
            logging.INFO,
            "throughput:no-peak",
            "keras-gpu: ThroughputLogger logs no throughput/mfu: no %s peak FLOP/s is known for %s. "
            "Pass %s (peak FLOP/s of one replica's device) to log it.",
            dtype,
            ", ".join(sorted(set(names))) or "this GPU",
            call_with(caller, "peak_flops"),
        )
        return None
    return local * max(1, num_replicas // max(1, len(devices)))


# -- compiles ----------------------------------------------------------------------------

#: Prefix of the `jax.monitoring` duration events JAX sends when it traces, lowers or compiles a function.
JAX_COMPILE_EVENTS = "/jax/core/compile/"


class CompileWatch:
    """Counts the compile events the backend sends on one thread, from `start` to `close`.

    `count` only grows; a reader compares it with the value it last
    saw. `on_compile` is called on the compiling thread after each event:
    it must do O(1) work (the caller sets its next batch-end check there).

    Args:
        on_compile: Called with no argument after each compile event.
        thread: The thread whose compiles count (default: the calling thread).
    """

    __slots__ = ("_listener", "_on_compile", "_thread", "count")

    def __init__(self, on_compile: Callable[[], None], thread: int | None = None) -> None:
        if not callable(on_compile):
            raise TypeError(f"`on_compile` must be callable. Received: on_compile={on_compile!r}")
        self.count = 0
        self._on_compile = on_compile
        self._thread = threading.get_ident() if thread is None else thread
        self._listener: Callable[..., None] | None = None

    def event(self, name: str, *_args: Any, **_kwargs: Any) -> None:
        """A `jax.monitoring` duration event: count it if it is a compile on the watched thread."""
        if name.startswith(JAX_COMPILE_EVENTS) and threading.get_ident() == self._thread:
            self.count += 1
            self._on_compile()

    def start(self) -> bool:
        """Start listening to JAX's compile events; False where JAX has no `jax.monitoring` listener."""
        import jax.monitoring

        register = getattr(jax.monitoring, "register_event_duration_secs_listener", None)
        if register is None or self._listener is not None:
            return False
        self._listener = self.event
        register(self._listener)
        return True

    def close(self) -> None:
        """Stop listening (idempotent)."""
        listener, self._listener = self._listener, None
        if listener is None:
            return
        import jax.monitoring

        unregister = getattr(jax.monitoring, "unregister_event_duration_listener", None)
        if unregister is None:
            return
        try:
            unregister(listener)
        except Exception as exc:  # noqa: BLE001 - an already-cleared listener
            logger.debug("keras-gpu: could not remove the compile listener: %s: %s", type(exc).__name__, exc)


def watch_compiles(on_compile: Callable[[], None]) -> CompileWatch | None:
    """A started `CompileWatch` of the calling thread where the backend signals its compiles, else `None`.

    Only JAX does (see the module's docstring). Call it on the training
    thread (a callback's `on_train_begin`) and close the watch when `fit`
    ends. Never raises: a watch that cannot start is `None`.

    Examples:
        >>> watch = watch_compiles(lambda: None)  # None off JAX
        >>> watch is None or watch.count == 0
        True
        >>> if watch is not None:
        ...     watch.close()
    """
    if backend.name() != "jax":
        return None
    try:
        watch = CompileWatch(on_compile)
        return watch if watch.start() else None
    except Exception as exc:  # noqa: BLE001 - a watch must never break fit
        logger.debug("keras-gpu: cannot watch JAX's compiles: %s: %s", type(exc).__name__, exc)
        return None
