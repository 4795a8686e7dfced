"""Every private TensorFlow API keras-gpu uses, behind small named functions.

TensorFlow's private modules (`tensorflow.python...`, `tensorflow.core...`,
`tensorflow.compiler...`, `tensorflow.tsl...`) and private attributes
(`context._context_handle`, `extended._devices`, ...) are touched here and
nowhere else in keras-gpu. When TensorFlow is upgraded, this module and
`keras_gpu/setup/keras_compat.py` (the upstream-defect fixes) are the files to
audit; `tests/test_tf_private.py` checks every function here against the
installed TensorFlow. Keras' private state is in `keras_gpu/core/keras_private.py`,
JAX's in `keras_gpu/core/jax_private.py`; `tests/test_private_fence.py` keeps
all of it inside these modules.

Each function names the fact it reads or the change it makes, states what
it was checked on, and imports TensorFlow lazily: importing this module
imports nothing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

__all__ = [
    "REGISTRATION_BARRIER",
    "cancel_registration",
    "clear_logical_configuration",
    "clear_memory_growth",
    "collective_cross_device_ops",
    "collective_keys_fixed_in_control_flow",
    "configure_coordination_service",
    "constant_value",
    "coordination_get",
    "coordination_service_config",
    "coordination_set",
    "export_run_metadata",
    "function_body_graph",
    "graph_collection",
    "has_kernel",
    "new_graph_def",
    "runtime_initialized",
    "server_task",
    "service_insert",
    "service_try_get",
    "slurm_cluster_resolver",
    "strategy_devices",
]


# --------------------------------------------------------------------------- the eager context


def _context() -> Any:
    from tensorflow.python.eager import context

    return context.context()


def runtime_initialized() -> bool:
    """Whether TensorFlow's eager runtime has initialised its devices, without initialising it.

    Mirrors the test TensorFlow's own setters use before refusing a change
    (`context._context_handle is not None`); `context_safe()` returns None when
    no context object exists yet, which also means "not initialised".
    """
    from tensorflow.python.eager import context

    ctx = context.context_safe()
    if ctx is None:
        return False
    if hasattr(ctx, "_context_handle"):
        return ctx._context_handle is not None
    return bool(getattr(ctx, "_initialized", False))


def clear_logical_configuration(device: Any) -> None:
    """Drop the logical-device configuration of physical `device` ("never configured").

    TensorFlow has no public call for this, which restoring "never
    configured" needs. Only legal before the runtime initialises.

    Raises:
        RuntimeError: The runtime is already initialised (TensorFlow's own message).
    """
    if runtime_initialized():
        raise RuntimeError("Virtual devices cannot be modified after being initialized")
    _context()._virtual_device_map.pop(device, None)


def clear_memory_growth(device: Any) -> None:
    """Set the memory growth of physical GPU `device` back to "never set" (only the private map holds it).

    Raises:
        RuntimeError: The runtime is already initialised (TensorFlow's own message).
    """
    if runtime_initialized():
        raise RuntimeError("Physical devices cannot be modified after being initialized")
    _context()._memory_growth_map[device] = None


# --------------------------------------------------------------------------- placed graphs


def export_run_metadata() -> Any:
    """Hand back (and clear) the `RunMetadata` proto the eager context has recorded, or None."""
    return _context().export_run_metadata()


def graph_collection(enabled: bool) -> None:
    """Switch recording of placed partition graphs on or off.

    Checked on TensorFlow 2.21: `disable_run_metadata()` does not stop graph
    recording, `disable_graph_collection()` does, and it also drops what was
    recorded: call `export_run_metadata()` before switching off.
    """
    ctx = _context()
    if enabled:
        ctx.enable_graph_collection()
    else:
        ctx.disable_graph_collection()


def new_graph_def() -> Any:
    """An empty `GraphDef` proto."""
    from tensorflow.core.framework import graph_pb2

    return graph_pb2.GraphDef()


# --------------------------------------------------------------------------- graphs and kernels


def function_body_graph(graph: Any, name: str) -> Any:
    """The graph of the function `name` as seen from `graph` or its outer graphs, or None.

    `Graph._get_function` is the only way from a call op to its body.
    """
    g = graph
    while g is not None:
        fn = g._get_function(name)
        if fn is not None and getattr(fn, "graph", None) is not None:
            return fn.graph
        g = getattr(g, "outer_graph", None)
    return None


def constant_value(tensor: Any) -> Any:
    """The value of `tensor` when TensorFlow's constant folding knows it, else None."""
    from tensorflow.python.framework import tensor_util

    return tensor_util.constant_value(tensor)


def has_kernel(op_name: str) -> bool:
    """Whether this TensorFlow build registers any kernel for the op `op_name` (e.g. `"NcclAllReduce"`)."""
    from tensorflow.python.framework import kernels

    return bool(kernels.get_registered_kernels_for_op(op_name).kernel)


# --------------------------------------------------------------------------- distribution


def strategy_devices(strategy: Any) -> tuple[str, ...]:
    """This worker's replica devices of `strategy`, in replica order; `()` when it has no list.

    Uses the public `extended.worker_devices`, and the private
    `extended._devices` where that property raises (some strategies only
    define it in a cross-replica context).
    """
    extended = getattr(strategy, "extended", None)
    try:
        devices = tuple(str(d) for d in extended.worker_devices)
    except Exception:  # noqa: BLE001 - any strategy without a usable public list falls back
        devices = tuple(str(d) for d in (getattr(extended, "_devices", None) or ()))
    return devices


def collective_cross_device_ops(strategy: Any) -> bool:
    """Whether a mirrored `strategy` all-reduces with TensorFlow's collective ops (`CollectiveAllReduce`)."""
    from tensorflow.python.distribute import cross_device_ops

    ops = getattr(getattr(strategy, "extended", None), "_cross_device_ops", None)
    return isinstance(ops, cross_device_ops.CollectiveAllReduce)


def collective_keys_fixed_in_control_flow(strategy: Any) -> int:
    """Make `strategy`'s collectives traced inside `tf.cond`/`tf.while_loop` take trace-time instance keys.

    TensorFlow 2.21 gives each collective a call-time instance key
    (`FuncGraph.capture_call_time_value`) when `CollectiveReplicaLauncher`'s
    class flag `_prefer_unique_instance_key` is on (the default). When the
    collective sits in a nested `tf.function` that is called from a
    control-flow branch, the deferred capture is re-registered on the branch
    graph, which never feeds it: `You must feed a value for placeholder tensor
    '...while/cond/Placeholder'` (keras-team/keras#19246). This sets, on
    each launcher of `strategy`'s `_cross_device_ops` and
    `_host_cross_device_ops` only, `_use_unique_instance_key` to answer False
    while the graph being built is nested in a control-flow graph, so those
    collectives get an instance key at trace time, the path TensorFlow takes
    itself outside eager mode. Collectives traced elsewhere keep call-time keys.

    Returns:
        How many launchers were changed (0 when the strategy has none).
    """
    from tensorflow.python.framework import ops

    def in_control_flow() -> bool:
        graph = ops.get_default_graph()
        while graph is not None:
            if getattr(graph, "is_control_flow_graph", False):
                return True
            graph = getattr(graph, "outer_graph", None)
        return False

    changed = 0
    extended = getattr(strategy, "extended", None)
    for name in ("_cross_device_ops", "_host_cross_device_ops"):
        for launcher in getattr(getattr(extended, name, None), "_launchers", None) or ():
            stock = launcher._use_unique_instance_key
            launcher._use_unique_instance_key = lambda stock=stock: stock() and not in_control_flow()
            changed += 1
    return changed


def slurm_cluster_resolver(**kwargs: Any) -> Any:
    """A `SlurmClusterResolver(**kwargs)` built from TensorFlow's own module."""
    from tensorflow.python.distribute.cluster_resolver import slurm_cluster_resolver as slurm

    return slurm.SlurmClusterResolver(**kwargs)


def coordination_set(key: str, value: str) -> None:
    """Store `key = value` in the cluster's coordination-service key-value store (after the cluster formed)."""
    _context().set_config_key_value(key, value)


def coordination_get(key: str, timeout_s: float) -> str:
    """The value of `key` in the coordination-service key-value store, waiting up to `timeout_s` for it to appear.

    Raises:
        tf.errors.DeadlineExceededError: The key did not appear in time.
    """
    return _context().get_config_key_value(key, timeout_in_ms=max(1, int(timeout_s * 1000)))


def coordination_service_config() -> Any:
    """The coordination service configuration of this process's context, or None when not configured."""
    return _context().coordination_service


def configure_coordination_service(cluster_spec: Any, jobs: Sequence[str], register_timeout_s: float) -> Any:
    """Configure the standalone coordination service the way `MultiWorkerMirroredStrategy` would.

    Args:
        cluster_spec: A `tf.train.ClusterSpec`.
        jobs: The coordinated job names present in `cluster_spec`.
        register_timeout_s: How long tasks may take to register, in seconds.

    Returns:
        The resulting configuration proto (mutable, see `coordination_service_config`).
    """
    from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2
    from tensorflow.python.distribute import multi_worker_util

    coordinated = [
        coordination_config_pb2.CoordinatedJob(name=job, num_tasks=cluster_spec.num_tasks(job)) for job in jobs
    ]
    ctx = _context()
    ctx.configure_coordination_service(
        service_type="standalone",
        service_leader=multi_worker_util.coordination_leader(cluster_spec),
        coordinated_jobs=coordinated,
        cluster_register_timeout_in_ms=int(register_timeout_s * 1000),
    )
    return ctx.coordination_service


# --------------------------------------------------------------------------- TensorFlow's gRPC services, from outside
#
# A multi-worker task's gRPC server (started inside the strategy's constructor)
# serves TensorFlow's WorkerService and, on the coordination leader, its
# CoordinationService. These functions call them over the wire with `grpcio`
# (a TensorFlow dependency), so they work from any process, with no TensorFlow
# import and while the task that owns the server blocks in native code. The
# few request and response messages are encoded here by field number; TensorFlow
# ships no Python classes for them. Checked on TensorFlow 2.21 (CPU, loopback):
# - WorkerService/GetStatus answers as soon as the server listens, while the
#   task still waits for its peers, with the task's devices named
#   `/job:worker/replica:0/task:K/device:CPU:0`.
# - CoordinationService/InsertKeyValue and TryGetKeyValue work while tasks
#   register, and afterwards while the leader's process lives.
# - CoordinationService/CancelBarrier on REGISTRATION_BARRIER (registration
#   with `cluster_register_with_barrier`) ends every task waiting there at
#   once, with `AlreadyExistsError: Aborted connect attempt as there is a
#   request from a newer incarnation.`; a barrier that already passed is left
#   alone (FAILED_PRECONDITION).

REGISTRATION_BARRIER = "[Init]Wait_for_all_tasks_to_register"
"""The coordination service's barrier that every task waits in while the cluster registers."""

_GRPC_OPTIONS = (("grpc.enable_http_proxy", 0),)  # loopback and cluster addresses never go through a proxy
_TASK_NAME = re.compile(r"^/job:([A-Za-z0-9_.\-]+)/replica:\d+/task:(\d+)(?:/|$)")


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, value: bytes | str | int) -> bytes:
    """One protobuf field: a varint for an int, length-delimited for bytes or str."""
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    data = value.encode() if isinstance(value, str) else value
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _fields(buffer: bytes) -> list[tuple[int, Any]]:
    """The top-level `(field number, value)` pairs of a protobuf message (varints as int, others as bytes)."""

    def varint(i: int) -> tuple[int, int]:
        value = shift = 0
        while True:
            byte = buffer[i]
            value |= (byte & 0x7F) << shift
            i, shift = i + 1, shift + 7
            if not byte & 0x80:
                return value, i

    out, i = [], 0
    while i < len(buffer):
        key, i = varint(i)
        kind = key & 7
        if kind == 0:
            value, i = varint(i)
        elif kind == 2:
            size, i = varint(i)
            value, i = buffer[i : i + size], i + size
        elif kind in (1, 5):
            size = 8 if kind == 1 else 4
            value, i = buffer[i : i + size], i + size
        else:
            raise ValueError(f"unsupported protobuf wire type {kind}")
        out.append((key >> 3, value))
    return out


def _call(address: str, method: str, request: bytes, timeout_s: float) -> bytes:
    """One unary call to TensorFlow's gRPC server at `host:port`. Raises `grpc.RpcError`."""
    import grpc

    with grpc.insecure_channel(address, options=_GRPC_OPTIONS) as channel:
        stub = channel.unary_unary(method, request_serializer=bytes, response_deserializer=bytes)
        return stub(request, timeout=timeout_s)


def _task(job: str, index: int) -> bytes:
    """A `CoordinatedTask` message."""
    return _field(1, job) + (_field(2, index) if index else b"")


def server_task(address: str, timeout_s: float = 2.0) -> tuple[str, int] | None:
    """Which task TensorFlow's server at `address` says it is, `(job, index)`, from `WorkerService/GetStatus`.

    Returns None when nothing answers, or what answers is not a TensorFlow
    server (or lists no task-named device).
    """
    import grpc

    try:
        response = _call(address, "/tensorflow.WorkerService/GetStatus", b"", timeout_s)
        for number, device in _fields(response):  # GetStatusResponse.device_attributes = 1
            if number != 1:
                continue
            name = dict(_fields(device)).get(1, b"")  # DeviceAttributes.name = 1
            match = _TASK_NAME.match(name.decode(errors="replace"))
            if match:
                return match.group(1), int(match.group(2))
    except (grpc.RpcError, ValueError, IndexError):
        return None
    return None


def service_insert(address: str, key: str, value: str, timeout_s: float = 2.0) -> bool:
    """Store `key = value` in the coordination service at `address` unless the key exists; whether it was stored."""
    import grpc

    entry = _field(1, key) + _field(2, value.encode())
    try:
        _call(address, "/tensorflow.CoordinationService/InsertKeyValue", _field(1, entry), timeout_s)
    except grpc.RpcError:
        return False
    return True


def service_try_get(address: str, key: str, timeout_s: float = 2.0) -> str | None:
    """The value of `key` in the coordination service at `address`, or None (absent, or no service answers)."""
    import grpc

    try:
        response = _call(address, "/tensorflow.CoordinationService/TryGetKeyValue", _field(1, key), timeout_s)
        entry = dict(_fields(response)).get(1, b"")  # TryGetKeyValueResponse.kv = 1
        return dict(_fields(entry)).get(2, b"").decode(errors="replace")  # KeyValueEntry.value = 2
    except (grpc.RpcError, ValueError, IndexError):
        return None


def cancel_registration(address: str, job: str, index: int, timeout_s: float = 2.0) -> bool | None:
    """Cancel the registration barrier of the coordination service at `address`, in the name of task `job:index`.

    Every task waiting there gets an error at once; a task that registers
    later gets one too. Returns True when the service cancelled it, False
    when a server answered but refused (the cluster already formed, or no
    coordination service there), None when nothing answered.
    """
    import grpc

    request = _field(1, REGISTRATION_BARRIER) + _field(2, _task(job, index))  # CancelBarrierRequest
    try:
        _call(address, "/tensorflow.CoordinationService/CancelBarrier", request, timeout_s)
    except grpc.RpcError as exc:
        code = exc.code() if callable(getattr(exc, "code", None)) else None
        return None if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED) else False
    return True
