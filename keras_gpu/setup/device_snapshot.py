"""What `configure_devices()` reads before it plans: the machine and the settings in force, as a `Snapshot`.

Reading never initialises TensorFlow's runtime (see `take_snapshot`), so the
settings that can only change before it starts still can afterwards.

Importing this module imports neither TensorFlow nor Keras.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, make_dataclass
from types import MappingProxyType
from typing import Any

from keras_gpu.core.log import logger
from keras_gpu.core.tf_private import runtime_initialized
from keras_gpu.setup.device_request import Request
from keras_gpu.setup.device_settings import (
    ENV_FORCE_GROWTH,
    ENV_THREAD_COUNT,
    ENV_THREAD_MODE,
    SIMPLE,
)

__all__ = ["MachineSnapshot", "Snapshot", "gpu_total_bytes", "take_snapshot"]


@dataclass(frozen=True)
class MachineSnapshot:
    """The machine and the planner's settings in force, as read before any change.

    GPU tuples are indexed by physical GPU index (TensorFlow's enumeration).

    Attributes:
        initialized: Whether TensorFlow's runtime had started.
        gpu_count: Physical GPUs TensorFlow sees.
        cpu_count: Physical CPU devices TensorFlow sees.
        gpu_memory_bytes: Total memory per GPU in bytes (None: unknown); only
            read when `memory_fraction` is used.
        visible_gpus: Indices of the visible GPUs.
        memory_growth: Memory growth per GPU; None: never set.
        gpu_logical_mb: Logical-device sizes in MB per GPU; None: no
            logical-device configuration.
        cpu_logical_devices: Logical CPU devices; None: no logical-device
            configuration (one CPU device).
        env: The GPU thread and memory-growth environment variables that are set.
    """

    initialized: bool
    gpu_count: int
    cpu_count: int
    gpu_memory_bytes: Mapping[int, int | None]
    visible_gpus: tuple[int, ...]
    memory_growth: tuple[bool | None, ...]
    gpu_logical_mb: tuple[tuple[float, ...] | None, ...]
    cpu_logical_devices: int | None
    env: Mapping[str, str]


Snapshot = make_dataclass("Snapshot", [(s.name, Any) for s in SIMPLE], bases=(MachineSnapshot,), frozen=True)
Snapshot.__module__ = __name__
Snapshot.__doc__ = "The machine, plus one field per simple setting (read only when the call names it, else None)."


def gpu_total_bytes(index: int) -> int | None:
    """Total memory of TensorFlow's physical GPU `index` from NVML, or None when unknown."""
    try:
        from keras_gpu.core.nvml import memory_total_bytes
    except ImportError as exc:
        logger.debug("NVML is unavailable, GPU memory unknown: %s", exc)
        return None
    total = memory_total_bytes(index)
    if isinstance(total, bool) or not isinstance(total, int) or total <= 0:
        return None
    return total


def take_snapshot(req: Request) -> Snapshot:
    """Read the machine and the settings in force.

    Listing physical devices does not initialise the runtime: checked on
    TensorFlow 2.21 (CPU build) in a fresh process, `context._context_handle`
    stays None after `list_physical_devices`, `get_visible_devices`, the memory
    growth / logical-device getters and the `tf.config` option getters, and
    logical devices can still be configured afterwards. TensorFlow documents
    `list_physical_devices` as querying devices "before they have been
    initialized by the eager runtime".
    """
    import tensorflow as tf

    initialized = runtime_initialized()
    gpus = tf.config.list_physical_devices("GPU")
    cpus = tf.config.list_physical_devices("CPU")
    visible = tf.config.get_visible_devices("GPU")
    cpu_config = tf.config.get_logical_device_configuration(cpus[0]) if cpus else None

    gpu_logical: list[tuple[float, ...] | None] = []
    for gpu in gpus:
        config = tf.config.get_logical_device_configuration(gpu)
        gpu_logical.append(None if config is None else tuple(d.memory_limit for d in config))

    memory: dict[int, int | None] = {}
    if req.memory_fraction is not None:
        memory = {i: gpu_total_bytes(i) for i in range(len(gpus))}

    return Snapshot(
        initialized=initialized,
        gpu_count=len(gpus),
        cpu_count=len(cpus),
        gpu_memory_bytes=MappingProxyType(memory),
        visible_gpus=tuple(i for i, g in enumerate(gpus) if g in visible),
        memory_growth=tuple(tf.config.experimental.get_memory_growth(g) for g in gpus),
        gpu_logical_mb=tuple(gpu_logical),
        cpu_logical_devices=None if cpu_config is None else len(cpu_config),
        **{s.name: s.read() if getattr(req, s.name) is not None else None for s in SIMPLE},
        env=MappingProxyType(
            {k: os.environ[k] for k in (ENV_THREAD_MODE, ENV_THREAD_COUNT, ENV_FORCE_GROWTH) if k in os.environ}
        ),
    )
