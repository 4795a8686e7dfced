"""Summarise a keras-gpu run from its event files: rates, where the time went, peak memory, CPU fallbacks, hints.

Reads what the callbacks wrote (TensorBoard event files and `placement.json`)
under a log directory, for a finished or a running job, and returns plain,
JSON-serialisable data. `keras-gpu report` renders it as tables.

Means are weighted by time: a rate's mean is the mean over the windows
weighted by each window's wall time (so samples/s is samples over seconds),
a steady rate's mean is :func:`keras_gpu.meters.throughput.steady_rate` over the
epochs (the figure of `ThroughputLogger`'s end-of-fit line), and a step-time
part's mean is weighted by the steps each trace covered.
Every hint names the measurement it follows from.
"""

from __future__ import annotations

import json
import os
import re
import statistics
from collections import Counter
from collections.abc import Iterator
from typing import Any

from keras_gpu.meters import step_time as steptime
from keras_gpu.output import tags as _tags
from keras_gpu.meters.cluster_view import straggler_over, straggler_sentence
from keras_gpu.meters.throughput import steady_rate

__all__ = ["find_runs", "read_scalars", "read_texts", "summarize", "uncounted_allocator"]

_WORKER_DIR = re.compile(r"^worker_(\d+)$")
_RATE_TAGS = (
    _tags.SAMPLES_PER_SEC,
    _tags.STEPS_PER_SEC,
    _tags.SAMPLES_PER_SEC_PER_REPLICA,
    _tags.TFLOPS_PER_SEC,
    _tags.MFU,
)
_STEADY_TAGS = (_tags.STEADY_SAMPLES_PER_SEC, _tags.STEADY_STEPS_PER_SEC)
_TIME_TAGS = (_tags.EPOCH_SEC, _tags.TRAIN_SEC, _tags.FIRST_STEP_SEC, _tags.VALIDATION_SEC, _tags.OTHER_EPOCH_SEC)
_ALLOC_TAGS = (_tags.ALLOC_CURRENT, _tags.ALLOC_PEAK, _tags.ALLOC_RUN_PEAK)
_GPU_TAGS = tuple(t for t in _tags.TAGS if t.pattern.startswith("gpu/{gpu}/"))
_STEP_PARTS = ("input", "compute", "communication", "other")
#: The first execution of each epoch is worth a hint from this share of the training time on.
FIRST_STEP_SHARE = 0.2
#: A GPU is worth a hint when NVML saw it busy less than this share of the time.
GPU_BUSY_PERCENT = 50.0


def uncounted_allocator(device: str) -> str:
    """Why `device`'s allocator can count no byte for a model that allocates, in a few words.

    Said wherever such an allocator would otherwise show "0 B": the end-of-fit
    line of `MemoryLogger` and `keras-gpu report`.
    """
    if device.upper().startswith("CPU"):
        return "TensorFlow's CPU allocator statistics leave small tensors out; the host RSS is this process's memory"
    return "the backend reported no allocation on this device"


def find_runs(log_dir: str) -> list[str]:
    """Run directories (relative to `log_dir`) that hold event files, sorted."""
    if not os.path.isdir(log_dir):
        raise FileNotFoundError(f"No such log directory: {log_dir!r}. Pass the `log_dir` given to keras_gpu.callbacks().")
    runs = []
    for root, _dirs, files in os.walk(log_dir):
        if any(".tfevents." in f for f in files):
            runs.append(os.path.relpath(root, log_dir))
    return sorted(runs, key=lambda r: (r.count(os.sep), r))


def _records(path: str) -> Iterator[bytes]:
    """The records of one event file, read with TensorBoard's own TensorFlow-free reader.

    TensorBoard's `EventFileLoader` imports TensorFlow whenever it is
    installed (seconds, hundreds of MB, and its log banner); its stub reader
    reads the same TFRecord framing, CRCs included, in plain Python. A
    truncated last record (a running job) ends the file.
    """
    from tensorboard.compat.tensorflow_stub import errors
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import PyRecordReader_New

    reader = PyRecordReader_New(path.encode())
    try:
        while True:
            try:
                reader.GetNext()
            except (errors.OutOfRangeError, errors.DataLossError):
                return
            yield reader.record()
    finally:
        reader.file_handle.close()


def _events(run_path: str) -> Iterator[Any]:
    from tensorboard.compat.proto import event_pb2

    for name in sorted(f for f in os.listdir(run_path) if ".tfevents." in f):
        try:
            for record in _records(os.path.join(run_path, name)):
                yield event_pb2.Event.FromString(record)
        except Exception:  # noqa: BLE001 - an unreadable file in a running job: keep what was read
            continue


def read_scalars(run_path: str) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in a run directory as `tag -> [(step, value), ...]`, in file order."""
    return _read(run_path)[0]


def read_texts(run_path: str) -> dict[str, list[tuple[int, str]]]:
    """Every text summary in a run directory as `tag -> [(step, text), ...]`, in file order."""
    return _read(run_path)[1]


def _read(run_path: str) -> tuple[dict[str, list[tuple[int, float]]], dict[str, list[tuple[int, str]]]]:
    """The scalars and the text summaries of a run directory, in one pass over its event files."""
    from tensorboard.util import tensor_util

    scalars: dict[str, list[tuple[int, float]]] = {}
    texts: dict[str, list[tuple[int, str]]] = {}
    for event in _events(run_path):
        if not event.HasField("summary"):
            continue
        for value in event.summary.value:
            if value.HasField("tensor"):
                if value.tensor.string_val:  # strings: a text summary's Markdown, or another plugin's data
                    if value.metadata.plugin_data.plugin_name == "text" and len(value.tensor.string_val) == 1:
                        text = value.tensor.string_val[0].decode("utf-8", "replace")
                        texts.setdefault(value.tag, []).append((int(event.step), text))
                    continue
                arr = tensor_util.make_ndarray(value.tensor)
                if arr.shape != () or arr.dtype.kind not in "fiub":
                    continue
                number = float(arr)
            elif value.HasField("simple_value"):
                number = float(value.simple_value)
            else:
                continue
            scalars.setdefault(value.tag, []).append((int(event.step), number))
    return scalars, texts


def _stats(points: list[tuple[int, float]]) -> dict[str, float]:
    values = [v for _, v in points]
    return {
        "mean": statistics.fmean(values),
        "median": statistics.median(values),
        "max": max(values),
        "last": values[-1],
        "points": len(values),
    }


def _short(tag: _tags.Tag) -> str:
    return tag.pattern.split("/", 1)[1]


def _rates(scalars: dict[str, list[tuple[int, float]]]) -> dict[str, dict[str, float]]:
    """Statistics of the per-window rates; `mean` is weighted by each window's wall time.

    A window's time is its steps (the global-step axis advances by them, from
    0 for the first window) over its steps/s. Steady-state rates, one point
    per epoch, have their `mean` from :func:`keras_gpu.meters.throughput.steady_rate`,
    each epoch weighted by its steady seconds (`time/train_sec -
    time/first_step_sec`, logged at the same step).
    """
    seconds: dict[int, float] = {}
    prev = 0
    for step, rate in scalars.get(_tags.STEPS_PER_SEC.name(), []):
        if rate > 0 and step > prev:
            seconds[step] = (step - prev) / rate
        prev = max(prev, step)
    first = dict(scalars.get(_tags.FIRST_STEP_SEC.name(), []))
    steady = {step: train - first[step] for step, train in scalars.get(_tags.TRAIN_SEC.name(), []) if step in first}
    out = {}
    for tag in _RATE_TAGS + _STEADY_TAGS:
        points = scalars.get(tag.name())
        if not points:
            continue
        stats = _stats(points)
        weights = [seconds.get(step) for step, _ in points]
        if tag in _RATE_TAGS and all(w is not None for w in weights) and sum(weights) > 0:
            stats["mean"] = sum(w * v for w, (_, v) in zip(weights, points)) / sum(weights)
            stats["seconds"] = sum(weights)
        elif tag in _STEADY_TAGS and all(step in steady for step, _ in points):
            stats["mean"] = steady_rate((v, steady[step]) for step, v in points) or stats["mean"]
            stats["seconds"] = sum(steady[step] for step, _ in points)
        out[_short(tag)] = stats
    return out


def _epoch_times(scalars: dict[str, list[tuple[int, float]]]) -> dict[str, float] | None:
    """Totals of the per-epoch `time/` tags in seconds, and the number of epochs."""
    epochs = scalars.get(_tags.EPOCH_SEC.name())
    if not epochs:
        return None
    out = {"epochs": len(epochs)}
    for tag in _TIME_TAGS:
        out[_short(tag)] = sum(v for _, v in scalars.get(tag.name(), []))
    return out


def _replica_order(label: str) -> tuple[int, str]:
    index, _, rest = label.partition("_")
    return (int(index) if index.isdigit() else 0, rest)


def _input_stage(
    texts: dict[str, list[tuple[int, str]]], weights: dict[int, float]
) -> steptime.InputStage | None:
    """The input stage the traces name for the most traced steps, with its mean time per batch over them."""
    named: dict[str, list[tuple[float, steptime.InputStage]]] = {}
    for step, text in texts.get(_tags.STEP_INPUT_STAGE.name(), []):
        stage = steptime.read_input_stage_markdown(text)
        if stage is not None:
            named.setdefault(stage.name, []).append((weights.get(step, 1.0), stage))
    if not named:
        return None
    found = max(named.values(), key=lambda traces: sum(w for w, _ in traces))
    total = sum(w for w, _ in found)
    return steptime.InputStage(found[-1][1].name, found[-1][1].path, sum(w * s.sec_per_step for w, s in found) / total)


def _step_time(
    scalars: dict[str, list[tuple[int, float]]], texts: dict[str, list[tuple[int, str]]] | None = None
) -> dict[str, Any] | None:
    """The step-time breakdown over every trace, each weighted by the steps it covered.

    The slowest input stage is the one the traces name for the most steps
    (`step_time/input_stage`), with its mean time per batch over those traces.
    """
    points = scalars.get(_tags.STEP_SEC.name())
    if not points:
        return None
    counts = dict(scalars.get(_tags.STEP_TRACED_STEPS.name(), []))
    weights = {s: counts.get(s, 1.0) for s, _ in points}
    total = sum(weights.values())

    def mean(tag: str) -> float:
        values = dict(scalars.get(tag, []))
        return sum(w * values.get(s, 0.0) for s, w in weights.items()) / total

    labels = sorted(
        {fields["replica"] for t in scalars if (fields := _tags.REPLICA_COMPUTE_SEC.match(t))}, key=_replica_order
    )
    step = steptime.StepTime(
        steps=int(total),
        step_sec=mean(_tags.STEP_SEC.name()),
        input_sec=mean(_tags.STEP_INPUT_SEC.name()),
        compute_sec=mean(_tags.STEP_COMPUTE_SEC.name()),
        communication_sec=mean(_tags.STEP_COMMUNICATION_SEC.name()),
        other_sec=mean(_tags.STEP_OTHER_SEC.name()),
        replicas=tuple(
            steptime.ReplicaTime(
                mean(_tags.REPLICA_COMPUTE_SEC.name(replica=label)),
                mean(_tags.REPLICA_COMMUNICATION_SEC.name(replica=label)),
            )
            for label in labels
        ),
        source="report",
        input_stage=_input_stage(texts or {}, weights),
    )
    out = step.as_dict()
    out["traces"] = len(points)
    out["shares"] = {part: step.share(part) for part in _STEP_PARTS}
    out["replica_labels"] = labels
    return out


def _cluster(scalars: dict[str, list[tuple[int, float]]]) -> dict[str, Any] | None:
    """The chief's cluster view over every gather: the straggler, if one is clear."""
    slowest = scalars.get(_tags.CLUSTER_SLOWEST_WORKER.name())
    imbalance = dict(scalars.get(_tags.CLUSTER_IMBALANCE.name(), []))
    if not slowest:
        return None
    gathers = [(int(worker), imbalance[step]) for step, worker in slowest if imbalance.get(step) is not None]
    straggler, ratio = straggler_over(gathers)
    reporting = scalars.get(_tags.CLUSTER_WORKERS_REPORTING.name(), [])
    out: dict[str, Any] = {
        "gathers": len(gathers),
        "straggler": straggler,
        "imbalance": ratio,
        "workers_reporting": reporting[-1][1] if reporting else None,
    }
    for part in ("busy", "input", "communication"):
        out[part] = {
            stat: scalars[f"cluster/{part}_sec/{stat}"][-1][1]
            for stat in ("min", "median", "max")
            if f"cluster/{part}_sec/{stat}" in scalars
        }
    out["sentence"] = straggler_sentence(straggler, out["imbalance"])
    return out


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


def _memory(scalars: dict[str, list[tuple[int, float]]]) -> dict[str, Any]:
    allocator: dict[str, float] = {}
    gpus: dict[str, dict[str, dict[str, float]]] = {}
    for tag, points in scalars.items():
        if (found := _tags.match(tag, _ALLOC_TAGS)) is not None:
            device = found[1]["device"]
            allocator[device] = max(allocator.get(device, 0.0), max(v for _, v in points))
        elif (found := _tags.match(tag, _GPU_TAGS)) is not None:
            gpus.setdefault(found[1]["gpu"], {})[tag.split("/", 2)[2]] = _stats(points)
    host = scalars.get(_tags.HOST_PEAK_RSS.name()) or scalars.get(_tags.HOST_RSS.name())
    return {
        "allocator_peak_bytes": {device: peak for device, peak in allocator.items() if peak > 0},
        "allocator_uncounted": {device: uncounted_allocator(device) for device, peak in allocator.items() if peak <= 0},
        "gpus": gpus,
        "host_rss_peak_bytes": max(v for _, v in host) if host else None,
    }


def _summarize_run(log_dir: str, run: str) -> dict[str, Any]:
    path = os.path.join(log_dir, run)
    scalars, texts = _read(path)
    worker, label = _worker_of(run)
    placement_tags = [t for t in _tags.TAGS if t.pattern.startswith("placement/") and not t.text]
    return {
        "run": run,
        "worker": worker,
        "label": label,
        "steps": max((s for pts in scalars.values() for s, _ in pts), default=0),
        "keras_gpu_tags": sorted(t for t in scalars if _tags.match(t) is not None),
        "placement_counts": {_short(t): scalars[t.name()][-1][1] for t in placement_tags if t.name() in scalars},
        "throughput": _rates(scalars),
        "time": _epoch_times(scalars),
        "step_time": _step_time(scalars, texts),
        "cluster": _cluster(scalars),
        "memory": _memory(scalars),
        "placement": _placement(path),
    }


def _replica_names(step: dict[str, Any]) -> list[str]:
    names = []
    for label in step["replica_labels"]:
        index, _, device = label.partition("_")
        names.append(f"replica {index} ({device.replace('_', ':')})" if device else f"replica {index}")
    return names


def _hints(runs: list[dict[str, Any]]) -> list[str]:
    hints = []
    for r in runs:
        step = r.get("step_time")
        if step:
            stage = step.get("input_stage")
            measured = steptime.StepTime(
                steps=step["steps"],
                step_sec=step["step_sec"],
                input_sec=step["input_sec"],
                compute_sec=step["compute_sec"],
                communication_sec=step["communication_sec"],
                other_sec=step["other_sec"],
                replicas=tuple(steptime.ReplicaTime(**x) for x in step["replicas"]),
                source=step["source"],
                input_stage=steptime.InputStage(**stage) if stage else None,
            )
            for hint in steptime.verdict(measured, _replica_names(step)):
                hints.append(f"{r['label']}: {hint} (measured on {step['steps']} traced steps).")
        times = r.get("time")
        if times and times["train_sec"] > 0 and times["first_step_sec"] / times["train_sec"] >= FIRST_STEP_SHARE:
            hints.append(
                f"{r['label']}: the first execution of each epoch took {times['first_step_sec']:.1f} s in all, "
                f"{times['first_step_sec'] / times['train_sec']:.0%} of the training time (time/first_step_sec): "
                "tracing, warm-up and starting the input iterator at every epoch."
            )
        for gpu, metrics in r["memory"]["gpus"].items():
            util = metrics.get("utilization_percent")
            if util and util["mean"] < GPU_BUSY_PERCENT:
                where = " See step_time/ for where the rest of the step goes." if not step else ""
                hints.append(
                    f"{r['label']}: NVML saw GPU {gpu} running a kernel only {util['mean']:.0f}% of the time on "
                    f"average.{where}"
                )
        placement = r.get("placement")
        if placement and placement["cpu_fallback_ops"]:
            top = ", ".join(f"{t} x{n}" for t, n in placement["top_fallbacks"][:3])
            hints.append(
                f"{r['label']}: {placement['cpu_fallback_ops']} op(s) of the training step ran on the CPU while the "
                f"replicas sit on GPUs ({top}); see placement/cpu_fallbacks in TensorBoard."
            )
    return hints


def summarize(log_dir: str) -> dict[str, Any]:
    """Summarise every run under `log_dir`.

    Returns:
        `{"log_dir", "runs": [...], "hints"}`: per run its worker,
        time-weighted rate statistics per `throughput/*` tag (`mean`,
        `median`, `max`, `last`, `points`, and `seconds` covered), totals of
        the per-epoch `time/` tags, the step-time breakdown over all traces
        (seconds per step, shares, per replica, and the slowest input stage
        as `input_stage`: `name`, `path`, `sec_per_step`), peak allocator bytes per
        device (an allocator that counted no byte is under
        `allocator_uncounted`, with the reason), NVML statistics per GPU,
        peak host RSS, and the placement
        digest when `placement.json` is present. Hints follow from these
        measurements only.
    """
    runs = [_summarize_run(log_dir, run) for run in find_runs(log_dir)]
    memory = ("allocator_peak_bytes", "allocator_uncounted", "gpus", "host_rss_peak_bytes")
    runs = [
        r
        for r in runs
        if r["throughput"] or r["time"] or r["step_time"] or r["cluster"] or r["placement"]
        or any(r["memory"][k] for k in memory)
    ]
    cluster = next((r["cluster"] for r in runs if r.get("cluster")), None)
    hints = _hints(runs)
    if cluster is not None:
        hints.insert(0, f"cluster: {cluster['sentence']} (from {cluster['gathers']} gather(s) of every worker's breakdown).")
    return {"log_dir": log_dir, "runs": runs, "cluster": cluster, "hints": hints}
