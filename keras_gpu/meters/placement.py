"""Where a training step really ran: graph capture and placement analysis.

The Markdown tables of a report are rendered by `keras_gpu.output.placement_markdown`.

TensorFlow decides where each op of a `tf.function` runs when it instantiates
the function: it places the graph, splits it into one partition per device and
joins the partitions with `_Send`/`_Recv` pairs. While graph collection is on,
the eager runtime records those placed partition graphs for every function it
instantiates, and `export_run_metadata()` hands them back as a `RunMetadata`
proto (`function_graphs[i].partition_graphs[j].node[k].device` is where node
*k* ran). That is private TensorFlow API, reached through `keras_gpu.core.tf_private`
(`graph_collection`, `export_run_metadata`), where all of keras-gpu's private
TensorFlow calls live.

Two facts, checked on TensorFlow 2.21, shape the capture:

* Graphs are recorded when a function is *instantiated* (its first call after
  a trace), not on later calls. Collection must therefore be on during the
  first call of a freshly traced training function; a call of an already
  instantiated function records nothing (and costs nothing extra).
* `context.disable_run_metadata()` does not stop graph recording: every
  function instantiated afterwards is still recorded, and the protos pile up
  in the eager context until someone exports them. The graph-collection
  switch (`enable_graph_collection` / `disable_graph_collection`) records the
  same placed partition graphs and does turn off, so :func:`capture_graphs`
  uses it.

The analysis (:func:`analyze_ops`) is plain proto walking, testable on
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
  :data:`HOST_BOUND_OPS` and does not match the input-pipeline pattern
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

import contextlib
import json
import math
import os
import re
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from keras_gpu.core.log import logger
from keras_gpu.core.tf_private import export_run_metadata, graph_collection, new_graph_def
from keras_gpu.core.topology import device_sort_key, device_type, replica_devices, short_device

__all__ = [
    "HOST_BOUND_OPS",
    "STEP_MARKER_OPS",
    "GraphCapture",
    "capture_graphs",
    "step_function_graphs",
    "is_host_bound",
    "device_type",
    "short_device",
    "strategy_kind",
    "PlacedOp",
    "Transfer",
    "XlaCluster",
    "OpPlacement",
    "VariableInfo",
    "StrategyInfo",
    "PlacementReport",
    "analyze_ops",
    "strategy_info",
    "variable_info",
    "placed_graph_def",
    "write_json",
    "read_json",
]

FORMAT = "keras-gpu/placement"
VERSION = 1

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

STEP_MARKER_OPS: frozenset[str] = frozenset(
    {"IteratorGetNext", "IteratorGetNextSync", "IteratorGetNextAsOptional", "MultiDeviceIteratorGetNextFromShard"}
)
"""Op types that mark a function graph as a training step: Keras' step pulls its batch from an iterator."""

_SEND_OPS = frozenset({"_Send", "_HostSend"})
_RECV_OPS = frozenset({"_Recv", "_HostRecv"})
_HOST_MEMORY_OPS = frozenset({"_HostSend", "_HostRecv"})
_XLA_LAUNCH_OPS = frozenset({"XlaLaunch", "XlaLaunchV2", "_XlaCompile", "_XlaRun"})
_UNPLACED = "(unplaced)"
_LARGE_CONST_BYTES = 1024


# --------------------------------------------------------------------------- capture


class GraphCapture:
    """What :func:`capture_graphs` collected.

    Attributes:
        run_metadata: The exported `RunMetadata` proto (set when the block
            exits, also when it raised); `None` if the export failed.
    """

    def __init__(self) -> None:
        self.run_metadata: Any = None

    @property
    def function_graphs(self) -> list[Any]:
        """All recorded `RunMetadata.FunctionGraphs`, in instantiation order."""
        if self.run_metadata is None:
            return []
        return list(self.run_metadata.function_graphs)


@contextlib.contextmanager
def capture_graphs() -> Iterator[GraphCapture]:
    """Record the placed graphs of every function instantiated inside the block.

    Graph collection is switched on for the block only and always switched off
    again, even when the block raises. Anything recorded before the block
    (another tool's pending graphs) is drained first so that it is not
    mistaken for this block's graphs.

    Example:

    ```python
    with capture_graphs() as captured:
        model.train_function(iterator)
    step = step_function_graphs(captured.function_graphs)
    ```
    """
    capture = GraphCapture()
    export_run_metadata()  # drain whatever is pending
    graph_collection(True)
    try:
        yield capture
    finally:
        try:
            capture.run_metadata = export_run_metadata()
        except Exception as exc:  # noqa: BLE001 - a failed export must not hide the step's own outcome
            logger.warning("keras-gpu: could not export the placed graphs (%s: %s)", type(exc).__name__, exc)
        finally:
            graph_collection(False)


def step_function_graphs(function_graphs: Iterable[Any]) -> list[Any]:
    """The function graphs that are a training step: those that pull a batch from an iterator.

    The first call of a Keras training function also instantiates small helper
    functions (variable creation, `Optional` handling); they are left out.
    """
    return [
        fg
        for fg in function_graphs
        if any(node.op in STEP_MARKER_OPS for pg in fg.partition_graphs for node in pg.node)
    ]


# --------------------------------------------------------------------------- devices


def _is_host(device: str) -> bool:
    return device_type(device) == "CPU"


def is_host_bound(op_type: str) -> bool:
    """Whether `op_type` belongs on the host (or does no work) and is never a CPU fallback."""
    return op_type in HOST_BOUND_OPS or bool(_HOST_BOUND_PATTERN.search(op_type))


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class PlacedOp:
    """One op of the placed graph: its type, node name and device."""

    op_type: str
    name: str
    device: str


@dataclass(frozen=True)
class Transfer:
    """One tensor moving between two devices per step.

    Attributes:
        tensor: The rendezvous key TensorFlow gave it (`tensor_name`).
        src: Sending device (full name).
        dst: Receiving device (full name).
        kind: `host_to_device`, `device_to_host`, `device_to_device`,
            `host_to_host` or `host_memory` (see the module docstring).
        send_op: Op type of the sending half (`""` if not in this process).
        recv_op: Op type of the receiving half (`""` if not in this process).
    """

    tensor: str
    src: str
    dst: str
    kind: str
    send_op: str = ""
    recv_op: str = ""


@dataclass(frozen=True)
class XlaCluster:
    """A call compiled by XLA: its node, the compiled function, its device and body size.

    `ops` is the number of nodes in the compiled function's body, or `None`
    when the function is not in the graph's library.
    """

    name: str
    op_type: str
    function: str
    device: str
    ops: int | None


@dataclass(frozen=True)
class OpPlacement:
    """Where the ops of one training step ran.

    Attributes:
        function_graphs: Step function graphs analysed.
        partitions: Placed partitions in them (one per device and function).
        ops_per_device: Placed nodes per device (full device name).
        compute_ops_per_device: The same without host-bound and bookkeeping
            ops (:func:`is_host_bound`).
        transfers: Every cross-device transfer (see :class:`Transfer`).
        fallbacks_checked: Whether the replicas (or any op) ran on an
            accelerator, so that CPU ops count as fallbacks.
        cpu_fallbacks: Ops that ran on a CPU while the replicas run on
            accelerators, host-bound ops excluded.
        xla_clusters: Calls compiled by XLA.
    """

    function_graphs: int = 0
    partitions: int = 0
    ops_per_device: dict[str, int] = field(default_factory=dict)
    compute_ops_per_device: dict[str, int] = field(default_factory=dict)
    transfers: tuple[Transfer, ...] = ()
    fallbacks_checked: bool = False
    cpu_fallbacks: tuple[PlacedOp, ...] = ()
    xla_clusters: tuple[XlaCluster, ...] = ()

    @property
    def total_ops(self) -> int:
        """All placed nodes of the step."""
        return sum(self.ops_per_device.values())

    @property
    def copy_ops(self) -> int:
        """Number of cross-device transfers per step."""
        return len(self.transfers)

    @property
    def copies_by_kind(self) -> dict[str, int]:
        """Transfers per kind."""
        return dict(sorted(Counter(t.kind for t in self.transfers).items()))

    @property
    def host_device_copy_ops(self) -> int:
        """Transfers that cross between host and accelerator memory (both directions)."""
        return sum(1 for t in self.transfers if t.kind in ("host_to_device", "device_to_host"))

    @property
    def cpu_fallback_count(self) -> int:
        """Number of CPU fallback ops."""
        return len(self.cpu_fallbacks)

    @property
    def fallbacks_by_type(self) -> dict[str, int]:
        """CPU fallback ops per op type, most frequent first."""
        return dict(Counter(op.op_type for op in self.cpu_fallbacks).most_common())


@dataclass(frozen=True)
class VariableInfo:
    """One variable and the devices its components live on.

    Attributes:
        path: The Keras variable path (`"sequential/dense/kernel"`).
        group: `"trainable"`, `"non_trainable"`, `"optimizer"` or `"metric"`.
        shape: Its shape (`None` for an unknown dimension).
        dtype: Its dtype name.
        kind: Class of the backing TensorFlow variable (`"MirroredVariable"`,
            `"ResourceVariable"`, ...).
        devices: Device of each component, in replica order (one entry for a
            plain variable, one per replica for a mirrored one).
    """

    path: str
    group: str
    shape: tuple[int | None, ...]
    dtype: str
    kind: str
    devices: tuple[str, ...]

    @property
    def nbytes(self) -> int | None:
        """Bytes of one component, or `None` when the shape or dtype size is unknown."""
        size = _dtype_bytes(self.dtype)
        if size is None or any(d is None for d in self.shape):
            return None
        return size * math.prod(self.shape)  # type: ignore[arg-type]


@dataclass(frozen=True)
class StrategyInfo:
    """The distribution strategy and this worker's place in the cluster.

    Attributes:
        class_name: The strategy's class name.
        kind: The keras-gpu kind (`"default"`, `"one_device"`, `"mirrored"`,
            `"multiworker"`), or `None` for other strategies.
        num_replicas_in_sync: Replicas across all workers.
        replica_devices: This worker's replica devices (full names).
        worker_index: This worker's rank among the training processes.
        num_workers: Training processes.
        is_chief: Whether this worker is the chief.
    """

    class_name: str
    kind: str | None
    num_replicas_in_sync: int
    replica_devices: tuple[str, ...]
    worker_index: int | None
    num_workers: int
    is_chief: bool

    @property
    def on_accelerators(self) -> bool:
        """Whether any replica device is not a CPU."""
        return any(device_type(d) not in ("CPU", "") for d in self.replica_devices)


@dataclass(frozen=True)
class PlacementReport:
    """Everything the placement analysis found for one traced training step.

    Attributes:
        step: Global step (optimizer iterations) when it was taken.
        strategy: See :class:`StrategyInfo`.
        variables: See :class:`VariableInfo`, model variables first.
        ops: See :class:`OpPlacement`; `None` when ops were not captured.
        ops_unavailable_reason: Why `ops` is `None`.
    """

    step: int
    strategy: StrategyInfo
    variables: tuple[VariableInfo, ...] = ()
    ops: OpPlacement | None = None
    ops_unavailable_reason: str | None = None

    # ---------------------------------------------------------------- serialisation

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary (the content of `placement.json`).

        The op-level fields are at the top level so that scripts can read
        `ops_per_device`, `copy_ops`, `cpu_fallback_count` and `cpu_fallbacks`
        (each with `op_type`, `name`, `device`) directly.
        """
        ops = self.ops
        out: dict[str, Any] = {
            "format": FORMAT,
            "version": VERSION,
            "step": self.step,
            "strategy": {**asdict(self.strategy), "replica_devices": list(self.strategy.replica_devices)},
            "variables": [
                {**asdict(v), "shape": list(v.shape), "devices": list(v.devices), "bytes": v.nbytes} for v in self.variables
            ],
            "ops_available": ops is not None,
            "ops_unavailable_reason": self.ops_unavailable_reason,
        }
        if ops is not None:
            out.update(
                {
                    "function_graphs": ops.function_graphs,
                    "partitions": ops.partitions,
                    "total_ops": ops.total_ops,
                    "ops_per_device": dict(ops.ops_per_device),
                    "compute_ops_per_device": dict(ops.compute_ops_per_device),
                    "copy_ops": ops.copy_ops,
                    "host_device_copy_ops": ops.host_device_copy_ops,
                    "copies_by_kind": ops.copies_by_kind,
                    "copies": [asdict(t) for t in ops.transfers],
                    "fallbacks_checked": ops.fallbacks_checked,
                    "cpu_fallback_count": ops.cpu_fallback_count,
                    "cpu_fallbacks": [asdict(op) for op in ops.cpu_fallbacks],
                    "xla_clusters": [asdict(c) for c in ops.xla_clusters],
                }
            )
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PlacementReport:
        """Rebuild a report from :meth:`to_dict` output (e.g. a loaded `placement.json`).

        Raises:
            ValueError: `data` is not a keras-gpu placement report.
        """
        if not isinstance(data, Mapping) or data.get("format") != FORMAT:
            raise ValueError(
                f"Not a keras-gpu placement report: expected 'format': {FORMAT!r}. "
                f"Received: format={data.get('format') if isinstance(data, Mapping) else type(data).__name__!r}"
            )
        if data.get("version") != VERSION:
            raise ValueError(
                f"Unsupported placement report version; this keras-gpu reads {VERSION}. "
                f"Received: version={data.get('version')!r}"
            )
        s = data["strategy"]
        strategy = StrategyInfo(
            class_name=s["class_name"],
            kind=s["kind"],
            num_replicas_in_sync=int(s["num_replicas_in_sync"]),
            replica_devices=tuple(s["replica_devices"]),
            worker_index=s["worker_index"],
            num_workers=int(s["num_workers"]),
            is_chief=bool(s["is_chief"]),
        )
        variables = tuple(
            VariableInfo(
                path=v["path"], group=v["group"], shape=tuple(v["shape"]), dtype=v["dtype"], kind=v["kind"], devices=tuple(v["devices"])
            )
            for v in data.get("variables", ())
        )
        ops = None
        if data.get("ops_available"):
            ops = OpPlacement(
                function_graphs=int(data["function_graphs"]),
                partitions=int(data["partitions"]),
                ops_per_device={k: int(v) for k, v in data["ops_per_device"].items()},
                compute_ops_per_device={k: int(v) for k, v in data["compute_ops_per_device"].items()},
                transfers=tuple(Transfer(**t) for t in data["copies"]),
                fallbacks_checked=bool(data["fallbacks_checked"]),
                cpu_fallbacks=tuple(PlacedOp(**op) for op in data["cpu_fallbacks"]),
                xla_clusters=tuple(XlaCluster(**c) for c in data["xla_clusters"]),
            )
        reason = data.get("ops_unavailable_reason")
        return cls(step=int(data["step"]), strategy=strategy, variables=variables, ops=ops, ops_unavailable_reason=reason)

    def to_json(self) -> str:
        """The report as indented JSON text."""
        return json.dumps(self.to_dict(), indent=1, sort_keys=False)

    # ---------------------------------------------------------------- TensorBoard

    def scalars(self) -> dict[str, float]:
        """The scalar summaries: `placement/cpu_fallback_ops`, `placement/copy_ops` and
        `placement/host_device_copy_ops` (op counts per step); empty when ops were not captured."""
        if self.ops is None:
            return {}
        return {
            "placement/cpu_fallback_ops": float(self.ops.cpu_fallback_count),
            "placement/copy_ops": float(self.ops.copy_ops),
            "placement/host_device_copy_ops": float(self.ops.host_device_copy_ops),
        }

    def markdown(self, max_rows: int = 50) -> dict[str, str]:
        """Markdown tables for TensorBoard's Text dashboard, by tag.

        Tags: `placement/strategy`, `placement/variables`,
        `placement/ops_per_device`, `placement/copies`,
        `placement/cpu_fallbacks`. Each list is cut at `max_rows` rows with a
        "... and N more" line; `placement.json` has them all.
        """
        from keras_gpu.output.placement_markdown import render

        return render(self, max_rows)


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
            :func:`step_function_graphs`).
        replica_devices: The strategy's replica devices on this worker; when
            any of them is an accelerator, ops on a CPU are checked for
            fallbacks. With none given, the graph itself decides: any op on an
            accelerator turns the check on.

    Returns:
        The :class:`OpPlacement`. Definitions are in the module docstring.
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


# --------------------------------------------------------------------------- files


def write_json(report: PlacementReport, path: str) -> None:
    """Write `report` to `path` atomically: a temporary file beside it, then a rename.

    Readers never see a half-written file. Remote paths (`gs://`, ...) go
    through `tf.io.gfile`.
    """
    text = report.to_json()
    tmp = f"{path}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    if "://" in path:
        import tensorflow as tf

        with tf.io.gfile.GFile(tmp, "w") as f:
            f.write(text)
        tf.io.gfile.rename(tmp, path, overwrite=True)
        return
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def read_json(path: str) -> PlacementReport:
    """Load a `placement.json` written by :func:`write_json`."""
    with open(path, encoding="utf-8") as f:
        return PlacementReport.from_dict(json.load(f))


# --------------------------------------------------------------------------- helpers


def _dtype_bytes(dtype: str) -> int | None:
    if dtype == "bool":
        return 1
    match = re.search(r"(\d+)", dtype)
    if match is None:
        return None
    return max(1, int(match.group(1)) // 8)
