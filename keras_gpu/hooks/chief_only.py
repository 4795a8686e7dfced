"""The chief-only gate of the callbacks that write files: only the chief writes; every worker trains.

Keras' `ModelCheckpoint` and `BackupAndRestore` have no notion of workers:
in a multi-worker job every worker would write the same files. The mixin
here runs their writing hooks on the chief only (the `"chief"` task, else
worker 0; on JAX process 0 of `jax.distributed`), outside the multi-process
distribution, and skips them on the other workers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from keras_gpu.core import backend
from keras_gpu.hooks.backup_private import atomic_saves

__all__ = ["ChiefWrites"]


class ChiefWrites:
    """Mixin for a Keras callback that writes files: its writing hooks run on the chief only.

    List it before the Keras callback class in the bases. Whether this
    process is the chief is read from the model when training begins
    (`backend.task_info`) and held in `chief_writes`; the hooks
    `on_train_batch_end`, `on_epoch_end` and `on_train_end` then run Keras'
    own on the chief, inside `backend.writing_alone()` so that saving runs
    no collective, and do nothing elsewhere. `on_train_begin` runs on every
    worker (where `BackupAndRestore` restores).

    Keras' dispatch mode is kept where the batch-end hook does nothing: with
    `save_freq="epoch"` (the default) the callback is `async_safe`, so on
    JAX and PyTorch with `verbose=0` Keras keeps running batch ends on its
    thread pool; with a `save_freq` in batches it saves from the batch end,
    on the training thread, as Keras' own callback does.

    Attributes:
        chief_writes: Whether this process writes; `None` before training begins.
    """

    chief_writes: bool | None = None
    atomic_model_saves = False
    """Whether `model.save` and `model.save_weights` replace their file atomically inside the hooks."""

    @property
    def async_safe(self) -> bool:
        """Whether Keras may run `on_train_batch_end` on its thread pool: where it never saves (per-epoch saves)."""
        return getattr(self, "save_freq", None) == "epoch"

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        with backend.writing_alone(), (atomic_saves(self.model) if self.atomic_model_saves else contextlib.nullcontext()):
            yield

    def on_train_begin(self, logs: Any = None) -> None:
        self.chief_writes = backend.task_info(self.model).is_chief
        super().on_train_begin(logs)

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if self.async_safe:
            # Per-epoch saves: Keras' batch end saves nothing, and on its pool it must not touch the model
            # (on JAX, `Callback.model` syncs the training state, racing the step on the training thread).
            return
        if self.chief_writes:
            with self._writing():
                super().on_train_batch_end(batch, logs)

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if self.chief_writes:
            with self._writing():
                super().on_epoch_end(epoch, logs)

    def on_train_end(self, logs: Any = None) -> None:
        if self.chief_writes:
            with self._writing():
                super().on_train_end(logs)
