"""`keras-gpu tune` and `keras-gpu scale` on Keras' PyTorch backend: tune's candidates there, scale's refusal.

Runs where PyTorch is installed (the environment without TensorFlow); elsewhere it skips with the reason.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.backend,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed"),
]

REPO = Path(__file__).resolve().parents[2]
CASES = str(REPO / "benchmarks" / "tune_cases.py")
WARMUP, STEPS = 10, 40


def _command(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), KERAS_BACKEND="torch")
    return subprocess.run([sys.executable, "-m", "keras_gpu.cli", *args], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=timeout)


def _tune(tmp_path: Path, tries: str, *script: str) -> tuple[dict, list[dict]]:
    watch = tmp_path / "stopwatch.jsonl"
    proc = _command("tune", "--json", "--try", tries, "--warmup", str(WARMUP), "--steps", str(STEPS), CASES, *script,
                    "--stopwatch", str(watch))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout), [json.loads(t) for t in watch.read_text().splitlines()]


def _stopwatch_rate(line: dict, batch: int) -> float:
    from benchmarks.tune_stopwatch import stopwatch_rate

    return stopwatch_rate(line, batch, WARMUP, STEPS)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_torch_tune_tries_a_bigger_batch_and_skips_what_pytorch_cannot_run(tmp_path):
    out, lines = _tune(tmp_path, "spe4,jit,batch2", "--case", "mlp", "--steps", "80")
    rows = {r["change"]: r for r in out["rows"]}
    assert list(rows) == ["baseline", "baseline (again)", "batch2"]
    assert out["skipped"] == [
        "spe4: Keras' PyTorch backend runs one step per call (steps_per_execution must be 1 there)",
        "jit: jit_compile on PyTorch is torch.compile, which keras-gpu does not try",
    ]
    batch2 = rows["batch2"]
    assert batch2["status"] == "measured" and batch2["line"] == "model.fit(..., batch_size=128)"
    assert batch2["keeps_results"] is False and batch2["caveat"] == "the learning rate may need scaling with the batch"
    assert batch2["losses"].startswith("loss ")  # other samples per step: the window's last loss is compared
    # In the order the runs ran: baseline, batch2, baseline again; each against the script's own stopwatch.
    for name, line, batch in zip(["baseline", "batch2", "baseline (again)"], lines, [64, 128, 64]):
        assert rows[name]["samples_per_sec"] == pytest.approx(_stopwatch_rate(line, batch), rel=0.10), name
    assert rows["baseline (again)"]["losses"].startswith("same (")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_torch_tune_gives_the_pydataset_given_to_fit_its_workers(tmp_path):
    out, lines = _tune(tmp_path, "workers,batch2", "--case", "pydataset", "--steps", "60", "--map-ms", "10")
    rows = {r["change"]: r for r in out["rows"]}
    assert out["skipped"] == ["batch2: fit is given PyDataset, not arrays with batch_size"]
    workers = rows["workers"]
    assert workers["status"] == "measured" and workers["line"] == "super().__init__(workers=4, **kwargs)  # in the PyDataset"
    # fit shuffles the batches (its default): with workers, Keras draws their order in its queue's thread.
    assert workers["keeps_results"] is False and workers["caveat"].startswith("fit shuffles the PyDataset's batches")
    assert len(lines) == 3
    for name, line in zip(["baseline", "workers", "baseline (again)"], lines):
        assert rows[name]["samples_per_sec"] == pytest.approx(_stopwatch_rate(line, 64), rel=0.10), name
    # 10 ms of host work per batch in __getitem__: with 4 workers the input part of the step shrinks.
    assert workers["input_sec"] < rows["baseline"]["input_sec"]


def test_scale_refuses_pytorch_with_one_line():
    proc = _command("scale", "--warmup", "5", "--steps", "10", str(REPO / "benchmarks" / "scale_mlp.py"), timeout=300)
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(
        "keras-gpu scale: error: the study needs Keras' TensorFlow or JAX backend (keras_gpu.make_strategy() spreads "
        "the model over replicas there), not 'torch': set KERAS_BACKEND=jax or KERAS_BACKEND=tensorflow (`keras-gpu "
        "tune` measures the fixes on every backend). Received: KERAS_BACKEND=torch"
    )
    assert proc.stdout == ""
