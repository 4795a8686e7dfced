"""The NVML session: starting NVML once, calling it under one error policy, shutting it down.

This is the one place that calls the `nvidia-ml-py` package (imported as
`pynvml`). NVML is initialised once, lazily, under a lock, on the first
query, and shut down at interpreter exit (stopping running samplers first).
Importing this module neither imports `pynvml` nor touches a GPU.

**Error policy.** Every query goes through `call`, which never raises
into the caller; a failed query returns `None` ("not available"):

* `NVMLError_NotSupported`, `NVMLError_FunctionNotFound` or
  `NVMLError_NoPermission` for a metric on a device turns that metric off for
  that device, with one WARNING.
* `NVMLError_GpuIsLost`, `NVMLError_Unknown`, `NVMLError_Uninitialized`,
  `NVMLError_DriverNotLoaded`, `NVMLError_LibraryNotFound`,
  `NVMLError_ResetRequired`, `NVMLError_LibRmVersionMismatch` or
  `NVMLError_GpuNotFound` after a successful start means NVML cannot be
  trusted any more: every later query returns `None`, `available`
  becomes False, running samplers stop, with one WARNING. Training goes on.
* Any other NVML error (a timeout, no data yet, ...) skips that one sample,
  with one WARNING per metric, device and error.
"""

from __future__ import annotations

import atexit
import importlib
import logging
import threading
import weakref
from typing import Any, NamedTuple

from keras_gpu.core.log import log_once, logger

__all__ = [
    "Device",
    "available",
    "call",
    "describe_error",
    "device_count",
    "driver_version",
    "generation",
    "handle",
    "label",
    "register_sampler",
    "reset_for_tests",
    "stopped_reason",
    "text",
    "unavailable_reason",
    "unregister_sampler",
    "uuid",
]

# NVML's return codes (nvml.h); stable across driver versions.
_ERR_UNINITIALIZED = 1
_ERR_NOT_SUPPORTED = 3
_ERR_NO_PERMISSION = 4
_ERR_DRIVER_NOT_LOADED = 9
_ERR_LIBRARY_NOT_FOUND = 12
_ERR_FUNCTION_NOT_FOUND = 13
_ERR_GPU_IS_LOST = 15
_ERR_RESET_REQUIRED = 16
_ERR_LIB_RM_VERSION_MISMATCH = 18
_ERR_GPU_NOT_FOUND = 28
_ERR_UNKNOWN = 999

_PER_METRIC_ERRORS = frozenset({_ERR_NOT_SUPPORTED, _ERR_FUNCTION_NOT_FOUND, _ERR_NO_PERMISSION})
_FATAL_ERRORS = frozenset(
    {
        _ERR_UNINITIALIZED,
        _ERR_DRIVER_NOT_LOADED,
        _ERR_LIBRARY_NOT_FOUND,
        _ERR_GPU_IS_LOST,
        _ERR_RESET_REQUIRED,
        _ERR_LIB_RM_VERSION_MISMATCH,
        _ERR_GPU_NOT_FOUND,
        _ERR_UNKNOWN,
    }
)


class Device(NamedTuple):
    """A device to query: NVML's index of the (parent) GPU and the handle to use (inside the package only).

    Attributes:
        nvml_index: NVML's index of the GPU (of the parent GPU for a MIG instance).
        handle: The NVML handle to query (the MIG instance's own for a MIG entry).
        key: Identifies the device in the disabled-metric set and in once-only messages.
        label: Names the device in messages.
    """

    nvml_index: int
    handle: Any
    key: str
    label: str


class _State:
    """Everything the session remembers; replaced as a whole by `reset_for_tests`."""

    def __init__(self, generation: int) -> None:
        self.generation = generation
        self.initialized = False  # nvmlInit was attempted
        self.nv: Any = None  # the pynvml module once nvmlInit succeeded
        self.reason: str | None = None  # why NVML is not (or no longer) available
        self.failed = False  # NVML broke after a successful start
        self.closing = False  # shutting down: errors are expected and silent
        self.disabled: set[tuple[str, str]] = set()  # (device key, metric)
        self.handles: dict[int, Any] = {}
        self.uuids: dict[int, str | None] = {}


_lock = threading.RLock()
_state = _State(0)
_samplers: weakref.WeakSet[Any] = weakref.WeakSet()  # running GpuSamplers, stopped at shutdown
_atexit_registered = False


# --------------------------------------------------------------------------- start and stop


def _ensure() -> Any:
    """The initialised `pynvml` module, or None when NVML is not (or no longer) usable."""
    state = _state
    if state.initialized:
        return None if state.failed or state.closing else state.nv
    with _lock:
        state = _state
        if not state.initialized:
            _initialize(state)
        return None if state.failed or state.closing else state.nv


def _initialize(state: _State) -> None:
    """Import `pynvml` and call `nvmlInit`; `state.initialized` is set last, once the outcome is known."""
    global _atexit_registered
    try:
        nv = importlib.import_module("pynvml")
    except Exception as exc:  # noqa: BLE001 - ImportError, or a broken install
        state.reason = f"the `nvidia-ml-py` package (module `pynvml`) cannot be imported ({type(exc).__name__}: {exc})"
    else:
        try:
            nv.nvmlInit()
        except Exception as exc:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded, OSError, ...
            state.reason = f"NVML could not start ({describe_error(exc)})"
        else:
            state.nv = nv
            if not _atexit_registered:
                atexit.register(_shutdown)
                _atexit_registered = True
    state.initialized = True
    if state.reason is not None:
        log_once(
            logging.INFO,
            f"nvml:{state.generation}:unavailable",
            "keras-gpu: NVML is not available, so GPU utilisation, power and device memory are not monitored: %s.",
            state.reason,
        )


def _shutdown() -> None:
    """Stop running samplers and shut NVML down (registered with `atexit`)."""
    with _lock:
        state = _state
        state.closing = True
        state.reason = state.reason or "NVML was shut down"
        samplers = list(_samplers)
    for sampler in samplers:
        sampler.stop(timeout=1.0)
    with _lock:
        if state.nv is not None:
            nv, state.nv = state.nv, None
            try:
                nv.nvmlShutdown()
            except Exception:  # noqa: BLE001, S110 - nothing useful to do at exit
                pass


def reset_for_tests() -> None:
    """Shut NVML down and forget every cached answer and warning (tests only)."""
    global _state
    _shutdown()
    with _lock:
        _state = _State(_state.generation + 1)


def describe_error(exc: BaseException) -> str:
    """An NVML error (or any exception) in a few words: its type, NVML's code, and its message."""
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001 - pynvml's __str__ itself calls NVML
        message = ""
    code = getattr(exc, "value", None)
    name = type(exc).__name__
    if code is not None:
        name = f"{name}, code {code}"
    return f"{name}: {message}" if message else name


# --------------------------------------------------------------------------- the one call wrapper


def call(
    fn_name: str,
    *args: Any,
    metric: str | None = None,
    device: Device | None = None,
    quiet: bool = False,
) -> Any:
    """Call `pynvml.<fn_name>(*args)`, applying the error policy; None when not available.

    `metric` and `device` name what a per-metric error turns off; without them
    an unsupported call just returns None. `quiet` logs a per-metric error at
    DEBUG instead of WARNING (for optional extras).
    """
    nv = _ensure()
    if nv is None:
        return None
    state = _state
    if metric is not None and device is not None and (device.key, metric) in state.disabled:
        return None
    fn = getattr(nv, fn_name, None)
    if fn is None:
        _disable(state, metric, device, f"this nvidia-ml-py has no `{fn_name}`", quiet)
        return None
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - the policy below decides
        _on_error(state, nv, exc, fn_name, metric, device, quiet)
        return None


def _on_error(
    state: _State, nv: Any, exc: Exception, fn_name: str, metric: str | None, device: Device | None, quiet: bool
) -> None:
    if state.closing or state.failed:
        return
    base = getattr(nv, "NVMLError", None)
    code = getattr(exc, "value", None) if isinstance(base, type) and isinstance(exc, base) else None
    if code in _FATAL_ERRORS:
        where = f" on {device.label}" if device is not None else ""
        with _lock:
            if state.failed:
                return
            state.failed = True
            state.reason = f"NVML failed during the run ({describe_error(exc)} from {fn_name}{where})"
        logger.warning(
            "keras-gpu: %s; NVML monitoring is off for the rest of this process. Training continues.",
            state.reason,
        )
        return
    if code in _PER_METRIC_ERRORS or code is None:
        _disable(state, metric, device, describe_error(exc), quiet)
        return
    what = metric or fn_name
    where = device.label if device is not None else "the system"
    log_once(
        logging.WARNING,
        f"nvml:{state.generation}:transient:{what}:{device.key if device else '-'}:{code}",
        "keras-gpu: NVML could not read %s on %s (%s); that sample is skipped.",
        what,
        where,
        describe_error(exc),
    )


def _disable(state: _State, metric: str | None, device: Device | None, why: str, quiet: bool) -> None:
    if metric is None or device is None:
        logger.debug("keras-gpu: NVML query failed: %s", why)
        return
    with _lock:
        if (device.key, metric) in state.disabled:
            return
        state.disabled.add((device.key, metric))
    logger.log(
        logging.DEBUG if quiet else logging.WARNING,
        "keras-gpu: NVML cannot report %s on %s (%s); that metric is off for this GPU.",
        metric,
        device.label,
        why,
    )


def text(value: Any) -> str | None:
    """An NVML string as `str`: they are `str` in nvidia-ml-py >= 11.5 and `bytes` before."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


# --------------------------------------------------------------------------- the system and its GPUs


def available() -> bool:
    """Whether NVML works in this process (initialising it on first call).

    False when `pynvml` cannot be imported, `nvmlInit` fails (no driver, no
    library), or NVML broke during the run; `unavailable_reason` says why.
    """
    return _ensure() is not None


def unavailable_reason() -> str | None:
    """Why `available` is False, or `None` when NVML works."""
    _ensure()
    return _state.reason


def driver_version() -> str | None:
    """The NVIDIA driver version, e.g. `"550.54.15"`, or `None` without NVML."""
    return text(call("nvmlSystemGetDriverVersion"))


def device_count() -> int:
    """Number of GPUs NVML sees on the machine (all of them, whatever `CUDA_VISIBLE_DEVICES` says); 0 without NVML."""
    count = call("nvmlDeviceGetCount")
    return count if isinstance(count, int) and count > 0 else 0


def handle(nvml_index: int) -> Any:
    """NVML's handle of GPU `nvml_index` (cached for the session), or None when NVML cannot give it."""
    state = _state
    found = state.handles.get(nvml_index)
    if found is None:
        found = call("nvmlDeviceGetHandleByIndex", nvml_index)
        if found is not None:
            state.handles[nvml_index] = found
    return found


def uuid(nvml_index: int) -> str | None:
    """The `"GPU-..."` UUID of GPU `nvml_index` (cached for the session), or None when NVML does not report it."""
    state = _state
    if nvml_index not in state.uuids:
        gpu = handle(nvml_index)
        found = text(call("nvmlDeviceGetUUID", gpu)) if gpu is not None else None
        if found is None:
            return None
        state.uuids[nvml_index] = found
    return state.uuids[nvml_index]


def label(nvml_index: int) -> str:
    """How messages name GPU `nvml_index`."""
    return f"GPU {nvml_index} (NVML index)"


# --------------------------------------------------------------------------- for samplers


def stopped_reason() -> str | None:
    """Why NVML can no longer be used (it failed after starting, or is shutting down); None while usable."""
    state = _state
    if state.failed or state.closing:
        return state.reason or "NVML is shutting down"
    return None


def generation() -> int:
    """A number that changes when the session's state is reset (keys once-only messages)."""
    return _state.generation


def register_sampler(sampler: Any) -> None:
    """Remember a running sampler so that shutdown stops it (`sampler.stop(timeout=...)`)."""
    with _lock:
        _samplers.add(sampler)


def unregister_sampler(sampler: Any) -> None:
    """Forget a sampler whose thread has ended."""
    with _lock:
        _samplers.discard(sampler)
