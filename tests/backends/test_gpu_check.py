"""`benchmarks/gpu_check.py`: runs every real-GPU check in one call, and says clearly why when it cannot run."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys

import pytest

from benchmarks import _ab, gpu_check
from tests._util import REPO, subprocess_env
from tests._xspace import space

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


def test_transformer_hand_count_follows_its_formula():
    # One block, L=2, d=4, 1 head of 2, ff 8, 3 classes. Forward: projections 4 x 2*2*4*2 = 128, attention
    # 4*2*2*2 = 32, feed-forward 2 x 2*2*4*8 = 256; classifier 2*4*3 = 24; training 3 x (416 + 24).
    assert gpu_check.hand_transformer_flops_per_sample(2, 4, 1, 2, 8, 3, blocks=1) == 3 * (128 + 32 + 256 + 24)
    # The checked size: two blocks, sequence 200, width 256, 4 heads of 64, feed-forward 1024, 2 classes.
    L, hk = 200, 256
    block = 8 * L * 256 * hk + 4 * L * L * hk + 4 * L * 256 * 1024
    assert gpu_check.hand_transformer_flops_per_sample(200, 256, 4, 64, 1024, 2) == 3 * (2 * block + 2 * 256 * 2)


def test_a_reading_between_two_others_is_bracketed_with_its_tolerance():
    assert gpu_check.bracketed(5.0, 4.0, 6.0, 0.0) and gpu_check.bracketed(5.0, 6.0, 4.0, 0.0)
    assert gpu_check.bracketed(6.5, 4.0, 6.0, 0.5) and not gpu_check.bracketed(6.6, 4.0, 6.0, 0.5)
    assert gpu_check.bracketed(3.5, 6.0, 4.0, 0.5) and not gpu_check.bracketed(3.4, 6.0, 4.0, 0.5)


def test_kernel_sum_counts_compute_on_streams_inside_the_marked_steps_only():
    mark = {"step_num": 1}
    trace = space({
        "/host:CPU": {"python3": [("train", 100, 200, mark), ("train", 200, 300, {"step_num": 2}), ("other", 0, 400)]},
        "/device:GPU:0": {
            "Stream #14(Compute)": [("early", 50, 110), ("fusion_1", 120, 150), ("gemm", 250, 310)],
            "Stream #15(MemcpyH2D)": [("MemcpyH2D", 130, 190)],
            "XLA Ops": [("fusion_1", 120, 150)],  # a view of the stream: not counted again
        },
    })
    steps, seconds = gpu_check.marked_kernel_seconds(trace)
    # Clipped to 100..300 us: early 10, fusion_1 30, gemm 50; the copy and the view line are not compute.
    assert steps == 2 and seconds == pytest.approx(90e-6)
    assert gpu_check.marked_kernel_seconds(space({"/host:CPU": {"python3": [("train", 0, 10, mark)]}})) is None
    assert gpu_check.marked_kernel_seconds(space({"/device:GPU:0": {"Stream #1": [("k", 0, 5)]}})) is None


def test_interleaved_pairs_alternate_the_order_and_summarise_the_ratios():
    calls, times = [], iter([2.0, 1.0, 1.0, 2.2, 2.4, 1.0])

    def arm(name):
        def run():
            calls.append(name)
            return next(times)
        return run

    result = _ab.interleaved_pairs(arm("a"), arm("b"), 3)
    assert calls == ["a", "b", "b", "a", "a", "b"]
    assert result["a_s"] == [2.0, 2.2, 2.4] and result["b_s"] == [1.0, 1.0, 1.0]
    assert result["ratios"] == pytest.approx([1.0, 1.2, 1.4])
    assert result["slowdown"]["median"] == pytest.approx(1.2) and result["slowdown"]["n"] == 3
    assert result["difference_of_medians_s"] == pytest.approx(1.2)
    with pytest.raises(ValueError, match="pairs"):
        _ab.interleaved_pairs(arm("a"), arm("b"), 0)


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
            "jax": {"versions": {"jax": "0.10.2"}, "checks": [
                gpu_check.check("MFU", 0.51234, "stopwatch 0.5 ±3%", True),
                gpu_check.skipped("NVML against nvidia-smi", "within two readings", "NVML is not available here"),
            ]},
            "torch": {"error": "worker exited 1: boom"},
        },
    }
    text = gpu_check.markdown(report)
    assert text.splitlines()[0].startswith("GPU: NVIDIA H100 80GB HBM3 (driver 570.1, 79.6 GiB)")
    assert "| jax 0.10.2 | MFU | 0.5123 | stopwatch 0.5 ±3% | pass |" in text
    assert "| jax 0.10.2 | NVML against nvidia-smi | None (NVML is not available here) | within two readings | skip |" in text
    assert "| torch | (run) | worker exited 1: boom | runs | FAIL |" in text


BACKENDS = [
    pytest.param(b, marks=pytest.mark.skipif(importlib.util.find_spec(b) is None, reason=f"{b} is not installed"))
    for b in ("jax", "torch")
]


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_worker_runs_every_check_on_a_cpu_and_skips_the_gpu_ones(tmp_path, backend):
    # Tiny sizes on the CPU: the checks that need no GPU pass, the GPU ones are skipped with a reason, none crashes.
    out = tmp_path / "out.json"
    proc = _run("--worker", backend, "--out", str(out), "--pairs", "1", "--smoke", backend=backend, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {row["check"]: row for row in json.loads(out.read_text())["checks"]}
    assert not any("raised" in name for name in rows), rows
    for name in ("samples/s vs stopwatch (last epoch, s)", "model FLOPs per sample", "transformer FLOPs per sample (float32)",
                 "dispatch: bare arm asynchronous",
                 "weights with keras-gpu (default set, per-epoch checkpoint and backup): arrays that differ"):
        assert rows[name]["pass"] is True, rows[name]
    for name in ("MFU (median, last epoch)", "allocator in use at fit end (GiB)", "NVML against nvidia-smi",
                 "step time: compute vs the trace's kernel sum (ms/step)", "overhead: wall-clock slowdown (median of pairs)",
                 "overhead: time in the callbacks' hooks / fit time", "one-off cost per fit (s)"):
        assert rows[name]["pass"] is None and rows[name]["note"], rows[name]  # skipped, saying why
    assert rows["MFU (median, last epoch)"]["note"] == "no NVIDIA GPU here: no peak FLOP/s"
    assert rows["allocator in use at fit end (GiB)"]["note"] == f"{backend} reports no GPU allocator statistics here"
    # The dispatch is Keras' own reading, whatever it is: a bool, not a skip.
    assert isinstance(rows["dispatch: with keras_gpu.callbacks() asynchronous"]["pass"], bool)
    assert "pairs" in rows["overhead: wall-clock slowdown (median of pairs)"]["note"]


@pytest.mark.gpu
def test_every_gpu_check_passes_on_a_real_gpu(tmp_path):
    out = tmp_path / "gpu_check.json"
    proc = _run("--json", str(out), timeout=3600)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["hardware"]["gpu"] not in ("", "?")
    assert report["backends"] and all(
        "error" not in r and r["checks"] and all(row["pass"] is not False for row in r["checks"])
        for r in report["backends"].values()
    )


H200 = REPO / "tests" / "data"


@pytest.mark.parametrize(
    ("name", "marked", "kernel_ms_per_step"),
    [("h200_jax_transformer_bf16", 20, 5.2155), ("h200_jax_small_mlp", 19, 0.03133), ("h200_jax_mlp_cupti_failed", None, None)],
)
def test_the_kernel_sum_check_passes_on_traces_recorded_on_an_h200(name, marked, kernel_ms_per_step):
    # The same comparison gpu_check makes after its traced fit, on traces StepTimeLogger recorded on an H200.
    from keras_gpu.meters import step_time, xspace

    path = H200 / f"{name}.xplane.pb"
    if not path.exists():
        pytest.skip(f"{path.name} is not in this checkout")
    trace = xspace.load(path)
    truth = gpu_check.marked_kernel_seconds(trace)
    if marked is None:  # the GPU profiler failed: no device plane, nothing to compare (not a zero)
        assert truth is None
        return
    steps, seconds = truth
    assert steps == marked and 1e3 * seconds / steps == pytest.approx(kernel_ms_per_step, rel=1e-3)
    breakdown = step_time.analyze(trace)
    assert breakdown.steps == steps and breakdown.source == "gpu"
    assert gpu_check.within(breakdown.compute_sec, seconds / steps, gpu_check.KERNEL_REL_TOL, gpu_check.KERNEL_ABS_TOL_S)
