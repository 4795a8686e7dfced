"""The scaling study's table as Markdown, and as a TensorBoard run that `keras-gpu report` reads back.

Layout of `--log-dir DIR` (written and read by `keras_gpu.output.study_output`,
as `keras-gpu tune`'s):

* `DIR/scale`: the table as the text summary `scale/table`, and `scale.json` (the rows as
  `keras-gpu scale --json` prints them, which `keras-gpu report` shows);
* `DIR/scale/workers_<w>`: `scale/samples_per_sec`, `scale/speedup`,
  `scale/ideal_speedup` and `scale/efficiency` of the rows with `w` workers,
  at the step of the row's total replica count (one line per worker count;
  the `--cpu` row, which has no replica count of its own, is in the table
  only), each run with the custom-scalars charts of its tags (speed-up
  against ideal).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from keras_gpu.meters.scale_table import ROW_KEYS, ScaleRow
from keras_gpu.output import tags as _tags
from keras_gpu.output.study_output import read_study, study_file, write_study

__all__ = [
    "PART_HEADERS",
    "RATE_HEADERS",
    "ROWS_FILE",
    "SCALE_RUN",
    "format_cell",
    "headers",
    "markdown_table",
    "read_rows",
    "write_log_dir",
]

SCALE_RUN = "scale"
"""The study's run directory under `--log-dir`."""
ROWS_FILE = study_file("scale")
"""The rows, beside the study's event file."""

_HEADERS = (
    ("devices", "devices"), ("device", "device"), ("workers", "workers"), ("replicas", "replicas/worker"),
    ("global_batch", "global batch"), ("per_replica_batch", "batch/replica"), ("samples_per_sec", "samples/s"),
    ("speedup", "speed-up"), ("efficiency", "efficiency"), ("step_sec", "step ms"), ("input_sec", "input ms"),
    ("compute_sec", "compute ms"), ("communication_sec", "comm. ms"), ("update_sec", "update ms"),
    ("device_sec", "device ms"), ("other_sec", "other ms"), ("allreduce_bus_gbps", "all-reduce busbw GB/s"),
    ("cause", "cause"),
)
RATE_HEADERS = (
    ("devices", "devices"), ("workers_x_replicas", "workers x replicas"), ("global_batch", "global batch"),
    ("samples_per_sec", "samples/s"), ("speedup", "speed-up"), ("efficiency", "efficiency"), ("step_sec", "step ms"),
)
"""`(key, header)` of the terminal's first table: the rates (`workers_x_replicas`: `"2 x 4"`)."""
PART_HEADERS = (
    ("input_sec", "input"), ("compute_sec", "compute"), ("communication_sec", "comm."), ("update_sec", "update"),
    ("device_sec", "device"), ("other_sec", "other"), ("allreduce_bus_gbps", "all-reduce alone GB/s"),
)
"""`(key, header)` of the terminal's second table: the step's parts (ms per step) and the all-reduce alone."""


def format_cell(key: str, value: Any) -> str:
    """A row's value as the table shows it (milliseconds for seconds per step, `-` for none)."""
    if value is None:
        return "-"
    if key == "samples_per_sec":
        return f"{value:,.0f}"
    if key.endswith("_sec"):
        return f"{value * 1e3:.3g}"
    if key in ("speedup", "efficiency"):
        return f"{value:.2f}"
    if key == "allreduce_bus_gbps":
        return f"{value:.3g}"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def headers() -> list[tuple[str, str]]:
    """`(key, title)` of each column."""
    return list(_HEADERS)


def markdown_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The rows (with a `devices` entry beside `ROW_KEYS`) as a Markdown table."""
    lines = [
        "| " + " | ".join(title for _, title in _HEADERS) + " |",
        "|" + "---|" * len(_HEADERS),
    ]
    for row in rows:
        cells = [format_cell(key, row.get(key)).replace("|", "\\|") for key, _ in _HEADERS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_log_dir(
    log_dir: str | os.PathLike, rows: Sequence[ScaleRow], labels: Sequence[str], spread: float | None = None
) -> str:
    """Write the study to `log_dir` (see the module's text); returns the study's run directory.

    `spread` is the baseline's run-to-run spread, kept in `scale.json`.
    """
    dicts = [dict(r.as_dict(), devices=label) for r, label in zip(rows, labels)]
    first = rows[0].result.total_replicas if rows else 1
    scalars = [
        (
            f"workers_{row.result.workers}",
            row.result.total_replicas,
            {
                _tags.SCALE_SAMPLES_PER_SEC.name(): row.samples_per_sec,
                _tags.SCALE_SPEEDUP.name(): row.speedup,
                _tags.SCALE_IDEAL_SPEEDUP.name(): row.result.total_replicas / first,
                _tags.SCALE_EFFICIENCY.name(): row.efficiency,
            },
        )
        for row in rows
        if not row.result.versus_gpu
    ]
    return write_study(log_dir, SCALE_RUN, {"rows": dicts, "baseline_spread": spread}, markdown_table(dicts),
                       _tags.SCALE_TABLE.name(), scalars)


def read_rows(log_dir: str | os.PathLike) -> list[dict[str, Any]] | None:
    """The study's rows (each with `devices` and `ROW_KEYS`), or `None` where there is none.

    `log_dir` is the `--log-dir` of `keras-gpu scale`, or the study's own
    run directory (`DIR/scale`).
    """
    rows = (read_study(log_dir, SCALE_RUN) or {}).get("rows")
    if not isinstance(rows, list):
        return None
    return [r for r in rows if isinstance(r, dict) and all(k in r for k in ROW_KEYS)]
