"""`keras_gpu.ModelCheckpoint`: `keras.callbacks.ModelCheckpoint` for multi-worker jobs.

Keras 3's `ModelCheckpoint` has no notion of workers: every worker of a
`MultiWorkerMirroredStrategy` job writes the same file. On one machine (or
shared storage) they race on it, and HDF5's file lock ends the job with
`BlockingIOError: Unable to synchronously create file (unable to lock file)`.

This subclass lets only the chief write. Every worker still runs the same
training, so the chief's file holds the weights all of them share (except
BatchNormalization's moving statistics, which Keras does not aggregate across
workers; use `BatchNormalization(synchronized=True)`).
"""

from __future__ import annotations

import os
from typing import Any

import keras

from keras_gpu.core.checks import fail
from keras_gpu.hooks.chief_only import ChiefWrites

__all__ = ["ModelCheckpoint"]


class ModelCheckpoint(ChiefWrites, keras.callbacks.ModelCheckpoint):
    """`ModelCheckpoint` that writes on the chief only; on other workers it does nothing.

    Takes the same arguments as `keras.callbacks.ModelCheckpoint`. Whether
    this process is the chief (the `"chief"` task, else worker 0) is read from
    the model's strategy (on JAX: process 0 of `jax.distributed`) when training
    begins. In a single process it behaves
    like Keras' own, except that each file is written to a temporary file
    beside it, fsynced and renamed into place, so a kill at any instant
    leaves the previous file or the new one. Saving reads each variable's local copy and runs
    no collective, so the chief never waits for its peers while it writes.

    Raises:
        TypeError: A `filepath` that is not a path (str or os.PathLike).
        ValueError: As Keras' own: a `filepath` that does not end in `.keras`
            (`.weights.h5` with `save_weights_only=True`), or a `save_freq`
            that is neither `"epoch"` nor an int.

    Attributes:
        writes_checkpoints: Whether this process writes checkpoints; `None`
            before training begins.

    Examples:
        >>> import os, tempfile
        >>> import numpy as np
        >>> import keras
        >>> import keras_gpu
        >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        >>> model.compile(optimizer="sgd", loss="mse")
        >>> x, y = np.zeros((16, 4), "float32"), np.zeros((16, 1), "float32")
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     path = os.path.join(tmp, "model.keras")
        ...     checkpoint = keras_gpu.ModelCheckpoint(path)
        ...     _ = model.fit(x, y, batch_size=4, epochs=1, callbacks=[checkpoint], verbose=0)
        ...     print(checkpoint.writes_checkpoints, os.path.exists(path))
        True True
    """

    atomic_model_saves = True  # a kill while writing leaves the previous file or the new one

    def __init__(self, filepath: Any, *args: Any, **kwargs: Any) -> None:
        if isinstance(filepath, bool) or not isinstance(filepath, (str, os.PathLike)):
            fail("filepath", "be a path (str or os.PathLike) ending in .keras", filepath, TypeError)
        super().__init__(filepath, *args, **kwargs)

    @property
    def writes_checkpoints(self) -> bool | None:
        """Whether this process writes checkpoints; `None` before training begins."""
        return self.chief_writes
