"""The typed record of a placement analysis, and its `placement.json` file.

`PlacementReport` is what `keras_gpu.meters.placement` builds for one
traced training step: the strategy, the variables and where the step's ops
ran (definitions of ops, copies, CPU fallbacks and XLA clusters are in that
module's docstring). This module holds the records, their JSON form
(`PlacementReport.to_dict` / `PlacementReport.from_dict`), their
scalar summaries and the file's atomic writer and reader. The Markdown tables
are rendered by `keras_gpu.output.placement_markdown`.
"""

from __future__ import annotations

import json
import math
import os
import re
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from keras_gpu.core.topology import device_type

__all__ = [
    "FORMAT",
    "VERSION",
    "OpPlacement",
    "PlacedOp",
    "PlacementReport",
    "StrategyInfo",
    "Transfer",
    "VariableInfo",
    "XlaCluster",
    "read_json",
    "write_json",
]

FORMAT = "keras-gpu/placement"
VERSION = 1


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
            `host_to_host` or `host_memory` (see `keras_gpu.meters.placement`).
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
            ops (`keras_gpu.meters.placement.is_host_bound`).
        transfers: Every cross-device transfer (see `Transfer`).
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
        strategy: See `StrategyInfo`.
        variables: See `VariableInfo`, model variables first.
        ops: See `OpPlacement`; `None` when ops were not captured.
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
        """Rebuild a report from `to_dict` output (e.g. a loaded `placement.json`).

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
    """Load a `placement.json` written by `write_json`."""
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
