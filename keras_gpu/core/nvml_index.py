"""TensorFlow's GPU index to NVML's: which GPUs `CUDA_VISIBLE_DEVICES` shows this process, in CUDA's order.

TensorFlow numbers GPUs as CUDA does in this process: the *k*-th entry of
`CUDA_VISIBLE_DEVICES` when it is set, else the *k*-th GPU of the machine.
NVML numbers every GPU of the machine in PCI bus order, whatever
`CUDA_VISIBLE_DEVICES` says. The mapping therefore assumes CUDA enumerates
GPUs in PCI bus order (`CUDA_DEVICE_ORDER=PCI_BUS_ID`, and also CUDA's
default on machines whose GPUs are all the same model):

* `CUDA_VISIBLE_DEVICES` unset: TensorFlow GPU *k* is NVML GPU *k*.
* Set to a comma-separated list: TensorFlow GPU *k* is the *k*-th entry. An
  integer entry is an NVML index; `GPU-...` is a GPU UUID or a unique prefix
  of one; `MIG-...` is the full UUID of a MIG instance, which maps to its
  parent GPU's NVML index (its memory figures are the instance's own). As in
  CUDA, the list ends at the first entry that names no device (or repeats
  one), so `""` and `"-1"` hide every GPU.

The variable is read when a mapping is asked for; CUDA reads it once, when
the process first uses the GPU, so changing it afterwards makes the mapping
wrong. NVML is reached through `keras_gpu.core.nvml_session`.
"""

from __future__ import annotations

import os
from typing import Any

from keras_gpu.core import nvml_session as _session
from keras_gpu.core.checks import check_index
from keras_gpu.core.nvml_session import Device

__all__ = ["tf_to_nvml_index", "visible_device", "visible_devices"]

_TF_INDEX = "TensorFlow's index of a GPU (`GPU:<index>`)"


def _whole_gpu(index: int) -> Device | None:
    """GPU `index` of the machine as a device to query, or None when NVML gives no handle."""
    gpu = _session.handle(index)
    return Device(index, gpu, str(index), _session.label(index)) if gpu is not None else None


def _resolve_entry(entry: str, count: int) -> Device | None:
    """The device one `CUDA_VISIBLE_DEVICES` entry names, or None when it names none."""
    if entry.isdigit():
        index = int(entry)
        return _whole_gpu(index) if index < count else None
    upper = entry.upper()
    if upper.startswith("GPU-") and len(entry) > 4:
        matches = [i for i in range(count) if (_session.uuid(i) or "").upper().startswith(upper)]
        return _whole_gpu(matches[0]) if len(matches) == 1 else None
    if upper.startswith("MIG-") and len(entry) > 4:
        mig = _session.call("nvmlDeviceGetHandleByUUID", entry)
        if mig is None:
            return None
        parent = _session.call("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", mig)
        index = _session.call("nvmlDeviceGetIndex", parent) if parent is not None else None
        if not isinstance(index, int):
            return None
        return Device(index, mig, entry, f"MIG instance {entry} of GPU {index} (NVML index)")
    return None


def visible_devices(environ: Any = None) -> list[Device]:
    """The GPUs CUDA shows this process, in CUDA's (= TensorFlow's) order.

    Args:
        environ: The environment to read `CUDA_VISIBLE_DEVICES` from
            (default `os.environ`).
    """
    env = os.environ if environ is None else environ
    count = _session.device_count()
    raw = env.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        targets = []
        for index in range(count):
            target = _whole_gpu(index)
            if target is None:
                break
            targets.append(target)
        return targets
    targets, seen = [], set()
    for entry in raw.split(","):
        target = _resolve_entry(entry.strip(), count)
        if target is None or target.key in seen:
            break
        seen.add(target.key)
        targets.append(target)
    return targets


def visible_device(tf_gpu_index: int, environ: Any = None) -> Device | None:
    """The device behind TensorFlow's GPU `tf_gpu_index`, or None when NVML is not available or no such GPU is visible.

    Raises:
        TypeError, ValueError: `tf_gpu_index` is not a non-negative integer.
    """
    index = check_index("tf_gpu_index", tf_gpu_index, _TF_INDEX)
    visible = visible_devices(environ)
    return visible[index] if index < len(visible) else None


def tf_to_nvml_index(tf_gpu_index: int, *, environ: Any = None) -> int | None:
    """NVML's index of TensorFlow's GPU `tf_gpu_index` (see the module docs for the rule).

    Args:
        tf_gpu_index: TensorFlow's GPU index (`GPU:<index>`, a CUDA ordinal
            of this process).
        environ: The environment to read `CUDA_VISIBLE_DEVICES` from
            (default `os.environ`).

    Returns:
        The NVML index (of the parent GPU for a MIG instance), or `None` when
        NVML is not available or no such GPU is visible.
    """
    target = visible_device(tf_gpu_index, environ)
    return target.nvml_index if target is not None else None
