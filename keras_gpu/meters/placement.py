"""Where a training step really ran: placement analysis of its captured graphs.

The placed partition graphs of a training step are captured by
`keras_gpu.meters.placement_capture`; this module walks them (and the
strategy and the model's variables) into a
`keras_gpu.meters.placement_report.PlacementReport`, the typed record that
`keras_gpu.output.placement_markdown` renders as Markdown tables. The names
of those two modules are importable from here too.

The analysis (`analyze_ops`) is plain proto walking, testable on
hand-built protos. Definitions:

* **Ops per device**: nodes of the placed partition graphs, by the device the
  runtime assigned (not the device requested in Python).
* **Copies**: every edge between two devices becomes a `_Send`/`_Recv` pair
  (`_HostSend`/`_HostRecv` when the tensor sits in host memory) carrying the
  attributes `tensor_name`, `send_device` and `recv_device`. One transfer is
  one distinct `(tensor_name, send_device, recv_device)` in one function,
  whether one or both halves are visible. Its kind:
  `host_to_device` / `device_to_host` (a CPU and an accelerator, both halves
  plain `_Send`/`_Recv`: a copy over the bus, what a profiler shows as
  `MemcpyHtoD`/`MemcpyDtoH`), `device_to_device` (two accelerators),
  `host_to_host` (two CPU devices, e.g. logical CPUs) and `host_memory` (a CPU
  and an accelerator, but one half is `_HostSend`/`_HostRecv`: the tensor
  already lives in host memory, e.g. a shape, so nothing crosses the bus).
* **CPU fallbacks**: only when the replicas run on accelerators (or any op of
  the step ran on one): ops placed on a CPU device whose type is not in
  `HOST_BOUND_OPS` and does not match the input-pipeline pattern
  (`Iterator`, `Dataset`, `Optional*`). Excluded because they belong on the
  host by nature or do no work per step: function arguments and results
  (`_Arg`, `_Retval`, `_DeviceArg`, `_DeviceRetval`), control-only nodes
  (`NoOp`, `ControlTrigger`), constants (`Const`, `HostConst`: no computation;
  if one must move, its copy is counted under copies), forwarding without
  computation (`Identity`, `IdentityN`), the copies themselves (`_Send`,
  `_Recv`, `_HostSend`, `_HostRecv`) and the input pipeline
  (`IteratorGetNext`, `MultiDeviceIteratorGetNextFromShard`, dataset ops,
  `OptionalFromValue`, ...).
* **XLA clusters**: a call compiled by XLA (attribute `_XlaMustCompile`, or an
  `XlaLaunch`/`_XlaCompile`/`_XlaRun` node) runs its whole body on the
  cluster's device; the ops inside are not placed one by one and are listed
  per cluster instead.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from keras_gpu.core.tf_private import new_graph_def
from keras_gpu.core.topology import (
    device_sort_key,
    device_type,
    replica_devices,
    short_device,
)
from keras_gpu.meters.placement_capture import (
    STEP_MARKER_OPS,
    GraphCapture,
    capture_graphs,
    step_function_graphs,
)
from keras_gpu.meters.placement_report import (
    FORMAT,
    VERSION,
    OpPlacement,
    PlacedOp,
    PlacementReport,
    StrategyInfo,
    Transfer,
    VariableInfo,
    XlaCluster,
    read_json,
    write_json,
)

__all__ = [
    "FORMAT",
    "HOST_BOUND_OPS",
    "STEP_MARKER_OPS",
    "VERSION",
    "GraphCapture",
    "OpPlacement",
    "PlacedOp",
    "PlacementReport",
    "StrategyInfo",
    "Transfer",
    "VariableInfo",
    "XlaCluster",
    "analyze_ops",
    "capture_graphs",
    "device_type",
    "is_host_bound",
    "placed_graph_def",
    "read_json",
    "short_device",
    "step_function_graphs",
    "strategy_info",
    "strategy_kind",
    "variable_info",
    "write_json",
]

HOST_BOUND_OPS: frozenset[str] = frozenset(
    {
        "_Arg", "_Retval", "_DeviceArg", "_DeviceRetval",
        "NoOp", "ControlTrigger",
        "Const", "HostConst",
        "Identity", "IdentityN",
        "_Send", "_Recv", "_HostSend", "_HostRecv",
        "IteratorGetNext", "IteratorGetNextSync", "IteratorGetNextAsOptional",
        "MultiDeviceIteratorGetNextFromShard",
        "OptionalFromValue", "OptionalHasValue", "OptionalGetValue", "OptionalNone",
    }
)
"""Op types never reported as CPU fallbacks (see the module docstring for why)."""

_HOST_BOUND_PATTERN = re.compile(r"Iterator|Dataset|^Optional")

_SEND_OPS = frozenset({"_Send", "_HostSend"})
_RECV_OPS = frozenset({"_Recv", "_HostRecv"})
_HOST_MEMORY_OPS = frozenset({"_HostSend", "_HostRecv"})
_XLA_LAUNCH_OPS = frozenset({"XlaLaunch", "XlaLaunchV2", "_XlaCompile", "_XlaRun"})
_UNPLACED = "(unplaced)"
_LARGE_CONST_BYTES = 1024


# --------------------------------------------------------------------------- devices


def _is_host(device: str) -> bool:
    return device_type(device) == "CPU"


def is_host_bound(op_type: str) -> bool:
    """Whether `op_type` belongs on the host (or does no work) and is never a CPU fallback."""
    return op_type in HOST_BOUND_OPS or bool(_HOST_BOUND_PATTERN.search(op_type))


# --------------------------------------------------------------------------- analysis


def _transfer_kind(src: str, dst: str, host_memory: bool) -> str:
    src_host, dst_host = _is_host(src), _is_host(dst)
    if src_host and dst_host:
        return "host_to_host"
    if not src_host and not dst_host:
        return "device_to_device"
    if host_memory:
        return "host_memory"
    return "host_to_device" if src_host else "device_to_host"


def _attr_str(node: Any, name: str) -> str:
    if name not in node.attr:
        return ""
    value = node.attr[name].s
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _pair_key(node: Any) -> tuple[str, str, str]:
    """What joins a `_Send` to its `_Recv`: the rendezvous tensor name and the two devices."""
    return (_attr_str(node, "tensor_name"), _attr_str(node, "send_device"), _attr_str(node, "recv_device"))


def _xla_cluster(node: Any, library: Mapping[str, int]) -> XlaCluster | None:
    must_compile = "_XlaMustCompile" in node.attr and node.attr["_XlaMustCompile"].b
    if not must_compile and node.op not in _XLA_LAUNCH_OPS:
        return None
    function = ""
    for key in ("f", "function"):
        if key in node.attr and node.attr[key].func.name:
            function = node.attr[key].func.name
            break
    return XlaCluster(name=node.name, op_type=node.op, function=function, device=node.device, ops=library.get(function))


def analyze_ops(function_graphs: Sequence[Any], replica_devices: Sequence[str] = ()) -> OpPlacement:
    """Analyse the placed partition graphs of a training step.

    Args:
        function_graphs: `RunMetadata.FunctionGraphs` protos of the step (see
            `step_function_graphs`).
        replica_devices: The strategy's replica devices on this worker; when
            any of them is an accelerator, ops on a CPU are checked for
            fallbacks. With none given, the graph itself decides: any op on an
            accelerator turns the check on.

    Returns:
        The `OpPlacement`. Definitions are in the module docstring.
    """
    ops_per_device: Counter[str] = Counter()
    compute_per_device: Counter[str] = Counter()
    partitions = 0
    transfers: list[Transfer] = []
    xla: list[XlaCluster] = []
    cpu_ops: list[PlacedOp] = []
    any_accelerator = False
    for fg in function_graphs:
        halves: dict[tuple[str, str, str], dict[str, str]] = {}
        library = {f.signature.name: len(f.node_def) for pg in fg.partition_graphs for f in pg.library.function}
        for pg in fg.partition_graphs:
            partitions += 1
            for node in pg.node:
                device = node.device or _UNPLACED
                ops_per_device[device] += 1
                host_bound = is_host_bound(node.op)
                if not host_bound:
                    compute_per_device[device] += 1
                if device_type(device) not in ("CPU", ""):
                    any_accelerator = True
                if node.op in _SEND_OPS or node.op in _RECV_OPS:
                    key = _pair_key(node)
                    if key[1] and key[2] and key[1] != key[2]:
                        halves.setdefault(key, {})["send" if node.op in _SEND_OPS else "recv"] = node.op
                    continue
                cluster = _xla_cluster(node, library)
                if cluster is not None:
                    xla.append(cluster)
                if _is_host(device) and not host_bound:
                    cpu_ops.append(PlacedOp(op_type=node.op, name=node.name, device=device))
        for (tensor, src, dst), ops in halves.items():
            send_op, recv_op = ops.get("send", ""), ops.get("recv", "")
            host_memory = send_op in _HOST_MEMORY_OPS or recv_op in _HOST_MEMORY_OPS
            transfers.append(
                Transfer(tensor=tensor, src=src, dst=dst, kind=_transfer_kind(src, dst, host_memory), send_op=send_op, recv_op=recv_op)
            )
    if replica_devices:
        checked = any(device_type(d) not in ("CPU", "") for d in replica_devices)
    else:
        checked = any_accelerator
    order = sorted(ops_per_device, key=device_sort_key)
    return OpPlacement(
        function_graphs=len(function_graphs),
        partitions=partitions,
        ops_per_device={d: ops_per_device[d] for d in order},
        compute_ops_per_device={d: compute_per_device[d] for d in order if compute_per_device[d]},
        transfers=tuple(transfers),
        fallbacks_checked=checked,
        cpu_fallbacks=tuple(cpu_ops) if checked else (),
        xla_clusters=tuple(xla),
    )


def placed_graph_def(function_graphs: Sequence[Any]) -> Any:
    """One `GraphDef` of all placed partitions of the step, for TensorBoard's Graphs dashboard.

    Every node keeps the device it ran on (use "Color by device"). Each
    `_Recv` gets a control input from its `_Send`, so the cross-device copies
    show as edges. Node names that repeat across partitions or functions get a
    suffix, and large constant values are dropped (their dtype and shape stay)
    to keep the event small.
    """
    out = new_graph_def()
    taken: set[str] = set()
    functions: set[str] = set()
    for fi, fg in enumerate(function_graphs):
        renames_per_partition: list[dict[str, str]] = []
        for pi, pg in enumerate(fg.partition_graphs):
            renames: dict[str, str] = {}
            for node in pg.node:
                name = node.name
                if name in taken:
                    name = f"{node.name}__f{fi}p{pi}"
                renames[node.name] = name
                taken.add(name)
            renames_per_partition.append(renames)
        sends: dict[tuple[str, str, str], str] = {}
        for pg, renames in zip(fg.partition_graphs, renames_per_partition, strict=True):
            for node in pg.node:
                if node.op in _SEND_OPS:
                    sends[_pair_key(node)] = renames[node.name]
        for pg, renames in zip(fg.partition_graphs, renames_per_partition, strict=True):
            if not out.HasField("versions") and pg.HasField("versions"):
                out.versions.CopyFrom(pg.versions)
            for node in pg.node:
                new = out.node.add()
                new.CopyFrom(node)
                new.name = renames[node.name]
                del new.input[:]
                new.input.extend(_rename_input(i, renames) for i in node.input)
                if node.op in _RECV_OPS and _pair_key(node) in sends:
                    new.input.append("^" + sends[_pair_key(node)])
                if node.op in ("Const", "HostConst") and "value" in new.attr:
                    tensor = new.attr["value"].tensor
                    if tensor.ByteSize() > _LARGE_CONST_BYTES:
                        slim = type(tensor)(dtype=tensor.dtype)
                        slim.tensor_shape.CopyFrom(tensor.tensor_shape)
                        tensor.CopyFrom(slim)
            for fdef in pg.library.function:
                if fdef.signature.name not in functions:
                    functions.add(fdef.signature.name)
                    out.library.function.add().CopyFrom(fdef)
    return out


def _rename_input(ref: str, renames: Mapping[str, str]) -> str:
    control = ref.startswith("^")
    body = ref[1:] if control else ref
    name, sep, port = body.partition(":")
    name = renames.get(name, name)
    return ("^" if control else "") + name + (sep + port if sep else "")


# --------------------------------------------------------------------------- strategy and variables

_KINDS: tuple[tuple[str, str], ...] = (
    ("MultiWorkerMirroredStrategy", "multiworker"),
    ("MirroredStrategy", "mirrored"),
    ("OneDeviceStrategy", "one_device"),
)


def strategy_kind(strategy: Any) -> str | None:
    """The keras-gpu kind of a strategy: `"default"`, `"one_device"`, `"mirrored"`,
    `"multiworker"`, or `None` for other strategies (TPU, parameter server, ...)."""
    import tensorflow as tf

    if strategy is None or type(strategy).__name__ == "_DefaultDistributionStrategy":
        return "default"
    for class_name, kind in _KINDS:
        cls = getattr(tf.distribute, class_name, None)
        if cls is not None and isinstance(strategy, cls):
            return kind
    return None


def strategy_info(strategy: Any, cluster: Any = None) -> StrategyInfo:
    """Describe `strategy` and this worker's place in the cluster.

    Args:
        strategy: The model's `tf.distribute.Strategy` (`model.distribute_strategy`).
        cluster: A `keras_gpu.core.cluster.ClusterInfo`; looked up from the
            strategy when omitted.
    """
    if cluster is None:
        from keras_gpu.core.cluster import task_info

        cluster = task_info(strategy)
    return StrategyInfo(
        class_name=type(strategy).__name__,
        kind=strategy_kind(strategy),
        num_replicas_in_sync=int(getattr(strategy, "num_replicas_in_sync", 1)),
        replica_devices=replica_devices(strategy),
        worker_index=cluster.worker_index,
        num_workers=cluster.num_workers,
        is_chief=cluster.is_chief,
    )


def _components(variable: Any) -> tuple[Any, tuple[str, ...]]:
    backing = getattr(variable, "value", variable)
    if callable(backing) and not hasattr(backing, "device"):
        backing = variable
    values = getattr(backing, "values", None)
    parts = tuple(values) if isinstance(values, (tuple, list)) and values else (backing,)
    return backing, tuple(str(getattr(p, "device", "") or "") for p in parts)


def variable_info(model: Any) -> tuple[VariableInfo, ...]:
    """Every variable of `model` with the devices of its components.

    Groups, in order: trainable and non-trainable model variables, optimizer
    variables and metric variables; a variable is listed once, in its first
    group.
    """
    groups: list[tuple[str, Iterable[Any]]] = [
        ("trainable", getattr(model, "trainable_variables", ()) or ()),
        ("non_trainable", getattr(model, "non_trainable_variables", ()) or ()),
        ("optimizer", getattr(getattr(model, "optimizer", None), "variables", ()) or ()),
        ("metric", getattr(model, "metrics_variables", ()) or ()),
    ]
    seen: set[int] = set()
    out: list[VariableInfo] = []
    for group, variables in groups:
        for v in variables:
            if id(v) in seen:
                continue
            seen.add(id(v))
            backing, devices = _components(v)
            shape = tuple(None if d is None else int(d) for d in getattr(v, "shape", ()))
            dtype = getattr(v, "dtype", "")
            dtype = getattr(dtype, "name", dtype)
            out.append(
                VariableInfo(
                    path=str(getattr(v, "path", None) or getattr(v, "name", "?")),
                    group=group,
                    shape=shape,
                    dtype=str(dtype),
                    kind=type(backing).__name__,
                    devices=devices,
                )
            )
    return tuple(out)
