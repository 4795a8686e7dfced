"""`ScaleWindow`: the measured window of one run of `keras-gpu scale` or `keras-gpu tune`.

The study's injection into the script's `fit` (`keras_gpu.hooks.study`)
adds the process's one window to every `fit`, so the user's script runs
unchanged. In the first `fit` that trains long enough it:

* lets `warmup` training steps pass (compilation, first executions);
* measures the next `steps` steps: their wall time from the batch end that
  opens the window to the batch end that closes it, leaving out the time
  between an epoch's last batch end and the next epoch's start (validation,
  epoch-end callbacks), and their samples (counted inside the step on
  TensorFlow, by keras-gpu's step probe, under XLA too; from the batches
  taken elsewhere); and the time per step of each half of the window (a
  part of the run-to-run spread);
* splits the step on TensorFlow with the step probe
  (`keras_gpu.hooks.step_probe`: timestamps inside the compiled step)
  into input, compute, communication and other; on JAX, where the step is
  one compiled program, with the cluster view's host clock
  (`keras_gpu.hooks.step_time_cluster_jax.StepClock`) into input (the
  host's wait for each batch while the device idled), the device's time
  (compute and communication together) and other (the host's time while the
  device idled);
* stops training (`model.stop_training`), and where more than one replica
  trains, all-reduces a buffer the size of the model's trainable weights
  over the same replicas, alone, a few times (every worker reaches this
  point, so the collective is safe).

`outcome` is then what the run's record holds of the window (`result`,
or where the `fit` ended before the window closed, how many steps it
trained); the injection writes the record once `fit` has returned, after
every callback's `on_train_end`, and ends the process. The next `fit`
starts counting again.

Nothing here does I/O on the training thread within the window: the hooks
take clock readings and count; the probe's sums are read once at each end of
the window. Keras' dispatch mode is kept (`async_safe`): where Keras runs
batch ends on its thread pool (JAX and PyTorch, `verbose=0`), the window's
time runs between batch ends taken in batch order, and its samples and the
JAX clock are read on the training thread, at the batch begin after each end
of the window (at the fit's end, where none follows).
"""

from __future__ import annotations

import statistics
import threading
import time
from typing import Any

import keras

from keras_gpu.core import backend as _backend
from keras_gpu.core import keras_private
from keras_gpu.core.log import logger
from keras_gpu.hooks import step_probe
from keras_gpu.hooks.fit_introspection import count_batches
from keras_gpu.hooks.study_env import StudySettings, settings_from_env

__all__ = ["ALLREDUCE_REPEATS", "ScaleWindow", "allreduce_seconds"]

ALLREDUCE_REPEATS = 10
"""Timed all-reduces per row (after two untimed ones); the median is reported."""


class ScaleWindow(keras.callbacks.Callback):
    """Measure `steps` training steps after `warmup`, then stop; see the module's text.

    Args:
        settings: The run's settings (default: from the environment, as
            `keras-gpu scale` and `keras-gpu tune` set it; `None` there makes
            this a no-op).

    Attributes:
        result: The closed window (steps, seconds, samples, parts, ...), or
            `None` while no window closed.
        outcome: What the run's record holds of the window after each `fit`:
            `result` with `"status": "done"`, or `"status": "short"` with the
            steps trained; `None` before a `fit` ended.
    """

    def __init__(self, settings: StudySettings | None = None) -> None:
        super().__init__()
        self.settings = settings if settings is not None else settings_from_env()
        self.result: dict[str, Any] | None = None
        self.outcome: dict[str, Any] | None = None
        self._probe: step_probe.StepProbe | None = None
        self._counter: Any = None
        self._clock: Any = None  # JAX: the host clock of the train function's calls
        self._lock = threading.Lock()  # batch ends may run on Keras' pool, concurrently
        self._thread = threading.get_ident()  # the training thread (set again when training begins)
        self._reset()

    async_safe = True
    """Keras may run `on_train_batch_end` on its thread pool: the study measures the script's own dispatch."""

    def _reset(self) -> None:
        self._steps_before = 0  # steps of the finished epochs of this fit
        self._steps = 0
        self._open: float | None = None  # when the window opened (batch end)
        self._segment: float | None = None  # start of the window's current segment
        self._last_end = 0.0
        self._elapsed = 0.0
        self._half: float | None = None  # the window's elapsed time at its middle step
        self._start_steps = 0
        self._done = False
        self._window: dict[str, Any] | None = None
        self._last_batch = -1  # the epoch's latest batch end taken
        # The counts read on the training thread at batch begins from the warmup on, by the steps they cover:
        # the window's ends are batch ends, which the pool may take a step late (an older one is covered).
        self._counts_at: dict[int, tuple[int, int, float]] = {}
        self._clock_open: int | None = None  # JAX: the steps when the clock was reset at the window's start
        self._clock_window: Any = None
        self._probe_open = (0, 0)  # TensorFlow: the probe's running (steps, samples) when the window opened

    # -- hooks ---------------------------------------------------------------------------

    def set_model(self, model: Any) -> None:
        super().set_model(model)
        if self.settings is None or self.result is not None:
            return
        try:
            if _backend.name() == "tensorflow":
                local = max(1, _backend.num_replicas(model) // _workers(model))
                timing = step_probe.unavailable_reason(model) is None
                self._probe = step_probe.install(model, local, timing=timing)  # reused on a model that has one
        except Exception as exc:  # noqa: BLE001 - a measurement failure must not stop training
            logger.warning("keras-gpu scale: no step breakdown: %s: %s", type(exc).__name__, exc)

    def on_train_begin(self, logs=None) -> None:
        if self.settings is None or self.result is not None:
            return
        self._reset()
        self.outcome = None
        if _backend.name() != "tensorflow":
            self._counter = count_batches(self.model)
        if _backend.name() == "jax":
            from keras_gpu.hooks.step_time_cluster_jax import install_clock

            self._clock = install_clock(self.model)
        self._thread = threading.get_ident()

    def on_epoch_begin(self, epoch, logs=None) -> None:
        if self._probe is not None:
            self._probe.epoch_begin()
        if self._counter is not None:
            self._counter.epoch_begin()
        if self._clock is not None:
            self._clock.epoch_begin()
        with self._lock:  # the last epoch's batch ends all ran (Keras waits for them at its end)
            self._last_batch = -1
            if self._segment is not None and not self._done:
                self._elapsed += self._last_end - self._segment
                self._segment = time.perf_counter()

    def on_train_batch_begin(self, batch, logs=None) -> None:
        # On the training thread, in order: the steps before this batch all ran (or were dispatched).
        if self._probe is not None:
            self._probe.batch_begin()
        if self._clock is not None:
            self._clock.batch_begin(batch)
        counted_here = self._counter is not None or self._clock is not None  # JAX, PyTorch: not the TF probe
        if counted_here and self.settings is not None and self.result is None:
            # The steps the counter's counts cover: PyTorch's trainer took this step's batch already.
            counted = self._counter.taken_in_epoch if self._counter is not None else int(batch)
            with self._lock:
                self._read_at(self._steps_before + counted)

    def _read_at(self, steps: int) -> None:
        """At a batch begin where the counts cover `steps` steps (lock held): the counts, and JAX's clock."""
        warmup, window = self.settings.warmup, self.settings.steps
        if steps < warmup or (self._done and steps != self._steps):
            return  # after the window: only its closing end, where the pool closed it before this begin
        if self._counter is not None:  # host counts (TensorFlow's probe is read once, at the end: a device read)
            self._counts_at[steps] = self._count()
        if self._clock is None:
            return
        if self._clock_open is None:
            self._clock_open = steps
            self._clock.reset()
        elif self._clock_window is None and steps - self._clock_open >= window:
            self._clock_window = self._clock.read()

    def on_train_batch_end(self, batch, logs=None) -> None:
        if self._probe is not None:
            self._probe.batch_end()  # the call's start counts once its steps ran (the probe's host time)
        if self._clock is not None:
            self._clock.ended(batch, time.perf_counter(), threading.get_ident() != self._thread)
        if self.settings is None or self._done or self.result is not None:
            return  # a fast path only: another batch end may close the window between this check and the lock
        with self._lock:  # in batch order: a batch end older than one already taken is covered by it
            # Keras reads stop_training after handing the batch end to its pool: later ones are in flight.
            if not self._done and batch > self._last_batch:
                self._last_batch = batch
                self._batch_end(self._steps_before + int(batch) + 1, time.perf_counter())

    def _batch_end(self, steps: int, now: float) -> None:
        """The batch end after `steps` steps of the fit, at `now` (lock held): the window opens, or closes."""
        self._steps = steps
        self._last_end = now
        if self._open is None:
            if self._steps >= self.settings.warmup:
                self._open = self._segment = now
                self._start_steps = self._steps
                if self._probe is not None:
                    self._probe.reset()
                    self._probe_open = self._probe.counts()
            return
        if self._half is None and 2 * (self._steps - self._start_steps) >= self.settings.steps:
            self._half = self._elapsed + (now - self._segment)
        if self._steps - self._start_steps >= self.settings.steps:
            self._elapsed += now - self._segment
            self._done = True
            self._window = self._close()
            # On Keras' pool: the model without `Callback.model`'s JAX state sync, which races the running step.
            keras_private.callback_model(self).stop_training = True

    def on_epoch_end(self, epoch, logs=None) -> None:
        with self._lock:
            self._steps_before = self._steps

    def on_train_end(self, logs=None) -> None:
        if self.settings is None or self.result is not None:
            return
        result: dict[str, Any] = {"steps_trained": self._steps, "backend": _backend.name()}
        result.update(self._topology())
        if self._window is None:
            result["status"] = "short"
            self.outcome = result
            return
        result["status"] = "done"
        result.update(self._window)
        if self._counter is not None:
            result.update(self._counted(self._window["steps"], self._window["seconds"] / self._window["steps"]))
        if self._clock is not None:
            from keras_gpu.hooks.step_time_cluster_jax import remove_clock

            remove_clock(self.model)
        result["grad_bytes"] = _weight_bytes(self.model)
        if result["replicas_total"] > 1:
            try:
                result["allreduce_sec"] = allreduce_seconds(self.model, result["grad_bytes"])
            except Exception as exc:  # noqa: BLE001 - the table is still worth having without it
                logger.warning("keras-gpu scale: the all-reduce alone could not be measured: %s: %s",
                               type(exc).__name__, exc)
        self.result = self.outcome = result

    # -- measuring --------------------------------------------------------------------------

    def _count(self) -> tuple[int, int, float]:
        if self._probe is not None:
            steps, samples = self._probe.counts()
            return steps, samples, 0.0
        if self._counter is not None:
            return self._counter.steps, self._counter.samples, self._counter.input_sec
        return 0, 0, 0.0

    def _close(self) -> dict[str, Any]:
        steps = self._steps - self._start_steps
        seconds = self._elapsed
        step_sec = seconds / steps
        window: dict[str, Any] = {"steps": steps, "seconds": seconds}
        half = (steps + 1) // 2
        if steps >= 2 and self._half is not None:
            window["halves"] = [self._half / half, (seconds - self._half) / (steps - half)]
        if self._probe is not None:
            measured = self._probe.read()
            # The running count, not the timed window's: a counting probe (XLA) has no timed window.
            window["samples"] = self._probe.counts()[1] - self._probe_open[1]
            if measured is not None and self._probe.timing and measured.input_sec == measured.input_sec:
                parts = {
                    "input": measured.input_sec,
                    "compute": measured.compute_sec,
                    "communication": measured.communication_sec,
                }
                parts["other"] = max(0.0, step_sec - sum(parts.values()))
                window["parts"] = parts
            else:
                window["note"] = "the step probe could not split this step (XLA, or steps_per_execution > 1)"
        elif self._counter is not None:
            pass  # read on the training thread (`_counted`)
        else:
            window["samples"] = 0
            window["note"] = f"keras-gpu counts no samples on the {_backend.name()} backend"
        return window

    def _counted(self, steps: int, step_sec: float) -> dict[str, Any]:
        """The window's samples and, on JAX, its parts: read on the training thread at the window's ends.

        Each end is read at the batch begin where the counter had taken the
        batches up to it, no more; the closing end, where no begin followed
        (the end of `fit`, when every batch end ran), now.
        """
        counts = self._counts_at
        opened = counts.get(self._start_steps) or counts.get(min(counts, default=0), (0, 0, 0.0))
        closed = counts.get(self._steps) or self._count()
        out: dict[str, Any] = {"samples": closed[1] - opened[1], "samples_global": _feeds_global_batches()}
        clock = self._clock_window
        if clock is None and self._clock is not None:
            clock = self._clock.read()
        if clock is not None:  # JAX: the host clock's parts, scaled to the window's step (they are its mean)
            scale = step_sec / clock.step_sec if clock.step_sec > 0 else 1.0
            parts = {"input": clock.input_sec * scale, "other": clock.host_sec * scale}
        else:
            input_step = (closed[2] - opened[2]) / steps
            parts = {"input": input_step, "other": 0.0}
        out["parts"] = {
            "input": parts["input"],
            "compute": None,
            "communication": None,
            "other": parts["other"],
            "device": max(0.0, step_sec - parts["input"] - parts["other"]),
        }
        return out

    def _topology(self) -> dict[str, Any]:
        total = _backend.num_replicas(self.model)
        workers = _workers(self.model)
        return {"replicas_total": total, "workers": workers}


def _feeds_global_batches() -> bool:
    """Whether every JAX process reads the whole global batch (keras-gpu's `make_strategy()` on JAX)."""
    from keras_gpu.setup.jax_global_batch import GlobalBatchDataParallel

    return isinstance(keras.distribution.distribution(), GlobalBatchDataParallel)


def _workers(model: Any) -> int:
    return max(1, int(_backend.task_info(model).num_workers))


def _weight_bytes(model: Any) -> int:
    """Bytes of the model's trainable weights: the size of its gradients."""
    total = 0
    for w in model.trainable_weights:
        size = 1
        for d in w.shape:
            size *= int(d)
        total += size * _itemsize(str(w.dtype))
    return total


def _itemsize(dtype: str) -> int:
    import numpy as np

    try:
        return int(np.dtype(dtype).itemsize)
    except TypeError:
        return 2 if "16" in dtype else 4


def allreduce_seconds(model: Any, nbytes: int, repeats: int = ALLREDUCE_REPEATS) -> float:
    """Median seconds of one all-reduce of a float32 buffer of `nbytes` over `model`'s replicas.

    Every worker must call it at the same point (it runs collectives). The
    result of each reduce is checked against the sum of the replicas'
    values, so a reduce that did not happen cannot pass for a fast one.

    Raises:
        RuntimeError: The reduced value is wrong.
    """
    elements = max(1, nbytes // 4)
    if _backend.name() == "tensorflow":
        run, ranks = _tf_allreduce(_backend.strategy(model), elements)
    else:
        run, ranks = _jax_allreduce(elements)
    expected = ranks * (ranks + 1) / 2
    times = []
    for i in range(repeats + 2):
        start = time.perf_counter()
        value = run()
        elapsed = time.perf_counter() - start
        if value != expected:
            raise RuntimeError(f"the all-reduce gave {value} where the replicas' values sum to {expected}")
        if i >= 2:
            times.append(elapsed)
    return statistics.median(times)


def _tf_allreduce(strategy: Any, elements: int) -> tuple[Any, int]:
    import tensorflow as tf

    ranks = int(strategy.num_replicas_in_sync)

    @tf.function
    def reduce() -> Any:
        def on_replica() -> Any:
            ctx = tf.distribute.get_replica_context()
            value = tf.cast(ctx.replica_id_in_sync_group, tf.float32) + 1.0
            return ctx.all_reduce("SUM", tf.fill([elements], value))

        reduced = strategy.run(on_replica)
        return strategy.experimental_local_results(reduced)[0][:1]

    return (lambda: float(reduce().numpy()[0])), ranks


def _jax_allreduce(elements: int) -> tuple[Any, int]:
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    devices = list(jax.devices())
    ranks = len(devices)
    mesh = Mesh(np.array(devices), ("replica",))
    sharding = NamedSharding(mesh, P("replica"))
    shards = [
        jax.device_put(np.full((1, elements), i + 1, np.float32), d)
        for i, d in enumerate(devices)
        if d.process_index == jax.process_index()
    ]
    x = jax.make_array_from_single_device_arrays((ranks, elements), sharding, shards)
    psum = jax.jit(jax.shard_map(lambda a: jax.lax.psum(a, "replica"), mesh=mesh, in_specs=P("replica"),
                                 out_specs=P("replica")))

    def run() -> float:
        out = psum(x)
        return float(np.asarray(out.addressable_shards[0].data)[0, 0])

    return run, ranks
