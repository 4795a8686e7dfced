"""A log directory's whole report: the runs' records, and the `keras-gpu scale` and `keras-gpu tune` studies in it.

`read_log_dir` is the one reader behind `keras-gpu report` (its tables and
its `--json`) and the keras-gpu tab in TensorBoard
(`keras_gpu.tensorboard.plugin`), so that the terminal, the tab and the docs
give the same numbers. `LogDirReport.as_dict` is what `keras-gpu report
--json` prints; a number that was not measured (NaN, or an infinity) is
`null` there, so that every JSON reader, a browser's included, takes it.

Examples:
    >>> json_safe({"a": float("nan"), "b": [1.5, float("inf")], "c": (2, "x")})
    {'a': None, 'b': [1.5, None], 'c': [2, 'x']}
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from keras_gpu.output.reader import Visit, read_report
from keras_gpu.output.report_records import Report
from keras_gpu.output.scale_output import read_rows
from keras_gpu.output.tune_output import read_study

__all__ = ["LogDirReport", "json_safe", "read_log_dir", "report_json"]


@dataclass(frozen=True)
class LogDirReport:
    """What a log directory holds, read back.

    Attributes:
        log_dir: The directory, as given.
        report: The runs' records and hints (`keras_gpu.output.reader.read_report`),
            `None` where the directory holds only a study whose files name it.
        scale: The rows of a `keras-gpu scale --log-dir` study in it, or `None`.
        tune: The rows, skipped changes and verdict of a `keras-gpu tune
            --log-dir` study in it, or `None`.
    """

    log_dir: str
    report: Report | None
    scale: list[dict[str, Any]] | None
    tune: dict[str, Any] | None

    @property
    def shows_report(self) -> bool:
        """Whether the runs' part is shown: where a run holds data, or where no study stands in for it.

        A directory with neither runs nor a study still shows the (empty)
        report, which says there is no keras-gpu data yet.
        """
        if self.report is None:
            return False
        return bool(self.report.runs) or (self.scale is None and self.tune is None)

    def as_dict(self) -> dict[str, Any]:
        """The JSON of `keras-gpu report --json`: the report's `{"log_dir", "runs", "cluster", "hints"}` where
        shown, `"scale"` and `"tune"` where present, with `null` for every number not measured."""
        out: dict[str, Any] = self.report.as_dict() if self.shows_report and self.report is not None else {}
        if self.scale is not None:
            out["scale"] = self.scale
        if self.tune is not None:
            out["tune"] = self.tune
        return json_safe(out)


def read_log_dir(log_dir: str | os.PathLike, visit: Visit | None = None) -> LogDirReport:
    """Read everything keras-gpu wrote under `log_dir`: the runs, and the scale and tune studies.

    Args:
        log_dir: The `log_dir` given to `keras_gpu.callbacks()`, or the
            `--log-dir` of `keras-gpu scale` or `keras-gpu tune`.
        visit: Called with each run's series as they are read (see
            `keras_gpu.output.reader.read_report`), so that a caller needing
            more than the records reads the event files once.

    Raises:
        FileNotFoundError: `log_dir` is no directory (and holds no study).
    """
    path = os.fspath(log_dir)
    tune = read_study(path)
    scale = read_rows(path)
    try:
        report = read_report(path, visit=visit)
    except FileNotFoundError:
        if scale is None and tune is None:
            raise
        report = None
    return LogDirReport(log_dir=path, report=report, scale=scale, tune=tune)


def report_json(log_dir: str | os.PathLike) -> dict[str, Any]:
    """What `keras-gpu report LOG_DIR --json` prints, as plain data (`read_log_dir(log_dir).as_dict()`).

    Raises:
        FileNotFoundError: `log_dir` is no directory (and holds no study).
    """
    return read_log_dir(log_dir).as_dict()


def json_safe(value: Any) -> Any:
    """`value` with every non-finite float as `None` and tuples as lists: data every JSON parser reads."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
