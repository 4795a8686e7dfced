"""Test configuration: quiet TensorFlow logs, and skip `gpu` tests where no NVIDIA GPU is present."""

from __future__ import annotations

import os
import shutil

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# TensorFlow keeps CPU allocator statistics (`get_memory_info("CPU:0")`) only with
# its oneDNN ops on, which it leaves off by default on some x86 CPUs; the memory
# tests read them. Child processes inherit this.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")

# In CI the fuzz tests replay the same examples on every run, so a red run is
# reproducible; locally hypothesis explores new examples each time.
try:
    from hypothesis import settings as _hypothesis_settings

    _hypothesis_settings.register_profile("ci", derandomize=True, database=None)
    if os.environ.get("CI"):
        _hypothesis_settings.load_profile("ci")
except ImportError:  # pragma: no cover - hypothesis is a test dependency
    pass
os.environ.setdefault("KERAS_BACKEND", "tensorflow")


def _has_nvidia_gpu() -> bool:
    # Decided without initialising TensorFlow in the test process.
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return pynvml.nvmlDeviceGetCount() > 0
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - any failure means no usable NVML
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if any(item.get_closest_marker("gpu") for item in items) and not _has_nvidia_gpu():
        skip = pytest.mark.skip(reason="needs an NVIDIA GPU with a working NVML driver; none on this machine")
        for item in items:
            if item.get_closest_marker("gpu"):
                item.add_marker(skip)
