"""`keras-gpu tune`'s rows as Markdown, and as a TensorBoard run that `keras-gpu report` reads back.

Layout of `--log-dir DIR` (written and read by `keras_gpu.output.study_output`,
as `keras-gpu scale`'s):

* `DIR/tune`: `tune/samples_per_sec` and
  `tune/speedup` of each measured row at the step of its number in the
  table, the table, skipped changes and verdict as the text summary
  `tune/table`, `tune.json` (what `keras-gpu tune --json` prints), and the
  custom-scalars charts of the two tags.

Examples:
    >>> format_cell("speedup", 2.345, {})
    '2.35x'
    >>> format_cell("losses", "same (7 steps)", {})
    'same'
    >>> row = {"loss_max_rel_diff": 1.9e-07}
    >>> format_cell("losses", "differ by up to 1.9e-07 (120 steps)", row)
    'Δ 2e-07'
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from keras_gpu.core.units import format_bytes
from keras_gpu.meters.tune_table import ROW_KEYS
from keras_gpu.output import study_output
from keras_gpu.output import tags as _tags

__all__ = ["ROWS_FILE", "TUNE_RUN", "columns", "format_cell", "markdown", "read_study", "write_log_dir"]

TUNE_RUN = "tune"
"""The run directory under `--log-dir`."""
ROWS_FILE = study_output.study_file("tune")
"""The rows, skipped changes and verdict, beside the run's event file."""

_COLUMNS = (("change", "change"), ("samples_per_sec", "samples/s"), ("speedup", "speed-up"),
            ("moved", "moved (ms/step)"), ("peak_memory_bytes", "peak mem"), ("losses", "losses"))


def columns() -> list[tuple[str, str]]:
    """`(key, title)` of each column of the table."""
    return list(_COLUMNS)


def format_cell(key: str, value: Any, row: Mapping[str, Any]) -> str:
    """A row's value as the table shows it (`-` for none; a failed row says so)."""
    if row.get("status") in ("failed", "not applied") and key != "change":
        return row["status"] if key == "samples_per_sec" else "-"
    if value is None:
        return "-"
    if key == "samples_per_sec":
        return f"{value:,.0f}"
    if key == "speedup":
        mark = {1: " +", -1: " -"}.get(row.get("helps") or 0, "")
        return f"{value:.2f}x{mark}"
    if key == "peak_memory_bytes":
        return format_bytes(value)
    if key == "moved":
        return str(value).replace(" -> ", "→").removesuffix(" ms")
    if key == "losses":
        return _losses_cell(str(value), row.get("loss_max_rel_diff"))
    return str(value)


def _losses_cell(text: str, diff: float | None) -> str:
    """The losses' comparison in a few characters: `same`, `Δ 2e-07` (largest relative difference), `end -1.2%`."""
    if text.startswith("same"):
        return "same"
    if text.startswith("differ") and diff is not None:
        return f"Δ {diff:.1g}"
    if text.startswith("loss ") and diff is not None:
        return f"end {diff:+.1%}"
    return "not compared" if text.startswith("not compared") else text


def markdown(rows: Sequence[Mapping[str, Any]], skips: Sequence[str], verdict: str) -> str:
    """The table, the failures, the skipped changes and the verdict as Markdown."""
    lines = ["| # | " + " | ".join(t for _, t in _COLUMNS) + " |", "|---|" + "---|" * len(_COLUMNS)]
    for i, row in enumerate(rows, 1):
        cells = [format_cell(k, row.get(k), row).replace("|", "\\|") for k, _ in _COLUMNS]
        lines.append(f"| {i} | " + " | ".join(cells) + " |")
    lines.append("")
    lines += [f"- {r['change']} failed: {r['error']}" for r in rows if r.get("status") == "failed"]
    lines += [f"- {r['change']} not applied: {r['not_applied']}" for r in rows if r.get("status") == "not applied"]
    lines += [f"- skipped {s}" for s in skips]
    lines += ["", verdict]
    return "\n".join(lines)


def write_log_dir(log_dir: str | os.PathLike, rows: Sequence[Mapping[str, Any]], verdict: str,
                  skips: Sequence[str] = ()) -> str:
    """Write the rows to `log_dir` (see the module's text); returns the run directory."""
    scalars = [
        ("", i, {_tags.TUNE_SAMPLES_PER_SEC.name(): row["samples_per_sec"], _tags.TUNE_SPEEDUP.name(): row["speedup"]})
        for i, row in enumerate(rows, 1)
        if row.get("status") == "measured"
    ]
    study = {"rows": list(rows), "skipped": list(skips), "verdict": verdict}
    return study_output.write_study(log_dir, TUNE_RUN, study, markdown(rows, skips, verdict), _tags.TUNE_TABLE.name(),
                                    scalars)


def read_study(log_dir: str | os.PathLike) -> dict[str, Any] | None:
    """`{"rows", "skipped", "verdict"}` under `log_dir`, or `None` where there is none."""
    study = study_output.read_study(log_dir, TUNE_RUN)
    try:
        rows = [r for r in study["rows"] if isinstance(r, dict) and all(k in r for k in ROW_KEYS)]
        return {"rows": rows, "skipped": list(study.get("skipped", [])), "verdict": str(study["verdict"])}
    except (KeyError, TypeError):
        return None
