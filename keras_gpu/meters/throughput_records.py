"""What the throughput meter reads and writes: the data schedule, its windows and epochs, and the rates over them.

Plain Python, no TensorFlow. `ThroughputMeter`
counts `fit`'s batches from a `DataSchedule` and answers with
`Window`, `FirstExecution`, `EpochTimes` and
`EpochRates` records. How Keras feeds batches:

* every step processes one batch of `batch_size` samples (the global batch, all
  replicas on all workers), except the last batch of a pass over finite data,
  which holds `last_batch_size` samples;
* with `steps_per_execution=k`, batch hooks fire once per execution and their
  `batch` argument is the index of the execution's last step, so one call
  covers `batch - previous_batch` steps; an execution stops early only when
  the data runs out, which happens only at the end of a pass;
* without `steps_per_epoch`, every epoch starts a fresh pass; with it, one
  pass continues across epochs until Keras has asked for all its batches.

Rates measure wall-clock time. An epoch's training phase runs from the
epoch's start to the end of its last training step; validation and
epoch-end work fall outside it (`EpochTimes`). The first execution of
each epoch (tracing, warm-up, iterator creation) is reported on its own
(`FirstExecution`) and the steady-state rates leave it out; over
several epochs the steady rate is `steady_rate`, the one figure of the
end-of-fit line and `keras-gpu report`.

FLOPs: multiply-add counts as 2 FLOPs; `flops_per_sample` is the *training*
FLOPs per sample (forward and backward). `tflops_per_sec` is the achieved
model FLOP/s of all replicas together, in units of 1e12 FLOP/s, and `mfu`
divides it by `peak_flops`, the summed peak FLOP/s of all replica devices.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from keras_gpu.core.checks import check_positive

__all__ = [
    "DataSchedule",
    "EpochRates",
    "EpochTimes",
    "FirstExecution",
    "Rates",
    "Window",
    "steady_rate",
    "window_rates",
]


def _positive_int(name: str, value: Any, allow_none: bool = True) -> int | None:
    return check_positive(name, value, integer=True, allow_none=allow_none)


@dataclass(frozen=True)
class DataSchedule:
    """How the running `fit` feeds batches.

    Attributes:
        batch_size: Samples per step, all replicas on all workers together.
            `None` when unknown: then only steps are counted.
        last_batch_size: Samples in the last batch of a pass over the data
            (equal to `batch_size` when every batch is full). `None` when
            unknown: then only steps are counted.
        batches_per_pass: Batches in one pass over the data, or `None` when
            unknown or infinite.
        infinite: Whether the data never runs out (a repeated dataset).
        steps_per_epoch: The `steps_per_epoch` passed to `fit`, or `None`.
        steps_per_execution: The model's `steps_per_execution`.
    """

    batch_size: int | None = None
    last_batch_size: int | None = None
    batches_per_pass: int | None = None
    infinite: bool = False
    steps_per_epoch: int | None = None
    steps_per_execution: int = 1

    def __post_init__(self) -> None:
        _positive_int("batch_size", self.batch_size)
        _positive_int("last_batch_size", self.last_batch_size)
        _positive_int("batches_per_pass", self.batches_per_pass)
        _positive_int("steps_per_epoch", self.steps_per_epoch)
        _positive_int("steps_per_execution", self.steps_per_execution, allow_none=False)
        if self.batch_size is not None and self.last_batch_size is not None and self.last_batch_size > self.batch_size:
            raise ValueError(
                "`last_batch_size` cannot exceed `batch_size`. "
                f"Received: batch_size={self.batch_size}, last_batch_size={self.last_batch_size}"
            )
        if self.infinite and self.batches_per_pass is not None:
            raise ValueError(
                f"Infinite data has no `batches_per_pass`. Received: batches_per_pass={self.batches_per_pass}"
            )

    @property
    def counts_samples(self) -> bool:
        """Whether samples can be counted exactly (batch size and last batch known)."""
        return self.batch_size is not None and self.last_batch_size is not None

    @property
    def exact_steps(self) -> bool:
        """Whether every execution's step count is known when it ends.

        False only for finite data of unknown length with
        `steps_per_execution > 1`: the last execution of a pass may stop early
        and nothing says by how much until the epoch ends.
        """
        return self.batches_per_pass is not None or self.infinite or self.steps_per_execution == 1

    @classmethod
    def from_samples(cls, samples_per_epoch: int, batch_size: int, **kwargs: Any) -> DataSchedule:
        """A schedule for `samples_per_epoch` samples in batches of `batch_size` (last one short)."""
        _positive_int("samples_per_epoch", samples_per_epoch, allow_none=False)
        _positive_int("batch_size", batch_size, allow_none=False)
        batches = -(-samples_per_epoch // batch_size)
        last = samples_per_epoch - (batches - 1) * batch_size
        return cls(batch_size=batch_size, last_batch_size=last, batches_per_pass=batches, **kwargs)


@dataclass(frozen=True)
class Window:
    """One logging window: exact counts and the rates over it.

    Attributes:
        step: Global training step at the end of the window.
        steps: Training steps in the window.
        samples: Samples in the window (all replicas), or `None` if unknown.
        seconds: Wall time of the window, in seconds.
        steps_per_sec: Steps per second.
        samples_per_sec: Samples per second, all replicas on all workers.
        samples_per_sec_per_replica: `samples_per_sec` divided by the number
            of replicas (in synchronous data parallelism every replica
            processes the same share of each global batch).
        tflops_per_sec: Achieved model FLOP/s of all replicas, in TFLOP/s
            (1e12 FLOP/s), or `None` without `flops_per_sample`.
        mfu: Model FLOPs utilisation, 0..1: achieved FLOP/s over the summed
            peak FLOP/s of all replica devices, or `None` without a peak.
        tokens_per_sec: Samples per second times the tokens per sample, or
            `None` without them.
    """

    step: int
    steps: int
    samples: int | None
    seconds: float
    steps_per_sec: float
    samples_per_sec: float | None
    samples_per_sec_per_replica: float | None
    tflops_per_sec: float | None
    mfu: float | None
    tokens_per_sec: float | None = None


@dataclass(frozen=True)
class Rates:
    """Rates over some steps and samples and the wall time they took (see `Window` for each field)."""

    steps_per_sec: float
    samples_per_sec: float | None = None
    samples_per_sec_per_replica: float | None = None
    tflops_per_sec: float | None = None
    mfu: float | None = None
    tokens_per_sec: float | None = None


def window_rates(
    steps: int,
    samples: int | None,
    seconds: float,
    *,
    num_replicas: int,
    flops_per_sample: float | None = None,
    peak_flops: float | None = None,
    tokens_per_sample: float | None = None,
) -> Rates:
    """The rates of `steps` and `samples` (`None`: not counted) over `seconds` of wall time.

    Returns:
        All `None` but steps/s without samples, TFLOP/s and MFU `None`
        without `flops_per_sample`, MFU `None` without `peak_flops`,
        tokens/s `None` without `tokens_per_sample`; steps/s is 0.0 when no
        time passed.
    """
    if seconds <= 0:
        return Rates(0.0)
    steps_per_sec = steps / seconds
    if samples is None:
        return Rates(steps_per_sec)
    samples_per_sec = samples / seconds
    tokens = None if tokens_per_sample is None else samples_per_sec * tokens_per_sample
    rates = Rates(steps_per_sec, samples_per_sec, samples_per_sec / num_replicas, tokens_per_sec=tokens)
    if flops_per_sample is None:
        return rates
    flops = flops_per_sample * samples_per_sec
    mfu = flops / peak_flops if peak_flops is not None else None
    return dataclasses.replace(rates, tflops_per_sec=flops / 1e12, mfu=mfu)


@dataclass(frozen=True)
class EpochRates:
    """One epoch's training-phase rates (`None` where not measured).

    Attributes:
        samples_per_sec: Samples over the training phase's wall time, first
            execution included: the rate of the epoch's windows together.
        steady_samples_per_sec: The same without the first execution.
        mfu: Model FLOPs utilisation over the training phase.
    """

    samples_per_sec: float | None
    steady_samples_per_sec: float | None
    mfu: float | None


@dataclass(frozen=True)
class FirstExecution:
    """The first execution of an epoch (its time is part of the epoch's first window).

    Attributes:
        step: Global training step at its end.
        epoch: Index of the epoch within this meter (0-based).
        steps: Steps it ran.
        seconds: Time from the epoch's start to its end, in seconds.
    """

    step: int
    epoch: int
    steps: int
    seconds: float


@dataclass(frozen=True)
class EpochTimes:
    """Where an epoch's wall time went, and its steady-state rates.

    `epoch_sec = train_sec + validation_sec + other_sec`, and `first_step_sec`
    is part of `train_sec`.

    Attributes:
        step: Global training step at the end of the epoch's training phase.
        epoch: Index of the epoch within this meter (0-based).
        epoch_sec: From the epoch's start to the start of the next epoch (or
            the end of training), in seconds.
        train_sec: From the epoch's start to the end of its last training step.
        first_step_sec: The epoch's first execution.
        validation_sec: Validation inside the epoch.
        other_sec: The rest: epoch-end callbacks and the training loop's own work.
        steady_steps_per_sec: Steps/s of the training phase without the first
            execution, or `None` when only one execution ran.
        steady_samples_per_sec: Samples/s likewise, or `None` (also when samples
            are not counted).
        steady_mfu: MFU at `steady_samples_per_sec`, or `None` without it,
            the FLOPs per sample or the peak.
    """

    step: int
    epoch: int
    epoch_sec: float
    train_sec: float
    first_step_sec: float
    validation_sec: float
    other_sec: float
    steady_steps_per_sec: float | None
    steady_samples_per_sec: float | None
    steady_mfu: float | None = None

    @property
    def steady_sec(self) -> float:
        """Seconds of the steady phase: the training phase without its first execution."""
        return self.train_sec - self.first_step_sec


def steady_rate(epochs: Iterable[tuple[float | None, float]]) -> float | None:
    """The steady-state rate over several epochs, from each epoch's `(steady rate, steady seconds)`.

    What the steady phases counted (steps or samples) over the seconds they
    took: each epoch's rate weighted by its `EpochTimes.steady_sec`, so
    a long epoch counts for more than a short one. Epochs without a steady
    rate are left out; `None` when none has one.
    """
    count = seconds = 0.0
    for rate, sec in epochs:
        if rate is not None and sec > 0:
            count += rate * sec
            seconds += sec
    return count / seconds if seconds > 0 else None
