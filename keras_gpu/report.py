"""Summarise a keras-gpu run from its event files: throughput per worker, peak memory, CPU fallbacks, hints.

Reads what the callbacks wrote (TensorBoard event files and `placement.json`)
under a log directory, for a finished or a running job, and returns plain,
JSON-serialisable data. `keras-gpu report` renders it as tables.
"""

from __future__ import annotations

import json
import os
import re
import statistics
from collections import Counter
from collections.abc import Iterator
from typing import Any

__all__ = ["find_runs", "read_scalars", "summarize"]

_WORKER_DIR = re.compile(r"^worker_(\d+)$")
_ALLOC = re.compile(r"^memory/allocator/([^/]+)/(current_bytes|peak_bytes|run_peak_bytes)$")
_GPU = re.compile(r"^gpu/(\d+)/([a-z_]+)$")


def find_runs(log_dir: str) -> list[str]:
    """Run directories (relative to `log_dir`) that hold event files, sorted."""
    if not os.path.isdir(log_dir):
        raise FileNotFoundError(f"No such log directory: {log_dir!r}. Pass the `log_dir` given to keras_gpu.callbacks().")
    runs = []
    for root, _dirs, files in os.walk(log_dir):
        if any(".tfevents." in f for f in files):
            runs.append(os.path.relpath(root, log_dir))
    return sorted(runs, key=lambda r: (r.count(os.sep), r))


def _events(run_path: str) -> Iterator[Any]:
    from tensorboard.backend.event_processing import event_file_loader

    for name in sorted(f for f in os.listdir(run_path) if ".tfevents." in f):
        try:
            yield from event_file_loader.EventFileLoader(os.path.join(run_path, name)).Load()
        except Exception:  # noqa: BLE001 - a truncated file in a running job: keep what was read
            continue


def read_scalars(run_path: str) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in a run directory as `tag -> [(step, value), ...]`, in file order."""
    from tensorboard.util import tensor_util

    out: dict[str, list[tuple[int, float]]] = {}
    for event in _events(run_path):
        if not event.HasField("summary"):
            continue
        for value in event.summary.value:
            if value.HasField("tensor"):
                arr = tensor_util.make_ndarray(value.tensor)
                if arr.shape != () or arr.dtype.kind not in "fiub":
                    continue
                number = float(arr)
            elif value.HasField("simple_value"):
                number = float(value.simple_value)
            else:
                continue
            out.setdefault(value.tag, []).append((int(event.step), number))
    return out


def _stats(points: list[tuple[int, float]]) -> dict[str, float]:
    values = [v for _, v in points]
    return {
        "mean": statistics.fmean(values),
        "median": statistics.median(values),
        "max": max(values),
        "later_max": max(values[1:], default=values[0]),
        "last": values[-1],
        "points": len(values),
    }


def _worker_of(run: str) -> tuple[int | None, str]:
    parts = run.split(os.sep)
    if parts[0] == "train" or (len(parts) == 1 and parts[0] == "."):
        return 0, "chief"
    match = _WORKER_DIR.match(parts[0])
    if match:
        return int(match.group(1)), f"worker {match.group(1)}"
    return None, run


def _placement(run_path: str) -> dict[str, Any] | None:
    path = os.path.join(run_path, "placement.json")
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    fallbacks = data.get("cpu_fallbacks") or []
    by_type = Counter(str(op.get("op_type", op.get("type", "?"))) for op in fallbacks if isinstance(op, dict))
    return {
        "cpu_fallback_ops": int(data.get("cpu_fallback_count", len(fallbacks))),
        "top_fallbacks": by_type.most_common(10),
        "ops_per_device": data.get("ops_per_device", {}),
        "copy_ops": data.get("copy_ops"),
    }


def _summarize_run(log_dir: str, run: str) -> dict[str, Any]:
    path = os.path.join(log_dir, run)
    scalars = read_scalars(path)
    worker, label = _worker_of(run)
    throughput = {
        tag.split("/", 1)[1]: _stats(points)
        for tag, points in scalars.items()
        if tag.startswith("throughput/") and tag.count("/") == 1
    }
    allocator: dict[str, dict[str, float]] = {}
    gpus: dict[str, dict[str, dict[str, float]]] = {}
    for tag, points in scalars.items():
        if m := _ALLOC.match(tag):
            allocator.setdefault(m.group(1), {})[m.group(2)] = max(v for _, v in points)
        elif m := _GPU.match(tag):
            gpus.setdefault(m.group(1), {})[m.group(2)] = _stats(points)
    host = scalars.get("memory/host/peak_rss_bytes") or scalars.get("memory/host/rss_bytes")
    return {
        "run": run,
        "worker": worker,
        "label": label,
        "steps": max((s for pts in scalars.values() for s, _ in pts), default=0),
        "throughput": throughput,
        "memory": {
            "allocator_peak_bytes": {d: max(v.values()) for d, v in allocator.items()},
            "gpus": gpus,
            "host_rss_peak_bytes": max(v for _, v in host) if host else None,
        },
        "placement": _placement(path),
    }


def _hints(runs: list[dict[str, Any]]) -> list[str]:
    hints = []
    rates = {r["label"]: r["throughput"]["samples_per_sec"]["median"] for r in runs if "samples_per_sec" in r["throughput"]}
    if len(rates) > 1:
        slowest, fastest = min(rates, key=rates.get), max(rates, key=rates.get)
        gap = 1.0 - rates[slowest] / rates[fastest] if rates[fastest] else 0.0
        if gap > 0.05:
            hints.append(
                f"{slowest} reports {gap:.0%} lower throughput than {fastest}; in synchronous training every "
                "worker waits for the slowest, so check its input pipeline, host load and GPU."
            )
    for r in runs:
        for gpu, metrics in r["memory"]["gpus"].items():
            util = metrics.get("utilization_percent")
            if util and util["mean"] < 50:
                hints.append(
                    f"{r['label']}: GPU {gpu} was busy only {util['mean']:.0f}% of the time on average; the step is "
                    "probably waiting for data or the host. Try `dataset.prefetch(tf.data.AUTOTUNE)`, `.cache()`, "
                    "a larger batch, or `steps_per_execution`."
                )
        placement = r.get("placement")
        if placement and placement["cpu_fallback_ops"]:
            top = ", ".join(f"{t} x{n}" for t, n in placement["top_fallbacks"][:3])
            hints.append(
                f"{r['label']}: {placement['cpu_fallback_ops']} op(s) of the training step ran on the CPU while the "
                f"replicas sit on GPUs ({top}); see placement/cpu_fallbacks in TensorBoard."
            )
        # The first epoch's first step includes tracing, so only later epochs say something about input start-up.
        first = r["throughput"].get("first_step_sec")
        steps = r["throughput"].get("steps_per_sec")
        if first and first["points"] > 1 and steps and steps["median"] > 0:
            later = first["later_max"]
            if later > 100.0 / steps["median"]:
                hints.append(
                    f"{r['label']}: the first step of a later epoch took {later:.1f} s, as long as more than 100 "
                    "steady steps: the input pipeline restarts slowly at each epoch. For in-memory arrays, try a "
                    "`tf.data` pipeline with `.cache()` and `.prefetch(tf.data.AUTOTUNE)`."
                )
    return hints


def summarize(log_dir: str) -> dict[str, Any]:
    """Summarise every run under `log_dir`.

    Returns:
        `{"log_dir", "runs": [...], "slowest_worker", "hints"}`: per run its
        worker, throughput statistics (mean, median, max, last, points) per
        `throughput/*` tag, peak allocator bytes per device, NVML statistics
        per GPU, peak host RSS, and the placement digest when
        `placement.json` is present.
    """
    runs = [_summarize_run(log_dir, run) for run in find_runs(log_dir)]
    memory = ("allocator_peak_bytes", "gpus", "host_rss_peak_bytes")
    runs = [r for r in runs if r["throughput"] or r["placement"] or any(r["memory"][k] for k in memory)]
    timed = [r for r in runs if "samples_per_sec" in r["throughput"]]
    slowest = min(timed, key=lambda r: r["throughput"]["samples_per_sec"]["median"]) if len(timed) > 1 else None
    return {
        "log_dir": log_dir,
        "runs": runs,
        "slowest_worker": None if slowest is None else {
            "label": slowest["label"],
            "samples_per_sec_median": slowest["throughput"]["samples_per_sec"]["median"],
        },
        "hints": _hints(runs),
    }
