"""keras-gpu: monitoring callbacks, strategies and device configuration for Keras 3 (see `keras_gpu._version.SUMMARY`).

Importing this package is cheap and side-effect free: it does not import
TensorFlow (nor any other backend), does not initialise any device and changes
no global state, so it is safe to import before `configure_devices`.
Public names are loaded on first access.

The callbacks work on every Keras backend (TensorFlow, JAX, PyTorch).
`make_strategy` and `configure_devices` work on TensorFlow and JAX;
`PlacementLogger` needs TensorFlow, and raises an `ImportError` naming the
install line when it is missing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from keras_gpu._version import __version__

# Public name -> defining module. Loaded lazily (PEP 562) so that `import keras_gpu`
# neither imports TensorFlow nor touches a device.
_EXPORTS: dict[str, str] = {
    "configure_devices": "keras_gpu.setup.devices",
    "DeviceConfig": "keras_gpu.setup.devices",
    "make_strategy": "keras_gpu.setup.strategy",
    "plan_strategy": "keras_gpu.setup.strategy",
    "StrategyPlan": "keras_gpu.setup.strategy",
    "ClusterInfo": "keras_gpu.core.cluster",
    "resolve_cluster": "keras_gpu.core.cluster",
    "is_chief": "keras_gpu.core.place",
    "worker_index": "keras_gpu.core.place",
    "BackupAndRestore": "keras_gpu.hooks.backup",
    "ModelCheckpoint": "keras_gpu.hooks.checkpoint",
    "Heartbeat": "keras_gpu.hooks.heartbeat",
    "callbacks": "keras_gpu.hooks.factory",
    "ThroughputLogger": "keras_gpu.hooks.factory",
    "MemoryLogger": "keras_gpu.hooks.factory",
    "PlacementLogger": "keras_gpu.hooks.factory",
    "StepTimeLogger": "keras_gpu.hooks.factory",
}

__all__ = ["__version__", *_EXPORTS]  # noqa: PLE0604 - the public names are the keys of _EXPORTS


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'keras_gpu' has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # pragma: no cover - names for type checkers and IDEs
    from keras_gpu.core.cluster import ClusterInfo, resolve_cluster  # noqa: F401
    from keras_gpu.core.place import is_chief, worker_index  # noqa: F401
    from keras_gpu.hooks.backup import BackupAndRestore  # noqa: F401
    from keras_gpu.hooks.checkpoint import ModelCheckpoint  # noqa: F401
    from keras_gpu.hooks.factory import MemoryLogger, PlacementLogger, StepTimeLogger, ThroughputLogger, callbacks  # noqa: F401
    from keras_gpu.hooks.heartbeat import Heartbeat  # noqa: F401
    from keras_gpu.setup.devices import DeviceConfig, configure_devices  # noqa: F401
    from keras_gpu.setup.strategy import StrategyPlan, make_strategy, plan_strategy  # noqa: F401
