"""The keras-gpu tab's data for one log directory: the report's JSON and the charts' series, read in one pass.

`read_tab` reads the log directory once through `keras-gpu report`'s own
reader (`keras_gpu.output.log_dir.read_log_dir`): the report is what
`keras-gpu report --json` prints, byte for byte the same data, and the view
holds what the charts draw (`keras_gpu.tensorboard.series`) and what the
tab says is missing (`keras_gpu.tensorboard.notes`). `TabCache` keeps the
last read of each log directory until a file in it changes.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from typing import Any

from keras_gpu.output.log_dir import json_safe, read_log_dir
from keras_gpu.output.runs_shown import shown_runs
from keras_gpu.tensorboard.log_dirs import signature
from keras_gpu.tensorboard.notes import notes
from keras_gpu.tensorboard.series import TabSeries, named_workers

__all__ = ["Tab", "TabCache", "read_tab", "version_of"]


@dataclass(frozen=True)
class Tab:
    """One read of a log directory.

    Attributes:
        report: What `keras-gpu report --json` prints for it.
        view: `{"series", "notes", "shown_runs"}`: the charts' points, the
            sentences saying what is missing (plain data, `None` for what
            was not measured), and the runs `keras-gpu report`'s tables list
            (`keras_gpu.output.runs_shown.shown_runs`), which the tab lists
            first.
        version: A digest of the files it was read from.
    """

    report: dict[str, Any]
    view: dict[str, Any]
    version: str


def version_of(files: tuple[tuple[str, int, int], ...]) -> str:
    """A short digest of `keras_gpu.tensorboard.log_dirs.signature`'s result."""
    return hashlib.sha1(repr(files).encode(), usedforsecurity=False).hexdigest()[:16]


def read_tab(log_dir: str, version: str | None = None) -> Tab:
    """Read `log_dir` once: the report, the series, the notes.

    Args:
        log_dir: The log directory.
        version: `version_of` its files, taken before the read (default: now).

    Raises:
        FileNotFoundError: `log_dir` is no directory.
    """
    version = version or version_of(signature(log_dir))
    series = TabSeries()
    data = read_log_dir(log_dir, visit=series)
    report = data.report if data.shows_report else None
    shown = [] if report is None else [r.run for r in shown_runs(report)[0]]
    named = named_workers(None if report is None else report.cluster)
    view = json_safe({"series": series.as_dict(named), "notes": notes(data, series), "shown_runs": shown})
    return Tab(report=data.as_dict(), view=view, version=version)


class TabCache:
    """The last `Tab` of each log directory, read again when a file in it changed; safe across threads.

    Two requests for the same directory at once read it once: the second
    waits for the first's result.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}
        self._tabs: dict[str, Tab] = {}

    def get(self, log_dir: str) -> Tab:
        """The tab of `log_dir`, from the cache while its files are unchanged."""
        with self._lock:
            lock = self._locks.setdefault(log_dir, threading.Lock())
        with lock:
            current = version_of(signature(log_dir))
            tab = self._tabs.get(log_dir)
            if tab is None or tab.version != current:
                tab = read_tab(log_dir, current)
                self._tabs[log_dir] = tab
            return tab
