"""`benchmarks/gpu_check.py`: runs every real-GPU check in one call, and says clearly why when it cannot run."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys

import pytest

from benchmarks import gpu_check
from tests._util import REPO, subprocess_env

pytestmark = [pytest.mark.backend]
SCRIPT = str(REPO / "benchmarks" / "gpu_check.py")


def _no_gpu() -> bool:
    if shutil.which("nvidia-smi") is None:
        return True
    from keras_gpu.core import nvml

    return not nvml.available()


def _run(*args: str, backend: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    env = subprocess_env({"KERAS_BACKEND": backend} if backend else None)
    return subprocess.run([sys.executable, SCRIPT, *args], env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.skipif(not _no_gpu(), reason="an NVIDIA GPU is present: the script runs instead")
def test_without_a_gpu_it_exits_2_with_one_line_saying_why():
    proc = _run()
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu_check: cannot run here: ") and lines[0].endswith(".")
    assert "NVML" in lines[0] or "nvidia" in lines[0]


def test_bad_backend_is_a_usage_error_echoing_it():
    proc = _run("--backends", "tensorflow")
    assert proc.returncode == 2
    assert "--backends takes jax and/or torch. Received: --backends='tensorflow'" in proc.stderr


def test_hand_count_and_tolerances():
    # Dense 4 -> 3 -> 2: forward 2*(4*3 + 3*2) = 36 FLOPs per sample, training 3x that.
    assert gpu_check.hand_flops_per_sample((4, 3, 2)) == 108
    assert gpu_check.within(101.0, 100.0, 0.01) and not gpu_check.within(101.5, 100.0, 0.01)
    assert gpu_check.within(100.0 + 60, 100.0, 0.01, abs_tol=64) and not gpu_check.within(100.0 + 65, 100.0, 0.01, 64)


def test_nvidia_smi_output_is_parsed_with_units_and_missing_values():
    gpu = (
        "GPU-1a2b, NVIDIA H100 80GB HBM3, 81559, 1234, 97, 612.40, 64, 1980\n"
        "GPU-3c4d, NVIDIA H100 80GB HBM3, 81559, 0, 0, [N/A], 30, 345\n"
    )
    rows = gpu_check.parse_smi_gpu(gpu)
    assert rows["GPU-1a2b"] == {
        "uuid": "GPU-1a2b", "name": "NVIDIA H100 80GB HBM3", "memory.total": 81559.0, "memory.used": 1234.0,
        "utilization.gpu": 97.0, "power.draw": 612.4, "temperature.gpu": 64.0, "clocks.sm": 1980.0,
    }
    assert rows["GPU-3c4d"]["power.draw"] is None
    assert gpu_check.parse_smi_apps("4242, 70000\n4242, 10\nbad line\n17, [N/A]\n") == {4242: 70010.0}


def test_markdown_names_the_hardware_and_every_check():
    report = {
        "hardware": {"gpu": "NVIDIA H100 80GB HBM3", "driver": "570.1", "memory_total_gib": 79.6, "host": "x, 16 CPUs",
                     "python": "3.11", "keras": "3.15.1"},
        "backends": {
            "jax": {"versions": {"jax": "0.10.2"}, "checks": [gpu_check.check("MFU", 0.51234, "0.15..1.0", True)]},
            "torch": {"error": "worker exited 1: boom"},
        },
    }
    text = gpu_check.markdown(report)
    assert text.splitlines()[0].startswith("GPU: NVIDIA H100 80GB HBM3 (driver 570.1, 79.6 GiB)")
    assert "| jax 0.10.2 | MFU | 0.5123 | 0.15..1.0 | pass |" in text
    assert "| torch | (run) | worker exited 1: boom | runs | FAIL |" in text


BACKENDS = [
    pytest.param(b, marks=pytest.mark.skipif(importlib.util.find_spec(b) is None, reason=f"{b} is not installed"))
    for b in ("jax", "torch")
]


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_worker_runs_every_check_on_a_cpu_and_fails_only_the_gpu_ones(tmp_path, backend):
    # Tiny sizes on the CPU: the checks that need no GPU pass, the GPU ones fail as failed rows, none crashes.
    out = tmp_path / "out.json"
    proc = _run("--worker", backend, "--out", str(out), "--pairs", "1", "--smoke", backend=backend, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {row["check"]: row for row in json.loads(out.read_text())["checks"]}
    assert rows["samples/s vs stopwatch (last epoch, s)"]["pass"], rows["samples/s vs stopwatch (last epoch, s)"]
    if backend == "torch":  # the exact hand count (JAX's cost analysis adds the element-wise ops of a tiny model)
        assert rows["model FLOPs per sample"]["pass"], rows["model FLOPs per sample"]
    assert not rows["MFU (median, last epoch)"]["pass"]  # no GPU, no peak
    assert rows["allocator in use at fit end (GiB)"]["note"] == f"{backend} reports no GPU allocator statistics here"
    assert {"overhead: time in the callbacks' hooks / fit time", "overhead: wall-clock slowdown (median of pairs)"} <= set(rows)


@pytest.mark.gpu
def test_every_gpu_check_passes_on_a_real_gpu(tmp_path):
    out = tmp_path / "gpu_check.json"
    proc = _run("--json", str(out), timeout=3600)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["hardware"]["gpu"] not in ("", "?")
    assert report["backends"] and all(
        "error" not in r and r["checks"] and all(row["pass"] for row in r["checks"]) for r in report["backends"].values()
    )
