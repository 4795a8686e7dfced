"""Summarise a keras-gpu run from its event files: rates, where the time went, peak memory, CPU fallbacks, hints.

Reads what the callbacks wrote (TensorBoard event files and `placement.json`)
under a log directory, for a finished or a running job, without TensorFlow.
`read_report` returns the records of
`keras_gpu.output.report_records` (built from the tags by
`keras_gpu.output.tag_records`); `summarize` returns the same as
plain, JSON-serialisable data. `keras-gpu report` renders it as tables.

Means are weighted by time: a rate's mean is the mean over the windows
weighted by each window's wall time (so samples/s is samples over seconds),
a steady rate's mean is `keras_gpu.meters.throughput_records.steady_rate` over the
epochs (the figure of `ThroughputLogger`'s end-of-fit line), and a step-time
part's mean is weighted by the steps each trace covered.
Every hint names the measurement it follows from
(`keras_gpu.output.report_hints`).
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

from keras_gpu.output import tag_records as _records_of
from keras_gpu.output.report_hints import (
    FIRST_STEP_SHARE,
    GPU_BUSY_PERCENT,
    report_hints,
)
from keras_gpu.output.report_records import PlacementDigest, Report, RunSummary
from keras_gpu.output.tag_records import Scalars, Texts, uncounted_allocator

__all__ = [
    "FIRST_STEP_SHARE",
    "GPU_BUSY_PERCENT",
    "find_runs",
    "read_report",
    "read_run",
    "read_scalars",
    "read_texts",
    "summarize",
    "uncounted_allocator",
]

_WORKER_DIR = re.compile(r"^worker_(\d+)$")


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
        except Exception:  # noqa: BLE001, S112 - an unreadable file in a running job: keep what was read
            continue


def read_scalars(run_path: str) -> Scalars:
    """Every scalar in a run directory as `tag -> [(step, value), ...]`, in file order."""
    return _read(run_path)[0]


def read_texts(run_path: str) -> Texts:
    """Every text summary in a run directory as `tag -> [(step, text), ...]`, in file order."""
    return _read(run_path)[1]


def _read(run_path: str) -> tuple[Scalars, Texts]:
    """The scalars and the text summaries of a run directory, in one pass over its event files."""
    from tensorboard.util import tensor_util

    scalars: Scalars = {}
    texts: Texts = {}
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


def _worker_of(run: str) -> tuple[int | None, str]:
    parts = run.split(os.sep)
    if parts[0] == "train" or (len(parts) == 1 and parts[0] == "."):
        return 0, "chief"
    match = _WORKER_DIR.match(parts[0])
    if match:
        return int(match.group(1)), f"worker {match.group(1)}"
    return None, run


def _placement(run_path: str) -> PlacementDigest | None:
    """The digest of the run's `placement.json`; `None` where there is none, or it cannot be read."""
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
    return PlacementDigest(
        cpu_fallback_ops=int(data.get("cpu_fallback_count", len(fallbacks))),
        top_fallbacks=by_type.most_common(10),
        ops_per_device=data.get("ops_per_device", {}),
        copy_ops=data.get("copy_ops"),
    )


def read_run(log_dir: str, run: str) -> RunSummary:
    """The records of one run directory (`run`, relative to `log_dir`)."""
    path = os.path.join(log_dir, run)
    scalars, texts = _read(path)
    worker, label = _worker_of(run)
    return RunSummary(
        run=run,
        worker=worker,
        label=label,
        steps=_records_of.last_step(scalars),
        keras_gpu_tags=_records_of.keras_gpu_tags(scalars),
        placement_counts=_records_of.read_placement_counts(scalars),
        throughput=_records_of.read_throughput(scalars),
        time=_records_of.read_epoch_times(scalars),
        step_time=_records_of.read_step_time(scalars, texts),
        cluster=_records_of.read_cluster(scalars, texts),
        memory=_records_of.read_memory(scalars, texts),
        placement=_placement(path),
    )


def read_report(log_dir: str) -> Report:
    """The records of every run under `log_dir` that holds a measurement, and the hints.

    Per run (`RunSummary`): its
    worker, time-weighted rate statistics per `throughput/*` tag, totals of
    the per-epoch `time/` tags, the step-time breakdown over all traces
    (seconds per step, shares, per replica, and the slowest input stage),
    the cluster view, peak allocator bytes per device (an allocator that
    counted no byte is under `allocator_uncounted`, with the reason), NVML
    statistics per GPU, peak host RSS, and the placement digest when
    `placement.json` is present. Hints follow from these measurements only.

    Raises:
        FileNotFoundError: `log_dir` is no directory.
    """
    runs = [r for r in (read_run(log_dir, run) for run in find_runs(log_dir)) if r.has_data]
    cluster = next((r.cluster for r in runs if r.cluster is not None), None)
    return Report(log_dir=log_dir, runs=runs, cluster=cluster, hints=report_hints(runs, cluster))


def summarize(log_dir: str) -> dict[str, Any]:
    """`read_report` as plain, JSON-serialisable data: what `keras-gpu report --json` prints.

    Returns:
        `{"log_dir", "runs": [...], "cluster", "hints"}`: per run its worker,
        time-weighted rate statistics per `throughput/*` tag (`mean`,
        `median`, `max`, `last`, `points`, and `seconds` covered), totals of
        the per-epoch `time/` tags, the step-time breakdown over all traces
        (seconds per step, shares, per replica, and the slowest input stage
        as `input_stage`: `name`, `path`, `sec_per_step`), peak allocator bytes per
        device (an allocator that counted no byte is under
        `allocator_uncounted`, with the reason), NVML statistics per GPU,
        peak host RSS, and the placement
        digest when `placement.json` is present; and `cluster`, the chief's
        cluster view (`keras_gpu.output.report_records.ClusterReport.as_dict`:
        the straggler and its part, other stragglers, the slowest workers
        over the fit, the last gather's threshold and spreads, the sentence).
        Hints follow from these measurements only.
    """
    return read_report(log_dir).as_dict()
