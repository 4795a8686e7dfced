"""The sample counter of `ThroughputLogger`: which source counts a `fit`'s samples, and reading it.

Where the batch size is not known before `fit` runs, a counter gives the
meter (:class:`keras_gpu.meters.throughput.ThroughputMeter`) the running
totals `(steps, samples)` of the fit, read once per window. The source, the
first that applies:

* on TensorFlow, Keras' own count (:class:`KerasCount` over
  :class:`keras_gpu.setup.keras_compat.KerasSampleCount`): Keras' default
  `train_step` adds each replica's batch size to its loss tracker's `count`;
  it needs an epoch whose length Keras knows, because the count is read at the
  epoch's last batch end, before validation or a callback's `evaluate` resets
  it. Nothing is added to the step;
* on TensorFlow otherwise, the counting probe in the training step
  (:mod:`keras_gpu.hooks.step_probe` with `timing=False`), installed by
  :func:`install_probe` before `fit` builds its train function; a model whose
  Keras count was lost in an earlier fit (:func:`count_in_step_next`) counts
  with it too;
* on JAX and PyTorch, the batches the train function takes from `fit`'s
  epoch iterator, counted on the host by their first dimension
  (:func:`keras_gpu.hooks.fit_introspection.count_batches`).

In a multi-worker TensorFlow job each worker's count (Keras' or the probe's)
holds its own replicas' samples: the global count is that times the number
of workers, exact where the workers' batches are the same size.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from keras_gpu.core import backend
from keras_gpu.hooks import step_probe
from keras_gpu.hooks.fit_introspection import FitData, count_batches, inspect_fit

if TYPE_CHECKING:
    from keras_gpu.setup.keras_compat import KerasSampleCount

__all__ = ["PROBE_NEXT", "KerasCount", "choose_counter", "count_in_step_next", "install_probe", "keras_count"]

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
        data: What :func:`keras_gpu.hooks.fit_introspection.inspect_fit` found.
        workers: Workers in the job (each counts its own replicas' samples).
        probe_only: Never Keras' own count (benchmarks compare the two).

    Returns:
        A :class:`KerasCount`, the probe's counts, JAX/PyTorch's batch
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
    """This fit's running samples from Keras' own per-epoch count (a :class:`KerasSampleCount`).

    Called as a meter's counter: `(None, samples)` (Keras' batch index counts
    the steps), all workers' samples (this worker's times the workers, as
    with the probe). Keras resets its count before each epoch: each epoch's
    reads are deltas from the read in :meth:`epoch_begin`, and the read at
    the epoch's last batch end (:meth:`epoch_end`) holds until the next
    epoch. A count reset within the epoch (by a callback before this one)
    or past the float's exact range gives `None`: samples not logged from
    then on (:attr:`lost_reason` says why).

    Args:
        source: Keras' count of the model in `fit`.
        workers: Workers in the job.
        num_batches: Steps Keras runs per epoch: the count is read at the
            batch end of index :attr:`last_index`.
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
