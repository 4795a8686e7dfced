"""`keras-gpu scale` on Keras' JAX backend: rows against the script's stopwatch, one and two workers, across epochs.

Runs where JAX is installed (the environment without TensorFlow); elsewhere it skips with the reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.backends._common import JAX_ONLY

pytestmark = JAX_ONLY

REPO = Path(__file__).resolve().parents[2]
MLP = str(REPO / "benchmarks" / "scale_mlp.py")
WARMUP, STEPS = 10, 40


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_jax_rows_match_the_scripts_stopwatch(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO), KERAS_BACKEND="jax")
    env.pop("TF_CONFIG", None)
    sw = tmp_path / "sw"
    proc = subprocess.run(
        [sys.executable, "-m", "keras_gpu.cli", "scale", "--workers", "1,2", "--warmup", str(WARMUP),
         "--steps", str(STEPS), "--json", MLP, "--steps", "80", "--epochs", "2", "--val-sleep", "1",
         "--stopwatch", str(sw)],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(proc.stdout)["rows"]
    # make_strategy() on JAX: batch_size is the global batch, 64 per replica.
    assert [(r["workers"], r["replicas"], r["global_batch"], r["per_replica_batch"]) for r in rows] == [
        (1, 1, 64, 64), (2, 1, 128, 64)]
    for row in rows:
        # Two epochs of 40 steps, each followed by validation that sleeps 1 s: the window (steps 10 to 50)
        # spans the first one, which the stopwatch's truth and the row both leave out.
        times = json.loads(Path(f"{sw}.{row['workers'] * row['replicas']}").read_text())
        ends, second_epoch = times["ends"], times["epochs"][1]
        gap = second_epoch - ends[39]
        truth = row["global_batch"] * STEPS / (ends[WARMUP + STEPS - 1] - ends[WARMUP - 1] - gap)
        assert row["samples_per_sec"] == pytest.approx(truth, rel=0.10)
        assert row["other_sec"] < 0.02  # the 1 s validation, spread over 40 steps, would be 25 ms per step
        assert row["compute_sec"] is None and row["communication_sec"] is None  # one compiled program on JAX
        assert row["device"] == "CPU" and row["device_sec"] > 0  # the compiled step has its own column
        parts = [row[f"{p}_sec"] for p in ("input", "compute", "communication", "update", "device", "other")]
        assert sum(p for p in parts if p is not None) == pytest.approx(row["step_sec"], rel=0.02)
    assert rows[1]["speedup"] == pytest.approx(rows[1]["samples_per_sec"] / rows[0]["samples_per_sec"])
    assert rows[1]["efficiency"] == pytest.approx(rows[1]["speedup"] / 2)
    assert rows[1]["allreduce_bus_gbps"] > 0 and rows[0]["allreduce_bus_gbps"] is None
    assert rows[1]["cause"].split(":")[0] in ("input", "device", "other") or rows[1]["cause"].startswith(
        "within run-to-run spread (")
