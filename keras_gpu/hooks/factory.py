"""Keras callbacks that log throughput, memory and device placement to TensorBoard.

Add the recommended set to a `fit` call you already have::

    model.fit(x, y, callbacks=keras_gpu.callbacks("runs/exp1"))

or pick single callbacks: `ThroughputLogger`, `MemoryLogger`,
`PlacementLogger`, `StepTimeLogger` (also importable from
`keras_gpu.hooks.factory`). Each worker of a cluster writes its own run
(`log_dir/train` for the chief, `log_dir/worker_k/train` for worker k), so one
`tensorboard --logdir log_dir` shows them all.
"""

from __future__ import annotations

import logging
import os

import keras

from keras_gpu.core import backend
from keras_gpu.core.checks import check_bool, check_positive
from keras_gpu.core.log import log_once, made_by_factory
from keras_gpu.hooks._base import RunOptions
from keras_gpu.hooks.memory_logger import MemoryLogger
from keras_gpu.hooks.placement_logger import PlacementLogger
from keras_gpu.hooks.step_time_logger import StepTimeLogger, check_profile_every_s
from keras_gpu.hooks.throughput_logger import ThroughputLogger

__all__ = ["MemoryLogger", "PlacementLogger", "StepTimeLogger", "ThroughputLogger", "callbacks"]


def callbacks(
    log_dir: str | os.PathLike,
    *,
    throughput: bool = True,
    memory: bool = True,
    placement: bool = True,
    step_time: bool = True,
    every_s: float | None = None,
    profile_every_s: float | None = None,
    per_worker_runs: bool | None = None,
    batch_size: int | None = None,
    samples_per_epoch: int | None = None,
    flops_per_sample: float | None = None,
    peak_flops: float | None = None,
    epoch_logs: bool = True,
    tokens_per_sample: float | None = None,
) -> list[keras.callbacks.Callback]:
    """The recommended set of keras-gpu callbacks, with defaults that cost almost nothing.

    The per-batch hooks of `ThroughputLogger` and `StepTimeLogger`
    store the batch index and compare it with the next batch end that has
    work (the clock is read only there); memory is sampled on a background thread and placement is
    analysed once per traced training step. It works beside
    `keras.callbacks.TensorBoard` writing to the same `log_dir` where that
    callback works: Keras' own needs TensorFlow installed, on every backend.

    Args:
        log_dir: TensorBoard log directory, shared by every worker of a job.
        throughput: Include `ThroughputLogger`.
        memory: Include `MemoryLogger`.
        placement: Include `PlacementLogger` (TensorFlow backend only;
            on the others it is left out with one INFO line).
        step_time: Include `StepTimeLogger`: a step-time breakdown
            (input, compute, communication, other) measured on a few traced
            steps after warm-up and then every `profile_every_s`; in
            multi-worker TensorFlow jobs, on every step by a probe in the
            step, with the cluster view (the straggler) on the chief; in
            multi-process JAX jobs, the cluster view from each process's
            host clock (host and input stragglers).
        every_s: Logging window in seconds for throughput and memory
            (`None`: each callback's default).
        profile_every_s: Seconds between step-time traces (`None`: 300, in
            fits where a trace costs at most 0.5% of the fit, see
            `StepTimeLogger`; a number traces whatever it costs; `0`: no
            tracing).
        per_worker_runs: Whether every worker of a multi-worker job writes
            its own run (`log_dir/worker_k/train`). `None`: yes up to 16
            workers; above, only the chief writes (the cluster summary).
        batch_size: Global batch size, for inputs where it cannot be read
            from `fit` (for example a `tf.data` dataset without a static batch
            dimension).
        samples_per_epoch: Samples per epoch, when the last batch is short and
            the input does not say so.
        flops_per_sample: Training FLOPs per sample, to override the count
            taken from the model's traced graph.
        peak_flops: Peak FLOP/s of one device, for GPUs not in the built-in
            table (needed for `throughput/mfu`).
        epoch_logs: Add each epoch's `throughput/samples_per_sec`,
            `throughput/steady_samples_per_sec`, `throughput/mfu` and peak
            memory (`memory/allocator/<device>/run_peak_bytes`,
            `memory/host/peak_rss_bytes`), where measured, to Keras' epoch
            `logs`: `History`, the progress bar, `CSVLogger` and callbacks
            placed after these (W&B's, MLflow's) record them. `False`: only
            TensorBoard gets them.
        tokens_per_sample: Tokens per sample of a text model (its sequence
            length), for `throughput/tokens_per_sec`.

    Returns:
        A list of callbacks to pass to `fit(callbacks=...)`; extend it with
        your own.

    Raises:
        TypeError: An argument has the wrong type (e.g. `batch_size="64"`, a
            `log_dir` that is not a path, a switch that is not a bool).
        ValueError: A number is out of range (zero, negative, infinite), the
            `log_dir` is empty, or every callback is switched off.

    Examples:
        >>> import tempfile
        >>> import numpy as np
        >>> import keras
        >>> import keras_gpu
        >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        >>> model.compile(optimizer="sgd", loss="mse")
        >>> x, y = np.zeros((16, 4), "float32"), np.zeros((16, 1), "float32")
        >>> with tempfile.TemporaryDirectory() as log_dir:
        ...     callbacks = keras_gpu.callbacks(log_dir)
        ...     _ = model.fit(x, y, batch_size=4, epochs=1, callbacks=callbacks, verbose=0)
        >>> [type(callback).__name__ for callback in callbacks]  # on the TensorFlow backend
        ['ThroughputLogger', 'MemoryLogger', 'PlacementLogger', 'StepTimeLogger']
    """
    # Each value is checked here first, so that a bad one fails before any callback is built.
    run = RunOptions.checked(log_dir, per_worker_runs)
    shared = {"log_dir": run.log_dir, "per_worker_runs": run.per_worker_runs}
    every_s = check_positive("every_s", every_s, allow_none=True)
    epoch_logs = check_bool("epoch_logs", epoch_logs)
    profile_every_s = check_profile_every_s(profile_every_s, allow_none=True)
    out: list[keras.callbacks.Callback] = []
    window = {} if every_s is None else {"every_s": every_s}
    if check_bool("throughput", throughput):
        out.append(
            ThroughputLogger(
                **shared,
                batch_size=batch_size,
                samples_per_epoch=samples_per_epoch,
                flops_per_sample=flops_per_sample,
                peak_flops=peak_flops,
                epoch_logs=epoch_logs,
                tokens_per_sample=tokens_per_sample,
                **window,
            )
        )
    if check_bool("memory", memory):
        memory_window = dict(window)
        if every_s is not None:  # keep at least one NVML sample per window
            memory_window["sample_interval_s"] = min(MemoryLogger.DEFAULT_SAMPLE_INTERVAL_S, every_s)
        out.append(MemoryLogger(**shared, epoch_logs=epoch_logs, **memory_window))
    if check_bool("placement", placement):
        backend_name = backend.name()
        if backend_name == "tensorflow":
            out.append(PlacementLogger(**shared))
        else:
            log_once(
                logging.INFO,
                "callbacks:no-placement",
                "keras-gpu: placement is logged on the TensorFlow backend only; on the %s backend "
                "keras_gpu.callbacks() leaves PlacementLogger out.",
                backend_name,
            )
    if check_bool("step_time", step_time) and profile_every_s != StepTimeLogger.NO_TRACING:
        profile = {} if profile_every_s is None else {"profile_every_s": profile_every_s}
        out.append(StepTimeLogger(**shared, **profile))
    if not out and placement:
        raise ValueError(
            f"keras_gpu.callbacks() has nothing to log on the {backend.name()} backend: placement is "
            "TensorFlow-only. Set throughput=True, memory=True or step_time=True. "
            "Received: throughput=False, memory=False, placement=True"
        )
    if not out:
        raise ValueError(
            "keras_gpu.callbacks() needs at least one of throughput, memory, placement or step_time. "
            f"Received: throughput=False, memory=False, placement=False, step_time={step_time!r}"
        )
    return made_by_factory(out)  # their messages name keras_gpu.callbacks(...)
