"""Tests of `keras-gpu env` and `keras_gpu.cli.envinfo`.

The command runs in subprocesses on this GPU-less machine; the GPU section is
tested in-process with a faked NVML (no TensorFlow device is touched here).
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys

import pytest

from keras_gpu.cli import envinfo
from keras_gpu.cli.env import render_text
from keras_gpu.core import nvml
from tests._util import subprocess_env

TWO_WORKERS = json.dumps(
    {"cluster": {"worker": ["127.0.0.1:45001", "127.0.0.1:45002"]}, "task": {"type": "worker", "index": 1}}
)
SECTIONS = {
    "keras_gpu", "python", "platform", "tensorflow", "jax", "keras", "tensorboard", "environment",
    "nvml", "gpus", "devices", "cluster", "strategy", "problems",
}


def _env_cmd(*args: str, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "keras_gpu.cli", "env", *args],
        env=subprocess_env(extra_env),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def json_run() -> subprocess.CompletedProcess:
    return _env_cmd("--json")


@pytest.fixture(scope="module")
def text_run() -> subprocess.CompletedProcess:
    return _env_cmd()


def _has_gpu() -> bool:
    return nvml.available()


# ------------------------------------------------------------- subprocesses


def test_json_report_is_complete_and_valid(json_run):
    assert json_run.returncode == 0, json_run.stderr
    report = json.loads(json_run.stdout)
    assert set(report) == SECTIONS
    assert report["problems"] == []
    assert report["keras_gpu"]["version"] == importlib.metadata.version("keras-gpu")
    assert report["python"]["version"] == ".".join(map(str, sys.version_info[:3]))
    tf_dists = report["tensorflow"]["distributions"]
    assert tf_dists and all(importlib.metadata.version(d) == v for d, v in tf_dists.items())
    assert report["tensorflow"]["version"] in tf_dists.values()
    assert isinstance(report["tensorflow"]["is_cuda_build"], bool)
    assert report["keras"] == {"version": importlib.metadata.version("keras"), "backend": "tensorflow"}
    assert report["tensorboard"] == {"installed": True, "version": importlib.metadata.version("tensorboard")}
    assert report["tensorflow"]["installed"] is True
    assert report["devices"]["backend"] == report["strategy"]["backend"] == "tensorflow"
    assert {"name": "/device:CPU:0", "device_type": "CPU"} in report["devices"]["logical"]
    assert report["cluster"]["source"] == "local" and report["cluster"]["num_workers"] == 1
    assert report["strategy"]["kind"] in ("default", "one_device", "mirrored")
    assert report["strategy"]["reason"]


def test_json_report_says_there_is_no_gpu(json_run):
    if _has_gpu():
        pytest.skip("this machine has an NVIDIA GPU")
    report = json.loads(json_run.stdout)
    assert report["nvml"]["available"] is False
    assert report["nvml"]["message"].startswith("No NVIDIA GPU / NVML not available: ")
    assert len(report["nvml"]["message"]) > len("No NVIDIA GPU / NVML not available: ") + 5
    assert report["gpus"] == []
    assert all(d["device_type"] != "GPU" for d in report["devices"]["physical"])


def test_text_report_is_readable_and_says_there_is_no_gpu(text_run):
    assert text_run.returncode == 0, text_run.stderr
    out = text_run.stdout
    for heading in ("Versions", "NVIDIA GPUs", "TensorFlow devices", "Distribution"):
        assert heading in out
    assert re.search(rf"keras-gpu\s+{re.escape(importlib.metadata.version('keras-gpu'))}\n", out)
    assert "single process (source: local)" in out
    assert "Problems: none found" in out
    assert "Traceback" not in out + text_run.stderr
    if not _has_gpu():
        assert "No NVIDIA GPU / NVML not available:" in out


def test_tf_config_is_reported_as_multiworker():
    proc = _env_cmd("--json", extra_env={"TF_CONFIG": TWO_WORKERS})
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    cluster = report["cluster"]
    assert cluster["source"] == "tf_config"
    assert cluster["is_multi_worker"] is True and cluster["num_workers"] == 2
    assert (cluster["task_type"], cluster["task_index"], cluster["is_chief"]) == ("worker", 1, False)
    assert cluster["cluster"] == {"worker": ["127.0.0.1:45001", "127.0.0.1:45002"]}
    assert report["strategy"]["kind"] == "multiworker"
    assert "2" in report["strategy"]["reason"]
    assert report["environment"]["TF_CONFIG"] == TWO_WORKERS
    assert report["problems"] == []


def test_malformed_tf_config_is_a_reported_problem_not_a_crash():
    proc = _env_cmd(extra_env={"TF_CONFIG": '{"cluster": {"worker": ["127.0.0.1:1"]}'})
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "PROBLEM: ValueError: TF_CONFIG is not valid JSON" in proc.stdout
    problems = proc.stdout.split("Problems:", 1)[1]
    assert "- cluster: ValueError: TF_CONFIG is not valid JSON" in problems
    assert "Versions" in proc.stdout and "TensorFlow devices" in proc.stdout  # the rest is still there


# --------------------------------------------------------------- faked NVML


@pytest.fixture
def fake_nvml(monkeypatch):
    gpus = [
        nvml.GpuInfo(0, "NVIDIA A100-SXM4-80GB", "GPU-aaaa", 80 * 2**30, (8, 0), "00000000:07:00.0"),
        nvml.GpuInfo(1, "NVIDIA A100-SXM4-80GB", "GPU-bbbb", 80 * 2**30, None, "00000000:0F:00.0"),
    ]
    monkeypatch.setattr(nvml, "available", lambda: True)
    monkeypatch.setattr(nvml, "driver_version", lambda: "550.54.15")
    monkeypatch.setattr(nvml, "static_info", lambda: list(gpus))
    return gpus


def test_gpu_sections_with_faked_nvml(fake_nvml):
    assert envinfo._nvml() == {"available": True, "driver_version": "550.54.15", "message": None}
    gpus = envinfo._gpus()
    assert gpus == [
        {
            "index": 0,
            "name": "NVIDIA A100-SXM4-80GB",
            "uuid": "GPU-aaaa",
            "memory_total_bytes": 80 * 2**30,
            "compute_capability": [8, 0],
            "pci_bus_id": "00000000:07:00.0",
        },
        {
            "index": 1,
            "name": "NVIDIA A100-SXM4-80GB",
            "uuid": "GPU-bbbb",
            "memory_total_bytes": 80 * 2**30,
            "compute_capability": None,
            "pci_bus_id": "00000000:0F:00.0",
        },
    ]
    json.dumps(gpus)


def test_nvml_section_without_nvml_gives_the_reason(monkeypatch):
    monkeypatch.setattr(nvml, "available", lambda: False)
    monkeypatch.setattr(nvml, "unavailable_reason", lambda: "libnvidia-ml.so.1 not found")
    assert envinfo._nvml() == {
        "available": False,
        "driver_version": None,
        "message": "No NVIDIA GPU / NVML not available: libnvidia-ml.so.1 not found",
    }
    assert envinfo._gpus() == []


def _report(gpus, *, cuda_build, tf_gpus):
    physical = [{"name": "/physical_device:CPU:0", "device_type": "CPU"}]
    physical += [
        {"name": f"/physical_device:GPU:{i}", "device_type": "GPU", "device_name": "NVIDIA A100", "compute_capability": [8, 0]}
        for i in range(tf_gpus)
    ]
    return {
        "keras_gpu": {"version": "9.9"},
        "python": {"version": "3.11.7", "implementation": "CPython", "executable": "/py"},
        "platform": {"platform": "Linux-x", "usable_cpus": 8, "cpu_count": 8},
        "tensorflow": {
            "version": "2.21.0",
            "distributions": {"tensorflow": "2.21.0"},
            "is_cuda_build": cuda_build,
            "cuda_version": "12.5.1" if cuda_build else None,
            "cudnn_version": "9" if cuda_build else None,
        },
        "keras": {"version": "3.15.1", "backend": "tensorflow"},
        "tensorboard": {"installed": False, "version": None},
        "environment": {},
        "nvml": {"available": True, "driver_version": "550.54.15", "message": None},
        "gpus": gpus,
        "devices": {"physical": physical, "logical": [{"name": "/device:CPU:0", "device_type": "CPU"}]},
        "cluster": {"description": "single process (source: local)", "cluster": {}},
        "strategy": {
            "kind": "mirrored",
            "devices": ["/device:GPU:0", "/device:GPU:1"],
            "cross_device_ops": "nccl",
            "communication": None,
            "reason": "2 GPUs are visible",
            "notes": [],
        },
        "problems": [],
    }


def test_text_rendering_of_gpus(fake_nvml):
    report = _report(envinfo._gpus(), cuda_build=True, tf_gpus=2)
    text = render_text(report)
    assert "NVIDIA GPUs (driver 550.54.15)" in text
    rows = [line for line in text.splitlines() if "NVIDIA A100-SXM4-80GB" in line]
    assert len(rows) == 2
    assert "80.0 GiB" in rows[0] and " 8.0 " in rows[0] and "00000000:07:00.0" in rows[0]
    assert "GPU-bbbb" in rows[1] and " ? " in rows[1]
    assert "2.21.0 (tensorflow 2.21.0; CUDA 12.5.1, cuDNN 9)" in text
    assert re.search(r"TensorBoard\s+not installed", text)
    assert "/physical_device:GPU:1 (NVIDIA A100, compute capability 8.0)" in text
    assert "mirrored" in text and "nccl" in text and "2 GPUs are visible" in text
    assert all(line == line.rstrip() for line in text.splitlines())


def test_diagnose_gpus_that_tensorflow_cannot_use(fake_nvml, monkeypatch):
    gpus = envinfo._gpus()
    assert envinfo._diagnose(_report(gpus, cuda_build=True, tf_gpus=2)) == []
    [cpu_build] = envinfo._diagnose(_report(gpus, cuda_build=False, tf_gpus=0))
    assert "no CUDA support" in cpu_build and "tensorflow[and-cuda]" in cpu_build
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    [hidden] = envinfo._diagnose(_report(gpus, cuda_build=True, tf_gpus=0))
    assert "TensorFlow sees none" in hidden and "CUDA_VISIBLE_DEVICES=''" in hidden
    two_tf = _report([], cuda_build=False, tf_gpus=0)
    two_tf["tensorflow"]["distributions"] = {"tensorflow": "2.21.0", "tensorflow-cpu": "2.21.0"}
    [dup] = envinfo._diagnose(two_tf)
    assert "Several TensorFlow distributions" in dup


def test_a_failing_section_is_reported_and_the_rest_still_collected(monkeypatch, fake_nvml):
    # Stand-ins for the sections that would initialise TensorFlow in this process.
    monkeypatch.setattr(envinfo, "_tensorflow", lambda: {"version": "x", "distributions": {}, "is_cuda_build": True})
    monkeypatch.setattr(envinfo, "_keras", lambda: {"version": "y", "backend": "tensorflow"})
    monkeypatch.setattr(envinfo, "_devices", lambda: {"physical": [{"name": "g", "device_type": "GPU"}], "logical": []})
    monkeypatch.setattr(envinfo, "_strategy", lambda: {"kind": "default"})
    monkeypatch.setenv("TF_CONFIG", "not json")
    report = envinfo.collect()
    assert set(report) == SECTIONS
    assert report["cluster"]["error"].startswith("ValueError: TF_CONFIG is not valid JSON")
    assert report["problems"] == [f"cluster: {report['cluster']['error']}"]
    assert len(report["gpus"]) == 2 and report["nvml"]["driver_version"] == "550.54.15"
    assert report["environment"]["TF_CONFIG"] == "not json"
    json.dumps(report)


def test_text_rendering_keeps_square_brackets_literal():
    report = _report([], cuda_build=False, tf_gpus=0)
    report["environment"] = {"TF_CONFIG": '{"cluster": {"worker": ["[bold]h:1"]}} [/x]'}
    report["problems"] = ["cluster: ValueError: bad [red]value[/red] ['a']"]
    text = render_text(report)
    assert '{"cluster": {"worker": ["[bold]h:1"]}} [/x]' in text
    assert "  - cluster: ValueError: bad [red]value[/red] ['a']" in text
