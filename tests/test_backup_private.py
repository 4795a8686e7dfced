"""`keras_gpu/hooks/backup_private.py` against the installed Keras.

keras-gpu's `BackupAndRestore` reads Keras' backup paths and position, and
makes `fit` resume from a chosen epoch; this checks that what it reads and
sets still means that on the Keras installed.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest

from keras_gpu.hooks.backup_private import backup_files, backup_position, resume_from


def _model():
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    return model


def test_keras_private_state_the_backup_relies_on(tmp_path):
    backup = keras.callbacks.BackupAndRestore(str(tmp_path))
    assert backup_files(backup) == (str(tmp_path / "latest.weights.h5"), str(tmp_path / "training_metadata.json"))
    assert backup_position(backup) == (0, 0)
    with pytest.raises(AttributeError, match="save_weights"):  # no model: Keras' _save_model (replaced by keras_gpu) ran
        backup.on_epoch_end(2)
    assert backup_position(backup) == (3, 0)
    model = _model()
    resume_from(model, 2)
    history = model.fit(np.zeros((8, 4), "float32"), np.zeros((8, 1), "float32"), epochs=4, verbose=0)
    assert history.epoch == [2, 3]
