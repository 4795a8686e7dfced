"""How the running `fit` feeds batches: :class:`DataSchedule`, what the throughput meter counts samples from.

Plain Python, no TensorFlow. How Keras feeds batches:

* every step processes one batch of `batch_size` samples (the global batch, all
  replicas on all workers), except the last batch of a pass over finite data,
  which holds `last_batch_size` samples;
* with `steps_per_execution=k`, batch hooks fire once per execution and their
  `batch` argument is the index of the execution's last step, so one call
  covers `batch - previous_batch` steps; an execution stops early only when
  the data runs out, which happens only at the end of a pass;
* without `steps_per_epoch`, every epoch starts a fresh pass; with it, one
  pass continues across epochs until Keras has asked for all its batches.

Where the batch size is not known before `fit` runs, the meter takes its
counts from a counter instead (see :mod:`keras_gpu.meters.throughput`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from keras_gpu.core.checks import check_positive

__all__ = ["DataSchedule"]


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
