"""The one injection of `keras-gpu scale` and `keras-gpu tune` into the script's `fit`, through the worker bootstrap.

Each test runs the bootstrap on a small script with the child protocol's
variables set (`keras_gpu.hooks.study_env.study_env`) and reads the record
the run left; they are bounded by step counts, never by wall time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from keras_gpu.hooks.study_env import result_path, study_env

REPO = Path(__file__).resolve().parent.parent

_FIT = """
import json, os, sys
{before}
import numpy as np
import keras

class Watch(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        self.last = batch
    def on_train_end(self, logs=None):
        with open(os.environ["WATCH"], "w") as f:
            json.dump({{"last": self.last}}, f)

keras.utils.set_random_seed(0)
x = np.random.default_rng(0).normal(size=(240, 8)).astype("float32")
y = np.zeros((240, 1), "float32")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
{fit}
print("AFTER FIT")
"""


def _worker(tmp_path: Path, script: str, tool: str = "tune", change: dict | None = None,
            warmup: int = 3, steps: int = 10) -> tuple[subprocess.CompletedProcess, dict | None]:
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(script))
    folder = tmp_path / "run"
    folder.mkdir()
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2", KERAS_BACKEND="tensorflow",
               WATCH=str(tmp_path / "watch.json"), **study_env(str(folder), warmup, steps, tool, change))
    proc = subprocess.run([sys.executable, "-m", "keras_gpu.cli._worker", "--", str(path)], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=600)
    record = Path(result_path(str(folder), 0))
    return proc, json.loads(record.read_text()) if record.exists() else None


def test_the_bootstrap_imports_no_framework_before_the_script(tmp_path):
    script = 'import sys\nprint(sorted(m for m in ("keras", "tensorflow", "jax", "torch") if m in sys.modules))\n'
    proc, record = _worker(tmp_path, script, change={"policy": "mixed_bfloat16", "parallel_map": []})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]"  # the script still chooses its backend
    assert record is None  # no fit, no record: the command says "never called fit"


@pytest.mark.slow
def test_the_record_survives_the_windows_exit(tmp_path):
    fit = "model.fit(x, y, batch_size=8, epochs=2, verbose=0, callbacks=[Watch()])"
    proc, record = _worker(tmp_path, _FIT.format(before="", fit=fit))
    assert proc.returncode == 0, proc.stderr[-2000:]
    # The window closed at step 13 (3 warm-up + 10): the process ended there, after every on_train_end ran.
    assert "AFTER FIT" not in proc.stdout
    assert json.loads((tmp_path / "watch.json").read_text()) == {"last": 12}
    assert (record["status"], record["steps"], record["steps_trained"]) == ("done", 10, 13)
    assert record["samples"] == 80 and record["seconds"] > 0
    run = record["run"]
    assert [step for step, _ in run["losses"]] == list(range(1, 14))
    assert run["facts"] == {"fit_input": "arrays", "fit_override": None, "batch_size": 8}
    assert run["change"] == {} and run["applied"] == {} and run["not_applied"] == {}
    assert run["peak_memory_bytes"] > 0 and run["policy"] == "float32"


@pytest.mark.slow
def test_a_fit_that_raises_leaves_its_error_in_the_record_and_the_script_sees_it(tmp_path):
    fit = """
class Boom(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if batch == 5:
            raise RuntimeError("out of memory\\nmore lines")
try:
    model.fit(x, y, batch_size=8, verbose=0, callbacks=[Boom()])
except RuntimeError as exc:
    print("SCRIPT SAW", exc)
"""
    proc, record = _worker(tmp_path, _FIT.format(before="", fit=fit))
    assert "SCRIPT SAW out of memory" in proc.stdout, proc.stderr[-2000:]
    assert record["status"] == "failed" and record["error"] == "RuntimeError: out of memory"


@pytest.mark.slow
def test_keras_imported_past_the_hook_is_said_in_the_record(tmp_path):
    before = """
import importlib.machinery
class Ahead:
    def find_spec(self, name, path, target=None):
        return importlib.machinery.PathFinder.find_spec(name, path, target) if name == "keras" else None
sys.meta_path.insert(0, Ahead())
"""
    fit = "model.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[Watch()])"
    proc, record = _worker(tmp_path, _FIT.format(before=before, fit=fit))
    assert proc.returncode == 0 and "AFTER FIT" in proc.stdout  # nothing stopped the script: nothing reached it
    assert record["status"] == "failed"
    assert record["error"].startswith("keras-gpu could not reach the script's fit: `keras` was imported past "
                                      "keras-gpu's import hook")
