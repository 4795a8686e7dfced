"""Backups that cannot tear: atomic writes, kills inside them, and unreadable backups (TensorFlow; JAX in tests/backends).

The launched job (`tests/_workers/fault_worker.py`) is killed inside the
chief's backup writes and restarted; its weights are compared with an
uninterrupted run of the same job, which itself starts beside a torn backup
of an older version.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

import keras_gpu
from keras_gpu.core.atomic_file import replace_atomically, temporary_beside
from keras_gpu.hooks.backup_private import atomic_saves
from tests._util import REPO, subprocess_env

WORKER = str(REPO / "tests" / "_workers" / "fault_worker.py")
TORN = b"\x89HDF\r\n\x1a\n" + b"\0" * 88  # the 96 bytes a write killed early leaves


def _model():
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    return model


def test_replace_atomically_leaves_the_old_file_when_the_write_fails(tmp_path):
    target = tmp_path / "ckpt.weights.h5"
    target.write_bytes(b"old")
    assert temporary_beside(str(target)) == str(tmp_path / f".ckpt.tmp-{os.getpid()}.weights.h5")

    def fails(path):
        with open(path, "wb") as f:
            f.write(b"half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        replace_atomically(str(target), fails)
    assert target.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.weights.h5"]
    replace_atomically(str(target), lambda path: open(path, "wb").write(b"new"))
    assert target.read_bytes() == b"new" and sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.weights.h5"]


def test_model_checkpoint_saves_through_a_temporary_file_and_puts_the_methods_back(tmp_path):
    model = _model()
    seen = []
    original = type(model).save_weights

    with atomic_saves(model):
        assert model.save_weights is not original
        model.save_weights(str(tmp_path / "a.weights.h5"))
        seen = sorted(p.name for p in tmp_path.iterdir())
    assert "save_weights" not in vars(model) and "save" not in vars(model)
    assert seen == ["a.weights.h5"]
    checkpoint = keras_gpu.ModelCheckpoint(str(tmp_path / "b.weights.h5"), save_weights_only=True)
    model.fit(np.zeros((8, 4), "float32"), np.zeros((8, 1), "float32"), epochs=1, verbose=0, callbacks=[checkpoint])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.weights.h5", "b.weights.h5"]
    assert "save_weights" not in vars(model)


def test_an_unreadable_backup_is_set_aside_with_one_line_and_training_starts_over(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="keras_gpu")
    backup = tmp_path / "backup"
    backup.mkdir()
    (backup / "latest.weights.h5").write_bytes(TORN)
    (backup / "training_metadata.json").write_text('{"epoch": 3, "batch": 0}')
    x, y = np.ones((16, 4), "float32"), np.ones((16, 1), "float32")
    reference = _model()
    reference.fit(x, y, batch_size=4, epochs=3, verbose=0, shuffle=False)
    model = _model()
    history = model.fit(x, y, batch_size=4, epochs=3, verbose=0, shuffle=False, callbacks=[keras_gpu.BackupAndRestore(str(backup))])
    assert history.epoch == [0, 1, 2]
    for a, b in zip(model.get_weights(), reference.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    # keras-gpu's lines only: TensorFlow's own (a retracing warning after other tests' fits) are not this test's.
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("keras_gpu")]
    assert len(lines) == 1, lines
    aside = tmp_path / "backup-unreadable"
    assert f"the backup {backup / 'latest.weights.h5'} cannot be read (OSError: " in lines[0]
    assert f"it was moved to {aside / 'latest.weights.h5'} and {aside / 'training_metadata.json'}" in lines[0]
    assert "Delete it, or load it by hand if it still matters." in lines[0]
    assert (aside / "latest.weights.h5").read_bytes() == TORN


def _launch(out, *options, fault=""):
    env = subprocess_env({"FAULT": fault})
    command = [sys.executable, "-m", "keras_gpu.cli", "launch", "-n", "2", "--grace-period", "4", *options, WORKER, str(out)]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.slow
def test_kills_inside_the_backup_writes_resume_to_the_uninterrupted_weights(tmp_path):
    clean, killed = tmp_path / "clean", tmp_path / "killed"
    (clean / "backup").mkdir(parents=True)
    (clean / "backup" / "latest.weights.h5").write_bytes(TORN)
    job = _launch(clean, "--max-restarts", "1")
    assert job.returncode == 0, job.stderr[-4000:]
    assert job.stderr.count("cannot be read") == 1 and "restarting" not in job.stderr

    job = _launch(killed, "--max-restarts", "2", fault="backup_kills")
    assert job.returncode == 0, job.stderr[-4000:]
    assert job.stderr.count("worker 0 was killed by SIGKILL") == 2
    result = json.loads((killed / "result_0.json").read_text())
    assert (result["attempt"], result["epochs_run"]) == (2, 2)  # epochs 3 and 4: the weights of epoch 2 were renamed in
    for rank in (0, 1):
        got = json.loads((killed / f"result_{rank}.json").read_text())["weights"]
        want = json.loads((clean / f"result_{rank}.json").read_text())["weights"]
        assert max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in zip(got, want, strict=True)) <= 1e-6


@pytest.mark.parametrize("bad", [3, None, True, b"model.keras"])
def test_a_checkpoint_path_that_is_not_a_path_is_a_type_error_naming_it(bad):
    with pytest.raises(TypeError, match=r"`filepath` must be a path \(str or os\.PathLike\).*Received: filepath="):
        keras_gpu.ModelCheckpoint(bad)
