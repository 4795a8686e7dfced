"""Test configuration: quiet TensorFlow logs, and skip `gpu` tests where no NVIDIA GPU is present."""

from __future__ import annotations

import os
import shutil

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
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
    except Exception:
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if any(item.get_closest_marker("gpu") for item in items) and not _has_nvidia_gpu():
        skip = pytest.mark.skip(reason="needs an NVIDIA GPU with a working NVML driver; none on this machine")
        for item in items:
            if item.get_closest_marker("gpu"):
                item.add_marker(skip)
