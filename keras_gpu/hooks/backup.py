"""`keras_gpu.BackupAndRestore`: `keras.callbacks.BackupAndRestore` for multi-worker jobs, with backups that cannot tear.

Keras 3's `BackupAndRestore` has no notion of workers: every worker of a
`MultiWorkerMirroredStrategy` job writes `latest.weights.h5` and
`training_metadata.json` to the same `backup_dir` at the end of each epoch,
and every worker deletes the directory when training ends. On storage shared
by the workers they race on the same files. It also writes both files in
place, so a process killed while it writes leaves a torn file that every
restart then fails to read.

This subclass keeps Keras' restore on every worker, so all of them read the
same backup and resume from the same epoch, but only the chief writes and
deletes it. Every worker must see the chief's `backup_dir` (a local path
under `keras-gpu launch`, shared storage across machines); a worker that
cannot would start again from epoch 0 while its peers resume later.

Each file is written to a temporary file beside it, fsynced and renamed into
place (`keras_gpu.core.atomic_file`), the weights first. The weights file
also records the epoch to resume from (an HDF5 attribute), which wins over
the metadata file: a kill at any instant leaves the previous backup or the
new one. A backup that cannot be read anyway (a disk that filled, a file from
another model or an older version) is moved aside by the chief to the folder
`<backup_dir>-unreadable` beside it, with one warning naming it, and training starts from
the beginning: no restart fails on it again.
"""

from __future__ import annotations

import json
import os
from typing import Any

import keras

from keras_gpu.core.atomic_file import replace_atomically
from keras_gpu.core.log import logger
from keras_gpu.hooks.backup_private import backup_files, backup_position, resume_from
from keras_gpu.hooks.chief_only import ChiefWrites

__all__ = ["BackupAndRestore"]

_EPOCH_ATTRIBUTE = "keras_gpu_backup"  # HDF5 attribute of the weights file: {"epoch": E, "batch": B}
UNREADABLE_SUFFIX = "-unreadable"  # the folder beside `backup_dir` that an unreadable backup is moved to


class BackupAndRestore(ChiefWrites, keras.callbacks.BackupAndRestore):
    """`BackupAndRestore` whose backup only the chief writes, atomically; every worker restores from it.

    Takes the same arguments as `keras.callbacks.BackupAndRestore`. Whether
    this process is the chief is read from the model's strategy (on JAX:
    process 0 of `jax.distributed`) when training begins. With `keras-gpu launch --max-restarts R`, a job that
    loses a worker restarts and resumes from the last epoch the chief backed up.
    A process killed while the chief writes leaves the previous backup or the
    new one; an unreadable backup is moved aside (to `<backup_dir>-unreadable`) with
    one warning, and training starts from the beginning.

    Raises:
        TypeError: `backup_dir` is not a path (as Keras' own).
        ValueError: As Keras' own: `backup_dir` is empty, or `save_freq` is
            neither `"epoch"`, `False` nor an int.

    Attributes:
        writes_backup: Whether this process writes (and at the end deletes)
            the backup; `None` before training begins.

    Examples:
        >>> import tempfile
        >>> import numpy as np
        >>> import keras
        >>> import keras_gpu
        >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        >>> model.compile(optimizer="sgd", loss="mse")
        >>> x, y = np.zeros((16, 4), "float32"), np.zeros((16, 1), "float32")
        >>> with tempfile.TemporaryDirectory() as backup_dir:
        ...     backup = keras_gpu.BackupAndRestore(backup_dir)
        ...     _ = model.fit(x, y, batch_size=4, epochs=2, callbacks=[backup], verbose=0)
        >>> backup.writes_backup
        True
    """

    @property
    def writes_backup(self) -> bool | None:
        """Whether this process writes (and at the end deletes) the backup; `None` before training begins."""
        return self.chief_writes

    def on_train_begin(self, logs: Any = None) -> None:
        weights, metadata = backup_files(self)
        saved = _snapshot(self.model) if _exists(weights) else None
        try:
            super().on_train_begin(logs)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            if saved is None and not _exists(weights):
                raise
            _restore(self.model, saved)
            resume_from(self.model, None)
            self._set_aside(weights, metadata, exc)
            return
        epoch = _recorded_epoch(weights)
        if epoch is not None:
            resume_from(self.model, epoch or None)

    def _set_aside(self, weights: str, metadata: str, exc: BaseException) -> None:
        """Move an unreadable backup aside (the chief) and say so once; training starts from the beginning."""
        if not self.chief_writes:
            return
        aside = os.path.normpath(self.backup_dir) + UNREADABLE_SUFFIX  # beside backup_dir, which fit deletes at its end
        moved = []
        for path in (weights, metadata):
            if _exists(path):
                os.makedirs(aside, exist_ok=True)
                os.replace(path, os.path.join(aside, os.path.basename(path)))
                moved.append(os.path.join(aside, os.path.basename(path)))
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        logger.warning(
            "keras-gpu: the backup %s cannot be read (%s: %s); it was moved to %s and training starts from the "
            "first epoch. Delete it, or load it by hand if it still matters.",
            weights, type(exc).__name__, first, " and ".join(moved) or "nowhere (it is gone)",
        )

    def _save_model(self) -> None:
        """Keras' writing step, made atomic: weights (with their epoch) first, then the metadata."""
        weights, metadata = backup_files(self)
        epoch, batch = backup_position(self)
        record = json.dumps({"epoch": epoch, "batch": batch})
        os.makedirs(self.backup_dir, exist_ok=True)
        if self.double_checkpoint:
            for path in (weights, metadata):
                if _exists(path):
                    replace_atomically(path + ".bkp", lambda tmp, src=path: _copy(src, tmp))

        def write_weights(path: str) -> None:
            self.model.save_weights(filepath=path, overwrite=True)
            import h5py

            with h5py.File(path, "a") as f:
                f.attrs[_EPOCH_ATTRIBUTE] = record

        replace_atomically(weights, write_weights)
        replace_atomically(metadata, lambda path: _write_text(path, record))


def _exists(path: str) -> bool:
    return os.path.exists(path)


def _copy(src: str, dst: str) -> None:
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        while chunk := fin.read(1 << 20):
            fout.write(chunk)


def _write_text(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def _recorded_epoch(weights: str) -> int | None:
    """The epoch the weights file says to resume from, or None when it records none (an older backup)."""
    if not _exists(weights):
        return None
    try:
        import h5py

        with h5py.File(weights, "r") as f:
            raw = f.attrs.get(_EPOCH_ATTRIBUTE)
        if raw is None:
            return None
        return int(json.loads(raw if isinstance(raw, str) else bytes(raw).decode())["epoch"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _snapshot(model: Any) -> list[tuple[Any, Any]]:
    """Every model and optimizer variable with its value, to undo a load that failed part of the way."""
    variables = list(model.weights)
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None and getattr(optimizer, "built", False):
        variables += list(optimizer.variables)
    return [(v, keras.ops.convert_to_numpy(v.value)) for v in variables]


def _restore(model: Any, saved: list[tuple[Any, Any]] | None) -> None:
    for variable, value in saved or ():
        variable.assign(value)
