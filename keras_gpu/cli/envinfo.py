"""The environment report behind `keras-gpu env`: versions, GPUs, devices, cluster and strategy.

`collect` returns plain JSON-serialisable data, so a script can log it
or attach it to a bug report:

```python
import json, keras_gpu.cli.envinfo
print(json.dumps(keras_gpu.cli.envinfo.collect(), indent=2))
```

The devices and the strategy are those of the Keras backend this process
selects (`KERAS_BACKEND`): TensorFlow's devices and `keras_gpu.plan_strategy`
on TensorFlow, JAX's devices and the JAX `make_strategy()` decision on JAX.
TensorFlow is reported missing only where that backend needs it. Collecting
initialises the backend's devices (it lists them), so call it after any
`keras_gpu.configure_devices(...)` of your own.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["ENV_VARS", "collect"]

ENV_VARS: tuple[str, ...] = (
    "TF_CONFIG",
    "KERAS_GPU_WORKER_INDEX",
    "KERAS_GPU_NUM_WORKERS",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "KERAS_BACKEND",
    "TF_CPP_MIN_LOG_LEVEL",
    "TF_FORCE_GPU_ALLOW_GROWTH",
    "TF_GPU_ALLOCATOR",
    "TF_ENABLE_ONEDNN_OPTS",
    "TF_XLA_FLAGS",
    "XLA_FLAGS",
    "NCCL_DEBUG",
    "NCCL_SOCKET_IFNAME",
    "NCCL_P2P_DISABLE",
    "NCCL_IB_DISABLE",
    "SLURM_JOB_ID",
    "SLURM_PROCID",
    "SLURM_STEP_NUM_TASKS",
    "SLURM_STEP_NODELIST",
    "SLURM_STEP_TASKS_PER_NODE",
    "LD_LIBRARY_PATH",
)
"""Environment variables the report includes when they are set."""

_TF_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-macos", "tf-nightly", "tf-nightly-cpu")


def collect() -> dict[str, Any]:
    """Collect the environment report.

    Returns:
        A JSON-serialisable dict with the sections `keras_gpu`, `python`,
        `platform`, `tensorflow`, `jax`, `keras`, `tensorboard`,
        `environment`, `nvml`, `gpus`, `devices`, `cluster`, `strategy` and
        `problems`. `devices` and `strategy` name the `backend` they were
        read from.
        A section that cannot be collected holds `{"error": "..."}` instead,
        and its message is added to `problems`, the list of findings a reader
        should act on (for example a malformed `TF_CONFIG`).
    """
    problems: list[str] = []
    report: dict[str, Any] = {}
    sections: list[tuple[str, Callable[[], Any]]] = [
        ("keras_gpu", _keras_gpu),
        ("python", _python),
        ("platform", _platform),
        ("tensorflow", _tensorflow),
        ("jax", _jax),
        ("keras", _keras),
        ("tensorboard", _tensorboard),
        ("environment", _environment),
        ("nvml", _nvml),
        ("gpus", _gpus),
        ("devices", _devices),
        ("cluster", _cluster),
        ("strategy", _strategy),
    ]
    for name, fn in sections:
        try:
            report[name] = fn()
        except Exception as exc:  # noqa: BLE001 - a broken section must not hide the rest of the report
            message = f"{type(exc).__name__}: {exc}"
            report[name] = {"error": message}
            problems.append(f"{name}: {message}")
    problems.extend(_diagnose(report))
    report["problems"] = problems
    return report


def _keras_gpu() -> dict[str, Any]:
    from keras_gpu._version import __version__

    return {"version": __version__}


def _python() -> dict[str, Any]:
    return {
        "version": platform.python_version(),
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
    }


def _platform() -> dict[str, Any]:
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "platform": platform.platform(),
        "system": platform.system(),
        "release": platform.release(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "usable_cpus": usable,
    }


def _backend() -> str:
    from keras_gpu.core import backend

    return backend.selected()


def _tensorflow() -> dict[str, Any]:
    from keras_gpu.core.backend import tensorflow_installed

    if not tensorflow_installed() and _backend() != "tensorflow":  # not needed here: not a problem
        return {"installed": False, "version": None}
    import tensorflow as tf

    build = dict(tf.sysconfig.get_build_info())
    return {
        "installed": True,
        "version": tf.__version__,
        "git_version": tf.version.GIT_VERSION,
        "distributions": {d: v for d in _TF_DISTRIBUTIONS if (v := _dist_version(d)) is not None},
        "is_cuda_build": bool(build.get("is_cuda_build", False)),
        "cuda_version": build.get("cuda_version"),
        "cudnn_version": build.get("cudnn_version"),
    }


def _jax() -> dict[str, Any]:
    version = _dist_version("jax")
    if version is None and _backend() == "jax":
        raise ImportError("KERAS_BACKEND selects JAX, which is not installed: pip install jax (jax[cuda12] for GPUs)")
    return {"installed": version is not None, "version": version}


def _keras() -> dict[str, Any]:
    import keras

    return {"version": keras.__version__, "backend": keras.backend.backend()}


def _tensorboard() -> dict[str, Any]:
    version = _dist_version("tensorboard")
    return {"installed": version is not None, "version": version}


def _environment() -> dict[str, str]:
    return {name: os.environ[name] for name in ENV_VARS if name in os.environ}


def _nvml() -> dict[str, Any]:
    from keras_gpu.core import nvml

    if nvml.available():
        return {"available": True, "driver_version": nvml.driver_version(), "message": None}
    reason = nvml.unavailable_reason() or "unknown reason"
    return {"available": False, "driver_version": None, "message": f"No NVIDIA GPU / NVML not available: {reason}"}


def _gpus() -> list[dict[str, Any]]:
    from keras_gpu.core import nvml

    if not nvml.available():
        return []
    return [
        {
            "index": g.index,
            "name": g.name,
            "uuid": g.uuid,
            "memory_total_bytes": g.memory_total_bytes,
            "compute_capability": list(g.compute_capability) if g.compute_capability is not None else None,
            "pci_bus_id": g.pci_bus_id,
        }
        for g in nvml.static_info()
    ]


def _devices() -> dict[str, Any]:
    current = _backend()
    if current == "jax":
        return _jax_devices()
    if current == "torch":
        return _torch_devices()
    return _tensorflow_devices()


def _jax_devices() -> dict[str, Any]:
    import jax

    from keras_gpu.core.backend import device_name

    local = []
    for d in jax.local_devices():
        name = device_name(d.platform, d.id)
        local.append({"name": name, "device_type": name.split(":")[-2], "device_name": d.device_kind})
    return {"backend": "jax", "local": local, "process_count": jax.process_count()}


def _torch_devices() -> dict[str, Any]:
    import torch

    from keras_gpu.core.backend import device_name

    local = [{"name": device_name("cpu", 0), "device_type": "CPU", "device_name": None}]
    if torch.cuda.is_available():
        local += [
            {"name": device_name("cuda", i), "device_type": "GPU", "device_name": torch.cuda.get_device_name(i)}
            for i in range(torch.cuda.device_count())
        ]
    return {"backend": "torch", "local": local}


def _tensorflow_devices() -> dict[str, Any]:
    import tensorflow as tf

    physical = []
    for device in tf.config.list_physical_devices():
        entry: dict[str, Any] = {"name": device.name, "device_type": device.device_type}
        if device.device_type == "GPU":
            details = tf.config.experimental.get_device_details(device)
            entry["device_name"] = details.get("device_name")
            cc = details.get("compute_capability")
            entry["compute_capability"] = list(cc) if cc is not None else None
        physical.append(entry)
    logical = [{"name": d.name, "device_type": d.device_type} for d in tf.config.list_logical_devices()]
    return {"backend": "tensorflow", "physical": physical, "logical": logical}


def _cluster() -> dict[str, Any]:
    from keras_gpu.core.cluster import resolve_cluster

    info = resolve_cluster()
    return {
        "source": info.source,
        "num_workers": info.num_workers,
        "is_multi_worker": info.is_multi_worker,
        "task_type": info.task_type,
        "task_index": info.task_index,
        "worker_index": info.worker_index,
        "is_chief": info.is_chief,
        "cluster": {k: list(v) for k, v in info.cluster.items()},
        "description": info.describe(),
    }


def _strategy() -> dict[str, Any]:
    current = _backend()
    if current == "jax":
        from keras_gpu.setup import jax_strategy

        jax_plan = jax_strategy.plan_strategy(kind="auto")
        return {
            "backend": "jax",
            "kind": jax_plan.kind,
            "devices": list(jax_plan.devices),
            "cross_device_ops": None,
            "communication": None,
            "reason": jax_plan.reason,
            "cluster": jax_plan.cluster.describe(),
            "notes": [],
            "description": f"{jax_plan.kind}: {jax_plan.reason}",
        }
    if current != "tensorflow":
        reason = (
            f"make_strategy() works on Keras' TensorFlow and JAX backends, not on {current!r}: set "
            "KERAS_BACKEND=tensorflow or KERAS_BACKEND=jax to use it"
        )
        return {"backend": current, "kind": None, "devices": [], "cross_device_ops": None, "communication": None,
                "reason": reason, "cluster": None, "notes": [], "description": reason}
    from keras_gpu.setup.strategy import plan_strategy

    plan = plan_strategy(kind="auto")
    return {
        "backend": "tensorflow",
        "kind": plan.kind,
        "devices": _jsonable(plan.devices),
        "cross_device_ops": _jsonable(plan.cross_device_ops),
        "communication": plan.communication,
        "reason": plan.reason,
        "cluster": _jsonable(plan.cluster),
        "notes": _jsonable(plan.notes),
        "description": plan.describe(),
    }


def _diagnose(report: dict[str, Any]) -> list[str]:
    """Findings that follow from combining sections (each section's own errors are added elsewhere)."""
    found: list[str] = []
    tf_info = report.get("tensorflow", {})
    gpus = report.get("gpus")
    devices = report.get("devices", {})
    distributions = tf_info.get("distributions") or {}
    if len(distributions) > 1:
        found.append(
            f"Several TensorFlow distributions are installed ({', '.join(sorted(distributions))}); they overwrite "
            "each other's files. Uninstall all of them and install one."
        )
    on_tensorflow = devices.get("backend", "tensorflow") == "tensorflow" and tf_info.get("installed", True)
    if isinstance(gpus, list) and gpus and on_tensorflow and "error" not in tf_info and "error" not in devices:
        tf_gpus = [d for d in devices.get("physical", []) if d.get("device_type") == "GPU"]
        if not tf_info.get("is_cuda_build"):
            found.append(
                f"NVML reports {len(gpus)} NVIDIA GPU(s), but this TensorFlow build has no CUDA support: install "
                "`tensorflow[and-cuda]` (for example `pip install 'tensorflow[and-cuda]>=2.16,<2.22'`)."
            )
        elif not tf_gpus:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            hint = (
                f" CUDA_VISIBLE_DEVICES={visible!r} hides them."
                if visible is not None
                else " Check that the CUDA and cuDNN libraries TensorFlow was built against are installed."
            )
            found.append(f"NVML reports {len(gpus)} NVIDIA GPU(s), but TensorFlow sees none.{hint}")
    if isinstance(gpus, list) and gpus and devices.get("backend") in ("jax", "torch"):
        if not any(d.get("device_type") == "GPU" for d in devices.get("local", [])):
            name = {"jax": "JAX", "torch": "PyTorch"}[devices["backend"]]
            install = "jax[cuda12]" if devices["backend"] == "jax" else "a CUDA build of torch"
            found.append(f"NVML reports {len(gpus)} NVIDIA GPU(s), but {name} sees none: install {install}, "
                         "and check CUDA_VISIBLE_DEVICES.")
    return found


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _jsonable(value: Any) -> Any:
    """`value` as JSON data: containers recursively, objects with `describe()` by it, others by `str`."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    describe = getattr(value, "describe", None)
    if callable(describe):
        return describe()
    return str(value)
