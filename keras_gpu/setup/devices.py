"""Configure TensorFlow's devices before its runtime starts: `configure_devices()`.

One call replaces the block of `tf.config` boilerplate that GPU guides put at
the top of training scripts. It works in three steps:

1. The arguments are checked on their own (types, ranges, combinations).
2. A snapshot of the machine and of the settings in force is taken, and a
   complete plan is built from the arguments and the snapshot alone. Every
   error is raised here, before anything changes.
3. The plan is applied. If a step still fails, the steps already applied are
   restored before the error propagates.

Some settings (visible GPUs, memory growth, memory limits, logical devices,
thread counts, the GPU thread mode) can only change before TensorFlow
initialises its runtime, i.e. before the first tensor, model or strategy is
created. Asking for a change to one of them afterwards raises a
`RuntimeError`; asking for what is already in force is a no-op. The other
settings (soft placement, placement logging, XLA, TF32, mixed precision) apply
at any time.

Each simple setting (thread counts, soft and logged placement, XLA, TF32,
mixed precision) is one row of `_SIMPLE`: its name, check, read, write, and
whether it must come before the runtime starts; the request, the snapshot,
the plan and the setters are built from that table. The GPU memory planner
(visible GPUs, memory growth, limits, logical devices) and the GPU thread
environment variables are resolved against the machine and stay explicit.

Importing this module imports neither TensorFlow nor Keras.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, make_dataclass
from numbers import Integral, Real
from types import MappingProxyType
from typing import Any, Literal

from keras_gpu.core.checks import check_bool, check_choice
from keras_gpu.core.log import logger
from keras_gpu.core.tf_private import clear_logical_configuration, clear_memory_growth, runtime_initialized
from keras_gpu.core.backend import require_tensorflow, selected

__all__ = ["DeviceConfig", "configure_devices"]

MIXED_PRECISION_POLICIES = ("mixed_float16", "mixed_bfloat16", "float32")
GPU_THREAD_MODES = ("global", "gpu_private", "gpu_shared")

# TensorFlow's "MB" for GPU memory limits is 2**20 bytes.
_MIB = 1 << 20
# Upper bound of a memory size in MB (1 PiB): larger values overflow TensorFlow's byte counts.
_MAX_MB = 1 << 30
# Upper bound of thread and logical-device counts: far above any machine, far below TensorFlow's int32 fields.
_MAX_COUNT = 4096

# Arguments that only mean something when TensorFlow sees a GPU.
_GPU_ARGS = (
    "visible_gpus",
    "memory_growth",
    "memory_limit_mb",
    "memory_fraction",
    "logical_gpus",
    "gpu_thread_mode",
    "gpu_thread_count",
)

# The planner's resolved settings that can only change before the runtime is
# initialised, in the order they are applied (the table's follow them).
_PLANNER_INIT_ONLY = (
    "gpu_thread_mode",
    "gpu_thread_count",
    "visible_gpus",
    "memory_growth",
    "gpu_memory_limits_mb",
    "cpu_devices",
)

_ENV_THREAD_MODE = "TF_GPU_THREAD_MODE"
_ENV_THREAD_COUNT = "TF_GPU_THREAD_COUNT"
_ENV_FORCE_GROWTH = "TF_FORCE_GPU_ALLOW_GROWTH"

_FIX_LATE = (
    "Call `keras_gpu.configure_devices()` before any tensor, model or strategy is created, "
    "e.g. at the top of the script right after the imports."
)

_lock = threading.Lock()

# Kept under its old name for callers and tests that probe the runtime through this module.
_runtime_initialized = runtime_initialized


# --------------------------------------------------------------------------- #
# The record returned to the user
# --------------------------------------------------------------------------- #


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
        return MappingProxyType({k: merged[k] for k in _ORDER if k in merged})

    def as_dict(self) -> dict[str, Any]:
        """A JSON-serialisable copy: mappings become dicts with string keys, tuples lists."""
        return {
            "applied": _jsonable(self.applied),
            "in_force": _jsonable(self.in_force),
            "skipped": dict(self.skipped),
        }

    def __str__(self) -> str:
        def values(mapping: Mapping[str, Any]) -> str:
            return ", ".join(f"{k}={_show(v)}" for k, v in mapping.items()) or "nothing"

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


def _show(value: Any) -> str:
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {_show(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return repr(value)


# --------------------------------------------------------------------------- #
# The settings table: each simple setting is one row
# --------------------------------------------------------------------------- #


def _tensorflow() -> Any:
    import tensorflow as tf

    return tf


def _keras() -> Any:
    import keras

    return keras


@dataclass(frozen=True)
class _Setting:
    """One simple setting: one argument of `configure_devices` that is one TensorFlow or Keras value.

    Attributes:
        name: The argument, and the setting's name in `DeviceConfig`.
        check: `check(name, value)` returns the normalised argument or raises (None passes through).
        read: Returns the value in force, without initialising TensorFlow's runtime.
        write: Sets a value (the target, or the value read, when restoring).
        before_init: Whether it can only change before TensorFlow initialises its runtime.
    """

    name: str
    check: Callable[[str, Any], Any]
    read: Callable[[], Any]
    write: Callable[[Any], None]
    before_init: bool


def _check_threads(name: str, value: Any) -> int | None:
    return _check_count(name, value, 0, " (0 lets TensorFlow choose)")


def _check_policy(name: str, value: Any) -> str | None:
    return check_choice(name, value, MIXED_PRECISION_POLICIES, allow_none=True)


def _check_switch(name: str, value: Any) -> bool | None:
    return check_bool(name, value, allow_none=True)


# A new simple setting: its argument and docstring in `configure_devices`, and one row here.
_SIMPLE: tuple[_Setting, ...] = (
    _Setting(
        "intra_op_threads",
        _check_threads,
        lambda: _tensorflow().config.threading.get_intra_op_parallelism_threads(),
        lambda n: _tensorflow().config.threading.set_intra_op_parallelism_threads(n),
        before_init=True,
    ),
    _Setting(
        "inter_op_threads",
        _check_threads,
        lambda: _tensorflow().config.threading.get_inter_op_parallelism_threads(),
        lambda n: _tensorflow().config.threading.set_inter_op_parallelism_threads(n),
        before_init=True,
    ),
    _Setting(
        "soft_placement",
        _check_switch,
        lambda: bool(_tensorflow().config.get_soft_device_placement()),
        lambda on: _tensorflow().config.set_soft_device_placement(on),
        before_init=False,
    ),
    _Setting(
        "log_placement",
        _check_switch,
        lambda: bool(_tensorflow().debugging.get_log_device_placement()),
        lambda on: _tensorflow().debugging.set_log_device_placement(on),
        before_init=False,
    ),
    _Setting(
        "xla",
        _check_switch,
        lambda: _tensorflow().config.optimizer.get_jit() == "autoclustering",
        lambda on: _tensorflow().config.optimizer.set_jit("autoclustering" if on else False),
        before_init=False,
    ),
    _Setting(
        "tf32",
        _check_switch,
        lambda: bool(_tensorflow().config.experimental.tensor_float_32_execution_enabled()),
        lambda on: _tensorflow().config.experimental.enable_tensor_float_32_execution(on),
        before_init=False,
    ),
    _Setting(
        "mixed_precision",
        _check_policy,
        lambda: _keras().mixed_precision.global_policy().name,
        lambda name: _keras().mixed_precision.set_global_policy(name),
        before_init=False,
    ),
)

# Resolved settings, in the order they are applied: the ones that can only
# change before initialisation first, so that a failure there leaves the
# any-time settings untouched.
_INIT_ONLY = _PLANNER_INIT_ONLY + tuple(s.name for s in _SIMPLE if s.before_init)
_ANY_TIME = tuple(s.name for s in _SIMPLE if not s.before_init)
_ORDER = _INIT_ONLY + _ANY_TIME


# --------------------------------------------------------------------------- #
# Step 1: the arguments on their own
# --------------------------------------------------------------------------- #

_PerGpu = Any  # a value for every visible GPU, or a read-only {gpu_index: value}


@dataclass(frozen=True)
class _PlannedRequest:
    """The arguments the planner resolves against the machine (GPU memory, devices, GPU threads)."""

    visible_gpus: tuple[int, ...] | Literal["all"] | None = None
    memory_growth: bool | None = None
    memory_limit_mb: _PerGpu = None
    memory_fraction: _PerGpu = None
    logical_gpus: _PerGpu = None
    cpu_devices: int | None = None
    gpu_thread_mode: str | None = None
    gpu_thread_count: int | None = None

    def given(self, names: Sequence[str]) -> list[str]:
        return [n for n in names if getattr(self, n) is not None]


# The arguments of one call, type-checked and normalised: one field per argument.
_Request = make_dataclass(
    "_Request", [(s.name, Any, field(default=None)) for s in _SIMPLE], bases=(_PlannedRequest,), frozen=True
)


def _type_name(value: Any) -> str:
    return type(value).__name__


def _check_count(name: str, value: Any, minimum: int, meaning: str = "") -> int | None:
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


def _check_mb(name: str, value: Any) -> float:
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


def _check_fraction(name: str, value: Any) -> float:
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


def _check_split(name: str, value: Any) -> int | tuple[float, ...]:
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
        return tuple(_check_mb(f"{name}[{i}]", v) for i, v in enumerate(value))
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


def _per_gpu(name: str, value: Any, check: Callable[[str, Any], Any]) -> _PerGpu:
    """One value for every visible GPU, or a `{gpu_index: value}` mapping."""
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


def _check_visible(value: Any) -> tuple[int, ...] | Literal["all"] | None:
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


def _covers(value: _PerGpu) -> set[int] | Literal["all"]:
    if value is None:
        return set()
    return set(value) if isinstance(value, Mapping) else "all"


def _overlap(a: set[int] | str, b: set[int] | str) -> bool:
    if not a or not b:
        return False
    return a == "all" or b == "all" or bool(a & b)  # type: ignore[operator]


def _parse_request(**kwargs: Any) -> _Request:
    """Check each argument and the combinations that are wrong on any machine."""
    req = _Request(
        visible_gpus=_check_visible(kwargs["visible_gpus"]),
        memory_growth=check_bool("memory_growth", kwargs["memory_growth"], allow_none=True),
        memory_limit_mb=_per_gpu("memory_limit_mb", kwargs["memory_limit_mb"], _check_mb),
        memory_fraction=_per_gpu("memory_fraction", kwargs["memory_fraction"], _check_fraction),
        logical_gpus=_per_gpu("logical_gpus", kwargs["logical_gpus"], _check_split),
        cpu_devices=_check_count("cpu_devices", kwargs["cpu_devices"], 1),
        **{s.name: s.check(s.name, kwargs[s.name]) for s in _SIMPLE},
        gpu_thread_mode=check_choice("gpu_thread_mode", kwargs["gpu_thread_mode"], GPU_THREAD_MODES, allow_none=True),
        gpu_thread_count=_check_count("gpu_thread_count", kwargs["gpu_thread_count"], 1),
    )

    limit_args = req.given(("memory_limit_mb", "memory_fraction", "logical_gpus"))
    if req.memory_growth and limit_args:
        # TensorFlow drops memory growth on every GPU as soon as any GPU has a
        # logical-device configuration (context._compute_device_options).
        shown = ", ".join(f"{n}={kwargs[n]!r}" for n in limit_args)
        raise ValueError(
            f"`memory_growth=True` cannot be combined with `{limit_args[0]}`: TensorFlow turns memory growth off "
            "on every GPU once any GPU has a memory limit or a logical split. Pass either memory_growth=True "
            f"or a memory limit. Received: memory_growth=True, {shown}."
        )
    if _overlap(_covers(req.memory_limit_mb), _covers(req.memory_fraction)):
        raise ValueError(
            "`memory_limit_mb` and `memory_fraction` both set a limit for the same GPU; give one of them per GPU. "
            f"Received: memory_limit_mb={kwargs['memory_limit_mb']!r}, memory_fraction={kwargs['memory_fraction']!r}."
        )
    split = req.logical_gpus
    if split is not None:
        limit_cover, fraction_cover = _covers(req.memory_limit_mb), _covers(req.memory_fraction)
        sized: set[int] | str = (
            "all" if "all" in (limit_cover, fraction_cover) else limit_cover | fraction_cover  # type: ignore[operator]
        )
        lists = (
            {g for g, v in split.items() if isinstance(v, tuple)}
            if isinstance(split, Mapping)
            else ("all" if isinstance(split, tuple) else set())
        )
        if _overlap(lists, sized):
            raise ValueError(
                "`logical_gpus` as a list of MB sizes already sets the memory of that GPU; do not also pass "
                "`memory_limit_mb`/`memory_fraction` for it (or pass logical_gpus=N to split that limit N ways). "
                f"Received: logical_gpus={kwargs['logical_gpus']!r}, memory_limit_mb={kwargs['memory_limit_mb']!r}, "
                f"memory_fraction={kwargs['memory_fraction']!r}."
            )
        counts = (
            {g for g, v in split.items() if isinstance(v, int)}
            if isinstance(split, Mapping)
            else ("all" if isinstance(split, int) else set())
        )
        if counts and not sized:
            raise ValueError(
                "`logical_gpus=N` splits a memory limit N ways, so it needs `memory_limit_mb` or `memory_fraction` "
                "(or give `logical_gpus` a list of MB sizes, one per logical GPU). "
                f"Received: logical_gpus={kwargs['logical_gpus']!r} and no memory limit."
            )
        unsized = sorted(counts - sized) if isinstance(counts, set) and isinstance(sized, set) else []
        if unsized:
            raise ValueError(
                f"`logical_gpus` splits GPU {unsized[0]} N ways but no memory limit is given for it: add GPU "
                f"{unsized[0]} to `memory_limit_mb` or `memory_fraction`, or give it a list of MB sizes. "
                f"Received: logical_gpus={kwargs['logical_gpus']!r}, memory_limit_mb={kwargs['memory_limit_mb']!r}, "
                f"memory_fraction={kwargs['memory_fraction']!r}."
            )
    if req.gpu_thread_count is not None and req.gpu_thread_mode not in ("gpu_private", "gpu_shared"):
        raise ValueError(
            '`gpu_thread_count` only applies with gpu_thread_mode="gpu_private" or "gpu_shared"; pass one of them '
            f"in the same call. Received: gpu_thread_count={req.gpu_thread_count!r}, "
            f"gpu_thread_mode={req.gpu_thread_mode!r}."
        )
    return req


# --------------------------------------------------------------------------- #
# Step 2: the machine, and the plan built from it
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class _MachineSnapshot:
    """The machine and the planner's settings in force, as read before any change.

    GPU tuples are indexed by physical GPU index (TensorFlow's enumeration).
    """

    initialized: bool
    gpu_count: int
    cpu_count: int
    gpu_memory_bytes: Mapping[int, int | None]  # only read when `memory_fraction` is used
    visible_gpus: tuple[int, ...]
    memory_growth: tuple[bool | None, ...]  # None: never set
    gpu_logical_mb: tuple[tuple[float, ...] | None, ...]  # None: no logical-device configuration
    cpu_logical_devices: int | None  # None: no logical-device configuration (one CPU device)
    env: Mapping[str, str]


# The snapshot: the machine, plus one field per simple setting (read only when the call names it, else None).
_Snapshot = make_dataclass("_Snapshot", [(s.name, Any) for s in _SIMPLE], bases=(_MachineSnapshot,), frozen=True)


@dataclass(frozen=True)
class _Change:
    """One setting to change: `target` is applied, `restore` undoes it (same setter)."""

    setting: str
    value: Any
    current: Any
    target: Any
    restore: Any


@dataclass(frozen=True)
class _Plan:
    changes: tuple[_Change, ...]
    in_force: Mapping[str, Any]
    skipped: Mapping[str, str]


def _resolve_visible(req: _Request, snap: _Snapshot) -> tuple[int, ...]:
    if req.visible_gpus is None:
        return snap.visible_gpus
    if req.visible_gpus == "all":
        return tuple(range(snap.gpu_count))
    missing = [i for i in req.visible_gpus if i >= snap.gpu_count]
    if missing:
        raise ValueError(
            f"`visible_gpus` names GPU {missing[0]}, but TensorFlow sees {snap.gpu_count} GPU(s) "
            f"(indices 0..{snap.gpu_count - 1}). Received: visible_gpus={list(req.visible_gpus)!r}."
        )
    return req.visible_gpus


def _memory_mb(req: _Request, snap: _Snapshot, gpu: int) -> int | None:
    """The memory limit asked for `gpu` through `memory_limit_mb` / `memory_fraction`, in whole MB."""
    for name in ("memory_limit_mb", "memory_fraction"):
        value = getattr(req, name)
        if isinstance(value, Mapping):
            value = value.get(gpu)
        if value is None:
            continue
        if name == "memory_limit_mb":
            return int(value)
        total = snap.gpu_memory_bytes.get(gpu)
        if total is None:
            raise RuntimeError(
                f"`memory_fraction` needs the total memory of GPU {gpu}, which NVML could not report on this "
                f"machine. Pass `memory_limit_mb` instead. Received: memory_fraction={value!r}."
            )
        mb = int(value * total // _MIB)
        if mb < 1:
            raise ValueError(
                f"`memory_fraction={value!r}` of GPU {gpu} ({total} bytes) is less than 1 MB. Pass a larger value."
            )
        return mb
    return None


def _resolve_limits(req: _Request, snap: _Snapshot, visible: tuple[int, ...]) -> dict[int, tuple[int, ...]]:
    """`{gpu: (mb, ...)}`: the logical-device sizes asked for each visible GPU."""
    for name in ("memory_limit_mb", "memory_fraction", "logical_gpus"):
        value = getattr(req, name)
        if isinstance(value, Mapping):
            hidden = [g for g in value if g not in visible]
            if hidden:
                raise ValueError(
                    f"`{name}` configures GPU {hidden[0]}, which is not visible (visible GPUs: {list(visible)}). "
                    f"Configure only visible GPUs, or add it to `visible_gpus`. Received: {name}={dict(value)!r}."
                )
    limits: dict[int, tuple[int, ...]] = {}
    for gpu in visible:
        total = _memory_mb(req, snap, gpu)
        split = req.logical_gpus.get(gpu) if isinstance(req.logical_gpus, Mapping) else req.logical_gpus
        if isinstance(split, tuple):
            limits[gpu] = tuple(int(mb) for mb in split)
        elif isinstance(split, int):
            if total is None:
                raise ValueError(
                    f"`logical_gpus={split}` for GPU {gpu} needs a memory size to split: add GPU {gpu} to "
                    "`memory_limit_mb` or `memory_fraction`, or give a list of MB sizes. "
                    f"Received: logical_gpus={_show(req.logical_gpus)}, memory_limit_mb={_show(req.memory_limit_mb)}, "
                    f"memory_fraction={_show(req.memory_fraction)}."
                )
            share = total // split
            if share < 1:
                raise ValueError(
                    f"Splitting {total} MB of GPU {gpu} into logical_gpus={split} leaves less than 1 MB each. "
                    f"Use fewer logical GPUs or a larger limit. Received: logical_gpus={_show(req.logical_gpus)}."
                )
            limits[gpu] = (share,) * split
        elif total is not None:
            limits[gpu] = (total,)
    return limits


def _effective_growth(snap: _Snapshot, gpu: int) -> bool:
    if any(snap.gpu_logical_mb[g] for g in snap.visible_gpus):
        return False  # TensorFlow ignores growth once any GPU has logical devices
    raw = snap.memory_growth[gpu]
    return raw if raw is not None else snap.env.get(_ENV_FORCE_GROWTH) == "true"


def _gpu_changes(req: _Request, snap: _Snapshot) -> tuple[list[tuple[_Change, bool]], dict[str, str]]:
    """Plan the GPU arguments; returns `[(change, already_in_force)]` and the skipped arguments."""
    given = req.given(_GPU_ARGS)
    if not given:
        return [], {}
    if snap.gpu_count == 0:
        return [], {n: "no GPU visible to TensorFlow" for n in given}

    out: list[tuple[_Change, bool]] = []
    visible = _resolve_visible(req, snap)
    if req.visible_gpus is not None:
        change = _Change("visible_gpus", visible, snap.visible_gpus, visible, snap.visible_gpus)
        out.append((change, visible == snap.visible_gpus))
    rest = [n for n in given if n != "visible_gpus"]
    if not visible:
        reason = (
            "`visible_gpus=[]` hides every GPU"
            if req.visible_gpus is not None
            else "every GPU was hidden earlier with `tf.config.set_visible_devices`"
        )
        return out, {n: reason for n in rest}

    limits = _resolve_limits(req, snap, visible)
    if limits:
        current = {g: snap.gpu_logical_mb[g] for g in limits}
        out.append(
            (
                _Change("gpu_memory_limits_mb", limits, current, limits, current),
                all(current[g] is not None and tuple(current[g]) == limits[g] for g in limits),
            )
        )

    if req.memory_growth is not None:
        final = {g: limits.get(g, snap.gpu_logical_mb[g]) for g in visible}
        configured = [g for g in visible if final[g]]
        if req.memory_growth and configured:
            raise ValueError(
                f"`memory_growth=True` cannot be used while GPU {configured[0]} has a memory limit or logical split "
                f"(set earlier: {_show(final[configured[0]])} MB); TensorFlow then turns memory growth off on every "
                "GPU. Set it in a fresh process without the limit."
            )
        growth = req.memory_growth
        current = {g: _effective_growth(snap, g) for g in visible}
        # Every visible GPU without logical devices gets the same value: TensorFlow
        # refuses to start when growth differs between GPUs.
        targets = {g: growth for g in visible if not final[g]}
        out.append(
            (
                _Change("memory_growth", growth, current, targets, {g: snap.memory_growth[g] for g in targets}),
                all(v == growth for v in current.values()),
            )
        )

    env = snap.env
    if req.gpu_thread_mode is not None:
        now = env.get(_ENV_THREAD_MODE)
        in_force = (now or "global") == req.gpu_thread_mode
        change = _Change("gpu_thread_mode", req.gpu_thread_mode, now or "global", req.gpu_thread_mode, now)
        out.append((change, in_force))
    if req.gpu_thread_count is not None:
        now = env.get(_ENV_THREAD_COUNT)
        wanted = str(req.gpu_thread_count)
        out.append((_Change("gpu_thread_count", req.gpu_thread_count, now, wanted, now), now == wanted))
    return out, {}


def _make_plan(req: _Request, snap: _Snapshot) -> _Plan:
    """Build the complete plan. Pure: it reads only `req` and `snap`, and raises on anything impossible."""
    candidates, skipped = _gpu_changes(req, snap)

    if req.cpu_devices is not None:
        now = snap.cpu_logical_devices
        count = now if now is not None else snap.cpu_count
        change = _Change("cpu_devices", req.cpu_devices, count, req.cpu_devices, now)
        candidates.append((change, count == req.cpu_devices))
    for setting in _SIMPLE:
        wanted = getattr(req, setting.name)
        if wanted is not None:
            now = getattr(snap, setting.name)
            candidates.append((_Change(setting.name, wanted, now, wanted, now), now == wanted))

    candidates.sort(key=lambda item: _ORDER.index(item[0].setting))
    changes = tuple(c for c, in_force in candidates if not in_force)
    in_force = {c.setting: c.value for c, f in candidates if f}

    if snap.initialized:
        late = [c for c in changes if c.setting in _INIT_ONLY]
        if late:
            detail = "; ".join(f"{c.setting} (in force: {_show(c.current)}, asked: {_show(c.value)})" for c in late)
            raise RuntimeError(
                "TensorFlow has already initialised its devices, so these settings can no longer change: "
                f"{detail}. Nothing was changed. {_FIX_LATE}"
            )
    return _Plan(changes, in_force, skipped)


# --------------------------------------------------------------------------- #
# Reading TensorFlow (no device initialisation)
# --------------------------------------------------------------------------- #


def _gpu_total_bytes(index: int) -> int | None:
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


def _take_snapshot(req: _Request) -> _Snapshot:
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
        memory = {i: _gpu_total_bytes(i) for i in range(len(gpus))}

    return _Snapshot(
        initialized=initialized,
        gpu_count=len(gpus),
        cpu_count=len(cpus),
        gpu_memory_bytes=MappingProxyType(memory),
        visible_gpus=tuple(i for i, g in enumerate(gpus) if g in visible),
        memory_growth=tuple(tf.config.experimental.get_memory_growth(g) for g in gpus),
        gpu_logical_mb=tuple(gpu_logical),
        cpu_logical_devices=None if cpu_config is None else len(cpu_config),
        **{s.name: s.read() if getattr(req, s.name) is not None else None for s in _SIMPLE},
        env=MappingProxyType(
            {k: os.environ[k] for k in (_ENV_THREAD_MODE, _ENV_THREAD_COUNT, _ENV_FORCE_GROWTH) if k in os.environ}
        ),
    )


# --------------------------------------------------------------------------- #
# Step 3: applying (each setter also restores, given a `_Change.restore` value)
# --------------------------------------------------------------------------- #


def _physical(kind: str, index: int) -> Any:
    import tensorflow as tf

    return tf.config.list_physical_devices(kind)[index]


def _set_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def _set_visible(indices: tuple[int, ...]) -> None:
    import tensorflow as tf

    tf.config.set_visible_devices([_physical("GPU", i) for i in indices], "GPU")


def _set_memory_growth(values: Mapping[int, bool | None]) -> None:
    import tensorflow as tf

    for gpu, enable in values.items():
        device = _physical("GPU", gpu)
        if enable is None:  # restoring "never set"
            clear_memory_growth(device)
        else:
            tf.config.experimental.set_memory_growth(device, enable)


def _set_gpu_limits(values: Mapping[int, tuple[float, ...] | None]) -> None:
    import tensorflow as tf

    for gpu, sizes in values.items():
        device = _physical("GPU", gpu)
        if sizes is None:
            clear_logical_configuration(device)
        else:
            tf.config.set_logical_device_configuration(
                device, [tf.config.LogicalDeviceConfiguration(memory_limit=mb) for mb in sizes]
            )


def _set_cpu_devices(count: int | None) -> None:
    import tensorflow as tf

    device = _physical("CPU", 0)
    if count is None:
        clear_logical_configuration(device)
    else:
        config = [tf.config.LogicalDeviceConfiguration() for _ in range(count)]
        tf.config.set_logical_device_configuration(device, config)


_SETTERS: dict[str, Callable[[Any], None]] = {
    "gpu_thread_mode": lambda v: _set_env(_ENV_THREAD_MODE, v),
    "gpu_thread_count": lambda v: _set_env(_ENV_THREAD_COUNT, v),
    "visible_gpus": _set_visible,
    "memory_growth": _set_memory_growth,
    "gpu_memory_limits_mb": _set_gpu_limits,
    "cpu_devices": _set_cpu_devices,
    **{s.name: s.write for s in _SIMPLE},
}


def _apply(plan: _Plan) -> None:
    """Apply every change in order; on failure restore the touched settings, newest first, and re-raise.

    Restoring writes back the values read in the snapshot. For soft placement
    and XLA that makes TensorFlow's "unset" default explicit with the same value.
    """
    touched: list[_Change] = []
    try:
        for change in plan.changes:
            touched.append(change)  # a setter may fail half-way through several GPUs
            _SETTERS[change.setting](change.target)
    except BaseException as error:
        for change in reversed(touched):
            try:
                _SETTERS[change.setting](change.restore)
            except Exception as exc:  # keep the original error; report what could not be undone
                logger.warning(
                    "configure_devices() failed and could not restore %s to %s: %s",
                    change.setting,
                    _show(change.current),
                    exc,
                )
        if isinstance(error, RuntimeError) and "initializ" in str(error):
            # The runtime started (e.g. in another thread) after the plan was checked.
            raise RuntimeError(
                f"TensorFlow initialised its devices while configure_devices() was setting "
                f"{touched[-1].setting}: {error}. Settings applied so far were restored where TensorFlow "
                f"allows it. {_FIX_LATE}"
            ) from error
        raise


# --------------------------------------------------------------------------- #
# Public entry point
# --------------------------------------------------------------------------- #


def configure_devices(
    *,
    visible_gpus: Sequence[int] | Literal["all"] | None = None,
    memory_growth: bool | None = None,
    memory_limit_mb: float | Mapping[int, float] | None = None,
    memory_fraction: float | Mapping[int, float] | None = None,
    logical_gpus: int | Sequence[float] | Mapping[int, int | Sequence[float]] | None = None,
    cpu_devices: int | None = None,
    soft_placement: bool | None = None,
    log_placement: bool | None = None,
    mixed_precision: str | None = None,
    xla: bool | None = None,
    tf32: bool | None = None,
    intra_op_threads: int | None = None,
    inter_op_threads: int | None = None,
    gpu_thread_mode: str | None = None,
    gpu_thread_count: int | None = None,
) -> DeviceConfig:
    """Configure TensorFlow's devices and runtime options in one validated call.

    On Keras' JAX backend, the settings with a JAX meaning are applied to JAX
    instead, and the others raise (see `keras_gpu.setup.jax_devices`).

    Call it at the top of the script, right after the imports and before any
    tensor, model or strategy is created. Every argument defaults to `None`,
    meaning "leave as is". All arguments are checked, and a full plan is made,
    before anything changes; if applying still fails, what was applied is
    restored.

    GPU indices are TensorFlow's physical GPU indices (the order of
    `tf.config.list_physical_devices("GPU")`, after `CUDA_VISIBLE_DEVICES`).
    Memory sizes are in TensorFlow's MB (2**20 bytes) and rounded down to whole
    MB. On a machine without a GPU the GPU arguments are skipped, with one INFO
    log line, and the others still apply.

    Common cases:

    ```python
    keras_gpu.configure_devices(memory_growth=True)                 # allocate GPU memory on demand
    keras_gpu.configure_devices(memory_fraction=0.5)                # half of each card
    keras_gpu.configure_devices(logical_gpus=[4096, 4096])          # 2 logical GPUs of 4 GB per card
    keras_gpu.configure_devices(logical_gpus=2, memory_limit_mb=8192)  # the same, split from a total
    keras_gpu.configure_devices(cpu_devices=4)                      # 4 replicas on a CPU-only machine
    ```

    Args:
        visible_gpus: GPU indices TensorFlow may use, e.g. `[0]`, or `"all"`.
            `[]` hides every GPU.
        memory_growth: Allocate GPU memory on demand instead of all at start.
            Applies to every visible GPU; cannot be combined with memory limits.
        memory_limit_mb: Hard memory limit, for every visible GPU or as
            `{gpu_index: mb}`.
        memory_fraction: Limit as a share in (0, 1] of the card's total memory
            (read from NVML), for every visible GPU or as `{gpu_index: share}`.
        logical_gpus: Split each visible GPU into logical GPUs: an int `N`
            divides the `memory_limit_mb`/`memory_fraction` limit into `N`
            equal parts; a list gives one MB size per logical GPU. Also
            `{gpu_index: N or [mb, ...]}`.
        cpu_devices: Split the CPU into this many logical devices (>= 1), so
            multi-replica code runs without a GPU.
        soft_placement: Let ops without a kernel for the requested device run
            elsewhere.
        log_placement: Log the device every op runs on.
        mixed_precision: Keras global policy: `"mixed_float16"`,
            `"mixed_bfloat16"` or `"float32"`.
        xla: XLA auto-clustering JIT for `tf.function` graphs.
        tf32: TensorFloat-32 math on GPUs that have it.
        intra_op_threads: Threads inside one op (0 lets TensorFlow choose).
        inter_op_threads: Threads running independent ops (0 lets TensorFlow
            choose).
        gpu_thread_mode: `"global"`, `"gpu_private"` or `"gpu_shared"` (sets
            `TF_GPU_THREAD_MODE`).
        gpu_thread_count: Threads per GPU for the private/shared modes (sets
            `TF_GPU_THREAD_COUNT`); needs `gpu_thread_mode` in the same call.

    Returns:
        A `DeviceConfig` recording what was applied, already in force, or skipped.

    Raises:
        TypeError: An argument has the wrong type.
        ValueError: An argument is out of range, or arguments contradict each
            other or the machine (e.g. a GPU index that does not exist).
        RuntimeError: TensorFlow has already initialised its devices and a
            setting that can only change before that differs from the one in
            force; or `memory_fraction` is used and NVML cannot report the
            card's memory. Nothing is changed in either case.
    """
    arguments = dict(locals())
    if selected() == "jax":  # the settings with a JAX meaning, mapped onto JAX
        from keras_gpu.setup import jax_devices

        return jax_devices.configure_devices(**arguments)
    require_tensorflow("keras_gpu.configure_devices()")
    req = _parse_request(
        visible_gpus=visible_gpus,
        memory_growth=memory_growth,
        memory_limit_mb=memory_limit_mb,
        memory_fraction=memory_fraction,
        logical_gpus=logical_gpus,
        cpu_devices=cpu_devices,
        soft_placement=soft_placement,
        log_placement=log_placement,
        mixed_precision=mixed_precision,
        xla=xla,
        tf32=tf32,
        intra_op_threads=intra_op_threads,
        inter_op_threads=inter_op_threads,
        gpu_thread_mode=gpu_thread_mode,
        gpu_thread_count=gpu_thread_count,
    )
    with _lock:
        plan = _make_plan(req, _take_snapshot(req))
        if plan.skipped:
            reasons = sorted(set(plan.skipped.values()))
            logger.info("configure_devices: %s; skipped GPU options: %s", "; ".join(reasons), ", ".join(plan.skipped))
        _apply(plan)
    record = DeviceConfig(
        applied={c.setting: c.value for c in plan.changes},
        in_force=plan.in_force,
        skipped=plan.skipped,
    )
    logger.debug("%s", record)
    return record
