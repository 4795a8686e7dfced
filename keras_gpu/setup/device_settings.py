"""The settings `configure_devices()` changes on TensorFlow, and applying a plan of them all-or-nothing.

Each simple setting (thread counts, soft and logged placement, XLA, TF32,
mixed precision) is one row of `SIMPLE`: its name, check, read, write, and
whether it must come before the runtime starts; the request, the snapshot,
the plan and the setters are built from that table. The settings the GPU
memory planner resolves (visible GPUs, memory growth, limits, logical
devices, the GPU thread environment variables) have their setters here too.

`apply` writes a plan's changes in order; if one fails, the changes already
written are restored, newest first, before the error propagates.

Importing this module imports neither TensorFlow nor Keras.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from keras_gpu.core.checks import check_bool, check_choice
from keras_gpu.core.log import logger
from keras_gpu.core.tf_private import clear_logical_configuration, clear_memory_growth
from keras_gpu.setup.device_args import MIXED_PRECISION_POLICIES, check_count, show

__all__ = [
    "ANY_TIME",
    "ENV_FORCE_GROWTH",
    "ENV_THREAD_COUNT",
    "ENV_THREAD_MODE",
    "FIX_LATE",
    "INIT_ONLY",
    "ORDER",
    "SETTERS",
    "SIMPLE",
    "Change",
    "Plan",
    "Setting",
    "apply",
]

ENV_THREAD_MODE = "TF_GPU_THREAD_MODE"
ENV_THREAD_COUNT = "TF_GPU_THREAD_COUNT"
ENV_FORCE_GROWTH = "TF_FORCE_GPU_ALLOW_GROWTH"

FIX_LATE = (
    "Call `keras_gpu.configure_devices()` before any tensor, model or strategy is created, "
    "e.g. at the top of the script right after the imports."
)
"""The fix named by every error about a setting asked for after TensorFlow initialised its runtime."""

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


def _tensorflow() -> Any:
    import tensorflow as tf

    return tf


def _keras() -> Any:
    import keras

    return keras


@dataclass(frozen=True)
class Setting:
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
    return check_count(name, value, 0, " (0 lets TensorFlow choose)")


def _check_policy(name: str, value: Any) -> str | None:
    return check_choice(name, value, MIXED_PRECISION_POLICIES, allow_none=True)


def _check_switch(name: str, value: Any) -> bool | None:
    return check_bool(name, value, allow_none=True)


# A new simple setting: its argument and docstring in `configure_devices`, and one row here.
SIMPLE: tuple[Setting, ...] = (
    Setting(
        "intra_op_threads",
        _check_threads,
        lambda: _tensorflow().config.threading.get_intra_op_parallelism_threads(),
        lambda n: _tensorflow().config.threading.set_intra_op_parallelism_threads(n),
        before_init=True,
    ),
    Setting(
        "inter_op_threads",
        _check_threads,
        lambda: _tensorflow().config.threading.get_inter_op_parallelism_threads(),
        lambda n: _tensorflow().config.threading.set_inter_op_parallelism_threads(n),
        before_init=True,
    ),
    Setting(
        "soft_placement",
        _check_switch,
        lambda: bool(_tensorflow().config.get_soft_device_placement()),
        lambda on: _tensorflow().config.set_soft_device_placement(on),
        before_init=False,
    ),
    Setting(
        "log_placement",
        _check_switch,
        lambda: bool(_tensorflow().debugging.get_log_device_placement()),
        lambda on: _tensorflow().debugging.set_log_device_placement(on),
        before_init=False,
    ),
    Setting(
        "xla",
        _check_switch,
        lambda: _tensorflow().config.optimizer.get_jit() == "autoclustering",
        lambda on: _tensorflow().config.optimizer.set_jit("autoclustering" if on else False),
        before_init=False,
    ),
    Setting(
        "tf32",
        _check_switch,
        lambda: bool(_tensorflow().config.experimental.tensor_float_32_execution_enabled()),
        lambda on: _tensorflow().config.experimental.enable_tensor_float_32_execution(on),
        before_init=False,
    ),
    Setting(
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
INIT_ONLY = _PLANNER_INIT_ONLY + tuple(s.name for s in SIMPLE if s.before_init)
ANY_TIME = tuple(s.name for s in SIMPLE if not s.before_init)
ORDER = INIT_ONLY + ANY_TIME


@dataclass(frozen=True)
class Change:
    """One setting to change: `target` is applied, `restore` undoes it (same setter).

    Attributes:
        setting: The setting's name (one of `ORDER`).
        value: The value the caller asked for, as `DeviceConfig` records it.
        current: The value in force before the change, for messages.
        target: What the setter writes.
        restore: What the setter writes to undo the change.
    """

    setting: str
    value: Any
    current: Any
    target: Any
    restore: Any


@dataclass(frozen=True)
class Plan:
    """A complete plan: the changes in the order they are applied, what is already in force, and what is skipped."""

    changes: tuple[Change, ...]
    in_force: Mapping[str, Any]
    skipped: Mapping[str, str]


# --------------------------------------------------------------------------- #
# Setters (each also restores, given a `Change.restore` value)
# --------------------------------------------------------------------------- #


def _physical(kind: str, index: int) -> Any:
    return _tensorflow().config.list_physical_devices(kind)[index]


def _set_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def _set_visible(indices: tuple[int, ...]) -> None:
    _tensorflow().config.set_visible_devices([_physical("GPU", i) for i in indices], "GPU")


def _set_memory_growth(values: Mapping[int, bool | None]) -> None:
    tf = _tensorflow()
    for gpu, enable in values.items():
        device = _physical("GPU", gpu)
        if enable is None:  # restoring "never set"
            clear_memory_growth(device)
        else:
            tf.config.experimental.set_memory_growth(device, enable)


def _set_gpu_limits(values: Mapping[int, tuple[float, ...] | None]) -> None:
    tf = _tensorflow()
    for gpu, sizes in values.items():
        device = _physical("GPU", gpu)
        if sizes is None:
            clear_logical_configuration(device)
        else:
            tf.config.set_logical_device_configuration(
                device, [tf.config.LogicalDeviceConfiguration(memory_limit=mb) for mb in sizes]
            )


def _set_cpu_devices(count: int | None) -> None:
    tf = _tensorflow()
    device = _physical("CPU", 0)
    if count is None:
        clear_logical_configuration(device)
    else:
        config = [tf.config.LogicalDeviceConfiguration() for _ in range(count)]
        tf.config.set_logical_device_configuration(device, config)


SETTERS: dict[str, Callable[[Any], None]] = {
    "gpu_thread_mode": lambda v: _set_env(ENV_THREAD_MODE, v),
    "gpu_thread_count": lambda v: _set_env(ENV_THREAD_COUNT, v),
    "visible_gpus": _set_visible,
    "memory_growth": _set_memory_growth,
    "gpu_memory_limits_mb": _set_gpu_limits,
    "cpu_devices": _set_cpu_devices,
    **{s.name: s.write for s in SIMPLE},
}
"""The setter of each setting, by name; `apply` looks them up here at call time."""


def apply(plan: Plan) -> None:
    """Apply every change in order; on failure restore the touched settings, newest first, and re-raise.

    Restoring writes back the values read in the snapshot. For soft placement
    and XLA that makes TensorFlow's "unset" default explicit with the same value.
    A restore that fails is logged as a WARNING and the original error kept.

    Raises:
        RuntimeError: TensorFlow initialised its runtime while the plan was
            being applied (the message names the setting and the fix).
        Exception: Any other error of a setter, unchanged.
    """
    touched: list[Change] = []
    try:
        for change in plan.changes:
            touched.append(change)  # a setter may fail half-way through several GPUs
            SETTERS[change.setting](change.target)
    except BaseException as error:
        for change in reversed(touched):
            try:
                SETTERS[change.setting](change.restore)
            except Exception as exc:  # noqa: BLE001 - keep the original error; report what could not be undone
                logger.warning(
                    "configure_devices() failed and could not restore %s to %s: %s",
                    change.setting,
                    show(change.current),
                    exc,
                )
        if isinstance(error, RuntimeError) and "initializ" in str(error):
            # The runtime started (e.g. in another thread) after the plan was checked.
            raise RuntimeError(
                f"TensorFlow initialised its devices while configure_devices() was setting "
                f"{touched[-1].setting}: {error}. Settings applied so far were restored where TensorFlow "
                f"allows it. {FIX_LATE}"
            ) from error
        raise
