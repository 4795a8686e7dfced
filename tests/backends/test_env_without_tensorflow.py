"""`keras-gpu env` without TensorFlow: the JAX and PyTorch backends' devices and strategy, no TensorFlow problem."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import subprocess
import sys

import pytest

from tests._util import subprocess_env
from tests.backends._common import WITHOUT_TENSORFLOW

pytestmark = WITHOUT_TENSORFLOW

TWO_WORKERS = json.dumps(
    {"cluster": {"worker": ["127.0.0.1:45001", "127.0.0.1:45002"]}, "task": {"type": "worker", "index": 1}}
)


def _env(backend: str, *args: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "keras_gpu.cli", "env", *args],
        env=subprocess_env({"KERAS_BACKEND": backend, **extra}),
        capture_output=True,
        text=True,
        timeout=300,
    )


def _child(code: str, backend: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code], env=subprocess_env({"KERAS_BACKEND": backend}), capture_output=True, text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")
def test_jax_report_shows_jax_and_what_make_strategy_builds_there():
    proc = _env("jax", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["problems"] == []  # TensorFlow is not needed on JAX: not a problem
    assert report["tensorflow"] == {"installed": False, "version": None}
    assert report["jax"]["version"] == importlib.metadata.version("jax")
    # JAX's own reading of its devices, in a separate process.
    truth = json.loads(_child("import json, jax; print(json.dumps([[d.platform, d.id] for d in jax.local_devices()]))", "jax"))
    names = [f"/device:{'GPU' if p in ('gpu', 'cuda', 'rocm') else p.upper()}:{i}" for p, i in truth]
    assert report["devices"]["backend"] == "jax"
    assert [d["name"] for d in report["devices"]["local"]] == names
    # What make_strategy() really builds here, in a separate process.
    built = _child("import keras_gpu; s = keras_gpu.make_strategy(); print(s.kind, *s.devices)", "jax").split()
    assert report["strategy"]["backend"] == "jax"
    assert [report["strategy"]["kind"], *report["strategy"]["devices"]] == built
    assert report["strategy"]["reason"]


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")
def test_jax_report_plans_a_multiworker_strategy_from_tf_config_without_joining():
    proc = _env("jax", "--json", TF_CONFIG=TWO_WORKERS)  # no peer runs: joining would wait
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["problems"] == []
    assert report["strategy"]["kind"] == "multiworker"
    assert "2 training tasks" in report["strategy"]["reason"]
    assert "worker:1" in report["strategy"]["cluster"]


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")
def test_jax_text_report_names_jax_and_no_tensorflow_problem():
    proc = _env("jax")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "JAX devices" in out and "TensorFlow devices" not in out
    assert f"JAX           {importlib.metadata.version('jax')}" in out
    assert "not installed (the Keras backend in use does not need it)" in out
    assert "Problems: none found" in out and "PROBLEM" not in out
    assert "Traceback" not in out + proc.stderr


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_torch_report_says_make_strategy_is_not_available_without_a_problem():
    proc = _env("torch", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["problems"] == []
    assert report["devices"]["backend"] == "torch"
    assert report["devices"]["local"][0]["name"] == "/device:CPU:0"
    assert report["strategy"]["kind"] is None
    assert "KERAS_BACKEND=tensorflow or KERAS_BACKEND=jax" in report["strategy"]["reason"]
