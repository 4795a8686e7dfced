"""`keras-gpu report LOGDIR [--json]`: a terminal summary of a run, for servers without a browser."""

from __future__ import annotations

import argparse
import json
from typing import Any

from keras_gpu.cli import UsageError

__all__ = ["add_parser", "run", "print_report", "render"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "report",
        help="summarise a finished or running run from its event files",
        description="Summarise throughput per worker, peak memory per device, CPU fallbacks and hints from LOGDIR.",
    )
    p.add_argument("log_dir", metavar="LOGDIR", help="the log_dir given to keras_gpu.callbacks()")
    p.add_argument("--json", action="store_true", help="print the same content as JSON")


def run(args: argparse.Namespace) -> int:
    from keras_gpu.output.reader import summarize

    try:
        data = summarize(args.log_dir)
    except FileNotFoundError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print(json.dumps(data, indent=2, sort_keys=True))
        return 0
    render(data)
    return 0


def print_report(log_dir: str) -> None:
    """Print the report of `log_dir` to standard output."""
    from keras_gpu.output.reader import summarize

    render(summarize(log_dir))


def _bytes(n: float | None) -> str:
    from keras_gpu.core.units import format_bytes

    return "-" if n is None else format_bytes(n)


def _num(stats: dict[str, float] | None, key: str = "mean", fmt: str = "{:,.1f}") -> str:
    return "-" if not stats else fmt.format(stats[key])


def render(data: dict[str, Any], console: Any = None) -> None:
    """Render a :func:`keras_gpu.output.reader.summarize` result as tables."""
    from rich.console import Console

    if console is None:
        console = Console()
        if not console.is_terminal:  # piped or captured: don't squeeze tables into 80 columns
            console = Console(width=140)
    runs = data["runs"]
    if not runs:
        console.print(f"No keras-gpu data under {data['log_dir']} yet.")
        return

    console.print(_throughput_table(runs, data["log_dir"]))
    times, replicas = _time_tables(runs)
    if times.row_count:
        console.print(times)
    for r in runs:
        stage = (r.get("step_time") or {}).get("input_stage")
        if stage:
            where = f" ({stage['path']})" if stage["path"] != stage["name"] else ""
            console.print(
                f"  {r['label']}: the slowest input stage is {stage['name']}{where}, "
                f"{1e3 * stage['sec_per_step']:,.3g} ms per batch of its own time."
            )
    if replicas.row_count > 1:
        console.print(replicas)

    mem, notes = _memory_table(runs)
    if mem.row_count:
        console.print(mem)
    for note in notes:
        console.print(f"  {note}")

    place = _placement_table(runs)
    if place.row_count:
        console.print(place)

    if data["hints"]:
        console.print("[bold]Hints[/bold]")
        for hint in data["hints"]:
            console.print(f"  - {hint}")


def _table(title: str, columns: tuple[str, ...], left: tuple[str, ...]) -> Any:
    """A rich table with `columns`, those in `left` left-justified and the rest right-justified."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for col in columns:
        table.add_column(col, justify="left" if col in left else "right")
    return table


def _throughput_table(runs: list[dict[str, Any]], log_dir: str) -> Any:
    table = _table(
        f"Throughput, wall clock  ({log_dir})",
        ("worker", "run", "samples/s", "steady samples/s", "steps/s", "TFLOP/s", "MFU", "last step"),
        ("worker", "run"),
    )
    for r in runs:
        t = r["throughput"]
        table.add_row(
            r["label"], r["run"], _num(t.get("samples_per_sec")), _num(t.get("steady_samples_per_sec")),
            _num(t.get("steps_per_sec"), "mean", "{:,.2f}"), _num(t.get("tflops_per_sec"), "mean", "{:.3f}"),
            _num(t.get("mfu"), "mean", "{:.1%}"), str(r["steps"]),
        )
    return table


def _time_tables(runs: list[dict[str, Any]]) -> tuple[Any, Any]:
    """`(where the time goes, per replica)`."""
    times = _table(
        "Where the time goes",
        ("worker", "epochs", "training s", "first executions s", "validation s", "other s",
         "ms/step", "input", "compute", "communication", "other", "traced steps"),
        ("worker",),
    )
    replicas = _table(
        "Per replica (seconds per step, from the traces)",
        ("worker", "replica", "compute ms", "communication ms"),
        ("worker", "replica"),
    )
    for r in runs:
        e, st = r.get("time") or {}, r.get("step_time")
        if not e and not st:
            continue
        epoch_cols = [str(e["epochs"])] + [f"{e[k]:,.2f}" for k in ("train_sec", "first_step_sec", "validation_sec", "other_sec")] if e else ["-"] * 5
        step_cols = ["-"] * 6
        if st:
            step_cols = [f"{1e3 * st['step_sec']:,.3g}"] + [f"{st['shares'][p]:.0%}" for p in ("input", "compute", "communication", "other")] + [str(st["steps"])]
            for label, rep in zip(st["replica_labels"], st["replicas"]):
                replicas.add_row(r["label"], label, f"{1e3 * rep['compute_sec']:,.3g}", f"{1e3 * rep['communication_sec']:,.3g}")
        times.add_row(r["label"], *epoch_cols, *step_cols)
    return times, replicas


def _memory_table(runs: list[dict[str, Any]]) -> tuple[Any, list[str]]:
    """`(peak memory table, notes on devices whose allocator counted nothing)`."""
    mem = _table(
        "Peak memory",
        ("worker", "device", "allocator peak", "GPU: this process", "GPU: all processes", "GPU util mean"),
        ("worker", "device"),
    )
    notes: list[str] = []
    for r in runs:
        m = r["memory"]
        for device, peak in sorted(m["allocator_peak_bytes"].items()):
            mem.add_row(r["label"], device, _bytes(peak), "", "", "")
        for device, why in sorted(m.get("allocator_uncounted", {}).items()):
            mem.add_row(r["label"], device, "not counted", "", "", "")
            notes.append(f"{r['label']}, {device}: the allocator counted no allocation ({why}).")
        for gpu, metrics in sorted(m["gpus"].items()):
            mem.add_row(
                r["label"], f"GPU {gpu} (NVML)", "",
                _bytes((metrics.get("process_memory_bytes") or {}).get("max")),
                _bytes((metrics.get("memory_used_bytes") or {}).get("max")),
                _num(metrics.get("utilization_percent"), "mean", "{:.0f}%"),
            )
        if m["host_rss_peak_bytes"] is not None:
            mem.add_row(r["label"], "host RSS", _bytes(m["host_rss_peak_bytes"]), "", "", "")
    return mem, notes


def _placement_table(runs: list[dict[str, Any]]) -> Any:
    columns = ("worker", "ops per device", "CPU fallbacks", "top fallback op types")
    place = _table("Placement of the training step", columns, columns)
    for r in runs:
        p = r.get("placement")
        if p:
            per_device = ", ".join(f"{d.split('device:')[-1]}: {n}" for d, n in sorted(p["ops_per_device"].items()))
            top = ", ".join(f"{t} x{n}" for t, n in p["top_fallbacks"][:5]) or "-"
            place.add_row(r["label"], per_device or "-", str(p["cpu_fallback_ops"]), top)
    return place
