"""The checks of single `configure_devices()` arguments, and how a value is echoed in messages.

Each check takes the argument's name and value, returns the normalised
value (None passes through where None means "leave as is") and raises a
`TypeError` or `ValueError` that names the argument, echoes
`Received: name=value` and says what to pass instead. Combinations of
arguments are checked in `keras_gpu.setup.device_request`.

Importing this module imports neither TensorFlow nor Keras.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from numbers import Integral, Real
from types import MappingProxyType
from typing import Any, Literal

__all__ = [
    "GPU_THREAD_MODES",
    "MIXED_PRECISION_POLICIES",
    "PerGpu",
    "check_count",
    "check_fraction",
    "check_mb",
    "check_split",
    "check_visible",
    "per_gpu",
    "show",
]

MIXED_PRECISION_POLICIES = ("mixed_float16", "mixed_bfloat16", "float32")
GPU_THREAD_MODES = ("global", "gpu_private", "gpu_shared")

# Upper bound of a memory size in MB (1 PiB): larger values overflow TensorFlow's byte counts.
_MAX_MB = 1 << 30
# Upper bound of thread and logical-device counts: far above any machine, far below TensorFlow's int32 fields.
_MAX_COUNT = 4096

PerGpu = Any
"""A value for every visible GPU, or a read-only `{gpu_index: value}`."""


def show(value: Any) -> str:
    """A setting's value as messages and `DeviceConfig` print it: mappings as `{k: v}`, sequences as `[a, b]`."""
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {show(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(show(v) for v in value) + "]"
    return repr(value)


def _type_name(value: Any) -> str:
    return type(value).__name__


def check_count(name: str, value: Any, minimum: int, meaning: str = "") -> int | None:
    """An int from `minimum` to 4096 (threads, logical devices), or None; `meaning` follows the range in messages."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(
            f"`{name}` must be an int >= {minimum}{meaning} or None. "
            f"Received: {name}={value!r} (type {_type_name(value)})."
        )
    if not minimum <= value <= _MAX_COUNT:
        # TensorFlow stores these as 32-bit ints and creates one thread or device per unit at start-up.
        raise ValueError(
            f"`{name}` must be an int from {minimum} to {_MAX_COUNT}{meaning}. Received: {name}={value!r}."
        )
    return int(value)


def check_mb(name: str, value: Any) -> float:
    """A finite memory size in MB, from 1 to 2**30."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(
            f"`{name}` must be a number of MB (int or float). Received: {name}={value!r} (type {_type_name(value)})."
        )
    mb = _as_float(value)
    if not math.isfinite(mb) or not 1 <= mb <= _MAX_MB:
        raise ValueError(
            f"`{name}` must be a finite number of MB, at least 1 and at most {_MAX_MB}. Received: {name}={value!r}."
        )
    return mb


def _as_float(value: Real) -> float:
    """`float(value)`, with ints too large for a float mapped to infinity instead of raising."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def check_fraction(name: str, value: Any) -> float:
    """A share of a card's memory in (0, 1]."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(
            f"`{name}` must be a float in (0, 1], the share of the card's memory. "
            f"Received: {name}={value!r} (type {_type_name(value)})."
        )
    fraction = _as_float(value)
    if not 0.0 < fraction <= 1.0:  # also rejects NaN
        raise ValueError(
            f"`{name}` must be in (0, 1], the share of the card's memory. Received: {name}={value!r}."
        )
    return fraction


def check_split(name: str, value: Any) -> int | tuple[float, ...]:
    """A split of one GPU: a number of logical GPUs, or one MB size per logical GPU."""
    if isinstance(value, Integral) and not isinstance(value, bool):
        if not 1 <= value <= _MAX_COUNT:
            raise ValueError(
                f"`{name}` must be a number of logical GPUs from 1 to {_MAX_COUNT}. Received: {name}={value!r}."
            )
        return int(value)
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        if not value:
            raise ValueError(
                f"`{name}` must not be empty: give one MB size per logical GPU. Received: {name}={value!r}."
            )
        if len(value) > _MAX_COUNT:
            raise ValueError(f"`{name}` may list at most {_MAX_COUNT} logical GPUs. Received: {name}={value!r}.")
        return tuple(check_mb(f"{name}[{i}]", v) for i, v in enumerate(value))
    raise TypeError(
        f"`{name}` must be an int N (split into N logical GPUs) or a list of MB sizes, one per logical GPU. "
        f"Received: {name}={value!r} (type {_type_name(value)})."
    )


def _check_gpu_index(name: str, index: Any) -> int:
    if isinstance(index, bool) or not isinstance(index, Integral):
        raise TypeError(
            f"`{name}` must hold physical GPU indices (ints >= 0). "
            f"Received: {name} containing {index!r} (type {_type_name(index)})."
        )
    if index < 0:
        raise ValueError(f"`{name}` must hold physical GPU indices (ints >= 0). Received: {name} containing {index!r}.")
    return int(index)


def per_gpu(name: str, value: Any, check: Callable[[str, Any], Any]) -> PerGpu:
    """One value for every visible GPU, or a `{gpu_index: value}` mapping; each value passes `check`."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        if not value:
            raise ValueError(
                f"`{name}` must not be an empty mapping; pass None to leave it as is. Received: {name}={{}}."
            )
        out = {}
        for key, item in value.items():
            out[_check_gpu_index(f"{name} keys", key)] = check(f"{name}[{key!r}]", item)
        return MappingProxyType(dict(sorted(out.items())))
    return check(name, value)


def check_visible(value: Any) -> tuple[int, ...] | Literal["all"] | None:
    """`visible_gpus`: `"all"`, or distinct physical GPU indices (sorted), or None."""
    if value is None:
        return None
    if isinstance(value, str):
        if value == "all":
            return "all"
        raise ValueError(f'`visible_gpus` must be "all" or a list of GPU indices. Received: visible_gpus={value!r}.')
    if not isinstance(value, Sequence):
        raise TypeError(
            f'`visible_gpus` must be "all" or a list of physical GPU indices, e.g. [0] or [0, 1]. '
            f"Received: visible_gpus={value!r} (type {_type_name(value)})."
        )
    if len(value) > _MAX_COUNT:
        raise ValueError(f"`visible_gpus` may list at most {_MAX_COUNT} GPUs. Received: visible_gpus={value!r}.")
    indices = [_check_gpu_index("visible_gpus", i) for i in value]
    if len(set(indices)) != len(indices):
        raise ValueError(f"`visible_gpus` lists a GPU more than once. Received: visible_gpus={value!r}.")
    return tuple(sorted(indices))
