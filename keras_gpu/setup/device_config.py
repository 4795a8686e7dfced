"""The record `configure_devices()` returns, on every backend: `DeviceConfig`.

`keras_gpu.DeviceConfig` (also importable from `keras_gpu.setup.devices`).

Importing this module imports neither TensorFlow nor Keras.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from keras_gpu.setup.device_args import show
from keras_gpu.setup.device_settings import ORDER

__all__ = ["DeviceConfig"]


@dataclass(frozen=True)
class DeviceConfig:
    """What one `configure_devices()` call did.

    Settings are keyed by name. GPU memory arguments (`memory_limit_mb`,
    `memory_fraction`, `logical_gpus`) are resolved into one setting,
    `gpu_memory_limits_mb`: `{gpu_index: (mb, ...)}`, one size per logical GPU.

    Attributes:
        applied: Settings this call changed, with their new values.
        in_force: Settings that were asked for but already had that value.
        skipped: Arguments that were ignored, with the reason (e.g. no GPU).

    Examples:
        The record that `configure_devices(cpu_devices=2, soft_placement=True,
        memory_growth=True)` returns in a fresh process on a machine without a
        GPU (soft placement is TensorFlow's default, so it is already in force):

        >>> from keras_gpu import DeviceConfig
        >>> config = DeviceConfig(
        ...     applied={"cpu_devices": 2},
        ...     in_force={"soft_placement": True},
        ...     skipped={"memory_growth": "no GPU visible to TensorFlow"},
        ... )
        >>> print(config)
        DeviceConfig
          applied:  cpu_devices=2
          in force: soft_placement=True
          skipped:  memory_growth (no GPU visible to TensorFlow)
        >>> config.as_dict()["skipped"]
        {'memory_growth': 'no GPU visible to TensorFlow'}
    """

    applied: Mapping[str, Any]
    in_force: Mapping[str, Any]
    skipped: Mapping[str, str]

    def __post_init__(self) -> None:
        for name in ("applied", "in_force", "skipped"):
            object.__setattr__(self, name, _freeze(dict(getattr(self, name))))

    @property
    def settings(self) -> Mapping[str, Any]:
        """Every setting named by the call that is now in force (`applied` and `in_force`)."""
        merged = {**self.in_force, **self.applied}
        return MappingProxyType({k: merged[k] for k in ORDER if k in merged})

    def as_dict(self) -> dict[str, Any]:
        """A JSON-serialisable copy: mappings become dicts with string keys, tuples lists."""
        return {
            "applied": _jsonable(self.applied),
            "in_force": _jsonable(self.in_force),
            "skipped": dict(self.skipped),
        }

    def __str__(self) -> str:
        def values(mapping: Mapping[str, Any]) -> str:
            return ", ".join(f"{k}={show(v)}" for k, v in mapping.items()) or "nothing"

        skipped = "; ".join(f"{k} ({why})" for k, why in self.skipped.items()) or "nothing"
        return "\n".join(
            [
                "DeviceConfig",
                f"  applied:  {values(self.applied)}",
                f"  in force: {values(self.in_force)}",
                f"  skipped:  {skipped}",
            ]
        )


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return MappingProxyType({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value
