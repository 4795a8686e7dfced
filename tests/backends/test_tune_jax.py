"""`keras-gpu tune` on Keras' JAX backend: rows against the script's stopwatch, same losses with steps_per_execution.

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
CASES = str(REPO / "benchmarks" / "tune_cases.py")
WARMUP, STEPS = 10, 40


def _stopwatch_rate(line: dict, batch: int) -> float:
    """The script's own rate over the window the command measures (`benchmarks.tune_stopwatch`)."""
    from benchmarks.tune_stopwatch import stopwatch_rate

    return stopwatch_rate(line, batch, WARMUP, STEPS)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_jax_tune_rows_match_the_stopwatch_and_keep_the_losses(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO), KERAS_BACKEND="jax")
    watch = tmp_path / "stopwatch.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "keras_gpu.cli", "tune", "--try", "spe16,jit,prefetch", "--warmup", str(WARMUP),
         "--steps", str(STEPS), "--json", CASES, "--case", "mlp", "--steps", "80", "--stopwatch", str(watch)],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    rows = {r["change"]: r for r in out["rows"]}
    assert list(rows) == ["baseline", "baseline (again)", "spe16"]
    assert out["skipped"] == [
        "jit: the script runs with jit_compile on already",  # Keras' default on JAX
        "prefetch: fit is given arrays, not a tf.data.Dataset",
    ]
    lines = [json.loads(t) for t in watch.read_text().splitlines()]
    assert len(lines) == 3
    assert [r["run"] for r in rows.values()] == [1, 3, 2]  # the baseline again after the candidates
    for (name, row), line in zip(sorted(rows.items(), key=lambda item: item[1]["run"]), lines):
        assert row["samples_per_sec"] == pytest.approx(_stopwatch_rate(line, 64), rel=0.10), name
        assert row["compute_sec"] is None and row["device_sec"] is not None  # one compiled program on JAX
    assert rows["baseline (again)"]["losses"].startswith("same (")
    assert rows["spe16"]["losses"].startswith("same (")
    assert rows["spe16"]["peak_memory_bytes"] > 0 and rows["spe16"]["memory_kind"] == "process peak RSS"
