"""A fake `pynvml` module that follows NVML's documented behaviour, for tests without a GPU.

Build one with :class:`FakePynvml` and install it with
``monkeypatch.setitem(sys.modules, "pynvml", fake)``. It mirrors the real
module where keras-gpu depends on it:

* error classes `NVMLError_<Name>` with the real names and `value` codes,
  created from `NVML_ERROR_*` constants as nvidia-ml-py does, and
  `NVMLError(code)` returning the matching subclass;
* `nvmlInit`/`nvmlShutdown` with reference counting; any other call while
  not initialised raises `NVMLError_Uninitialized`;
* units: memory in bytes, utilisation in percent, power in milliwatts,
  temperature in degrees C, clocks in MHz, per-process memory in bytes
  (`None` where the driver does not report it).

Each device is a :class:`FakeGpu`. A metric value may be a list, read one
element per call (the last one repeats), to script a sequence of readings;
an exception instance in such a list (e.g. `fake.error("Timeout")`) is
raised by that call.
Every call is recorded in `calls` as `(function name, thread ident)`.
"""

from __future__ import annotations

import string
import threading
import types
from dataclasses import dataclass, field
from typing import Any

# NVML's return codes, as in nvml.h and nvidia-ml-py.
ERROR_CODES: dict[str, int] = {
    "NVML_ERROR_UNINITIALIZED": 1,
    "NVML_ERROR_INVALID_ARGUMENT": 2,
    "NVML_ERROR_NOT_SUPPORTED": 3,
    "NVML_ERROR_NO_PERMISSION": 4,
    "NVML_ERROR_ALREADY_INITIALIZED": 5,
    "NVML_ERROR_NOT_FOUND": 6,
    "NVML_ERROR_INSUFFICIENT_SIZE": 7,
    "NVML_ERROR_INSUFFICIENT_POWER": 8,
    "NVML_ERROR_DRIVER_NOT_LOADED": 9,
    "NVML_ERROR_TIMEOUT": 10,
    "NVML_ERROR_IRQ_ISSUE": 11,
    "NVML_ERROR_LIBRARY_NOT_FOUND": 12,
    "NVML_ERROR_FUNCTION_NOT_FOUND": 13,
    "NVML_ERROR_CORRUPTED_INFOROM": 14,
    "NVML_ERROR_GPU_IS_LOST": 15,
    "NVML_ERROR_RESET_REQUIRED": 16,
    "NVML_ERROR_OPERATING_SYSTEM": 17,
    "NVML_ERROR_LIB_RM_VERSION_MISMATCH": 18,
    "NVML_ERROR_IN_USE": 19,
    "NVML_ERROR_MEMORY": 20,
    "NVML_ERROR_NO_DATA": 21,
    "NVML_ERROR_NOT_READY": 27,
    "NVML_ERROR_GPU_NOT_FOUND": 28,
    "NVML_ERROR_UNKNOWN": 999,
}

GIB = 1024**3


@dataclass
class FakeProcess:
    """An entry of NVML's process lists."""

    pid: int
    usedGpuMemory: int | None  # noqa: N815 - NVML's field name


@dataclass
class FakeGpu:
    """One fake device; metric fields may be a value or a list of successive values."""

    name: str = "NVIDIA Fake A100 80GB"
    uuid: str = "GPU-00000000-1111-2222-3333-444444444444"
    pci_bus_id: str = "00000000:3B:00.0"
    compute_capability: tuple[int, int] = (8, 0)
    memory_total: Any = 80 * GIB
    memory_used: Any = 3 * GIB
    utilization_gpu: Any = 87
    utilization_memory: Any = 35
    power_mw: Any = 250_000
    temperature_c: Any = 65
    sm_clock_mhz: Any = 1410
    compute_processes: Any = field(default_factory=list)
    graphics_processes: Any = field(default_factory=list)
    unsupported: set[str] = field(default_factory=set)  # function names raising NotSupported here
    mig_uuids: tuple[str, ...] = ()  # MIG instances of this GPU
    _reads: dict[str, int] = field(default_factory=dict, repr=False)

    def read(self, attribute: str) -> Any:
        """The attribute's next value; an exception instance in its place is raised."""
        value = getattr(self, attribute)
        scripted = isinstance(value, list) and (
            attribute not in ("compute_processes", "graphics_processes")
            or (value and isinstance(value[0], (list, BaseException)))
        )
        if scripted:
            i = self._reads.get(attribute, 0)
            self._reads[attribute] = i + 1
            value = value[min(i, len(value) - 1)]
        if isinstance(value, BaseException):
            raise value
        return value


class _Handle:
    def __init__(self, gpu: int, mig: str | None = None) -> None:
        self.gpu = gpu
        self.mig = mig

    def __repr__(self) -> str:
        return f"<fake nvmlDevice {self.gpu}{' ' + self.mig if self.mig else ''}>"


class FakePynvml(types.ModuleType):
    """A stand-in for the `pynvml` module.

    Args:
        gpus: The devices, in NVML (PCI bus) order.
        init_error: Name of the error `nvmlInit` raises, e.g. `"LibraryNotFound"`.
        lose_after: After this many device queries (calls taking a handle),
            every call raises `NVMLError_GpuIsLost`.
        names_as_bytes: Return strings as `bytes`, like nvidia-ml-py < 11.5.
        driver: The driver version string.
    """

    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_GRAPHICS = 0
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_SUCCESS = 0

    def __init__(
        self,
        gpus: list[FakeGpu] | None = None,
        *,
        init_error: str | None = None,
        lose_after: int | None = None,
        names_as_bytes: bool = False,
        driver: str = "550.54.15",
    ) -> None:
        super().__init__("pynvml")
        self.gpus = list(gpus or [])
        self.init_error = init_error
        self.lose_after = lose_after
        self.names_as_bytes = names_as_bytes
        self.driver = driver
        self.refcount = 0
        self.init_calls = 0
        self.shutdown_calls = 0
        self.device_queries = 0
        self.calls: list[tuple[str, int]] = []
        self._calls_lock = threading.Lock()
        self._make_errors()

    # -- errors, built like nvidia-ml-py's _extractNVMLErrorsAsClasses

    def _make_errors(self) -> None:
        mapping: dict[int, type] = {}

        class NVMLError(Exception):
            def __new__(cls, value: int = 999):
                if cls is NVMLError:
                    cls = mapping.get(value, cls)
                obj = Exception.__new__(cls)
                obj.value = value
                return obj

            def __init__(self, *args: Any) -> None:
                super().__init__()

            def __str__(self) -> str:
                return {v: k for k, v in ERROR_CODES.items()}.get(self.value, "Unknown Error")

        self.NVMLError = NVMLError
        for const, code in ERROR_CODES.items():
            setattr(self, const, code)
            name = "NVMLError_" + string.capwords(const.replace("NVML_ERROR_", ""), "_").replace("_", "")

            def make_new(val: int):
                def new(cls, *args: Any):
                    return NVMLError.__new__(cls, val)  # noqa: B023 - `cls` is new()'s own argument

                return new

            cls = type(name, (NVMLError,), {"__new__": make_new(code)})
            cls.__module__ = "pynvml"
            setattr(self, name, cls)
            mapping[code] = cls

    def error(self, name: str) -> Exception:
        """An instance of `NVMLError_<name>`."""
        return getattr(self, f"NVMLError_{name}")()

    # -- bookkeeping

    def _record(self, fn: str, device: bool = False) -> None:
        with self._calls_lock:
            self.calls.append((fn, threading.get_ident()))
            if fn not in ("nvmlInit", "nvmlShutdown") and self.refcount <= 0:
                raise self.error("Uninitialized")
            if device:
                self.device_queries += 1
                if self.lose_after is not None and self.device_queries > self.lose_after:
                    raise self.error("GpuIsLost")

    def _gpu(self, handle: Any, fn: str) -> FakeGpu:
        if not isinstance(handle, _Handle) or not 0 <= handle.gpu < len(self.gpus):
            raise self.error("InvalidArgument")
        gpu = self.gpus[handle.gpu]
        if fn in gpu.unsupported:
            raise self.error("NotSupported")
        return gpu

    def _str(self, text: str) -> str | bytes:
        return text.encode() if self.names_as_bytes else text

    def threads_that_called(self) -> set[int]:
        """Idents of the threads that called any NVML function."""
        with self._calls_lock:
            return {ident for _, ident in self.calls}

    # -- init

    def nvmlInit(self) -> None:
        self._record("nvmlInit")
        self.init_calls += 1
        if self.init_error is not None:
            raise self.error(self.init_error)
        self.refcount += 1

    def nvmlShutdown(self) -> None:
        self._record("nvmlShutdown")
        if self.refcount <= 0:
            raise self.error("Uninitialized")
        self.shutdown_calls += 1
        self.refcount -= 1

    # -- system

    def nvmlSystemGetDriverVersion(self) -> str | bytes:
        self._record("nvmlSystemGetDriverVersion")
        return self._str(self.driver)

    def nvmlDeviceGetCount(self) -> int:
        self._record("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._record("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise self.error("InvalidArgument")
        return _Handle(index)

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> _Handle:
        self._record("nvmlDeviceGetHandleByUUID")
        uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
        for i, gpu in enumerate(self.gpus):
            if gpu.uuid == uuid:
                return _Handle(i)
            if uuid in gpu.mig_uuids:
                return _Handle(i, mig=uuid)
        raise self.error("NotFound")

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle: _Handle) -> _Handle:
        self._record("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", device=True)
        if not isinstance(handle, _Handle) or handle.mig is None:
            raise self.error("InvalidArgument")
        return _Handle(handle.gpu)

    def nvmlDeviceGetIndex(self, handle: _Handle) -> int:
        self._record("nvmlDeviceGetIndex", device=True)
        self._gpu(handle, "nvmlDeviceGetIndex")
        return handle.gpu

    # -- static

    def nvmlDeviceGetName(self, handle: _Handle) -> str | bytes:
        self._record("nvmlDeviceGetName", device=True)
        return self._str(self._gpu(handle, "nvmlDeviceGetName").name)

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str | bytes:
        self._record("nvmlDeviceGetUUID", device=True)
        gpu = self._gpu(handle, "nvmlDeviceGetUUID")
        return self._str(handle.mig or gpu.uuid)

    def nvmlDeviceGetPciInfo(self, handle: _Handle) -> types.SimpleNamespace:
        self._record("nvmlDeviceGetPciInfo", device=True)
        gpu = self._gpu(handle, "nvmlDeviceGetPciInfo")
        return types.SimpleNamespace(busId=self._str(gpu.pci_bus_id))

    def nvmlDeviceGetCudaComputeCapability(self, handle: _Handle) -> tuple[int, int]:
        self._record("nvmlDeviceGetCudaComputeCapability", device=True)
        return tuple(self._gpu(handle, "nvmlDeviceGetCudaComputeCapability").compute_capability)

    # -- dynamic

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle) -> types.SimpleNamespace:
        self._record("nvmlDeviceGetMemoryInfo", device=True)
        gpu = self._gpu(handle, "nvmlDeviceGetMemoryInfo")
        total, used = gpu.read("memory_total"), gpu.read("memory_used")
        if handle.mig is not None:  # a MIG instance: a slice of the card
            total, used = total // 7, used // 7
        return types.SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> types.SimpleNamespace:
        self._record("nvmlDeviceGetUtilizationRates", device=True)
        gpu = self._gpu(handle, "nvmlDeviceGetUtilizationRates")
        if handle.mig is not None:
            raise self.error("NotSupported")
        return types.SimpleNamespace(gpu=gpu.read("utilization_gpu"), memory=gpu.read("utilization_memory"))

    def nvmlDeviceGetPowerUsage(self, handle: _Handle) -> int:
        self._record("nvmlDeviceGetPowerUsage", device=True)
        return self._gpu(handle, "nvmlDeviceGetPowerUsage").read("power_mw")

    def nvmlDeviceGetTemperature(self, handle: _Handle, sensor: int) -> int:
        self._record("nvmlDeviceGetTemperature", device=True)
        if sensor != self.NVML_TEMPERATURE_GPU:
            raise self.error("InvalidArgument")
        return self._gpu(handle, "nvmlDeviceGetTemperature").read("temperature_c")

    def nvmlDeviceGetClockInfo(self, handle: _Handle, clock_type: int) -> int:
        self._record("nvmlDeviceGetClockInfo", device=True)
        gpu = self._gpu(handle, "nvmlDeviceGetClockInfo")
        if clock_type != self.NVML_CLOCK_SM:
            raise self.error("InvalidArgument")
        return gpu.read("sm_clock_mhz")

    def nvmlDeviceGetComputeRunningProcesses(self, handle: _Handle) -> list[FakeProcess]:
        self._record("nvmlDeviceGetComputeRunningProcesses", device=True)
        return list(self._gpu(handle, "nvmlDeviceGetComputeRunningProcesses").read("compute_processes"))

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: _Handle) -> list[FakeProcess]:
        self._record("nvmlDeviceGetGraphicsRunningProcesses", device=True)
        return list(self._gpu(handle, "nvmlDeviceGetGraphicsRunningProcesses").read("graphics_processes"))
