"""The cluster view on a real two-worker job with two replicas per worker (two logical GPUs each).

Runs where an NVIDIA GPU is present (`gpu`): `keras-gpu launch -n 2` of
`tests/_workers/gpu_replicas_worker.py`, each worker splitting its GPU into
two memory-limited logical GPUs, 4 replicas in sync. Without GPUs
TensorFlow's multi-worker strategy takes one CPU device per worker, so the
CPU twin of this test (`tests/test_cluster_view_two_replicas.py`) runs the
probe on a one-process mirrored strategy instead.

Counts and the sleeps the worker puts into worker 1's input (lower bounds),
never timed thresholds; bit-identity against the same training without the
callbacks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests._util import REPO, subprocess_env

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

WORKER = str(REPO / "tests" / "_workers" / "gpu_replicas_worker.py")
SLEEP, EPOCHS = 0.08, 3  # the worker's


def _visible_gpus() -> str:
    """Every GPU of the machine, unless the caller's environment chose some."""
    if os.environ.get("CUDA_VISIBLE_DEVICES"):
        return os.environ["CUDA_VISIBLE_DEVICES"]
    import pynvml

    pynvml.nvmlInit()
    try:
        return ",".join(str(i) for i in range(pynvml.nvmlDeviceGetCount()))
    finally:
        pynvml.nvmlShutdown()


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu_two_replicas")
    log_dir, out = root / "logs", root / "out"
    out.mkdir()
    env = subprocess_env({"CUDA_VISIBLE_DEVICES": _visible_gpus()})
    cmd = [sys.executable, "-m", "keras_gpu.cli", "launch", "-n", "2", WORKER, str(log_dir), str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    return [json.loads((out / f"w{rank}.json").read_text()) for rank in (0, 1)]


def test_each_worker_trains_two_logical_gpus(records):
    for record in records:
        assert record["replicas_in_sync"] == 4
        assert len(record["local_devices"]) == 2 and all("GPU" in d for d in record["local_devices"])


@pytest.mark.parametrize("name", ["input_spe1", "input_spe4"])
def test_a_worker_waiting_for_its_input_or_its_peer_is_not_busy(records, name):
    views = records[0][name]
    assert views == records[1][name]  # one gather: every worker holds every row
    gathers = [v for v in views if v is not None]
    assert len(gathers) == EPOCHS  # one at each epoch's end
    for gather in gathers:
        assert gather["reporting"] == 2
        slow, fast = gather["rows"]["1"], gather["rows"]["0"]
        # Worker 1's pipeline sleeps SLEEP per batch: its input wait, never its host or compute time.
        assert slow["input_sec"] >= SLEEP / 2, gather
        assert slow["other_sec"] + slow["compute_sec"] < SLEEP / 2, gather
        # Worker 0 waits for worker 1 (the iterator's check, the all-reduce): waits are never work.
        assert fast["busy_sec"] < SLEEP / 2, gather
        assert (gather["slowest_worker"], gather["part"]) == (1, "input")


@pytest.mark.parametrize("spe", [1, 4])
def test_final_weights_are_bit_identical_with_and_without_the_callbacks(records, spe):
    for record in records:
        digests = record[f"identical_spe{spe}"]
        assert digests["kg"] == digests["plain"], (record["rank"], spe)
