"""NVML (the `nvidia-ml-py` package, imported as `pynvml`) in one import: every public name of the NVML modules.

Importing this module neither imports `pynvml` nor touches a GPU. The work is
done in modules of one concept each:

* `keras_gpu.core.nvml_session`: the one place that calls `pynvml`:
  NVML started once, lazily, under a lock, and shut down at exit, and the
  error policy every query goes through (a failed query returns `None`;
  NVML failing for good turns monitoring off; training goes on).
  `available`, `unavailable_reason`, `driver_version`,
  `device_count`.
* `keras_gpu.core.nvml_index`: TensorFlow's GPU index to NVML's,
  following `CUDA_VISIBLE_DEVICES` (integers, `GPU-` UUIDs or prefixes,
  `MIG-` instances). `tf_to_nvml_index`.
* `keras_gpu.core.nvml_readings`: what NVML reads: `GpuInfo`
  (`static_info`), `GpuSample` (`sample`),
  `memory_total_bytes`, `process_memory_bytes`, with garbage
  values discarded.
* `keras_gpu.core.nvml_sampler`: `GpuSampler` samples on a daemon
  thread and keeps, per window, the count, sum and maximum of each metric per
  GPU; `GpuSampler.drain` returns the window's `WindowStat` and
  starts a new window.
"""

from __future__ import annotations

from keras_gpu.core.nvml_index import tf_to_nvml_index
from keras_gpu.core.nvml_readings import (
    METRICS,
    GpuInfo,
    GpuSample,
    memory_total_bytes,
    process_memory_bytes,
    sample,
    static_info,
)
from keras_gpu.core.nvml_sampler import GpuSampler, WindowStat
from keras_gpu.core.nvml_session import (
    available,
    device_count,
    driver_version,
    unavailable_reason,
)

__all__ = [
    "METRICS",
    "GpuInfo",
    "GpuSample",
    "GpuSampler",
    "WindowStat",
    "available",
    "device_count",
    "driver_version",
    "memory_total_bytes",
    "process_memory_bytes",
    "sample",
    "static_info",
    "tf_to_nvml_index",
    "unavailable_reason",
]
