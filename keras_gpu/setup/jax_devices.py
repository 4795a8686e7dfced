"""`configure_devices()` on Keras' JAX backend: the settings that have a JAX meaning, before JAX starts.

`keras_gpu.configure_devices` hands its arguments here when Keras runs on
JAX. They are checked as on TensorFlow (`keras_gpu.setup.device_request`), then
each one maps onto JAX:

- `visible_gpus`: `jax_cuda_visible_devices` (`[]`: `jax_platforms="cpu"`);
- `memory_growth`: `XLA_PYTHON_CLIENT_PREALLOCATE` (`false` allocates on demand);
- `memory_fraction`: `XLA_PYTHON_CLIENT_MEM_FRACTION` (one share for every GPU);
- `cpu_devices`: `jax_num_cpu_devices`;
- `mixed_precision`: Keras' global dtype policy (any time);
- `tf32`: `jax_default_matmul_precision`, `tensorfloat32` or `float32` (any time).

The first four are read when JAX starts its backends, so they must come
before that (before the first array, model or strategy).

The other arguments (`memory_limit_mb`, `logical_gpus`, `soft_placement`,
`log_placement`, `xla`, thread counts and modes) have no JAX meaning and
raise one `ValueError` naming them all. Everything is checked, including a
late change to a setting JAX has already read, before anything changes.
Without a GPU plugin for JAX the GPU arguments are skipped with one INFO
line, as on TensorFlow without a GPU.

Importing this module imports neither JAX nor Keras.
"""

from __future__ import annotations

import importlib.util
import os
import pkgutil
import re
from collections.abc import Callable, Mapping
from typing import Any

from keras_gpu.core.log import logger
from keras_gpu.setup.device_args import show
from keras_gpu.setup.device_config import DeviceConfig
from keras_gpu.setup.device_request import DeviceArguments, parse_request

__all__ = ["NOT_ON_JAX", "backends_started", "configure_devices"]

NOT_ON_JAX = (
    "memory_limit_mb",
    "logical_gpus",
    "soft_placement",
    "log_placement",
    "xla",
    "intra_op_threads",
    "inter_op_threads",
    "gpu_thread_mode",
    "gpu_thread_count",
)
"""`configure_devices` arguments that have no JAX meaning."""

_GPU_ARGS = ("visible_gpus", "memory_growth", "memory_fraction")
_BEFORE_START = ("visible_gpus", "memory_growth", "memory_fraction", "cpu_devices")
_ENV_PREALLOCATE = "XLA_PYTHON_CLIENT_PREALLOCATE"
_ENV_FRACTION = "XLA_PYTHON_CLIENT_MEM_FRACTION"
_FORCE_DEVICES = re.compile(r"--xla_force_host_platform_device_count=(\d+)")
_FIX_LATE = (
    "Call `keras_gpu.configure_devices()` before JAX creates any array, model or strategy, e.g. at the top of "
    "the script right after the imports."
)


def backends_started() -> bool:
    """Whether JAX has started its backends in this process (after which device settings are fixed)."""
    import sys

    if "jax" not in sys.modules:
        return False
    from keras_gpu.core.jax_private import backends_initialized

    return backends_initialized()


def configure_devices(arguments: DeviceArguments) -> DeviceConfig:
    """Apply `keras_gpu.configure_devices`' arguments on JAX (see the module docstring); same arguments and record.

    Raises:
        TypeError: An argument has the wrong type.
        ValueError: An argument is out of range, contradicts another, or has
            no JAX meaning.
        RuntimeError: JAX has already started its backends and a setting it
            read then would change. Nothing is changed in any of these cases.
    """
    req = parse_request(arguments)
    foreign = [name for name in NOT_ON_JAX if getattr(req, name) is not None]
    if foreign:
        shown = ", ".join(f"{name}={getattr(arguments, name)!r}" for name in foreign)
        raise ValueError(
            f"{', '.join(f'`{n}`' for n in foreign)} {'has' if len(foreign) == 1 else 'have'} no meaning on Keras' JAX "
            "backend; on JAX configure_devices takes visible_gpus, memory_growth, memory_fraction (one share for "
            f"every GPU), cpu_devices, mixed_precision and tf32. Leave the others out. Received: {shown}"
        )
    if isinstance(req.memory_fraction, Mapping):
        raise TypeError(
            "`memory_fraction` on JAX is one share for every GPU (XLA_PYTHON_CLIENT_MEM_FRACTION), not a per-GPU "
            f"mapping. Pass a float. Received: memory_fraction={arguments.memory_fraction!r}"
        )
    wanted = {name: getattr(req, name) for name in (*_BEFORE_START, "mixed_precision", "tf32")}
    wanted = {name: value for name, value in wanted.items() if value is not None}
    skipped: dict[str, str] = {}
    gpu_given = [name for name in _GPU_ARGS if name in wanted]
    if gpu_given and not _gpu_plugin():
        skipped = dict.fromkeys(gpu_given, "no GPU plugin is installed for JAX")
        logger.info("configure_devices: no GPU plugin is installed for JAX; skipped GPU options: %s", ", ".join(gpu_given))
        for name in gpu_given:
            del wanted[name]

    started = backends_started()
    changes: dict[str, Any] = {}
    in_force: dict[str, Any] = {}
    for name, value in wanted.items():
        (in_force if _SETTINGS[name][0](started) == value else changes)[name] = value
    late = [name for name in changes if name in _BEFORE_START] if started else []
    if late:
        detail = "; ".join(f"{n} (in force: {show(_SETTINGS[n][0](started))}, asked: {show(changes[n])})" for n in late)
        raise RuntimeError(
            f"JAX has already started its backends, so these settings can no longer change: {detail}. "
            f"Nothing was changed. {_FIX_LATE}"
        )
    _apply(changes)
    record = DeviceConfig(applied=changes, in_force=in_force, skipped=skipped)
    logger.debug("%s", record)
    return record


def _apply(changes: Mapping[str, Any]) -> None:
    """Write every change; on failure restore those already written, newest first, and re-raise."""
    done: list[tuple[str, Any]] = []
    try:
        for name, value in changes.items():
            done.append((name, _raw(name)))
            _SETTINGS[name][1](value)
    except BaseException:
        for name, old in reversed(done):
            try:
                _restore(name, old)
            except Exception as exc:  # noqa: BLE001 - keep the original error
                logger.warning("configure_devices() failed and could not restore %s: %s", name, exc)
        raise


def _gpu_plugin() -> bool:
    """Whether a GPU plugin for JAX is installed (found without importing JAX or starting a backend)."""
    if importlib.util.find_spec("jax_plugins") is None:
        return False
    import jax_plugins

    return any(re.search(r"cuda|rocm", module.name) for module in pkgutil.iter_modules(jax_plugins.__path__))


# --------------------------------------------------------------------------- each setting: read (what is in force), write


def _config(name: str) -> Any:
    import jax

    return getattr(jax.config, name)


def _update(name: str, value: Any) -> None:
    import jax

    jax.config.update(name, value)


def _read_cpu_devices(started: bool) -> int:
    if started:
        import jax

        return len(jax.local_devices(backend="cpu"))
    configured = int(_config("jax_num_cpu_devices"))
    if configured > 0:
        return configured
    forced = _FORCE_DEVICES.search(os.environ.get("XLA_FLAGS", ""))
    return int(forced.group(1)) if forced else 1


def _read_visible(started: bool) -> Any:
    if str(_config("jax_platforms") or "") == "cpu":
        return ()
    value = str(_config("jax_cuda_visible_devices"))
    return "all" if value == "all" else tuple(int(i) for i in value.split(",") if i.strip())


def _write_visible(value: Any) -> None:
    if value == ():
        _update("jax_platforms", "cpu")
    else:
        _update("jax_cuda_visible_devices", "all" if value == "all" else ",".join(str(i) for i in value))


def _read_mixed_precision(started: bool) -> str:
    import keras

    return keras.mixed_precision.global_policy().name


def _write_mixed_precision(name: str) -> None:
    import keras

    keras.mixed_precision.set_global_policy(name)


def _read_tf32(started: bool) -> bool:
    precision = str(_config("jax_default_matmul_precision") or "default").lower()
    return precision not in ("highest", "float32")


def _read_fraction(started: bool) -> float | None:
    try:
        return float(os.environ[_ENV_FRACTION])
    except (KeyError, ValueError):
        return None


def _set_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


_SETTINGS: dict[str, tuple[Callable[[bool], Any], Callable[[Any], None]]] = {
    "visible_gpus": (_read_visible, _write_visible),
    "memory_growth": (
        lambda started: os.environ.get(_ENV_PREALLOCATE, "true").lower() == "false",
        lambda on: _set_env(_ENV_PREALLOCATE, "false" if on else "true"),
    ),
    "memory_fraction": (_read_fraction, lambda share: _set_env(_ENV_FRACTION, f"{share:g}")),
    "cpu_devices": (_read_cpu_devices, lambda n: _update("jax_num_cpu_devices", n)),
    "mixed_precision": (_read_mixed_precision, _write_mixed_precision),
    "tf32": (_read_tf32, lambda on: _update("jax_default_matmul_precision", "tensorfloat32" if on else "float32")),
}

# What `_restore` writes back: the raw value each setting had (environment variables may be unset).
_RAW: dict[str, Callable[[], Any]] = {
    "visible_gpus": lambda: (_config("jax_platforms"), _config("jax_cuda_visible_devices")),
    "memory_growth": lambda: os.environ.get(_ENV_PREALLOCATE),
    "memory_fraction": lambda: os.environ.get(_ENV_FRACTION),
    "cpu_devices": lambda: _config("jax_num_cpu_devices"),
    "mixed_precision": lambda: _read_mixed_precision(False),
    "tf32": lambda: _config("jax_default_matmul_precision"),
}


def _raw(name: str) -> Any:
    return _RAW[name]()


def _restore(name: str, old: Any) -> None:
    if name == "visible_gpus":
        _update("jax_platforms", old[0])
        _update("jax_cuda_visible_devices", old[1])
    elif name == "memory_growth":
        _set_env(_ENV_PREALLOCATE, old)
    elif name == "memory_fraction":
        _set_env(_ENV_FRACTION, old)
    elif name == "cpu_devices":
        _update("jax_num_cpu_devices", old)
    elif name == "mixed_precision":
        _write_mixed_precision(old)
    else:
        _update("jax_default_matmul_precision", old)
