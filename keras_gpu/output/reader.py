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
from collections.abc import Callable, Iterator
from typing import Any

from keras_gpu.output import tag_records as _records_of
from keras_gpu.output.report_hints import (
    FIRST_STEP_SHARE,
    GPU_BUSY_PERCENT,
    report_hints,
)
from keras_gpu.output.report_records import PlacementDigest, Report, RunSummary
from keras_gpu.output.runs_shown import run_order
from keras_gpu.output.tag_records import Scalars, Texts, uncounted_allocator

__all__ = [
    "FIRST_STEP_SHARE",
    "GPU_BUSY_PERCENT",
    "Visit",
    "find_runs",
    "holds_keras_gpu_data",
    "read_report",
    "read_run",
    "read_scalars",
    "read_texts",
    "summarize",
    "uncounted_allocator",
    "worker_of",
]

_WORKER_DIR = re.compile(r"^worker_(\d+)$")
_DT_FLOAT, _DT_DOUBLE = 1, 2  # tensorboard.compat.proto.types_pb2's DT_FLOAT and DT_DOUBLE

#: `visit(run, scalars, texts, cut)`: what a caller of `read_report` is given of each run as it is read; `cut`
#: names the run's event files whose last record is incomplete (a job still writing, or a file cut short).
Visit = Callable[[str, Scalars, Texts, tuple[str, ...]], None]


def find_runs(log_dir: str) -> list[str]:
    """Run directories (relative to `log_dir`) that hold event files, in
    `keras_gpu.output.runs_shown.run_order` (`worker_2/train` before `worker_10/train`)."""
    if not os.path.isdir(log_dir):
        raise FileNotFoundError(f"No such log directory: {log_dir!r}. Pass the `log_dir` given to keras_gpu.callbacks().")
    runs = []
    for root, _dirs, files in os.walk(log_dir):
        if any(".tfevents." in f for f in files):
            runs.append(os.path.relpath(root, log_dir))
    return sorted(runs, key=run_order)


def _records(path: str, cut: list[str] | None = None) -> Iterator[bytes]:
    """The records of one event file, read with TensorBoard's own TensorFlow-free reader.

    TensorBoard's `EventFileLoader` imports TensorFlow whenever it is
    installed (seconds, hundreds of MB, and its log banner); its stub reader
    reads the same TFRecord framing, CRCs included, in plain Python. A
    truncated last record (a running job) ends the file; its name is added to
    `cut` where given.
    """
    from tensorboard.compat.tensorflow_stub import errors
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import PyRecordReader_New

    reader = PyRecordReader_New(path.encode())
    try:
        while True:
            try:
                reader.GetNext()
            except errors.OutOfRangeError:
                return
            except errors.DataLossError:
                if cut is not None:
                    cut.append(os.path.basename(path))
                return
            yield reader.record()
    finally:
        reader.file_handle.close()


def _events(run_path: str, cut: list[str] | None = None) -> Iterator[Any]:
    from tensorboard.compat.proto import event_pb2

    for name in sorted(f for f in os.listdir(run_path) if ".tfevents." in f):
        try:
            for record in _records(os.path.join(run_path, name), cut):
                yield event_pb2.Event.FromString(record)
        except Exception:  # noqa: BLE001, S112 - an unreadable file in a running job: keep what was read
            continue


def read_scalars(run_path: str) -> Scalars:
    """Every scalar in a run directory as `tag -> [(step, value), ...]`, in file order."""
    return _read(run_path)[0]


def read_texts(run_path: str) -> Texts:
    """Every text summary in a run directory as `tag -> [(step, text), ...]`, in file order."""
    return _read(run_path)[1]


def _read(run_path: str, cut: list[str] | None = None) -> tuple[Scalars, Texts]:
    """The scalars and the text summaries of a run directory, in one pass over its event files (`cut`: see
    `_records`)."""
    from tensorboard.util import tensor_util

    scalars: Scalars = {}
    texts: Texts = {}
    for event in _events(run_path, cut):
        if not event.HasField("summary"):
            continue
        for value in event.summary.value:
            if value.HasField("tensor"):
                if value.tensor.string_val:  # strings: a text summary's Markdown, or another plugin's data
                    if value.metadata.plugin_data.plugin_name == "text" and len(value.tensor.string_val) == 1:
                        text = value.tensor.string_val[0].decode("utf-8", "replace")
                        texts.setdefault(value.tag, []).append((int(event.step), text))
                    continue
                number = _scalar(value.tensor, tensor_util)
                if number is None:
                    continue
            elif value.HasField("simple_value"):
                number = float(value.simple_value)
            else:
                continue
            scalars.setdefault(value.tag, []).append((int(event.step), number))
    return scalars, texts


def _scalar(tensor: Any, tensor_util: Any) -> float | None:
    """A scalar tensor's value (`None` for any other tensor).

    The callbacks' scalars (one `float_val` of a float32 tensor of no shape)
    are read straight from the field, the same value `make_ndarray` gives in
    a fraction of its time; any other form goes through `make_ndarray`.
    """
    if not tensor.tensor_shape.dim:
        if tensor.dtype == _DT_FLOAT and len(tensor.float_val) == 1:
            return tensor.float_val[0]
        if tensor.dtype == _DT_DOUBLE and len(tensor.double_val) == 1:
            return tensor.double_val[0]
    arr = tensor_util.make_ndarray(tensor)
    if arr.shape != () or arr.dtype.kind not in "fiub":
        return None
    return float(arr)


def holds_keras_gpu_data(event_file: str, records: int = 200) -> bool:
    """Whether one of the first `records` records of `event_file` is a keras-gpu tag (or keras-gpu's layout).

    A bounded read, for telling a keras-gpu run from another program's: the
    callbacks write their custom-scalars layout and first points at the start
    of a run. An unreadable file holds none.
    """
    from tensorboard.compat.proto import event_pb2
    from tensorboard.plugins.custom_scalar import metadata

    from keras_gpu.output import tags as _tags

    try:
        for i, record in enumerate(_records(event_file)):
            if i >= records:
                return False
            event = event_pb2.Event.FromString(record)
            for value in event.summary.value:
                layout = value.tag == metadata.CONFIG_SUMMARY_TAG and value.tensor.string_val
                if (layout and b"keras-gpu: " in value.tensor.string_val[0]) or _tags.match(value.tag) is not None:
                    return True
    except Exception:  # noqa: BLE001 - a file being written or damaged: not known to be keras-gpu's
        return False
    return False


def worker_of(run: str) -> tuple[int | None, str]:
    """`(worker index, label)` of a run directory relative to its log directory: `(0, "chief")` for `train`,
    `(1, "worker 1")` for `worker_1/train`, `(None, run)` for any other."""
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


def read_run(log_dir: str, run: str, visit: Visit | None = None) -> RunSummary:
    """The records of one run directory (`run`, relative to `log_dir`); `visit` is given its series first."""
    path = os.path.join(log_dir, run)
    cut: list[str] = []
    scalars, texts = _read(path, cut)
    if visit is not None:
        visit(run, scalars, texts, tuple(cut))
    worker, label = worker_of(run)
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


def read_report(log_dir: str, visit: Visit | None = None) -> Report:
    """The records of every run under `log_dir` that holds a measurement, and the hints.

    Per run (`RunSummary`): its
    worker, time-weighted rate statistics per `throughput/*` tag, totals of
    the per-epoch `time/` tags, the step-time breakdown over all traces
    (seconds per step, shares, per replica, and the slowest input stage),
    the cluster view, peak allocator bytes per device (an allocator that
    counted no byte is under `allocator_uncounted`, with the reason), NVML
    statistics per GPU, peak host RSS, and the placement digest when
    `placement.json` is present. Hints follow from these measurements only.

    `visit(run, scalars, texts, cut)`, where given, is called with each run
    directory's series as they are read (every run, with data or not; `cut`:
    its event files whose last record is incomplete), so that a caller
    drawing them reads the event files once.

    Raises:
        FileNotFoundError: `log_dir` is no directory.
    """
    runs = [r for r in (read_run(log_dir, run, visit) for run in find_runs(log_dir)) if r.has_data]
    cluster = next((r.cluster for r in runs if r.cluster is not None), None)
    return Report(log_dir=log_dir, runs=runs, cluster=cluster, hints=report_hints(runs, cluster))


def summarize(log_dir: str) -> dict[str, Any]:
    """`read_report` as plain, JSON-serialisable data: the runs' part of `keras-gpu report --json`.

    All of it, with the scale and tune studies and `null` for what was not
    measured, is `keras_gpu.output.log_dir.report_json`.

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
