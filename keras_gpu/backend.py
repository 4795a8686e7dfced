"""Which Keras backend trains, and every per-backend fact the callbacks need, in one place.

The callbacks (`keras_gpu.callbacks()`, `ThroughputLogger`, `MemoryLogger`)
run on the TensorFlow, JAX and PyTorch backends of Keras 3; TensorFlow is
needed only on the TensorFlow backend and for the TensorFlow-only parts
(`make_strategy`, `configure_devices`, `PlacementLogger`, `keras-gpu
launch`), which call :func:`require_tensorflow`. Everything here reads the
backend lazily: importing this module imports no backend.

Per backend:

=============================  ==========================  ==========================  ==========================
fact                           TensorFlow                  JAX                         PyTorch
=============================  ==========================  ==========================  ==========================
replica devices                the strategy's devices      the `keras.distribution`    the model's device
                                                           mesh, else the default
                                                           device
allocator memory               `get_memory_info`; peak     `Device.memory_stats()`     `torch.cuda` memory stats
                               reset per window            (GPU); peak since process   (GPU); peak reset per
                                                           start                       window; none on CPU
model FLOPs per sample         traced graph count          XLA cost analysis of the    `torch.utils.flop_counter`
                               (:mod:`keras_gpu.flops`)    compiled forward pass       on one forward pass
=============================  ==========================  ==========================  ==========================

Training FLOPs are 3 x the forward FLOPs on every backend (the convention of
:mod:`keras_gpu.flops`), so MFU means the same thing on all three. Device
names use TensorFlow's form (`/device:GPU:0`) everywhere, so tags
(`GPU_0`) and tables read the same whichever backend trained.
"""

from __future__ import annotations

import importlib.util
import threading
import weakref
from typing import Any, NamedTuple

from keras_gpu._log import logger
from keras_gpu.cluster import ClusterInfo

__all__ = [
    "INSTALL_HINT",
    "Allocator",
    "AllocatorReading",
    "allocator_memory",
    "allocators",
    "compute_dtype",
    "gpu_peak_flops",
    "name",
    "physical_gpus",
    "replica_devices",
    "num_replicas",
    "require_tensorflow",
    "require_tensorflow_backend",
    "reset_allocator_peak",
    "strategy",
    "task_info",
    "tensorflow_installed",
    "training_flops_per_sample",
]

INSTALL_HINT = 'pip install "keras-gpu[cpu]" (CPU) or pip install "keras-gpu[cuda]" (NVIDIA GPUs)'
"""How to install keras-gpu together with a TensorFlow build."""


# --------------------------------------------------------------------------- which backend


def name() -> str:
    """The Keras backend in use: `"tensorflow"`, `"jax"`, `"torch"`, ... (`keras.backend.backend()`)."""
    import keras

    return str(keras.backend.backend())


def tensorflow_installed() -> bool:
    """Whether TensorFlow can be imported here (checked without importing it)."""
    return importlib.util.find_spec("tensorflow") is not None


def require_tensorflow(feature: str) -> None:
    """Raise one clear `ImportError` when `feature` is used without TensorFlow installed.

    Args:
        feature: What the user called, e.g. `"keras_gpu.make_strategy()"`.

    Raises:
        ImportError: TensorFlow is not installed, naming the install line.
    """
    if not tensorflow_installed():
        raise ImportError(
            f"{feature} needs TensorFlow, which is not installed. Install keras-gpu with a TensorFlow "
            f"build: {INSTALL_HINT}. The callbacks (keras_gpu.callbacks(), ThroughputLogger, "
            "MemoryLogger) work without it on the JAX and PyTorch backends."
        )


def require_tensorflow_backend(feature: str) -> None:
    """Like :func:`require_tensorflow`, and also raise when Keras runs on another backend.

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

    TensorFlow: the strategy's cluster (see `keras_gpu.cluster.task_info`).
    JAX: `jax.process_index()` of `jax.process_count()` processes. PyTorch:
    the `torch.distributed` rank when a process group is initialised. A
    single process otherwise.
    """
    backend = name()
    if backend == "tensorflow":
        from keras_gpu.cluster import task_info as tf_task_info

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


def _torch_device(model: Any) -> Any:
    import torch

    for variable in getattr(model, "weights", ()):
        value = getattr(variable, "value", None)
        if isinstance(value, torch.Tensor):
            return value.device
    # No weights yet: where Keras' torch backend puts new tensors.
    return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")


def _tf_name(kind: str, index: int) -> str:
    kind = {"cuda": "GPU", "gpu": "GPU", "cpu": "CPU", "tpu": "TPU"}.get(kind.lower(), kind.upper())
    return f"/device:{kind}:{index}"


def replica_devices(model: Any) -> tuple[str, ...]:
    """This process's replica devices, in replica order, as TensorFlow-style names (`/device:GPU:0`); never empty.

    TensorFlow: the strategy's devices (full names). JAX: the local devices
    of the `keras.distribution` mesh, or the default device. PyTorch: the
    device holding the model's weights.
    """
    backend = name()
    if backend == "tensorflow":
        from keras_gpu import topology

        return tuple(topology.replica_devices(strategy(model)))
    if backend == "jax":
        return tuple(_tf_name(d.platform, d.id) for d in _jax_devices(model))
    if backend == "torch":
        device = _torch_device(model)
        return (_tf_name(device.type, device.index or 0),)
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
    return [ordinal for ordinal, _ in _replica_gpus(model)]


def gpu_peak_flops(model: Any, dtype: str) -> tuple[float | None, list[str]]:
    """Summed peak FLOP/s (the table of :mod:`keras_gpu.flops`) of the distinct GPUs under this process's replicas.

    Replicas on logical GPUs that share one physical GPU count it once.

    Args:
        model: The model being trained.
        dtype: A key of the peak table (see :func:`compute_dtype`).

    Returns:
        `(peak, names)`: the GPUs' product names, and their summed peak, or
        `None` when one of them is not in the table; `(None, [])` when the
        replicas run on no GPU.
    """
    from keras_gpu import flops

    names = [gpu_name for _, gpu_name in _replica_gpus(model)]
    peaks = [flops.peak_flops(n, dtype) for n in names]
    if not peaks or any(p is None for p in peaks):
        return None, names
    return float(sum(p for p in peaks if p is not None)), names


def _replica_gpus(model: Any) -> list[tuple[int, str]]:
    """`(CUDA ordinal, product name)` of each distinct GPU under this process's replicas, in replica order."""
    backend = name()
    out: list[tuple[int, str]] = []

    def add(ordinal: int, product: str) -> None:
        if all(o != ordinal for o, _ in out):
            out.append((ordinal, product))

    if backend == "tensorflow":
        import tensorflow as tf

        from keras_gpu import topology

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

        device = _torch_device(model)
        if device.type == "cuda":
            add(device.index or 0, torch.cuda.get_device_name(device))
    return out


def compute_dtype(model: Any) -> str:
    """The dtype the model's matmuls run in, as a key of the peak table of :mod:`keras_gpu.flops`.

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
        peak_resets: Whether the backend can reset the peak, so that
            `peak_bytes` is the window's peak (TensorFlow, PyTorch) rather
            than the peak since the process started (JAX).
    """

    device: str
    tag: str
    peak_resets: bool


class AllocatorReading(NamedTuple):
    """Bytes held by an allocator now, and the most it held at once (see `Allocator.peak_resets`)."""

    current_bytes: int
    peak_bytes: int


def allocators(model: Any) -> list[Allocator]:
    """The distinct allocators behind this process's replica devices.

    Logical CPU devices share one allocator, logged once as `CPU_0`. Which
    ones keep statistics is found by reading them (:func:`allocator_memory`).
    """
    backend = name()
    devices = replica_devices(model)
    if backend == "tensorflow":
        from keras_gpu import topology

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

        return AllocatorReading(
            int(torch.cuda.memory_allocated(allocator.device)), int(torch.cuda.max_memory_allocated(allocator.device))
        )
    return None


def reset_allocator_peak(allocator: Allocator) -> None:
    """Start a new peak (TensorFlow, PyTorch on GPU); nothing where the backend cannot (JAX)."""
    if not allocator.peak_resets:
        return
    backend = name()
    if backend == "tensorflow":
        import tensorflow as tf

        tf.config.experimental.reset_memory_stats(allocator.device)
    elif backend == "torch":
        import torch

        torch.cuda.reset_peak_memory_stats(allocator.device)


# --------------------------------------------------------------------------- model FLOPs


def training_flops_per_sample(model: Any, input_spec: Any = None) -> float | None:
    """Training FLOPs per sample (3 x forward), or None (the reason is logged at DEBUG level).

    TensorFlow: the traced graph count of :mod:`keras_gpu.flops` (`input_spec`
    is its `tf.TensorSpec` structure). JAX: XLA's cost analysis of the
    compiled forward pass. PyTorch: `torch.utils.flop_counter.FlopCounterMode`
    over one forward pass of zeros (no gradients are touched). Counted once
    per model and input shape, then cached. JAX and
    PyTorch need the model's symbolic inputs (a functional or `Sequential`
    model with an `Input`); a subclassed model gets None: pass
    `flops_per_sample=` to the callback.
    """
    backend = name()
    if backend == "tensorflow":
        from keras_gpu import flops

        return flops.training_flops_per_sample(model, input_spec)
    counters = {"jax": _jax_forward_flops, "torch": _torch_forward_flops}
    counter = counters.get(backend)
    reason = f"the {backend} backend has no FLOP counter keras-gpu can use"
    if counter is not None:
        shapes = _input_shapes(model, _PROBE_BATCH[backend])
        if shapes is None:
            reason = "the model has no symbolic inputs (a subclassed model) to count them from"
        else:
            key = (backend, tuple(shapes))
            with _cache_lock:
                cached = _cache.get(model, {}).get(key)
            if cached is not None:
                return cached
            try:
                forward = counter(model, shapes)
            except Exception as exc:  # noqa: BLE001 - a model we cannot count must not break training
                forward = None
                reason = f"counting failed ({type(exc).__name__}: {exc})"
            if forward is not None and forward > 0:
                with _cache_lock:
                    try:
                        _cache.setdefault(model, {})[key] = 3.0 * forward
                    except TypeError:  # not weak-referenceable: just don't cache
                        pass
                return 3.0 * forward
            if forward is not None:
                reason = "the counter found no FLOPs"
    logger.debug("keras-gpu: model FLOPs are not available on the %s backend for %s: %s.", backend,
                 getattr(model, "name", "this model"), reason)
    return None


_PROBE_BATCH = {"jax": 4096, "torch": 2}
"""Samples in the probe batch the FLOPs are counted on (divided out again). JAX counts
abstract shapes, so a large batch costs nothing and makes per-step work (the
casts of `mixed_*` policies, the optimizer) vanish from the per-sample count;
PyTorch runs a real forward pass, so its batch is small."""

_cache: weakref.WeakKeyDictionary[Any, dict[Any, float]] = weakref.WeakKeyDictionary()
_cache_lock = threading.Lock()


def _input_shapes(model: Any, batch: int) -> list[tuple[tuple[int, ...], str]] | None:
    """`(shape with batch `batch`, dtype)` of each symbolic model input, or None when unknown."""
    try:
        inputs = model.inputs
    except (AttributeError, ValueError):
        return None
    if not inputs:
        return None
    result = []
    for tensor in inputs:
        shape = tuple(tensor.shape)
        if any(dim is None for dim in shape[1:]):
            return None
        result.append(((batch, *shape[1:]), str(tensor.dtype)))
    return result


def _jax_forward_flops(model: Any, shapes: list[tuple[tuple[int, ...], str]]) -> float | None:
    import jax

    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]
    args = [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in shapes]
    x = args[0] if len(args) == 1 else args

    def forward(trainable, non_trainable, x):
        outputs, _ = model.stateless_call(trainable, non_trainable, x, training=False)
        return outputs

    analysis = jax.jit(forward).lower(trainable, non_trainable, x).compile().cost_analysis()
    if isinstance(analysis, (list, tuple)):  # older JAX returns one dict per computation
        analysis = analysis[0] if analysis else None
    if not analysis or "flops" not in analysis:
        return None
    return float(analysis["flops"]) / shapes[0][0][0]


def _torch_forward_flops(model: Any, shapes: list[tuple[tuple[int, ...], str]]) -> float | None:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    device = _torch_device(model)
    args = [torch.zeros(shape, dtype=getattr(torch, dtype), device=device) for shape, dtype in shapes]
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(args[0] if len(args) == 1 else args, training=False)
    return float(counter.get_total_flops()) / shapes[0][0][0]
