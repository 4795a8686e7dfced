"""Markdown tables of a placement report, for TensorBoard's Text dashboard.

The analysis (`keras_gpu.meters.placement`) builds a `PlacementReport`; this module
only renders it. `keras_gpu.PlacementLogger` calls `render` for the text
it writes; anyone else who wants the tables calls it the same way.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from keras_gpu.core.topology import device_sort_key, short_device
from keras_gpu.core.units import format_bytes
from keras_gpu.meters.placement import HOST_BOUND_OPS
from keras_gpu.meters.placement_report import PlacementReport, VariableInfo

__all__ = ["render"]


def render(report: PlacementReport, max_rows: int = 50) -> dict[str, str]:
    """Markdown tables for TensorBoard's Text dashboard, by tag.

    Tags: `placement/strategy`, `placement/variables`,
    `placement/ops_per_device`, `placement/copies`,
    `placement/cpu_fallbacks`. Each list is cut at `max_rows` rows with a
    "... and N more" line; `placement.json` has them all.
    """
    return {
        "placement/strategy": _strategy(report),
        "placement/variables": _variables(report, max_rows),
        "placement/ops_per_device": _ops(report, max_rows),
        "placement/copies": _copies(report, max_rows),
        "placement/cpu_fallbacks": _fallbacks(report, max_rows),
    }


def _strategy(report: PlacementReport) -> str:
    s = report.strategy
    kind = f" (keras-gpu kind `{s.kind}`)" if s.kind else ""
    worker = "?" if s.worker_index is None else str(s.worker_index)
    rows = [
        ("Strategy", f"`{_cell(s.class_name)}`{kind}"),
        ("Replicas in sync", str(s.num_replicas_in_sync)),
        ("This worker's replica devices", ", ".join(f"`{short_device(d)}`" for d in s.replica_devices) or "-"),
        ("Worker", f"{worker} of {s.num_workers}" + (" (chief)" if s.is_chief else "")),
        ("Analysed at step", str(report.step)),
    ]
    return _table(("", ""), rows, max_rows=len(rows))


def _variables(report: PlacementReport, max_rows: int) -> str:
    if not report.variables:
        return "No variables."
    groups = Counter(v.group for v in report.variables)
    head = f"**{len(report.variables)} variables** (" + ", ".join(f"{n} {g}" for g, n in groups.items()) + ")."
    by_set: dict[tuple[str, ...], list[VariableInfo]] = {}
    for v in report.variables:
        by_set.setdefault(v.devices, []).append(v)
    summary_rows = []
    for devices, vs in sorted(by_set.items(), key=lambda kv: -len(kv[1])):
        known = [v.nbytes for v in vs if v.nbytes is not None]
        summary_rows.append(
            (", ".join(f"`{short_device(d)}`" for d in devices) or "-", str(len(vs)), format_bytes(sum(known)) if known else "?")
        )
    summary = _table(("Devices (one copy each)", "Variables", "Size per copy"), summary_rows, max_rows)
    rows = [
        (
            f"`{_cell(v.path)}`",
            v.group,
            _shape_text(v.shape),
            v.dtype,
            v.kind,
            ", ".join(f"`{short_device(d)}`" for d in v.devices),
        )
        for v in report.variables
    ]
    detail = _table(("Variable", "Group", "Shape", "Dtype", "Kind", "Devices"), rows, max_rows)
    return f"{head}\n\n{summary}\n\n{detail}"


def _ops(report: PlacementReport, max_rows: int) -> str:
    if report.ops is None:
        return f"Op placement not captured: {report.ops_unavailable_reason or 'unknown reason'}."
    ops = report.ops
    compute_total = sum(ops.compute_ops_per_device.values())
    head = (
        f"**{ops.total_ops} placed ops** in {ops.partitions} partition(s) of the training step "
        f"({ops.function_graphs} function graph(s)); {ops.copy_ops} cross-device transfer(s), "
        f"{ops.host_device_copy_ops} of them between host and accelerator memory."
    )
    rows = []
    for device, count in sorted(ops.ops_per_device.items(), key=lambda kv: device_sort_key(kv[0])):
        compute = ops.compute_ops_per_device.get(device, 0)
        share = f"{100.0 * compute / compute_total:.1f}%" if compute_total else "-"
        rows.append((f"`{short_device(device)}`", str(count), str(compute), share))
    text = f"{head}\n\n" + _table(("Device", "Ops", "Compute ops", "Share of compute"), rows, max_rows)
    if ops.xla_clusters:
        xla_rows = [
            (f"`{_cell(c.name)}`", f"`{_cell(c.function)}`", f"`{short_device(c.device)}`", "?" if c.ops is None else str(c.ops))
            for c in ops.xla_clusters
        ]
        text += "\n\n**Compiled by XLA** (the body runs on the cluster's device):\n\n" + _table(
            ("Node", "Function", "Device", "Ops in body"), xla_rows, max_rows
        )
    return text


def _copies(report: PlacementReport, max_rows: int) -> str:
    if report.ops is None:
        return f"Copies not captured: {report.ops_unavailable_reason or 'unknown reason'}."
    ops = report.ops
    if not ops.transfers:
        return "No cross-device transfers: the step runs on one device."
    kinds = _table(("Kind", "Transfers per step"), [(f"`{k}`", str(n)) for k, n in ops.copies_by_kind.items()], max_rows)
    order = {"host_to_device": 0, "device_to_host": 1, "device_to_device": 2, "host_to_host": 3, "host_memory": 4}
    transfers = sorted(ops.transfers, key=lambda t: (order.get(t.kind, 9), t.src, t.dst, t.tensor))
    rows = [
        (f"`{short_device(t.src)}`", f"`{short_device(t.dst)}`", f"`{t.kind}`", f"`{_cell(t.tensor)}`") for t in transfers
    ]
    return f"**{ops.copy_ops} transfers** per step.\n\n{kinds}\n\n" + _table(("From", "To", "Kind", "Tensor"), rows, max_rows)


def _fallbacks(report: PlacementReport, max_rows: int) -> str:
    if report.ops is None:
        return f"CPU fallbacks not checked: {report.ops_unavailable_reason or 'unknown reason'}."
    ops = report.ops
    if not ops.fallbacks_checked:
        devices = ", ".join(f"`{short_device(d)}`" for d in report.strategy.replica_devices) or "the CPU"
        return f"The replicas run on {devices}: no op counts as a CPU fallback."
    if not ops.cpu_fallbacks:
        return "**No CPU fallbacks**: every compute op of the step ran on an accelerator."
    head = (
        f"**{ops.cpu_fallback_count} op(s) ran on the CPU** while the replicas run on accelerators. "
        "Each costs host compute and usually a copy each way; look for ops without a GPU kernel, "
        "int32/string tensors and ops pinned with `tf.device`."
    )
    by_type = _table(("Op type", "Count"), [(f"`{_cell(t)}`", str(n)) for t, n in ops.fallbacks_by_type.items()], max_rows)
    rows = [(f"`{_cell(op.op_type)}`", f"`{_cell(op.name)}`", f"`{short_device(op.device)}`") for op in ops.cpu_fallbacks]
    note = "Not counted (host-bound by nature): " + ", ".join(f"`{t}`" for t in sorted(HOST_BOUND_OPS)) + ", and dataset/iterator ops."
    return f"{head}\n\n{by_type}\n\n" + _table(("Op type", "Name", "Device"), rows, max_rows) + f"\n\n{note}"


def _shape_text(shape: Sequence[int | None]) -> str:
    dims = ["?" if d is None else str(d) for d in shape]
    return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("`", "'").replace("\n", " ")


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], max_rows: int) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows[:max_rows]]
    if len(rows) > max_rows:
        lines.append(f"\n... and {len(rows) - max_rows} more (all of them are in `placement.json`).")
    return "\n".join(lines)
