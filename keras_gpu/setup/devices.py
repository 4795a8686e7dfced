"""Configure TensorFlow's devices before its runtime starts: `configure_devices()`.

One call replaces the block of `tf.config` boilerplate that GPU guides put at
the top of training scripts. It works in three steps:

1. The arguments are checked on their own (types, ranges, combinations):
   `keras_gpu.setup.device_request`.
2. A snapshot of the machine and of the settings in force is taken
   (`keras_gpu.setup.device_snapshot`), and a complete plan is built from the
   arguments and the snapshot alone (`keras_gpu.setup.device_plan`). Every
   error is raised here, before anything changes.
3. The plan is applied (`keras_gpu.setup.device_settings`). If a step still
   fails, the steps already applied are restored before the error propagates.

Some settings (visible GPUs, memory growth, memory limits, logical devices,
thread counts, the GPU thread mode) can only change before TensorFlow
initialises its runtime, i.e. before the first tensor, model or strategy is
created. Asking for a change to one of them afterwards raises a
`RuntimeError`; asking for what is already in force is a no-op. The other
settings (soft placement, placement logging, XLA, TF32, mixed precision) apply
at any time.

On Keras' JAX backend the call goes to `keras_gpu.setup.jax_devices`; both
paths return a `DeviceConfig` (`keras_gpu.setup.device_config`).

Importing this module imports neither TensorFlow nor Keras.
"""

from __future__ import annotations

import threading
from dataclasses import fields
from typing import Any

from keras_gpu.core.backend import require_tensorflow, selected
from keras_gpu.core.checks import check_keywords, declared_signature
from keras_gpu.core.log import logger
from keras_gpu.setup import jax_devices
from keras_gpu.setup.device_config import DeviceConfig
from keras_gpu.setup.device_plan import make_plan
from keras_gpu.setup.device_request import DeviceArguments, parse_request
from keras_gpu.setup.device_settings import apply
from keras_gpu.setup.device_snapshot import take_snapshot

__all__ = ["DeviceConfig", "configure_devices"]

_lock = threading.Lock()


def configure_devices(**arguments: Any) -> DeviceConfig:
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
    # allocate GPU memory on demand
    keras_gpu.configure_devices(memory_growth=True)
    # half of each card
    keras_gpu.configure_devices(memory_fraction=0.5)
    # 2 logical GPUs of 4 GB per card
    keras_gpu.configure_devices(logical_gpus=[4096, 4096])
    # the same, split from a total
    keras_gpu.configure_devices(logical_gpus=2, memory_limit_mb=8192)
    # 4 replicas on a CPU-only machine
    keras_gpu.configure_devices(cpu_devices=4)
    ```

    Args:
        **arguments: The keywords below, declared once by
            `keras_gpu.setup.device_request.DeviceArguments` (the function's
            `__signature__` lists them, each defaulting to `None`).

    Keyword Args:
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
            card's memory. Nothing is changed in either case. Also on Keras'
            PyTorch backend, where neither TensorFlow's nor JAX's devices are
            the ones Keras trains on.
        ImportError: TensorFlow is not installed (on the TensorFlow backend).

    Examples:
        Two logical CPUs, so that a mirrored strategy has two replicas without
        a GPU. Run it in a fresh process: the split must come before
        TensorFlow's first tensor.

        >>> import keras_gpu
        >>> config = keras_gpu.configure_devices(cpu_devices=2)
        >>> dict(config.applied)
        {'cpu_devices': 2}
        >>> # asking again changes nothing
        >>> dict(keras_gpu.configure_devices(cpu_devices=2).in_force)
        {'cpu_devices': 2}
    """
    check_keywords("configure_devices", arguments, _KEYWORDS)
    given = DeviceArguments(**arguments)
    if selected() == "jax":  # the settings with a JAX meaning, mapped onto JAX
        return jax_devices.configure_devices(given)
    require_tensorflow("keras_gpu.configure_devices()", also_on_jax=True)
    current = selected()
    if current != "tensorflow":
        raise RuntimeError(
            f"keras_gpu.configure_devices() configures TensorFlow's or JAX's devices, and Keras trains on "
            f"{current!r} here: set KERAS_BACKEND=tensorflow or KERAS_BACKEND=jax before importing keras, or leave "
            f"the call out. Received: backend={current!r}"
        )
    return _configure_tensorflow(given)


_KEYWORDS = tuple(f.name for f in fields(DeviceArguments))
"""The keywords of `configure_devices`: `DeviceArguments`' fields, declared there once."""

configure_devices.__signature__ = declared_signature(configure_devices, DeviceArguments)  # type: ignore[attr-defined]


def _configure_tensorflow(arguments: DeviceArguments) -> DeviceConfig:
    """Check, plan and apply `arguments` on TensorFlow (the three steps of the module docstring)."""
    req = parse_request(arguments)
    with _lock:
        plan = make_plan(req, take_snapshot(req))
        if plan.skipped:
            reasons = sorted(set(plan.skipped.values()))
            logger.info("configure_devices: %s; skipped GPU options: %s", "; ".join(reasons), ", ".join(plan.skipped))
        apply(plan)
    record = DeviceConfig(
        applied={c.setting: c.value for c in plan.changes},
        in_force=plan.in_force,
        skipped=plan.skipped,
    )
    logger.debug("%s", record)
    return record
