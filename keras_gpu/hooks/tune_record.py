"""`TuneRecord`: what one `keras-gpu tune` run trained, written for the command to compare with the baseline.

`keras_gpu.hooks.tune_private` adds one to every `fit` of a run that
`keras-gpu tune` started, ahead of the scale window
(`keras_gpu.hooks.scale_window.ScaleWindow`, which ends the process after
its window). It keeps each batch end's `loss` as Keras hands it to the
callbacks (a Python float Keras converted: no extra wait, no I/O on the
training thread) with its step number, and at the end of training writes
`tune.json` to the run's folder:
the script's facts (see `tune_private.FACTS`), the model's
`steps_per_execution`, `jit_compile` and dtype policy, the losses, and the
peak memory.

The peak memory is the GPU allocators' peak where the backend keeps one
(every backend on GPUs), else (on the CPU) the process's peak resident set
size (`resource.getrusage`), and `memory_kind` says which.

It is `async_safe`, like the scale window: a run keeps the dispatch the
script's `fit` has (on JAX and PyTorch with `verbose=0`, batch ends on
Keras' thread pool, in any order), so each candidate is timed as the
script runs it. The losses are sorted by step when the record is built.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from typing import Any

import keras

from keras_gpu.core import backend as _backend
from keras_gpu.core.log import logger

__all__ = ["RECORD_FILE", "TuneRecord", "peak_memory"]

RECORD_FILE = "tune.json"
"""The file each run writes in its folder."""


class TuneRecord(keras.callbacks.Callback):
    """Record the losses of a `fit`, and write them with the script's facts when it ends.

    Args:
        folder: Where to write `tune.json` (empty: keep it in `record` only).
        facts: What the script did (shared with the patches, read at the end).
        change: The candidate's change applied in this run.
    """

    def __init__(self, folder: str, facts: Mapping[str, Any], change: Mapping[str, Any]) -> None:
        super().__init__()
        self.folder = folder
        self.facts = facts
        self.change = dict(change)
        self.losses: list[tuple[int, Any]] = []
        self.record: dict[str, Any] | None = None
        self._steps_before = 0
        self._steps = 0
        self._lock = threading.Lock()  # batch ends may run on Keras' pool, concurrently

    async_safe = True
    """Keras may run `on_train_batch_end` on its thread pool, in any order: tune times the script's own dispatch."""

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

    def on_train_end(self, logs=None) -> None:
        try:
            self.record = self._build()
        except Exception as exc:  # noqa: BLE001 - the measurement must not fail the user's training
            logger.warning("keras-gpu tune: the run's record could not be built: %s: %s", type(exc).__name__, exc)
            return
        if self.folder:
            path = os.path.join(self.folder, RECORD_FILE)
            with open(f"{path}.tmp", "w", encoding="utf-8") as f:
                json.dump(self.record, f)
            os.replace(f"{path}.tmp", path)

    def _build(self) -> dict[str, Any]:
        model = self.model
        policy = getattr(model, "dtype_policy", None)
        memory, kind = peak_memory(model)
        return {
            "facts": dict(self.facts),
            "change": self.change,
            "backend": _backend.name(),
            "steps_per_execution": int(getattr(model, "steps_per_execution", 1) or 1),
            "jit_compile": bool(getattr(model, "jit_compile", False)),
            "policy": getattr(policy, "name", str(policy)),
            "losses": [[step, float(value)] for step, value in sorted(self.losses, key=lambda item: item[0])],
            "peak_memory_bytes": memory,
            "memory_kind": kind,
            "bf16_gpu": _gpu_has_bf16(),
        }


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
        logger.debug("keras-gpu tune: allocator peak not read: %s", exc)
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
