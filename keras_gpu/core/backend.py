"""Which Keras backend trains, and every per-backend fact the callbacks need, in one place.

The callbacks (`keras_gpu.callbacks()`, `ThroughputLogger`, `MemoryLogger`,
`StepTimeLogger`, ...) run on the TensorFlow, JAX and PyTorch backends of
Keras 3; `make_strategy`, `configure_devices` and `keras-gpu launch` on
TensorFlow and JAX. TensorFlow is needed only on the TensorFlow backend and
for the TensorFlow-only parts (`plan_strategy`, `PlacementLogger`), which
call `require_tensorflow`. Everything here reads the
backend lazily: importing this module imports no backend.

Per backend:

=============================  ==========================  ==========================  ==========================
fact                           TensorFlow                  JAX                         PyTorch
=============================  ==========================  ==========================  ==========================
replica devices                the strategy's devices      the `keras.distribution`    the model's device
                                                           mesh, else the default
                                                           device
allocator memory               `get_memory_info`; peak     `Device.memory_stats()`     `torch.cuda.memory_stats`
                               since process start or      (GPU); peak since process   (GPU); peak since process
                               its last reset              start; a pool preallocated  start or its last reset;
                                                           on GPU by default           none on CPU
matmul dtype (float32)         TF32 while TF32 execution   TF32 unless the default     TF32 when
                               is enabled                  matmul precision is         `allow_tf32` is set
                                                           `highest`
=============================  ==========================  ==========================  ==========================

A model's FLOPs and its GPUs' peak FLOP/s are counted from these facts in
`keras_gpu.meters.model_flops`. Device names use TensorFlow's form
(`/device:GPU:0`) everywhere, so tags (`GPU_0`) and tables read the same
whichever backend trained.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from collections.abc import Iterator
from typing import Any, NamedTuple

from keras_gpu.core.cluster_info import ClusterInfo

__all__ = [
    "INSTALL_HINT",
    "Allocator",
    "AllocatorPool",
    "AllocatorReading",
    "allocator_memory",
    "allocator_pool",
    "allocator_unavailable",
    "allocators",
    "batch_ends_in_order",
    "compute_dtype",
    "device_name",
    "jax_preallocation",
    "name",
    "num_replicas",
    "physical_gpus",
    "replica_devices",
    "replica_gpus",
    "require_tensorflow",
    "require_tensorflow_backend",
    "reset_allocator_peak",
    "selected",
    "strategy",
    "task_info",
    "tensorflow_installed",
    "torch_device",
    "writing_alone",
]

INSTALL_HINT = 'pip install "tensorflow-cpu>=2.16,<2.22" (CPU) or pip install "tensorflow[and-cuda]>=2.16,<2.22" (NVIDIA GPUs)'
"""How to add a TensorFlow build keras-gpu supports (its `cpu` and `cuda` extras) to the environment."""


# --------------------------------------------------------------------------- which backend


def name() -> str:
    """The Keras backend in use: `"tensorflow"`, `"jax"`, `"torch"`, ... (`keras.backend.backend()`)."""
    import keras

    return str(keras.backend.backend())


def batch_ends_in_order() -> bool:
    """Whether Keras runs every callback's batch ends on the training thread, in order, on this backend.

    On TensorFlow it does (its backend is not thread-safe for Keras). On the
    others (JAX, PyTorch), with `verbose=0` and every callback `async_safe`,
    Keras runs batch ends on a thread pool, concurrently and in any order,
    and waits for them only at the epoch's end.
    """
    return name() == "tensorflow"


def selected() -> str:
    """The Keras backend this process uses, or will use once Keras is imported.

    Read without importing Keras where the `KERAS_BACKEND` environment
    variable decides (it overrides Keras' config file); otherwise Keras is
    imported (which imports its backend, but starts no device) and asked;
    when Keras cannot be imported, its default, `"tensorflow"`.
    """
    if "keras" not in sys.modules:
        chosen = os.environ.get("KERAS_BACKEND", "").strip()
        if chosen:
            return chosen
    try:
        return name()
    except ImportError:
        return "tensorflow"


def tensorflow_installed() -> bool:
    """Whether TensorFlow can be imported here (checked without importing it)."""
    return importlib.util.find_spec("tensorflow") is not None


def require_tensorflow(feature: str, *, also_on_jax: bool = False) -> None:
    """Raise one clear `ImportError` when `feature` is used without TensorFlow installed.

    The message says the fix for the backend selected: install TensorFlow,
    or, for a feature that also works on JAX (`also_on_jax`) called on
    another backend (PyTorch), select TensorFlow or JAX.

    Args:
        feature: What the user called, e.g. `"keras_gpu.make_strategy()"`.
        also_on_jax: Whether `feature` works on Keras' JAX backend too
            (`make_strategy`, `configure_devices`, `keras-gpu launch`).

    Raises:
        ImportError: TensorFlow is not installed, naming the fix.
    """
    if tensorflow_installed():
        return
    current = selected()
    if also_on_jax and current not in ("tensorflow", "jax"):
        raise ImportError(
            f"{feature} works on Keras' TensorFlow and JAX backends, not on {current!r}: set KERAS_BACKEND=jax, "
            f"or install TensorFlow ({INSTALL_HINT}) and set KERAS_BACKEND=tensorflow. Received: backend={current!r}"
        )
    jax_too = " (or set KERAS_BACKEND=jax, where it works without TensorFlow)" if also_on_jax else ""
    raise ImportError(
        f"{feature} needs TensorFlow, which is not installed. Install a TensorFlow build beside "
        f"keras-gpu: {INSTALL_HINT}{jax_too}. Without it, every callback but PlacementLogger (keras_gpu.callbacks(), "
        "ThroughputLogger, MemoryLogger, StepTimeLogger, ModelCheckpoint, BackupAndRestore, Heartbeat) works "
        "on the JAX and PyTorch backends, and make_strategy(), configure_devices() and keras-gpu launch work on JAX."
    )


def require_tensorflow_backend(feature: str) -> None:
    """Like `require_tensorflow`, and also raise when Keras runs on another backend.

    Raises:
        ImportError: TensorFlow is not installed.
        RuntimeError: Keras uses another backend (set `KERAS_BACKEND=tensorflow`).
    """
    require_tensorflow(feature)
    current = name()
    if current != "tensorflow":
        raise RuntimeError(
            f"{feature} works on Keras' TensorFlow backend only: set KERAS_BACKEND=tensorflow before "
            f"importing keras, or leave it out (keras_gpu.callbacks() does so by itself). Received: backend={current!r}"
        )


# --------------------------------------------------------------------------- where the replicas run


def strategy(model: Any) -> Any:
    """The model's `tf.distribute.Strategy` on the TensorFlow backend (the one in scope if it has none); else None."""
    if name() != "tensorflow":
        return None
    import tensorflow as tf

    return getattr(model, "distribute_strategy", None) or tf.distribute.get_strategy()


def task_info(model: Any) -> ClusterInfo:
    """This process's place in the cluster.

    TensorFlow: the strategy's cluster (see `keras_gpu.core.cluster.task_info`).
    JAX: `jax.process_index()` of `jax.process_count()` processes. PyTorch:
    the `torch.distributed` rank when a process group is initialised. A
    single process otherwise.
    """
    backend = name()
    if backend == "tensorflow":
        from keras_gpu.core.cluster import task_info as tf_task_info

        return tf_task_info(strategy(model))
    count, index = 1, 0
    if backend == "jax":
        import jax

        count, index = jax.process_count(), jax.process_index()
    elif backend == "torch":
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            count, index = dist.get_world_size(), dist.get_rank()
    if count <= 1:
        return ClusterInfo(source="local")
    workers = tuple(f"process_{i}" for i in range(count))
    return ClusterInfo(source=backend, cluster={"worker": workers}, task_type="worker", task_index=index)


@contextlib.contextmanager
def writing_alone() -> Iterator[None]:
    """A block where this process alone works with Keras objects, e.g. the chief writing a checkpoint.

    On JAX with a `keras.distribution` over several processes, every new
    Keras variable is placed on the global mesh by `jax.device_put`, which
    all processes must call together; Keras' saving creates such variables
    (`saving_lib` builds a reference optimizer), so a save on the chief alone
    would stall or fail the job. Inside the block no distribution is in force,
    so new variables stay on this process; existing ones are read as they
    are. Elsewhere the block changes nothing.
    """
    if name() != "jax":
        yield
        return
    import jax
    import keras

    distribution = keras.distribution.distribution()
    if distribution is None or jax.process_count() <= 1:
        yield
        return
    keras.distribution.set_distribution(None)
    try:
        yield
    finally:
        keras.distribution.set_distribution(distribution)


def _jax_devices(model: Any) -> list[Any]:
    import jax
    import keras

    distribution = keras.distribution.distribution()
    if distribution is None:
        return [jax.devices()[0]]
    by_name = {f"{d.platform}:{d.id}": d for d in jax.devices()}
    found = [by_name.get(str(d).lower()) for d in distribution.device_mesh.devices.flatten()]
    local = [d for d in found if d is not None and d.process_index == jax.process_index()]
    return local or [jax.devices()[0]]


def torch_device(model: Any) -> Any:
    """The `torch.device` holding the model's weights (PyTorch backend), else where Keras puts new tensors."""
    import torch

    for variable in getattr(model, "weights", ()):
        value = getattr(variable, "value", None)
        if isinstance(value, torch.Tensor):
            return value.device
    # No weights yet: where Keras' torch backend puts new tensors.
    return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")


def device_name(kind: str, index: int) -> str:
    """A device's name in TensorFlow's form (`/device:GPU:0`), as keras-gpu names devices on every backend.

    Args:
        kind: The platform or device type (`"cuda"`, `"gpu"`, `"rocm"`, `"cpu"`, `"tpu"`, ...).
        index: The device's index.
    """
    kind = {"cuda": "GPU", "gpu": "GPU", "rocm": "GPU", "cpu": "CPU", "tpu": "TPU"}.get(kind.lower(), kind.upper())
    return f"/device:{kind}:{index}"


def replica_devices(model: Any) -> tuple[str, ...]:
    """This process's replica devices, in replica order, as TensorFlow-style names (`/device:GPU:0`); never empty.

    TensorFlow: the strategy's devices (full names). JAX: the local devices
    of the `keras.distribution` mesh, or the default device. PyTorch: the
    device holding the model's weights.
    """
    backend = name()
    if backend == "tensorflow":
        from keras_gpu.core import topology

        return tuple(topology.replica_devices(strategy(model)))
    if backend == "jax":
        return tuple(device_name(d.platform, d.id) for d in _jax_devices(model))
    if backend == "torch":
        device = torch_device(model)
        return (device_name(device.type, device.index or 0),)
    return ("/device:CPU:0",)


def num_replicas(model: Any) -> int:
    """Replicas training in sync over all processes (TensorFlow: `num_replicas_in_sync`).

    JAX: the size of the `keras.distribution` mesh's batch dimension (1
    without a distribution). PyTorch: 1: Keras trains one replica per
    process there, and each process of a `torch.distributed` job logs its
    own run (`log_dir/worker_<rank>/train`) with its own batches.
    """
    backend = name()
    if backend == "tensorflow":
        return int(getattr(strategy(model), "num_replicas_in_sync", 1) or 1)
    if backend == "jax":
        import keras

        distribution = keras.distribution.distribution()
        if distribution is None:
            return 1
        mesh = distribution.device_mesh
        axis = getattr(distribution, "batch_dim_name", None)
        if axis in tuple(mesh.axis_names):
            return int(mesh.shape[tuple(mesh.axis_names).index(axis)])
        return int(mesh.devices.size)
    return 1


def physical_gpus(model: Any) -> list[int]:
    """CUDA ordinals (among this process's visible GPUs) of the distinct GPUs the replicas run on, for NVML."""
    return [ordinal for ordinal, _ in replica_gpus(model)]


def replica_gpus(model: Any) -> list[tuple[int, str]]:
    """`(CUDA ordinal, product name)` of each distinct GPU under this process's replicas, in replica order.

    Replicas on logical GPUs that share one physical GPU name it once. The
    name is `""` where the backend does not tell it.
    """
    backend = name()
    out: list[tuple[int, str]] = []

    def add(ordinal: int, product: str) -> None:
        if all(o != ordinal for o, _ in out):
            out.append((ordinal, product))

    if backend == "tensorflow":
        import tensorflow as tf

        from keras_gpu.core import topology

        layout = topology.gpu_layout()
        visible = tf.config.get_visible_devices("GPU")
        for device in replica_devices(model):
            parsed = topology.parse_device(device)
            if parsed is None or parsed.device_type != "GPU":
                continue
            for ordinal in topology.logical_to_physical(layout, [parsed.index or 0]):
                entry = next((d for d in visible if d.name.endswith(f":{ordinal}")), None)
                try:
                    details = tf.config.experimental.get_device_details(entry) if entry is not None else {}
                except Exception:  # noqa: BLE001 - no details: the name stays unknown
                    details = {}
                add(ordinal, str(details.get("device_name", "")))
    elif backend == "jax":
        for d in _jax_devices(model):
            if d.platform == "gpu":
                local = getattr(d, "local_hardware_id", None)
                add(int(d.id if local is None else local), str(d.device_kind))
    elif backend == "torch":
        import torch

        device = torch_device(model)
        if device.type == "cuda":
            add(device.index or 0, torch.cuda.get_device_name(device))
    return out


def compute_dtype(model: Any) -> str:
    """The dtype the model's matmuls run in, as a key of the peak table of `keras_gpu.meters.flops`.

    `mixed_float16` gives `"float16"`, `mixed_bfloat16` `"bfloat16"`. float32
    gives `"tf32"` where the backend runs float32 matmuls as TF32 on GPUs
    that have it (TensorFlow: while TF32 execution is enabled, its default;
    JAX: its default matmul precision; PyTorch: when
    `torch.backends.cuda.matmul.allow_tf32` is set, off by default), else
    `"float32"`.
    """
    policy = getattr(model, "dtype_policy", None)
    dtype = str(getattr(policy, "compute_dtype", None) or "float32")
    if dtype in ("float16", "bfloat16"):
        return dtype
    if dtype != "float32":
        return "float32"
    backend = name()
    if backend == "tensorflow":
        import tensorflow as tf

        return "tf32" if tf.config.experimental.tensor_float_32_execution_enabled() else "float32"
    if backend == "jax":
        import jax

        precision = str(jax.config.jax_default_matmul_precision or "default").lower()
        return "float32" if precision in ("highest", "float32") else "tf32"
    if backend == "torch":
        import torch

        return "tf32" if torch.backends.cuda.matmul.allow_tf32 else "float32"
    return "float32"


# --------------------------------------------------------------------------- allocator memory


class Allocator(NamedTuple):
    """One device memory allocator of this process.

    Attributes:
        device: The backend's own name for the device (`"GPU:0"` for
            TensorFlow, the `jax.Device`'s `"gpu:0"`, `"cuda:0"` for PyTorch).
        tag: Its label in tags (`memory/allocator/<tag>/...`): `GPU_0`, `CPU_0`.
        peak_resets: Whether the backend can reset the peak counter
            (TensorFlow, PyTorch on a GPU; JAX cannot). keras-gpu resets it
            only where asked to (`MemoryLogger(reset_peaks=True)`).
    """

    device: str
    tag: str
    peak_resets: bool


class AllocatorReading(NamedTuple):
    """Bytes held by an allocator now, and its peak counter: the most it held at once since the process started or
    the counter's last reset (by anyone: the user, or `reset_allocator_peak`)."""

    current_bytes: int
    peak_bytes: int


def allocators(model: Any) -> list[Allocator]:
    """The distinct allocators behind this process's replica devices.

    Logical CPU devices share one allocator, logged once as `CPU_0`. Which
    ones keep statistics is found by reading them (`allocator_memory`).
    """
    backend = name()
    devices = replica_devices(model)
    if backend == "tensorflow":
        from keras_gpu.core import topology

        return [Allocator(device, tag, True) for device, tag in topology.allocator_devices(devices)]
    result: list[Allocator] = []
    for device in devices:
        kind, _, index = device.rsplit("/device:", 1)[-1].partition(":")
        number = 0 if kind == "CPU" else int(index or 0)
        if backend == "jax":
            entry = Allocator(f"{'gpu' if kind == 'GPU' else kind.lower()}:{number}", f"{kind}_{number}", False)
        elif backend == "torch":
            entry = Allocator(f"cuda:{number}" if kind == "GPU" else "cpu", f"{kind}_{number}", kind == "GPU")
        else:
            continue
        if entry not in result:
            result.append(entry)
    return result


def allocator_memory(allocator: Allocator) -> AllocatorReading | None:
    """Read an allocator; `None` when the backend keeps no statistics for it (JAX and PyTorch on CPU).

    Cheap and thread-safe on every backend (no device synchronisation).
    """
    backend = name()
    if backend == "tensorflow":
        import tensorflow as tf

        info = tf.config.experimental.get_memory_info(allocator.device)
        return AllocatorReading(int(info["current"]), int(info["peak"]))
    if backend == "jax":
        import jax

        device = next((d for d in jax.local_devices() if f"{d.platform}:{d.id}" == allocator.device), None)
        stats = device.memory_stats() if device is not None else None
        if not stats or "bytes_in_use" not in stats:
            return None
        current = int(stats["bytes_in_use"])
        return AllocatorReading(current, int(stats.get("peak_bytes_in_use", current)))
    if backend == "torch" and allocator.device.startswith("cuda"):
        import torch

        # One read for both: what `memory_allocated` and `max_memory_allocated` return.
        stats = torch.cuda.memory_stats(allocator.device)
        current = int(stats.get("allocated_bytes.all.current", 0))
        return AllocatorReading(current, int(stats.get("allocated_bytes.all.peak", current)))
    return None


def allocator_unavailable(device: str) -> str:
    """Why the backend gives no allocator statistics for `device` (a `Allocator.device` such as `"CPU:0"`), in words.

    Said once per process by `MemoryLogger` in place of the backend's own
    error (`ValueError: Allocator stats not available for device 'CPU:0'` on
    TensorFlow), which it keeps at DEBUG.
    """
    backend = name()
    if not device.upper().startswith("CPU"):
        return f"the {backend} backend gave none for this device during the fit"
    if backend == "tensorflow":
        return (
            "TensorFlow keeps them on CPU only with its oneDNN ops on, by default only on CPUs with AVX-512 "
            "(TF_ENABLE_ONEDNN_OPTS=1 turns them on)"
        )
    return f"the {backend} backend keeps none on CPU"


def reset_allocator_peak(allocator: Allocator) -> None:
    """Start a new peak (TensorFlow, PyTorch on GPU); nothing where the backend cannot (JAX).

    The counter is the process's, not keras-gpu's: the user's own readers
    (`torch.cuda.max_memory_allocated`, `get_memory_info(...)["peak"]`) see
    the reset too.
    """
    if not allocator.peak_resets:
        return
    backend = name()
    if backend == "tensorflow":
        import tensorflow as tf

        tf.config.experimental.reset_memory_stats(allocator.device)
    elif backend == "torch":
        import torch

        torch.cuda.reset_peak_memory_stats(allocator.device)


# --------------------------------------------------------------------------- JAX's preallocated pool

_JAX_DEFAULT_FRACTION = 0.75
"""The share of a GPU's memory JAX preallocates when no memory-fraction variable says otherwise."""

_JAX_FRACTION_VARIABLES = ("XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION")
"""The memory-fraction variables jaxlib reads, the current name first (the second is its deprecated name)."""


class AllocatorPool(NamedTuple):
    """A pool of device memory the backend's allocator took up front, whatever the model uses of it.

    Attributes:
        gpu: The GPU's CUDA ordinal among this process's visible GPUs, as
            NVML's readings are indexed (`physical_gpus`).
        pool_bytes: Its size as the backend reports it (JAX: `pool_bytes` of
            `Device.memory_stats()`), `None` where it reports none.
        setting: The environment variables that decide it, in words, e.g.
            `"XLA_PYTHON_CLIENT_PREALLOCATE unset: on by default; 75% of the
            GPU's memory by default"`.
    """

    gpu: int
    pool_bytes: int | None
    setting: str


def jax_preallocation(environ: Any = None) -> str | None:
    """How JAX's GPU client preallocates, by the rules of jaxlib's GPU plugin options; `None` where it does not.

    Preallocation is on unless `XLA_PYTHON_CLIENT_PREALLOCATE` is `false`,
    `False` or `0`, or `XLA_PYTHON_CLIENT_ALLOCATOR=platform` (which
    allocates on demand). Its size is `XLA_CLIENT_MEM_FRACTION` (formerly
    `XLA_PYTHON_CLIENT_MEM_FRACTION`) of the GPU's memory, 75% by default.
    JAX reads them once, when its GPU backend starts; this function reads
    them as they are now, so change them before JAX starts.

    Args:
        environ: The environment to read (`os.environ` when `None`).

    Returns:
        The setting in words, or `None` where JAX allocates on demand.

    Examples:
        >>> jax_preallocation({})
        "XLA_PYTHON_CLIENT_PREALLOCATE unset: on by default; 75% of the GPU's memory by default"
        >>> jax_preallocation({"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}) is None
        True
    """
    env = os.environ if environ is None else environ
    if env.get("XLA_PYTHON_CLIENT_ALLOCATOR", "default").lower() == "platform":
        return None
    preallocate = env.get("XLA_PYTHON_CLIENT_PREALLOCATE", "")
    if preallocate in ("false", "False", "0"):
        return None
    parts = [f"XLA_PYTHON_CLIENT_PREALLOCATE={preallocate}" if preallocate else
             "XLA_PYTHON_CLIENT_PREALLOCATE unset: on by default"]
    fraction = next(((v, env[v]) for v in _JAX_FRACTION_VARIABLES if env.get(v)), None)
    if fraction is None:
        parts.append(f"{_JAX_DEFAULT_FRACTION:.0%} of the GPU's memory by default")
    else:
        parts.append(f"{fraction[0]}={fraction[1]}")
    return "; ".join(parts)


def allocator_pool(allocator: Allocator) -> AllocatorPool | None:
    """The pool the allocator preallocated on its device: JAX on a GPU with preallocation on; else `None`.

    Its size is read from `Device.memory_stats()` (`pool_bytes`) where JAX
    reports it, never estimated from the memory fraction.
    """
    if name() != "jax" or not allocator.device.startswith("gpu"):
        return None
    setting = jax_preallocation()
    if setting is None:
        return None
    import jax

    device = next((d for d in jax.local_devices() if f"{d.platform}:{d.id}" == allocator.device), None)
    if device is None:
        return None
    stats = device.memory_stats() or {}
    pool = stats.get("pool_bytes")
    local = getattr(device, "local_hardware_id", None)
    return AllocatorPool(int(device.id if local is None else local), None if pool is None else int(pool), setting)
