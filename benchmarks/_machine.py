"""The machine description stored with every result: CPU, cores, load, versions, GPUs."""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import socket
from typing import Any

__all__ = ["describe_machine", "load_average"]


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _gpus() -> dict[str, Any]:
    try:
        from keras_gpu.core import nvml

        if not nvml.available():
            return {"available": False, "reason": nvml.unavailable_reason(), "gpus": []}
        return {
            "available": True,
            "driver_version": nvml.driver_version(),
            "gpus": [{"index": g.index, "name": g.name, "memory_total_bytes": g.memory_total_bytes} for g in nvml.static_info()],
        }
    except Exception as exc:  # noqa: BLE001 - the description must never stop the benchmark
        return {"available": False, "reason": f"{type(exc).__name__}: {exc}", "gpus": []}


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages, or `None` where unavailable."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def describe_machine() -> dict[str, Any]:
    """Host, CPU model and cores, memory, Python/TensorFlow/Keras/keras-gpu versions and NVML GPUs.

    Does not import TensorFlow (versions come from the installed
    distributions), so it is cheap and initialises nothing.
    """
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        mem = None
    tf_dist = next((d for d in ("tensorflow", "tensorflow-cpu", "tf-nightly") if _version(d)), None)
    from keras_gpu._version import __version__

    return {
        "hostname": socket.gethostname(),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "usable_cpus": usable,
        "memory_bytes": mem,
        "load_average": load_average(),
        "python": platform.python_version(),
        "tensorflow": {"distribution": tf_dist, "version": _version(tf_dist) if tf_dist else None},
        "keras": _version("keras"),
        "tensorboard": _version("tensorboard"),
        "keras_gpu": __version__,
        "nvml": _gpus(),
    }
