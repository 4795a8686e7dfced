"""`keras-gpu env`: the environment report to paste into a bug report.

```
keras-gpu env          # readable tables
keras-gpu env --json   # the same content as JSON (see `keras_gpu.cli.envinfo.collect`)
```

The command exits 0 whenever it could write the report, including when the
report lists problems (such as a malformed `TF_CONFIG`): finding those is
its job. The data comes from `keras_gpu.cli.envinfo.collect`.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from typing import Any

__all__ = ["add_parser", "render_text", "run"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register `keras-gpu env`."""
    parser = subparsers.add_parser(
        "env",
        help="print versions, GPUs, devices, cluster and the strategy that would be used",
        description=(
            "Report Python, TensorFlow (with its CUDA/cuDNN build), JAX, Keras, TensorBoard and keras-gpu versions, "
            "the NVIDIA driver and GPUs, the Keras backend's devices, the TF_CONFIG/SLURM cluster and the strategy "
            "`make_strategy('auto')` would pick on that backend. Exits 0 even when the report lists problems."
        ),
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    """Collect the report and print it; returns 0."""
    from keras_gpu.cli.envinfo import collect

    report = collect()
    if args.json:
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    else:
        sys.stdout.write(render_text(report))
    sys.stdout.flush()
    return 0


def render_text(report: dict[str, Any], width: int = 100) -> str:
    """Render a report from `keras_gpu.cli.envinfo.collect()` as plain-text tables."""
    from rich.console import Console

    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None, markup=False, highlight=False, emoji=False)
    console.print(_versions_table(report))
    console.print(_gpu_table(report))
    console.print(_devices_table(report))
    console.print(_distribution_table(report))
    env = report.get("environment") or {}
    if env and "error" not in env:
        console.print(_key_values("Environment", env))
    problems = report.get("problems") or []
    console.print("Problems:" if problems else "Problems: none found")
    for problem in problems:
        console.print(f"  - {problem}", soft_wrap=True)
    return "".join(line.rstrip() + "\n" for line in buffer.getvalue().splitlines())


def _key_values(title: str, rows: dict[str, Any]):
    from rich import box
    from rich.table import Table

    table = Table(title=title, title_justify="left", show_header=False, box=box.SIMPLE, pad_edge=False)
    table.add_column("key", no_wrap=True)
    table.add_column("value", overflow="fold")
    for key, value in rows.items():
        table.add_row(key, "-" if value is None else str(value))
    return table


def _error_or(section: Any, render) -> Any:
    if isinstance(section, dict) and "error" in section:
        return f"unavailable ({section['error']})"
    return render(section)


def _versions_table(report: dict[str, Any]):
    tf_info = report.get("tensorflow", {})

    def tensorflow(tf: dict[str, Any]) -> str:
        if not tf.get("installed", True):
            return "not installed (the Keras backend in use does not need it)"
        dists = ", ".join(f"{d} {v}" for d, v in (tf.get("distributions") or {}).items()) or "unknown distribution"
        if tf.get("is_cuda_build"):
            build = f"CUDA {tf.get('cuda_version') or '?'}, cuDNN {tf.get('cudnn_version') or '?'}"
        else:
            build = "built without CUDA"
        return f"{tf['version']} ({dists}; {build})"

    return _key_values(
        "Versions",
        {
            "keras-gpu": _error_or(report.get("keras_gpu", {}), lambda s: s["version"]),
            "Python": _error_or(
                report.get("python", {}), lambda s: f"{s['version']} ({s['implementation']}, {s['executable']})"
            ),
            "Platform": _error_or(
                report.get("platform", {}),
                lambda s: f"{s['platform']}; {s['usable_cpus']} of {s['cpu_count']} CPUs usable",
            ),
            "TensorFlow": _error_or(tf_info, tensorflow),
            "JAX": _error_or(
                report.get("jax", {}),
                lambda s: s["version"] if s.get("installed") else "not installed",
            ),
            "Keras": _error_or(report.get("keras", {}), lambda s: f"{s['version']} (backend: {s['backend']})"),
            "TensorBoard": _error_or(
                report.get("tensorboard", {}), lambda s: s["version"] if s["installed"] else "not installed"
            ),
        },
    )


def _gpu_table(report: dict[str, Any]):
    from rich import box
    from rich.table import Table

    nvml = report.get("nvml", {})
    gpus = report.get("gpus")
    if "error" in nvml:
        return _key_values("NVIDIA GPUs", {"NVML": f"unavailable ({nvml['error']})"})
    if not nvml.get("available"):
        return _key_values("NVIDIA GPUs", {"NVML": nvml.get("message")})
    if isinstance(gpus, dict):  # the section failed
        return _key_values("NVIDIA GPUs", {"driver": nvml.get("driver_version"), "GPUs": f"unavailable ({gpus['error']})"})
    title = f"NVIDIA GPUs (driver {nvml.get('driver_version') or 'unknown'})"
    if not gpus:
        return _key_values(title, {"GPUs": "NVML is available but reports no GPU"})
    table = Table(title=title, title_justify="left", box=box.SIMPLE, pad_edge=False)
    for column in ("#", "name", "memory", "compute capability", "PCI bus", "UUID"):
        table.add_column(column, overflow="fold")
    for gpu in gpus:
        cc = gpu.get("compute_capability")
        table.add_row(
            str(gpu["index"]),
            gpu["name"],
            f"{gpu['memory_total_bytes'] / 2**30:.1f} GiB" if gpu.get("memory_total_bytes") is not None else "?",
            f"{cc[0]}.{cc[1]}" if cc else "?",
            gpu.get("pci_bus_id") or "?",
            gpu.get("uuid") or "?",
        )
    return table


def _devices_table(report: dict[str, Any]):
    devices = report.get("devices", {})
    title = {"jax": "JAX devices", "torch": "PyTorch devices"}.get(devices.get("backend", ""), "TensorFlow devices")
    if "error" in devices:
        return _key_values(title, {"devices": f"unavailable ({devices['error']})"})

    def describe(entry: dict[str, Any]) -> str:
        extra = [entry[k] for k in ("device_name",) if entry.get(k)]
        if entry.get("compute_capability"):
            extra.append("compute capability {}.{}".format(*entry["compute_capability"]))
        return entry["name"] + (f" ({', '.join(extra)})" if extra else "")

    if "local" in devices:  # JAX and PyTorch: no physical/logical split
        rows = {"local": "\n".join(describe(d) for d in devices["local"]) or "none"}
        if devices.get("process_count", 1) > 1:
            rows["processes"] = devices["process_count"]
        return _key_values(title, rows)
    return _key_values(
        title,
        {
            "physical": "\n".join(describe(d) for d in devices.get("physical", [])) or "none",
            "logical": "\n".join(d["name"] for d in devices.get("logical", [])) or "none",
        },
    )


def _distribution_table(report: dict[str, Any]):
    cluster = report.get("cluster", {})
    strategy = report.get("strategy", {})
    rows: dict[str, Any] = {}
    if "error" in cluster:
        rows["cluster"] = f"PROBLEM: {cluster['error']}"
    else:
        rows["cluster"] = cluster.get("description")
        for task_type, addresses in (cluster.get("cluster") or {}).items():
            rows[f"  {task_type}"] = ", ".join(addresses)
    if "error" in strategy:
        rows["make_strategy('auto')"] = f"PROBLEM: {strategy['error']}"
    elif strategy.get("kind") is None:
        rows["make_strategy('auto')"] = f"not available: {strategy.get('reason')}"
    else:
        rows["make_strategy('auto')"] = strategy.get("kind")
        rows["  devices"] = ", ".join(str(d) for d in strategy.get("devices") or []) or "-"
        if strategy.get("cross_device_ops") is not None:
            rows["  cross-device ops"] = strategy["cross_device_ops"]
        if strategy.get("communication") is not None:
            rows["  communication"] = strategy["communication"]
        rows["  why"] = strategy.get("reason")
        for note in strategy.get("notes") or []:
            rows["  note"] = note if "  note" not in rows else f"{rows['  note']}\n{note}"
    return _key_values("Distribution", rows)
