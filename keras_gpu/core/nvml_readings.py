"""What NVML reads about a GPU: its fixed facts (`GpuInfo`) and one reading of every metric (`GpuSample`).

NVML is reached through `keras_gpu.core.nvml_session` (its error policy
applies: a metric NVML cannot give is `None`) and TensorFlow's GPU index is
mapped by `keras_gpu.core.nvml_index`. Garbage values (negative,
utilisation above 100 %, temperature above 200 C, memory used above the
card's total, ...) are discarded, with one WARNING per metric and device.
"""

from __future__ import annotations

import logging
import os
from typing import Any, NamedTuple

from keras_gpu.core import nvml_session as _session
from keras_gpu.core.log import log_once
from keras_gpu.core.nvml_index import visible_device
from keras_gpu.core.nvml_session import Device

__all__ = [
    "METRICS",
    "GpuInfo",
    "GpuSample",
    "memory_total_bytes",
    "process_memory_bytes",
    "read_device",
    "sample",
    "static_info",
]

_TEMPERATURE_GPU = 0  # NVML_TEMPERATURE_GPU
_CLOCK_SM = 1  # NVML_CLOCK_SM

# Upper bounds beyond which a reading is garbage (NVML's "not available"
# sentinels are all-ones integers, far above these).
_MAX_PERCENT = 100.0
_MAX_TEMPERATURE_C = 200.0
_MAX_POWER_W = 10_000.0
_MAX_CLOCK_MHZ = 10_000.0

METRICS: tuple[str, ...] = (
    "memory_used_bytes",
    "memory_total_bytes",
    "process_memory_bytes",
    "utilization_percent",
    "memory_utilization_percent",
    "power_watts",
    "temperature_c",
    "sm_clock_mhz",
)
"""The fields of `GpuSample`, which are also the metric names of a sampler window."""


class GpuInfo(NamedTuple):
    """What does not change about a GPU while the process runs.

    Attributes:
        index: NVML's index of the GPU (PCI bus order, all GPUs of the machine).
        name: Product name, e.g. `"NVIDIA H100 80GB HBM3"`.
        uuid: `"GPU-..."` UUID, or `None` when NVML does not report it.
        memory_total_bytes: Total device memory, in bytes.
        compute_capability: CUDA compute capability `(major, minor)`.
        pci_bus_id: PCI bus id, e.g. `"00000000:3B:00.0"`.
    """

    index: int
    name: str | None
    uuid: str | None
    memory_total_bytes: int | None
    compute_capability: tuple[int, int] | None
    pci_bus_id: str | None


class GpuSample(NamedTuple):
    """One reading of a GPU; a field is `None` when NVML could not provide it.

    Attributes:
        memory_used_bytes: Device memory used by all processes, in bytes.
        memory_total_bytes: Total device memory, in bytes.
        process_memory_bytes: Device memory used by this process, in bytes.
        utilization_percent: Percent of the last sample period in which a
            kernel ran on the GPU (0-100).
        memory_utilization_percent: Percent of the last sample period in
            which device memory was read or written (0-100).
        power_watts: Power draw, in watts (NVML reports milliwatts).
        temperature_c: GPU core temperature, in degrees Celsius.
        sm_clock_mhz: Current SM clock, in MHz.
    """

    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    process_memory_bytes: int | None = None
    utilization_percent: float | None = None
    memory_utilization_percent: float | None = None
    power_watts: float | None = None
    temperature_c: float | None = None
    sm_clock_mhz: float | None = None


# --------------------------------------------------------------------------- garbage


def _garbage(metric: str, device: Device, value: Any) -> None:
    log_once(
        logging.WARNING,
        f"nvml:{_session.generation()}:garbage:{metric}:{device.key}",
        "keras-gpu: NVML reported an impossible %s on %s (%r); such readings are discarded.",
        metric,
        device.label,
        value,
    )


def _valid(metric: str, device: Device, value: Any, upper: float | None) -> float | int | None:
    """`value` as a number when it is within `[0, upper]`, else None (with one warning)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        _garbage(metric, device, value)
        return None
    if value < 0 or (upper is not None and value > upper):
        _garbage(metric, device, value)
        return None
    return value


# --------------------------------------------------------------------------- fixed facts


def static_info() -> list[GpuInfo]:
    """Name, UUID, memory, compute capability and PCI bus id of every GPU, in NVML order.

    Returns an empty list without NVML.
    """
    infos = []
    for index in range(_session.device_count()):
        handle = _session.handle(index)
        if handle is None:
            continue
        target = Device(index, handle, str(index), _session.label(index))
        memory = _session.call("nvmlDeviceGetMemoryInfo", handle, metric="memory_total", device=target, quiet=True)
        total = _valid("memory_total_bytes", target, getattr(memory, "total", None), None) if memory else None
        capability = _session.call(
            "nvmlDeviceGetCudaComputeCapability", handle, metric="compute_capability", device=target, quiet=True
        )
        if isinstance(capability, (tuple, list)) and len(capability) == 2:
            capability = (int(capability[0]), int(capability[1]))
        else:
            capability = None
        pci = _session.call("nvmlDeviceGetPciInfo", handle, metric="pci_info", device=target, quiet=True)
        infos.append(
            GpuInfo(
                index=index,
                name=_session.text(_session.call("nvmlDeviceGetName", handle, metric="name", device=target, quiet=True)),
                uuid=_session.uuid(index),
                memory_total_bytes=int(total) if total else None,
                compute_capability=capability,
                pci_bus_id=_session.text(getattr(pci, "busId", None)) if pci is not None else None,
            )
        )
    return infos


def memory_total_bytes(tf_gpu_index: int, *, environ: Any = None) -> int | None:
    """Total memory, in bytes, of TensorFlow's GPU `tf_gpu_index` (of the MIG instance for a MIG entry).

    `None` when NVML is not available or no such GPU is visible.
    """
    target = visible_device(tf_gpu_index, environ)
    if target is None:
        return None
    memory = _session.call("nvmlDeviceGetMemoryInfo", target.handle, metric="memory", device=target)
    total = _valid("memory_total_bytes", target, getattr(memory, "total", None), None) if memory is not None else None
    return int(total) if total else None


# --------------------------------------------------------------------------- readings


def _own_memory(target: Device, entries: list[Any]) -> int | None:
    """The memory this process's `entries` of one process list hold, or None when the driver does not say."""
    used = [getattr(p, "usedGpuMemory", None) for p in entries]
    if any(u is None for u in used):
        log_once(
            logging.INFO,
            f"nvml:{_session.generation()}:pidmem:{target.key}",
            "keras-gpu: the driver does not report per-process memory on %s (e.g. Windows WDDM or a "
            "restricted container); per-process GPU memory is not reported.",
            target.label,
        )
        return None
    return sum(used)


def _process_memory(target: Device, total: float | None) -> int | None:
    """Device memory used by this process on `target`, in bytes, or None when unknown.

    Compute and graphics processes are listed separately; a process that uses
    both appears in both lists with the same figure, so the larger of the two
    per-list sums is taken rather than their total.
    """
    compute = _session.call(
        "nvmlDeviceGetComputeRunningProcesses", target.handle, metric="process_memory", device=target
    )
    if compute is None:
        return None
    graphics = _session.call(
        "nvmlDeviceGetGraphicsRunningProcesses", target.handle, metric="graphics_processes", device=target, quiet=True
    )
    pid = os.getpid()
    lists = [list(compute), list(graphics or [])]
    mine = [[p for p in procs if getattr(p, "pid", None) == pid] for procs in lists]
    if not any(mine):
        if any(lists):
            log_once(
                logging.INFO,
                f"nvml:{_session.generation()}:pid:{target.key}",
                "keras-gpu: this process (pid %d) is not among the processes NVML lists on %s, probably "
                "because it runs in its own PID namespace (a container); per-process GPU memory is not reported.",
                pid,
                target.label,
            )
            return None
        return 0
    sums = []
    for entries in mine:
        if not entries:
            continue
        own = _own_memory(target, entries)
        if own is None:
            return None
        sums.append(own)
    value = _valid("process_memory_bytes", target, max(sums), total)
    return int(value) if value is not None else None


def _memory(target: Device) -> tuple[float | int | None, float | int | None]:
    """`(used, total)` device memory of `target`, in bytes; either is None when unknown or garbage."""
    memory = _session.call("nvmlDeviceGetMemoryInfo", target.handle, metric="memory", device=target)
    if memory is None:
        return None, None
    total = _valid("memory_total_bytes", target, getattr(memory, "total", None), None)
    if total == 0:
        _garbage("memory_total_bytes", target, total)
        total = None
    return _valid("memory_used_bytes", target, getattr(memory, "used", None), total), total


def _float(value: float | int | None) -> float | None:
    return float(value) if value is not None else None


def read_device(target: Device) -> GpuSample:
    """One reading of every metric of `target` (a field is `None` when NVML cannot give it)."""
    handle = target.handle
    used, total = _memory(target)
    util = _session.call("nvmlDeviceGetUtilizationRates", handle, metric="utilization", device=target)
    gpu_util = mem_util = None
    if util is not None:
        gpu_util = _valid("utilization_percent", target, getattr(util, "gpu", None), _MAX_PERCENT)
        mem_util = _valid("memory_utilization_percent", target, getattr(util, "memory", None), _MAX_PERCENT)
    power_mw = _session.call("nvmlDeviceGetPowerUsage", handle, metric="power", device=target)
    numeric = isinstance(power_mw, (int, float)) and not isinstance(power_mw, bool)
    power = _valid("power_watts", target, power_mw / 1000.0 if numeric else power_mw, _MAX_POWER_W)  # mW -> W
    temperature = _valid(
        "temperature_c",
        target,
        _session.call("nvmlDeviceGetTemperature", handle, _TEMPERATURE_GPU, metric="temperature", device=target),
        _MAX_TEMPERATURE_C,
    )
    clock = _valid(
        "sm_clock_mhz",
        target,
        _session.call("nvmlDeviceGetClockInfo", handle, _CLOCK_SM, metric="sm_clock", device=target),
        _MAX_CLOCK_MHZ,
    )
    return GpuSample(
        memory_used_bytes=int(used) if used is not None else None,
        memory_total_bytes=int(total) if total is not None else None,
        process_memory_bytes=_process_memory(target, total),
        utilization_percent=_float(gpu_util),
        memory_utilization_percent=_float(mem_util),
        power_watts=_float(power),
        temperature_c=_float(temperature),
        sm_clock_mhz=_float(clock),
    )


def process_memory_bytes(tf_gpu_index: int, *, environ: Any = None) -> int | None:
    """Device memory used by this process on TensorFlow's GPU `tf_gpu_index`, in bytes.

    `None` when NVML is not available, the GPU is not visible, or the driver
    does not list this process (another PID namespace) or its memory.
    """
    target = visible_device(tf_gpu_index, environ)
    if target is None:
        return None
    memory = _session.call("nvmlDeviceGetMemoryInfo", target.handle, metric="memory", device=target)
    return _process_memory(target, getattr(memory, "total", None) if memory is not None else None)


def sample(tf_gpu_index: int, *, environ: Any = None) -> GpuSample | None:
    """One reading of every metric of TensorFlow's GPU `tf_gpu_index`.

    `None` when NVML is not available or the GPU is not visible; a field is
    `None` when that metric is not available.
    """
    target = visible_device(tf_gpu_index, environ)
    return read_device(target) if target is not None else None
