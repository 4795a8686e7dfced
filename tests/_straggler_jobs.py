"""Real jobs of several workers, one slowed, for the TensorFlow and the JAX tests of the cluster view."""

from __future__ import annotations

import json
import subprocess
import sys

from tests._util import REPO, subprocess_env

__all__ = ["check_straggler_job", "launch_straggler_job"]


def launch_straggler_job(tmp_path, workers, backend_env=None, timeout=840):
    """`tests/_workers/straggler_worker.py` under `keras-gpu launch`, the last worker sleeping 20 ms after each step;
    every worker's record (the job must exit 0, never re-run)."""
    out = tmp_path / "out"
    out.mkdir()
    jax = (backend_env or {}).get("KERAS_BACKEND") == "jax"
    cmd = [sys.executable, "-m", "keras_gpu.cli", "launch", "-n", str(workers), *(["--cpu-replicas", "1"] if jax else []),
           str(REPO / "tests" / "_workers" / "straggler_worker.py"), str(out), str(workers - 1), "0.02", "4"]
    proc = subprocess.run(cmd, env=subprocess_env(backend_env), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    return [json.loads((out / f"w{k}.json").read_text()) for k in range(workers)], proc.stdout + proc.stderr


def check_straggler_job(records, text, workers):
    """Every worker judged the same gathers; the chief named the slowed worker with its host time."""
    assert len({json.dumps(r["gathers"]) for r in records}) == 1
    chief = records[0]
    assert all(g["reporting"] == workers for g in chief["gathers"]) and len(chief["gathers"]) == 4
    assert (chief["straggler"], chief["part"]) == (workers - 1, "host"), chief
    assert chief["clear_gathers"] >= 3, chief
    # A 20 ms sleep after each step on a loaded machine: clear, whichever gathers the load starved.
    assert f"worker {workers - 1} is the straggler: its host time between steps is " in text

