"""The data schedule `ThroughputLogger` meters a `fit` with: what the fit's data says, and what the user passed.

Once per `fit`, from :func:`keras_gpu.hooks.fit_introspection.inspect_fit`'s
:class:`~keras_gpu.hooks.fit_introspection.FitData` and the callback's
`batch_size=` and `samples_per_epoch=`, which override it. A disagreement,
an assumption (every batch full) or a batch size nobody knows gives one hint
(once per process) naming the argument to pass.
"""

from __future__ import annotations

import logging
from typing import Any

from keras_gpu.core.log import Once, call_with
from keras_gpu.hooks.fit_introspection import FitData
from keras_gpu.meters.data_schedule import DataSchedule

__all__ = ["fit_schedule"]


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
    """The :class:`~keras_gpu.meters.data_schedule.DataSchedule` of the running fit.

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
