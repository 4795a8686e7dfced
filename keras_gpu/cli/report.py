"""`keras-gpu report LOGDIR [--json]`: a terminal summary of a run, for servers without a browser."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from keras_gpu.cli import UsageError
from keras_gpu.output.runs_shown import RUNS_SHOWN, SLOWEST_SHOWN

if TYPE_CHECKING:
    from keras_gpu.output.report_records import Report, RunSummary, SeriesStats

__all__ = ["RUNS_SHOWN", "add_parser", "print_report", "render", "run", "shown_runs"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "report",
        help="summarise a finished or running run from its event files",
        description="Summarise throughput per worker, peak memory per device, CPU fallbacks and hints from LOGDIR.",
    )
    p.add_argument("log_dir", metavar="LOGDIR", help="the log_dir given to keras_gpu.callbacks()")
    p.add_argument("--json", action="store_true", help="print the same content as JSON")


def run(args: argparse.Namespace) -> int:
    from keras_gpu.output.log_dir import read_log_dir

    try:
        data = read_log_dir(args.log_dir)  # the runs, and any `keras-gpu scale` or `keras-gpu tune` study
    except FileNotFoundError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print(json.dumps(data.as_dict(), indent=2, sort_keys=True))
        return 0
    if data.tune is not None:
        from keras_gpu.cli.tune import render as render_tune

        render_tune(data.tune["rows"], data.tune["skipped"], data.tune["verdict"])
    if data.scale is not None:
        from keras_gpu.cli.scale import render as render_scale

        render_scale(data.scale, title="scaling study (keras-gpu scale)")
    if data.shows_report and data.report is not None:
        render(data.report)
    return 0


def print_report(log_dir: str) -> None:
    """Print the report of `log_dir` to standard output."""
    from keras_gpu.output.reader import read_report

    render(read_report(log_dir))


def _bytes(n: float | None) -> str:
    from keras_gpu.core.units import format_bytes

    return "-" if n is None else format_bytes(n)


def _num(stats: SeriesStats | None, key: str = "mean", fmt: str = "{:,.1f}") -> str:
    return "-" if stats is None else fmt.format(getattr(stats, key))


def render(report: Report, console: Any = None) -> None:
    """Render a `keras_gpu.output.reader.read_report` result as tables."""
    from rich.console import Console

    if console is None:
        console = Console()
        if not console.is_terminal:  # piped or captured: don't squeeze tables into 80 columns
            console = Console(width=140)
    runs = report.runs
    if not runs:
        console.print(f"No keras-gpu data under {report.log_dir} yet.")
        return

    runs, hidden = shown_runs(report)
    console.print(_throughput_table(runs, report.log_dir))
    if hidden:
        console.print(
            f"  {hidden:,} more workers' runs are not shown: the chief, the stragglers and the slowest workers are "
            "(keras-gpu report --json lists every run)."
        )
    cluster = _cluster_table(report)
    if cluster is not None:
        console.print(cluster)
    times, replicas = _time_tables(runs)
    if times.row_count:
        console.print(times)
    for r in runs:
        stage = None if r.step_time is None else r.step_time.step.input_stage
        if stage is not None:
            where = f" ({stage.path})" if stage.path != stage.name else ""
            console.print(
                f"  {r.label}: the slowest input stage is {stage.name}{where}, "
                f"{1e3 * stage.sec_per_step:,.3g} ms per batch of its own time."
            )
    for r in runs:
        if r.step_time is not None and r.step_time.step.unmeasured:
            console.print(
                f"  {r.label}: {r.step_time.step.unmeasured}: compute, communication, transfer, other and host are "
                "not measured.", markup=False, highlight=False,
            )
        for line in _kernel_lines(r):
            console.print(line, markup=False, highlight=False)
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

    hints = report.hints
    if hidden:
        from keras_gpu.output.report_hints import report_hints

        hints = report_hints(runs, report.cluster)
    if hints:
        console.print("[bold]Hints[/bold]")
        for hint in hints:
            console.print(f"  - {hint}")


def shown_runs(report: Report) -> tuple[list[RunSummary], int]:
    """The runs the tables list, and how many they leave out: `keras_gpu.output.runs_shown.shown_runs` with this
    module's `RUNS_SHOWN` and `SLOWEST_SHOWN`."""
    from keras_gpu.output.runs_shown import shown_runs as shown

    return shown(report, RUNS_SHOWN, SLOWEST_SHOWN)


def _cluster_table(report: Report) -> Any:
    """The cluster view's slowest workers over the fit's gathers (`None`: no cluster view, or none ranked)."""
    cluster = report.cluster
    if cluster is None or not cluster.slowest_workers:
        return None
    threshold = "" if cluster.threshold is None else f"; a worker stands out past {cluster.threshold:.2f}"
    table = _table(
        f"Cluster view: the slowest workers over {cluster.gathers} gathers (score: excess over the others' median, "
        f"in their spreads{threshold})",
        ("worker", "stood out", "listed", "score", "over median", "part"),
        ("worker", "part"),
    )
    for s in cluster.slowest_workers[:SLOWEST_SHOWN]:
        mark = " (straggler)" if s.worker == cluster.straggler else ""
        table.add_row(
            f"worker {s.worker}{mark}", f"{s.clear_gathers} of {cluster.gathers}",
            f"{s.listed_gathers} of {cluster.gathers}", f"{s.score:.1f}", f"{s.imbalance:+.0%}", s.part or "-",
        )
    return table


def _table(title: str, columns: tuple[str, ...], left: tuple[str, ...]) -> Any:
    """A rich table with `columns`, those in `left` left-justified and the rest right-justified."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for col in columns:
        table.add_column(col, justify="left" if col in left else "right")
    return table


def _throughput_table(runs: list[RunSummary], log_dir: str) -> Any:
    table = _table(
        f"Throughput, wall clock  ({log_dir})",
        ("worker", "run", "samples/s", "steady samples/s", "steps/s", "TFLOP/s", "MFU", "last step"),
        ("worker", "run"),
    )
    for r in runs:
        t = r.throughput
        table.add_row(
            r.label, r.run, _num(t.samples_per_sec), _num(t.steady_samples_per_sec),
            _num(t.steps_per_sec, "mean", "{:,.2f}"), _num(t.tflops_per_sec, "mean", "{:.3f}"),
            _mfu(t), str(r.steps),
        )
    return table


def _mfu(t: Any) -> str:
    """"steady X% (wall-clock Y%)" where the steady MFU was logged, else the wall-clock MFU alone."""
    wall = _num(t.mfu, "mean", "{:.1%}")
    if t.steady_mfu is None:
        return wall if t.mfu is None else f"wall-clock {wall}"
    return f"steady {t.steady_mfu.mean:.1%}" + ("" if t.mfu is None else f" (wall-clock {wall})")


def _time_tables(runs: list[RunSummary]) -> tuple[Any, Any]:
    """`(where the time goes, per replica)`."""
    times = _table(
        "Where the time goes",
        ("worker", "epochs", "training s", "first executions s", "validation s", "other s",
         "ms/step", "input", "compute", "communication", "transfer", "other", "host", "traced steps"),
        ("worker",),
    )
    replicas = _table(
        "Per replica (seconds per step, from the traces)",
        ("worker", "replica", "compute ms", "communication ms"),
        ("worker", "replica"),
    )
    for r in runs:
        e, st = r.time, r.step_time
        if e is None and st is None:
            continue
        epoch_cols = ["-"] * 5
        if e is not None:
            epoch_cols = [str(e.epochs)] + [f"{s:,.2f}" for s in (e.train_sec, e.first_step_sec, e.validation_sec, e.other_sec)]
        step_cols = ["-"] * 8
        if st is not None:
            shares = st.shares
            parts = ("input", "compute", "communication", "transfer", "other", "host")
            step_cols = [f"{1e3 * st.step.step_sec:,.3g}"] + [_share(shares[p]) for p in parts] + [str(st.step.steps)]
            for label, rep in zip(st.replica_labels, st.step.replicas):
                replicas.add_row(r.label, label, f"{1e3 * rep.compute_sec:,.3g}", f"{1e3 * rep.communication_sec:,.3g}")
        times.add_row(r.label, *epoch_cols, *step_cols)
    return times, replicas


def _share(value: float) -> str:
    return "-" if value != value else f"{value:.0%}"  # not measured: the line under the table says so


def _kernel_lines(r: RunSummary) -> list[str]:
    """The kernel view of a run's last trace: kernel time per step by class, then the top kernels."""
    st = r.step_time
    if st is None or not st.step.kernel_classes:
        return []
    classes = ", ".join(f"{k.name} {1e3 * k.sec_per_step:,.3g} ms ({k.share:.0%})" for k in st.step.kernel_classes)
    lines = [f"  {r.label}: kernel time per step by class: {classes}. Top kernels:"]
    lines += [
        f"    {1e3 * k.sec_per_step:8.3f} ms  {k.share:>4.0%}  {k.kind:<12} {k.name}" for k in st.step.kernels[:5]
    ]
    return lines


def _memory_table(runs: list[RunSummary]) -> tuple[Any, list[str]]:
    """`(peak memory table, notes on devices whose allocator counted nothing or preallocated a pool)`."""
    mem = _table(
        "Peak memory",
        ("worker", "device", "allocator peak", "host RSS peak", "GPU: this process", "GPU: all processes",
         "GPU util mean"),
        ("worker", "device"),
    )
    from keras_gpu.output.memory_tags import pool_words

    notes: list[str] = []
    for r in runs:
        m = r.memory
        for device, peak in sorted(m.allocator_peak_bytes.items()):
            mem.add_row(r.label, device, _bytes(peak), "", "", "", "")
        for device, why in sorted(m.allocator_uncounted.items()):
            mem.add_row(r.label, device, "not counted", "", "", "", "")
            notes.append(f"{r.label}, {device}: the allocator counted no allocation ({why}).")
        for device, (size, setting) in sorted(m.pools.items()):
            notes.append(
                f"{r.label}, {device}: {pool_words(size, setting)}. NVML's 'GPU: this process' counts all of the "
                "pool; the allocator peak is what the model used of it."
            )
        for gpu, metrics in sorted(m.gpus.items()):
            mem.add_row(
                r.label, f"GPU {gpu} (NVML)", "", "",
                _bytes(_max(metrics.get("process_memory_bytes"))),
                _bytes(_max(metrics.get("memory_used_bytes"))),
                _num(metrics.get("utilization_percent"), "mean", "{:.0f}%"),
            )
        if m.host_rss_peak_bytes is not None:  # the process's resident memory, not an allocator's count
            mem.add_row(r.label, "host", "", _bytes(m.host_rss_peak_bytes), "", "", "")
    return mem, notes


def _max(stats: SeriesStats | None) -> float | None:
    return None if stats is None else stats.max


def _placement_table(runs: list[RunSummary]) -> Any:
    columns = ("worker", "ops per device", "CPU fallbacks", "top fallback op types")
    place = _table("Placement of the training step", columns, columns)
    for r in runs:
        p = r.placement
        if p is not None:
            per_device = ", ".join(f"{d.split('device:')[-1]}: {n}" for d, n in sorted(p.ops_per_device.items()))
            top = ", ".join(f"{t} x{n}" for t, n in p.top_fallbacks[:5]) or "-"
            place.add_row(r.label, per_device or "-", str(p.cpu_fallback_ops), top)
    return place
