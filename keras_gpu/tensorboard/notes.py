"""What the keras-gpu tab says is missing: one sentence per gap in a log directory's data, by section of the tab.

A run still writing, a worker with no step yet, an event file cut short, a
part never measured: the tab shows what the log directory holds and says,
under each section, what it lacks and why, from the same records the
numbers come from (`keras_gpu.output.log_dir.read_log_dir` and the tab's
series, `keras_gpu.tensorboard.series.TabSeries`).

Examples:
    >>> from keras_gpu.output.report_records import Throughput
    >>> mfu_missing(Throughput(), gpu=False) is None  # no rate: said for the run
    True
"""

from __future__ import annotations

import os
from typing import Any

from keras_gpu.output.log_dir import LogDirReport
from keras_gpu.output.report_records import RunSummary, Throughput
from keras_gpu.tensorboard.series import TabSeries

__all__ = ["SECTIONS", "mfu_missing", "notes", "per_run"]

#: The tab's sections, in page order; `notes` gives each a list of sentences.
SECTIONS = ("runs", "headline", "time", "kernels", "cluster", "memory", "hints")


def mfu_missing(throughput: Throughput, gpu: bool) -> str | None:
    """Why a run that logged rates has no MFU (`None`: it has one, or logged no rate).

    Args:
        throughput: The run's rates.
        gpu: Whether the run logged a GPU (NVML or an allocator on one).
    """
    if not throughput or throughput.mfu is not None or throughput.steady_mfu is not None:
        return None
    if throughput.tflops_per_sec is None:
        return (
            "no TFLOP/s nor MFU: the model's FLOPs per sample were not counted (the fit's log says why; "
            "pass flops_per_sample= to keras_gpu.callbacks())"
        )
    if not gpu:
        return (
            "no MFU: it needs the devices' peak FLOP/s, which keras-gpu knows for NVIDIA GPUs, and this run "
            "ran on none (pass peak_flops=, one replica device's peak FLOP/s, to keras_gpu.callbacks())"
        )
    return "no MFU: keras-gpu knows no peak FLOP/s for this GPU (pass peak_flops= to keras_gpu.callbacks())"


def per_run(said: list[tuple[str, str]], named: int = 3) -> list[str]:
    """`"label: sentence."` per `(label, sentence)`, the runs that share a sentence in one line (`named` labels at
    most, then how many more), in the order each sentence first comes: a job of many workers gets a few lines.

    Examples:
        >>> per_run([("chief", "no MFU"), ("worker 1", "no MFU"), ("worker 2", "no step")])
        ['chief and worker 1: no MFU.', 'worker 2: no step.']
        >>> per_run([(f"worker {k}", "no MFU") for k in range(6)])
        ['worker 0, worker 1, worker 2 and 3 more runs: no MFU.']
    """
    runs: dict[str, list[str]] = {}
    for label, sentence in said:
        runs.setdefault(sentence, []).append(label)
    out = []
    for sentence, labels in runs.items():
        if len(labels) > named:
            who = f"{', '.join(labels[:named])} and {len(labels) - named:,} more runs"
        else:
            who = labels[0] if len(labels) == 1 else f"{', '.join(labels[:-1])} and {labels[-1]}"
        out.append(f"{who}: {sentence}.")
    return out


def _on_gpu(r: RunSummary) -> bool:
    m = r.memory
    devices = [*m.allocator_peak_bytes, *m.allocator_uncounted]
    return bool(m.gpus) or any(d.upper().startswith("GPU") for d in devices)


def _run_notes(data: LogDirReport, series: TabSeries) -> list[str]:
    """Runs without data yet, event files cut short, workers with no step."""
    out = []
    shown = {r.run for r in data.report.runs} if data.report is not None else set()
    for run, cut in series.cut.items():
        for name in cut:
            out.append(
                f"{run}: the last record of {name} is incomplete (a run still writing, or a file cut short): "
                "shown is what comes before it."
            )
        if run not in shown and not series.keras_gpu.get(run) and os.path.basename(run) == "train":
            out.append(f"{run}: no keras-gpu data yet (a run just started, or one that logged nothing).")
    runs = data.report.runs if data.report is not None else []
    return out + per_run(
        [(r.label, "no throughput window yet: samples/s, TFLOP/s and MFU are missing") for r in runs if not r.throughput]
    )


def _time_notes(runs: list[RunSummary]) -> tuple[list[str], list[str]]:
    """`(step-time notes, kernel notes)`."""
    time: list[str] = []
    if runs and all(r.step_time is None for r in runs):
        time.append(
            "no step-time breakdown: no profiler trace nor step-probe window was logged (StepTimeLogger traces "
            "every profile_every_s seconds; a fit shorter than that, or on PyTorch, has none)."
        )
    time += per_run([
        (r.label, f"{r.step_time.step.unmeasured}: compute, communication, transfer and other are not measured")
        for r in runs if r.step_time is not None and r.step_time.step.unmeasured
    ])
    kernels = [] if any(r.step_time is not None and r.step_time.step.kernel_classes for r in runs) else [
        "no kernel classes: they come from a profiler trace with GPU activity, and this log dir holds none."
    ]
    return time, kernels


def _cluster_notes(runs: list[RunSummary], cluster: dict[str, Any] | None) -> list[str]:
    workers = [r for r in runs if r.worker is not None]
    if cluster is None:
        if len(workers) > 1:
            return ["no cluster view: the chief logged no gather of the workers' breakdowns (StepTimeLogger on "
                    "TensorFlow or JAX)."]
        return ["a single worker: no cluster view."]
    if cluster.get("matrix") is None and len(workers) > 1:
        return ["the workers' runs hold no step-time breakdown at the chief's gathers, so the workers x gathers "
                "matrix is missing: shown is the spread across workers at each gather and the slowest workers over "
                "the gathers, from the chief's summary."]
    if cluster.get("matrix") is None:
        return ["only the chief wrote a run, so the workers x gathers matrix is missing: shown is the spread "
                "across workers at each gather and the slowest workers over the gathers, from the chief's summary "
                "(keras_gpu.callbacks(per_worker_runs=True) keeps every worker's run)."]
    return []


def _memory_notes(runs: list[RunSummary], series: TabSeries) -> list[str]:
    said = []
    for r in runs:
        if not series.runs.get(r.run, {}).get("memory"):
            said.append((r.label, "no memory series (MemoryLogger logged no window)"))
        elif not r.memory.gpus and _on_gpu(r):
            said.append((r.label, "no NVML readings (the driver's library was not found, or it lists no process)"))
    return per_run(said)


def notes(data: LogDirReport, series: TabSeries) -> dict[str, list[str]]:
    """Per section of the tab (`SECTIONS`), the sentences saying what its data lacks, in page order."""
    runs = data.report.runs if data.report is not None else []
    time, kernels = _time_notes(runs)
    headline = per_run([(r.label, why) for r in runs if (why := mfu_missing(r.throughput, _on_gpu(r)))])
    return {
        "runs": _run_notes(data, series),
        "headline": headline,
        "time": time,
        "kernels": kernels,
        "cluster": _cluster_notes(runs, series.cluster()),
        "memory": _memory_notes(runs, series),
        "hints": [] if data.report is None or data.report.hints else ["no hint: nothing measured called for one."],
    }
