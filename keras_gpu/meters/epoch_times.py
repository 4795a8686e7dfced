"""Where an epoch's time goes: its first execution, its phases, and the steady-state rate over epochs.

Plain Python, no TensorFlow. Conventions:

* An epoch's training phase runs from the epoch's start to the end of its
  last training step. Validation and epoch-end work fall outside it and are
  reported apart by :class:`EpochTimes`.
* The first execution of each epoch (tracing, warm-up, iterator creation) is
  reported on its own (:class:`FirstExecution`), and the steady-state rates
  of :class:`EpochTimes` leave it out. Over several epochs the steady rate is
  :func:`steady_rate`: what the epochs' steady phases counted over the time
  they took, the one figure of the end-of-fit line and `keras-gpu report`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["EpochRates", "EpochTimes", "FirstExecution", "steady_rate"]


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

    @property
    def steady_sec(self) -> float:
        """Seconds of the steady phase: the training phase without its first execution."""
        return self.train_sec - self.first_step_sec


def steady_rate(epochs: Iterable[tuple[float | None, float]]) -> float | None:
    """The steady-state rate over several epochs, from each epoch's `(steady rate, steady seconds)`.

    What the steady phases counted (steps or samples) over the seconds they
    took: each epoch's rate weighted by its :attr:`EpochTimes.steady_sec`, so
    a long epoch counts for more than a short one. Epochs without a steady
    rate are left out; `None` when none has one.
    """
    count = seconds = 0.0
    for rate, sec in epochs:
        if rate is not None and sec > 0:
            count += rate * sec
            seconds += sec
    return count / seconds if seconds > 0 else None
