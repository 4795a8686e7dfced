"""`RunRecord`: what one run of `keras-gpu scale` or `keras-gpu tune` trained, for the command to compare.

The study's injection into `fit` (`keras_gpu.hooks.study`) adds one to the
`fit` it measures, beside the window. It keeps each batch end's `loss` as
Keras hands it to the callbacks (a Python float Keras converted: no extra
wait, no I/O on the training thread) with its step number; `describe` then
gives, once `fit` has returned, the model's `steps_per_execution`,
`jit_compile` and dtype policy, the losses sorted by step, and the peak
memory, for the run's one record.

The peak memory is the GPU allocators' peak where the backend keeps one
(every backend on GPUs), else (on the CPU) the process's peak resident set
size (`resource.getrusage`), and `memory_kind` says which.

It is `async_safe`, like the window: a run keeps the dispatch the script's
`fit` has (on JAX and PyTorch with `verbose=0`, batch ends on Keras' thread
pool, in any order), so each run is timed as the script runs it.
"""

from __future__ import annotations

import threading
from typing import Any

import keras

from keras_gpu.core import backend as _backend
from keras_gpu.core.log import logger

__all__ = ["RunRecord", "peak_memory"]


class RunRecord(keras.callbacks.Callback):
    """Record the losses of a `fit` by step; `describe` gives them with the model's settings and peak memory."""

    def __init__(self) -> None:
        super().__init__()
        self.losses: list[tuple[int, Any]] = []
        self._steps_before = 0
        self._steps = 0
        self._lock = threading.Lock()  # batch ends may run on Keras' pool, concurrently

    async_safe = True
    """Keras may run `on_train_batch_end` on its thread pool, in any order: the study times the script's dispatch."""

    def on_train_begin(self, logs=None) -> None:
        self.losses = []
        self._steps_before = self._steps = 0

    def on_train_batch_end(self, batch, logs=None) -> None:
        step = self._steps_before + int(batch) + 1
        with self._lock:
            self._steps = max(self._steps, step)
            if logs and "loss" in logs:
                self.losses.append((step, logs["loss"]))  # converted after training, in step order

    def on_epoch_end(self, epoch, logs=None) -> None:
        self._steps_before = self._steps

    def describe(self, model: Any) -> dict[str, Any]:
        """What `model` trained with, and the losses in step order (after `fit`: never on its thread's steps)."""
        out: dict[str, Any] = {"backend": _backend.name()}
        try:
            policy = getattr(model, "dtype_policy", None)
            memory, kind = peak_memory(model)
            out.update(
                steps_per_execution=int(getattr(model, "steps_per_execution", 1) or 1),
                jit_compile=bool(getattr(model, "jit_compile", False)),
                policy=getattr(policy, "name", str(policy)),
                losses=[[step, float(value)] for step, value in sorted(self.losses, key=lambda item: item[0])],
                peak_memory_bytes=memory,
                memory_kind=kind,
                bf16_gpu=_gpu_has_bf16(),
            )
        except Exception as exc:  # noqa: BLE001 - the measurement must not fail the user's training
            logger.warning("keras-gpu: the run's record could not be built: %s: %s", type(exc).__name__, exc)
        return out


def peak_memory(model: Any) -> tuple[int | None, str]:
    """The most memory the run held: `(bytes, what was read)`; `(None, why)` where nothing could be read."""
    total, kinds = 0, []
    try:
        for allocator in _backend.allocators(model):
            if allocator.tag.startswith("CPU"):  # the host's allocator counts part of the host's memory only
                continue
            reading = _backend.allocator_memory(allocator)
            if reading is not None:
                total += reading.peak_bytes
                kinds.append(allocator.tag)
    except Exception as exc:  # noqa: BLE001 - fall back to the process's own peak
        logger.debug("keras-gpu: allocator peak not read: %s", exc)
        kinds = []
    if kinds:
        return total, f"allocator peak ({', '.join(kinds)})"
    try:
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024, "process peak RSS"
    except (ImportError, OSError):
        return None, "not measured: no allocator statistics and no resource module"


def _gpu_has_bf16() -> bool | None:
    """Whether the first GPU computes in bfloat16 (compute capability 8.0 or later); `None` without a GPU."""
    backend = _backend.name()
    try:
        if backend == "tensorflow":
            import tensorflow as tf

            gpus = tf.config.list_physical_devices("GPU")
            if not gpus:
                return None
            major = tf.config.experimental.get_device_details(gpus[0]).get("compute_capability", (0, 0))[0]
            return major >= 8
        if backend == "jax":
            import jax

            gpus = [d for d in jax.local_devices() if d.platform == "gpu"]
            if not gpus:
                return None
            return float(getattr(gpus[0], "compute_capability", "0")) >= 8.0
        if backend == "torch":
            import torch

            if not torch.cuda.is_available():
                return None
            return bool(torch.cuda.is_bf16_supported())
    except Exception:  # noqa: BLE001 - unknown: the command tries bfloat16
        return None
    return None
