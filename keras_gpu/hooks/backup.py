"""`keras_gpu.BackupAndRestore`: `keras.callbacks.BackupAndRestore` for multi-worker jobs.

Keras 3's `BackupAndRestore` has no notion of workers: every worker of a
`MultiWorkerMirroredStrategy` job writes `latest.weights.h5` and
`training_metadata.json` to the same `backup_dir` at the end of each epoch,
and every worker deletes the directory when training ends. On storage shared
by the workers they race on the same files.

This subclass keeps Keras' restore on every worker, so all of them read the
same backup and resume from the same epoch, but only the chief writes and
deletes it. Every worker must see the chief's `backup_dir` (a local path
under `keras-gpu launch`, shared storage across machines); a worker that
cannot would start again from epoch 0 while its peers resume later.
"""

from __future__ import annotations

import keras

from keras_gpu.hooks.chief_only import ChiefWrites

__all__ = ["BackupAndRestore"]


class BackupAndRestore(ChiefWrites, keras.callbacks.BackupAndRestore):
    """`BackupAndRestore` whose backup only the chief writes; every worker restores from it.

    Takes the same arguments as `keras.callbacks.BackupAndRestore`. Whether
    this process is the chief is read from the model's strategy (on JAX:
    process 0 of `jax.distributed`) when training begins. With `keras-gpu launch --max-restarts R`, a job that
    loses a worker restarts and resumes from the last epoch the chief backed up.

    Attributes:
        writes_backup: Whether this process writes (and at the end deletes)
            the backup; `None` before training begins.

    Example:
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
