"""Where the replicas run: replica devices, device names, logical and physical GPUs.

One home for three facts that the callbacks and the placement report all
need, so that one run labels one device the same way everywhere:

* **Replica devices** (`replica_devices`): this worker's replica devices
  of a strategy, in replica order. A strategy without a device list (the
  default strategy) runs on the first logical GPU, else on the CPU.
* **Device names** (`parse_device`): one parser for TensorFlow's device
  strings (`/job:worker/replica:0/task:1/device:GPU:0`, `/device:CPU:0`,
  `/gpu:0`, `GPU:0`, `/physical_device:GPU:3`), with the labels built from it
  (`device_label` for tags, `short_device` for tables).
* **Logical to physical GPUs** (`gpu_layout`, `physical_gpus`):
  TensorFlow numbers logical GPUs in the order of the visible physical GPUs,
  each split into its configured number of logical devices.

Parsing is pure Python; the functions that read TensorFlow import it lazily
and say whether they initialise its runtime.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from keras_gpu.core import tf_private as _tf

__all__ = [
    "DeviceName",
    "allocator_devices",
    "default_device",
    "device_label",
    "device_sort_key",
    "device_type",
    "gpu_layout",
    "logical_gpu_order",
    "logical_to_physical",
    "parse_device",
    "physical_gpus",
    "replica_devices",
    "short_device",
    "trace_gpu_replicas",
    "visible_gpu_count",
]

_UNPLACED = "(unplaced)"
_TYPE = re.compile(r"^[A-Za-z_]+$")
_INDEX = re.compile(r"^\d+$")


class DeviceName(NamedTuple):
    """The parts of one TensorFlow device name; `None` where the name leaves a part out.

    Attributes:
        job: The job (`"localhost"`, `"worker"`, ...).
        replica: The replica number.
        task: The task number.
        device_type: Upper case (`"CPU"`, `"GPU"`, ...); `""` when the name has no device part.
        index: The device index; `None` when missing or `*`.
    """

    job: str | None
    replica: int | None
    task: int | None
    device_type: str
    index: int | None


def parse_device(name: str) -> DeviceName | None:
    """Split a TensorFlow device name into its parts; `None` when it is not one.

    Accepts the full form (`/job:localhost/replica:0/task:0/device:GPU:0`),
    any subset of its parts, the short forms `/gpu:0`, `GPU:0` and
    `/device:CPU:*`, and physical device names (`/physical_device:GPU:3`).
    The device type is upper-cased.
    """
    if not isinstance(name, str) or not name.strip():
        return None
    job = replica = task = index = None
    kind = ""
    for part in name.strip().split("/"):
        if not part:
            continue
        key, _, rest = part.partition(":")
        if key == "job" and rest:
            job = rest
        elif key in ("replica", "task") and _INDEX.match(rest):
            replica, task = (int(rest), task) if key == "replica" else (replica, int(rest))
        else:
            if key in ("device", "physical_device"):
                key, _, rest = rest.partition(":")
            if not _TYPE.match(key) or key in ("job", "replica", "task") or not (rest == "*" or _INDEX.match(rest)):
                return None
            kind, index = key.upper(), int(rest) if _INDEX.match(rest) else None
    return DeviceName(job, replica, task, kind, index)


def device_type(device: str) -> str:
    """The device type of a device name, upper case: `"CPU"`, `"GPU"`, ... (`""` if unknown)."""
    parsed = parse_device(device)
    return parsed.device_type if parsed and parsed.index is not None else ""


def device_label(device: str) -> str:
    """A tag-safe label for a device, `TYPE_INDEX`: `GPU_0`, `CPU_1` (`device_0` if unknown)."""
    parsed = parse_device(device)
    if parsed is None or not parsed.device_type:
        return "device_0"
    return f"{parsed.device_type}_{parsed.index or 0}"


def short_device(device: str) -> str:
    """A compact device name for tables.

    `/job:localhost/replica:0/task:0/device:GPU:0` -> `GPU:0`;
    `/job:worker/replica:0/task:1/device:GPU:0` -> `worker:1/GPU:0`;
    `""` -> `(unplaced)`; a string that is not a device name comes back as is.
    """
    if not device:
        return _UNPLACED
    parsed = parse_device(device)
    if parsed is None or parsed.index is None:
        return device
    name = f"{parsed.device_type}:{parsed.index}"
    if parsed.job is not None and parsed.job != "localhost":
        return f"{parsed.job}:{parsed.task or 0}/{name}"
    return name


def device_sort_key(device: str) -> tuple[str, int, str, int, str]:
    """Sort key for device names: job, task, device type, index (then the name itself)."""
    parsed = parse_device(device)
    if parsed is None:
        return ("", 0, device, 0, device)
    placed = parsed.index is not None
    return (
        parsed.job or "",
        parsed.task or 0,
        parsed.device_type if placed else device,
        parsed.index if placed else 0,
        device,
    )


# --------------------------------------------------------------------------- replica devices


def default_device() -> str:
    """Where ops of the default strategy go: the first logical GPU if any, else the CPU.

    Lists logical devices, which initialises TensorFlow's runtime.
    """
    import tensorflow as tf

    device = "GPU:0" if tf.config.list_logical_devices("GPU") else "CPU:0"
    return f"/job:localhost/replica:0/task:0/device:{device}"


def replica_devices(strategy: Any) -> tuple[str, ...]:
    """This worker's replica devices of `strategy`, in replica order (never empty).

    The strategy's own device list; for a strategy without one (the default
    strategy, `None`), the one `default_device`. Initialises
    TensorFlow's runtime (as building a strategy does).
    """
    return _tf.strategy_devices(strategy) or (default_device(),)


def allocator_devices(devices: Iterable[str]) -> list[tuple[str, str]]:
    """`(device, tag label)` of each distinct memory allocator behind `devices`, in order.

    `("GPU:1", "GPU_1")` for a GPU; all logical CPUs share one allocator,
    `("CPU:0", "CPU_0")`. A name without a device type counts as the CPU.
    """
    result: list[tuple[str, str]] = []
    for name in devices:
        parsed = parse_device(name)
        kind = (parsed.device_type if parsed else "") or "CPU"
        index = 0 if kind == "CPU" or parsed is None else (parsed.index or 0)
        entry = (f"{kind}:{index}", f"{kind}_{index}")
        if entry not in result:
            result.append(entry)
    return result


# --------------------------------------------------------------------------- logical and physical GPUs


def gpu_layout() -> list[tuple[int, int]]:
    """`(physical GPU index, logical GPUs on it)` for each visible physical GPU, in TensorFlow's order.

    Reads the configuration only: does not initialise TensorFlow's runtime.
    """
    import tensorflow as tf

    layout = []
    for device in tf.config.get_visible_devices("GPU"):
        configs = tf.config.get_logical_device_configuration(device)
        parsed = parse_device(device.name)
        index = parsed.index if parsed is not None and parsed.index is not None else len(layout)
        layout.append((index, len(configs) if configs else 1))
    return layout


def logical_to_physical(layout: Sequence[tuple[int, int]], logical: Iterable[int]) -> list[int]:
    """The distinct physical GPU indices behind logical GPU indices, in order of first use.

    Args:
        layout: For each visible physical GPU in order, `(physical index,
            number of logical devices on it)` (see `gpu_layout`).
            TensorFlow numbers logical GPUs in that order.
        logical: Logical GPU indices; those out of range are left out.
    """
    order = logical_gpu_order(layout)
    result: list[int] = []
    for index in logical:
        if 0 <= index < len(order) and order[index] not in result:
            result.append(order[index])
    return result


def logical_gpu_order(layout: Sequence[tuple[int, int]]) -> list[int]:
    """The physical GPU index behind each logical GPU index: element `k` serves logical GPU `k`.

    Args:
        layout: `(physical index, logical devices on it)` per visible physical
            GPU, in order (see `gpu_layout`).
    """
    return [physical for physical, count in layout for _ in range(max(count, 1))]


def trace_gpu_replicas(
    devices: Sequence[str], layout: Sequence[tuple[int, int]] | None = None
) -> dict[int, tuple[int, ...]]:
    """`{GPU index as a profiler trace numbers it: local replicas on it}` for replica devices in replica order.

    A trace's `/device:GPU:k` planes number GPUs as the CUDA driver shows
    them to the process: after `CUDA_VISIBLE_DEVICES` (with
    `CUDA_VISIBLE_DEVICES=4,6`, the process's GPUs 0 and 1), which is also how
    TensorFlow numbers its physical GPUs (`/physical_device:GPU:k`) whatever
    `tf.config.set_visible_devices` hides. A replica on logical GPU `k` runs on
    the physical GPU `logical_gpu_order` gives for `k`; logical GPUs
    split from one physical GPU share its plane, so it maps to each of their
    replicas. Devices that are not GPUs, and logical GPUs outside the layout,
    are left out.

    Args:
        devices: This worker's replica devices in replica order (TensorFlow
            device names, as `replica_devices` gives them).
        layout: TensorFlow's GPU layout (`gpu_layout`); `None` where
            each logical GPU is its own device (JAX, PyTorch).
    """
    order = logical_gpu_order(layout) if layout is not None else None
    mapping: dict[int, tuple[int, ...]] = {}
    for replica, name in enumerate(devices):
        parsed = parse_device(name)
        if parsed is None or parsed.device_type != "GPU" or parsed.index is None:
            continue
        if order is not None and not 0 <= parsed.index < len(order):
            continue
        physical = order[parsed.index] if order is not None else parsed.index
        mapping[physical] = (*mapping.get(physical, ()), replica)
    return mapping


def physical_gpus(logical: Iterable[int]) -> list[int]:
    """The physical GPUs behind this process's logical GPU indices (see `logical_to_physical`)."""
    logical = list(logical)
    return logical_to_physical(gpu_layout(), logical) if logical else []


def visible_gpu_count() -> int:
    """Logical GPUs TensorFlow will create: each visible GPU counts its logical devices, or 1.

    Does not initialise TensorFlow's runtime.
    """
    return sum(max(count, 1) for _, count in gpu_layout())
