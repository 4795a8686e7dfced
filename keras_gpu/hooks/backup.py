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

from keras_gpu.core import backend

__all__ = ["BackupAndRestore"]


class BackupAndRestore(keras.callbacks.BackupAndRestore):
    """`BackupAndRestore` whose backup only the chief writes; every worker restores from it.

    Takes the same arguments as `keras.callbacks.BackupAndRestore`. Whether
    this process is the chief is read from the model's strategy (on JAX:
    process 0 of `jax.distributed`) when training begins. With `keras-gpu launch --max-restarts R`, a job that
    loses a worker restarts and resumes from the last epoch the chief backed up.

    Attributes:
        writes_backup: Whether this process writes (and at the end deletes)
            the backup; `None` before training begins.
    """

    def __init__(self, backup_dir, **kwargs):
        super().__init__(backup_dir, **kwargs)
        self.writes_backup = None

    def on_train_begin(self, logs=None):
        self.writes_backup = backend.task_info(self.model).is_chief
        super().on_train_begin(logs)

    def on_epoch_end(self, epoch, logs=None):
        if self.writes_backup:
            with backend.writing_alone():
                super().on_epoch_end(epoch, logs)

    def on_train_batch_end(self, batch, logs=None):
        if self.writes_backup:
            with backend.writing_alone():
                super().on_train_batch_end(batch, logs)

    def on_train_end(self, logs=None):
        if self.writes_backup:
            with backend.writing_alone():
                super().on_train_end(logs)
