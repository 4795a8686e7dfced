"""The one place that talks to NVML (the `nvidia-ml-py` package, imported as `pynvml`).

NVML is initialised once, lazily, under a lock, on the first query, and shut
down at interpreter exit. Importing this module neither imports `pynvml` nor
touches a GPU.

**Error policy.** Every query goes through one wrapper that never raises into
the caller; a failed query returns `None` ("not available"):

* `NVMLError_NotSupported`, `NVMLError_FunctionNotFound` or
  `NVMLError_NoPermission` for a metric on a device turns that metric off for
  that device, with one WARNING.
* `NVMLError_GpuIsLost`, `NVMLError_Unknown`, `NVMLError_Uninitialized`,
  `NVMLError_DriverNotLoaded`, `NVMLError_LibraryNotFound`,
  `NVMLError_ResetRequired`, `NVMLError_LibRmVersionMismatch` or
  `NVMLError_GpuNotFound` after a successful start means NVML cannot be
  trusted any more: every later query returns `None`, :func:`available`
  becomes False, running samplers stop, with one WARNING. Training goes on.
* Any other NVML error (a timeout, no data yet, ...) skips that one sample,
  with one WARNING per metric, device and error.
* Garbage values (negative, utilisation above 100 %, temperature above
  200 C, memory used above the card's total, ...) are discarded, with one
  WARNING per metric and device.

**TensorFlow's GPU index to NVML's.** TensorFlow numbers GPUs as CUDA does
in this process: the *k*-th entry of `CUDA_VISIBLE_DEVICES` when it is set,
else the *k*-th GPU of the machine. NVML numbers every GPU of the machine in
PCI bus order, whatever `CUDA_VISIBLE_DEVICES` says. The mapping therefore
assumes CUDA enumerates GPUs in PCI bus order (`CUDA_DEVICE_ORDER=PCI_BUS_ID`,
and also CUDA's default on machines whose GPUs are all the same model):

* `CUDA_VISIBLE_DEVICES` unset: TensorFlow GPU *k* is NVML GPU *k*.
* Set to a comma-separated list: TensorFlow GPU *k* is the *k*-th entry. An
  integer entry is an NVML index; `GPU-...` is a GPU UUID or a unique prefix
  of one; `MIG-...` is the full UUID of a MIG instance, which maps to its
  parent GPU's NVML index (its memory figures are the instance's own). As in
  CUDA, the list ends at the first entry that names no device (or repeats
  one), so `""` and `"-1"` hide every GPU.

The variable is read when a mapping is asked for; CUDA reads it once, when
the process first uses the GPU, so changing it afterwards makes the mapping
wrong.

**Sampling.** `keras_gpu.core.nvml_sampler.GpuSampler` samples on a daemon thread and keeps, per window, the count, sum
and maximum of each metric per GPU; :meth:`GpuSampler.drain` returns the
window's mean and maximum and starts a new window. It reaches NVML only
through this module's functions.
"""

from __future__ import annotations

import atexit
import importlib
import logging
import os
import threading
import weakref
from typing import Any, NamedTuple

from keras_gpu.core.checks import check_index
from keras_gpu.core.log import log_once, logger

__all__ = [
    "GpuInfo",
    "GpuSample",
    "WindowStat",
    "METRICS",
    "available",
    "unavailable_reason",
    "driver_version",
    "device_count",
    "static_info",
    "memory_total_bytes",
    "tf_to_nvml_index",
    "process_memory_bytes",
    "sample",
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

_TEMPERATURE_GPU = 0  # NVML_TEMPERATURE_GPU
_CLOCK_SM = 1  # NVML_CLOCK_SM

# Upper bounds beyond which a reading is garbage (NVML's "not available"
# sentinels are all-ones integers, far above these).
_TF_INDEX = "TensorFlow's index of a GPU (`GPU:<index>`)"
_MAX_PERCENT = 100.0
_MAX_TEMPERATURE_C = 200.0
_MAX_POWER_W = 10_000.0
_MAX_CLOCK_MHZ = 10_000.0

METRICS: tuple[str, ...] = (
    "memory_used_bytes",
    "memory_total_bytes",
    "process_memory_bytes",
    "utilization_percent",
    "memory_utilization_percent",
    "power_watts",
    "temperature_c",
    "sm_clock_mhz",
)
"""The fields of :class:`GpuSample`, which are also the metric names of a sampler window."""


class GpuInfo(NamedTuple):
    """What does not change about a GPU while the process runs.

    Attributes:
        index: NVML's index of the GPU (PCI bus order, all GPUs of the machine).
        name: Product name, e.g. `"NVIDIA H100 80GB HBM3"`.
        uuid: `"GPU-..."` UUID, or `None` when NVML does not report it.
        memory_total_bytes: Total device memory, in bytes.
        compute_capability: CUDA compute capability `(major, minor)`.
        pci_bus_id: PCI bus id, e.g. `"00000000:3B:00.0"`.
    """

    index: int
    name: str | None
    uuid: str | None
    memory_total_bytes: int | None
    compute_capability: tuple[int, int] | None
    pci_bus_id: str | None


class GpuSample(NamedTuple):
    """One reading of a GPU; a field is `None` when NVML could not provide it.

    Attributes:
        memory_used_bytes: Device memory used by all processes, in bytes.
        memory_total_bytes: Total device memory, in bytes.
        process_memory_bytes: Device memory used by this process, in bytes.
        utilization_percent: Percent of the last sample period in which a
            kernel ran on the GPU (0-100).
        memory_utilization_percent: Percent of the last sample period in
            which device memory was read or written (0-100).
        power_watts: Power draw, in watts (NVML reports milliwatts).
        temperature_c: GPU core temperature, in degrees Celsius.
        sm_clock_mhz: Current SM clock, in MHz.
    """

    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    process_memory_bytes: int | None = None
    utilization_percent: float | None = None
    memory_utilization_percent: float | None = None
    power_watts: float | None = None
    temperature_c: float | None = None
    sm_clock_mhz: float | None = None


class WindowStat(NamedTuple):
    """Summary of one metric over a sampler window.

    Attributes:
        count: Number of valid samples in the window.
        mean: Mean of the samples, in the metric's unit.
        max: Largest sample, in the metric's unit.
    """

    count: int
    mean: float
    max: float


class Device(NamedTuple):
    """A device to query: NVML's index of the (parent) GPU and the handle to use (inside the package only)."""

    nvml_index: int
    handle: Any
    key: str  # identifies the device in the disabled-metric set and in messages
    label: str


class _State:
    """Everything this module remembers; replaced as a whole by `_reset_for_tests`."""

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


# --------------------------------------------------------------------------- init


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
            except Exception:  # noqa: BLE001 - nothing useful to do at exit
                pass


def _reset_for_tests() -> None:
    """Shut NVML down and forget every cached answer and warning (tests only)."""
    global _state
    _shutdown()
    with _lock:
        _state = _State(_state.generation + 1)


def describe_error(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - pynvml's __str__ itself calls NVML
        text = ""
    code = getattr(exc, "value", None)
    name = type(exc).__name__
    if code is not None:
        name = f"{name}, code {code}"
    return f"{name}: {text}" if text else name


# --------------------------------------------------------------------------- queries


def _call(
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


def _garbage(metric: str, device: Device, value: Any) -> None:
    log_once(
        logging.WARNING,
        f"nvml:{_state.generation}:garbage:{metric}:{device.key}",
        "keras-gpu: NVML reported an impossible %s on %s (%r); such readings are discarded.",
        metric,
        device.label,
        value,
    )


def _valid(metric: str, device: Device, value: Any, upper: float | None) -> float | int | None:
    """`value` as a number when it is within `[0, upper]`, else None (with one warning)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        _garbage(metric, device, value)
        return None
    if value < 0 or (upper is not None and value > upper):
        _garbage(metric, device, value)
        return None
    return value


def _text(value: Any) -> str | None:
    """NVML strings are `str` in nvidia-ml-py >= 11.5 and `bytes` before."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


# --------------------------------------------------------------------------- public: system


def available() -> bool:
    """Whether NVML works in this process (initialising it on first call).

    False when `pynvml` cannot be imported, `nvmlInit` fails (no driver, no
    library), or NVML broke during the run; :func:`unavailable_reason` says why.
    """
    return _ensure() is not None


def unavailable_reason() -> str | None:
    """Why :func:`available` is False, or `None` when NVML works."""
    _ensure()
    return _state.reason


def driver_version() -> str | None:
    """The NVIDIA driver version, e.g. `"550.54.15"`, or `None` without NVML."""
    return _text(_call("nvmlSystemGetDriverVersion"))


def device_count() -> int:
    """Number of GPUs NVML sees on the machine (all of them, whatever `CUDA_VISIBLE_DEVICES` says); 0 without NVML."""
    count = _call("nvmlDeviceGetCount")
    return count if isinstance(count, int) and count > 0 else 0


def _handle(nvml_index: int) -> Any:
    state = _state
    handle = state.handles.get(nvml_index)
    if handle is None:
        handle = _call("nvmlDeviceGetHandleByIndex", nvml_index)
        if handle is not None:
            state.handles[nvml_index] = handle
    return handle


def _uuid(nvml_index: int) -> str | None:
    state = _state
    if nvml_index not in state.uuids:
        handle = _handle(nvml_index)
        uuid = _text(_call("nvmlDeviceGetUUID", handle)) if handle is not None else None
        if uuid is None:
            return None
        state.uuids[nvml_index] = uuid
    return state.uuids[nvml_index]


def _label(nvml_index: int) -> str:
    return f"GPU {nvml_index} (NVML index)"


def static_info() -> list[GpuInfo]:
    """Name, UUID, memory, compute capability and PCI bus id of every GPU, in NVML order.

    Returns an empty list without NVML.
    """
    infos = []
    for index in range(device_count()):
        handle = _handle(index)
        if handle is None:
            continue
        target = Device(index, handle, str(index), _label(index))
        memory = _call("nvmlDeviceGetMemoryInfo", handle, metric="memory_total", device=target, quiet=True)
        total = _valid("memory_total_bytes", target, getattr(memory, "total", None), None) if memory else None
        capability = _call(
            "nvmlDeviceGetCudaComputeCapability", handle, metric="compute_capability", device=target, quiet=True
        )
        if isinstance(capability, (tuple, list)) and len(capability) == 2:
            capability = (int(capability[0]), int(capability[1]))
        else:
            capability = None
        pci = _call("nvmlDeviceGetPciInfo", handle, metric="pci_info", device=target, quiet=True)
        infos.append(
            GpuInfo(
                index=index,
                name=_text(_call("nvmlDeviceGetName", handle, metric="name", device=target, quiet=True)),
                uuid=_uuid(index),
                memory_total_bytes=int(total) if total else None,
                compute_capability=capability,
                pci_bus_id=_text(getattr(pci, "busId", None)) if pci is not None else None,
            )
        )
    return infos


# --------------------------------------------------------------------------- index mapping


def _resolve_entry(entry: str, count: int) -> Device | None:
    """The device one `CUDA_VISIBLE_DEVICES` entry names, or None when it names none."""
    if entry.isdigit():
        index = int(entry)
        if index >= count:
            return None
        handle = _handle(index)
        return Device(index, handle, str(index), _label(index)) if handle is not None else None
    upper = entry.upper()
    if upper.startswith("GPU-") and len(entry) > 4:
        matches = [i for i in range(count) if (_uuid(i) or "").upper().startswith(upper)]
        if len(matches) != 1:
            return None
        index = matches[0]
        handle = _handle(index)
        return Device(index, handle, str(index), _label(index)) if handle is not None else None
    if upper.startswith("MIG-") and len(entry) > 4:
        mig = _call("nvmlDeviceGetHandleByUUID", entry)
        if mig is None:
            return None
        parent = _call("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", mig)
        index = _call("nvmlDeviceGetIndex", parent) if parent is not None else None
        if not isinstance(index, int):
            return None
        return Device(index, mig, entry, f"MIG instance {entry} of GPU {index} (NVML index)")
    return None


def visible_devices(environ: Any = None) -> list[Device]:
    """The GPUs CUDA shows this process, in CUDA's (= TensorFlow's) order."""
    env = os.environ if environ is None else environ
    count = device_count()
    raw = env.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        targets = []
        for index in range(count):
            handle = _handle(index)
            if handle is None:
                break
            targets.append(Device(index, handle, str(index), _label(index)))
        return targets
    targets, seen = [], set()
    for entry in raw.split(","):
        target = _resolve_entry(entry.strip(), count)
        if target is None or target.key in seen:
            break
        seen.add(target.key)
        targets.append(target)
    return targets


def _target(tf_gpu_index: int, environ: Any = None) -> Device | None:
    visible = visible_devices(environ)
    return visible[tf_gpu_index] if tf_gpu_index < len(visible) else None


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
    target = _target(check_index("tf_gpu_index", tf_gpu_index, _TF_INDEX), environ)
    return target.nvml_index if target is not None else None


def memory_total_bytes(tf_gpu_index: int, *, environ: Any = None) -> int | None:
    """Total memory, in bytes, of TensorFlow's GPU `tf_gpu_index` (of the MIG instance for a MIG entry).

    `None` when NVML is not available or no such GPU is visible.
    """
    target = _target(check_index("tf_gpu_index", tf_gpu_index, _TF_INDEX), environ)
    if target is None:
        return None
    memory = _call("nvmlDeviceGetMemoryInfo", target.handle, metric="memory", device=target)
    total = _valid("memory_total_bytes", target, getattr(memory, "total", None), None) if memory is not None else None
    return int(total) if total else None


# --------------------------------------------------------------------------- sampling


def _process_memory(target: Device, total: float | None) -> int | None:
    """Device memory used by this process on `target`, in bytes, or None when unknown.

    Compute and graphics processes are listed separately; a process that uses
    both appears in both lists with the same figure, so the larger of the two
    per-list sums is taken rather than their total.
    """
    compute = _call("nvmlDeviceGetComputeRunningProcesses", target.handle, metric="process_memory", device=target)
    if compute is None:
        return None
    graphics = _call(
        "nvmlDeviceGetGraphicsRunningProcesses", target.handle, metric="graphics_processes", device=target, quiet=True
    )
    pid = os.getpid()
    lists = [list(compute), list(graphics or [])]
    mine = [[p for p in procs if getattr(p, "pid", None) == pid] for procs in lists]
    if not any(mine):
        if any(lists):
            log_once(
                logging.INFO,
                f"nvml:{_state.generation}:pid:{target.key}",
                "keras-gpu: this process (pid %d) is not among the processes NVML lists on %s, probably "
                "because it runs in its own PID namespace (a container); per-process GPU memory is not reported.",
                pid,
                target.label,
            )
            return None
        return 0
    sums = []
    for entries in mine:
        if not entries:
            continue
        used = [getattr(p, "usedGpuMemory", None) for p in entries]
        if any(u is None for u in used):
            log_once(
                logging.INFO,
                f"nvml:{_state.generation}:pidmem:{target.key}",
                "keras-gpu: the driver does not report per-process memory on %s (e.g. Windows WDDM or a "
                "restricted container); per-process GPU memory is not reported.",
                target.label,
            )
            return None
        sums.append(sum(used))
    value = _valid("process_memory_bytes", target, max(sums), total)
    return int(value) if value is not None else None


def read_device(target: Device) -> GpuSample:
    handle = target.handle
    used = total = None
    memory = _call("nvmlDeviceGetMemoryInfo", handle, metric="memory", device=target)
    if memory is not None:
        total = _valid("memory_total_bytes", target, getattr(memory, "total", None), None)
        if total == 0:
            _garbage("memory_total_bytes", target, total)
            total = None
        used = _valid("memory_used_bytes", target, getattr(memory, "used", None), total)
    util = _call("nvmlDeviceGetUtilizationRates", handle, metric="utilization", device=target)
    gpu_util = mem_util = None
    if util is not None:
        gpu_util = _valid("utilization_percent", target, getattr(util, "gpu", None), _MAX_PERCENT)
        mem_util = _valid("memory_utilization_percent", target, getattr(util, "memory", None), _MAX_PERCENT)
    power_mw = _call("nvmlDeviceGetPowerUsage", handle, metric="power", device=target)
    numeric = isinstance(power_mw, (int, float)) and not isinstance(power_mw, bool)
    power = _valid("power_watts", target, power_mw / 1000.0 if numeric else power_mw, _MAX_POWER_W)  # mW -> W
    temperature = _valid(
        "temperature_c",
        target,
        _call("nvmlDeviceGetTemperature", handle, _TEMPERATURE_GPU, metric="temperature", device=target),
        _MAX_TEMPERATURE_C,
    )
    clock = _valid(
        "sm_clock_mhz",
        target,
        _call("nvmlDeviceGetClockInfo", handle, _CLOCK_SM, metric="sm_clock", device=target),
        _MAX_CLOCK_MHZ,
    )
    return GpuSample(
        memory_used_bytes=int(used) if used is not None else None,
        memory_total_bytes=int(total) if total is not None else None,
        process_memory_bytes=_process_memory(target, total),
        utilization_percent=float(gpu_util) if gpu_util is not None else None,
        memory_utilization_percent=float(mem_util) if mem_util is not None else None,
        power_watts=float(power) if power is not None else None,
        temperature_c=float(temperature) if temperature is not None else None,
        sm_clock_mhz=float(clock) if clock is not None else None,
    )


def process_memory_bytes(tf_gpu_index: int, *, environ: Any = None) -> int | None:
    """Device memory used by this process on TensorFlow's GPU `tf_gpu_index`, in bytes.

    `None` when NVML is not available, the GPU is not visible, or the driver
    does not list this process (another PID namespace) or its memory.
    """
    target = _target(check_index("tf_gpu_index", tf_gpu_index, _TF_INDEX), environ)
    if target is None:
        return None
    memory = _call("nvmlDeviceGetMemoryInfo", target.handle, metric="memory", device=target)
    return _process_memory(target, getattr(memory, "total", None) if memory is not None else None)


def sample(tf_gpu_index: int, *, environ: Any = None) -> GpuSample | None:
    """One reading of every metric of TensorFlow's GPU `tf_gpu_index`.

    `None` when NVML is not available or the GPU is not visible; a field is
    `None` when that metric is not available.
    """
    target = _target(check_index("tf_gpu_index", tf_gpu_index, _TF_INDEX), environ)
    return read_device(target) if target is not None else None


# --------------------------------------------------------------------------- for the sampler (keras_gpu.core.nvml_sampler)


def stopped_reason() -> str | None:
    """Why NVML can no longer be used (it failed after starting, or is shutting down); None while usable."""
    state = _state
    if state.failed or state.closing:
        return state.reason or "NVML is shutting down"
    return None


def generation() -> int:
    """A number that changes when this module's state is reset (keys once-only messages)."""
    return _state.generation


def register_sampler(sampler: Any) -> None:
    """Remember a running sampler so that shutdown stops it (`sampler.stop(timeout=...)`)."""
    with _lock:
        _samplers.add(sampler)


def unregister_sampler(sampler: Any) -> None:
    """Forget a sampler whose thread has ended."""
    with _lock:
        _samplers.discard(sampler)
