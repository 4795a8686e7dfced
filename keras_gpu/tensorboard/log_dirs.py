"""The keras-gpu log directories under TensorBoard's `--logdir`, found by the run directories the callbacks write.

`keras_gpu.callbacks(log_dir)` writes the chief's run to `log_dir/train` and
each other worker's to `log_dir/worker_<i>/train`; `keras-gpu scale` and
`keras-gpu tune` write `DIR/scale` (with `DIR/scale/workers_<w>`) and
`DIR/tune`. TensorBoard may be started on such a `log_dir` itself (the
demo's `tensorboard --logdir runs/demo`) or on a folder of them
(`--logdir runs`): `find_log_dirs` gives each, as a path relative to
TensorBoard's folder (`"."` for the folder itself), where one of its runs
holds keras-gpu's tags (a bounded read of each event file's first records,
remembered per file: `KerasGpuFiles`) or its study's rows.

Examples:
    >>> log_dir_of(("runs", "demo", "worker_1", "train"))
    ('runs', 'demo')
    >>> log_dir_of(("scale", "workers_2"))
    ()
    >>> log_dir_of(("validation",)) is None
    True
"""

from __future__ import annotations

import os
import re
import threading

from keras_gpu.output.reader import holds_keras_gpu_data
from keras_gpu.output.runs_shown import natural_key
from keras_gpu.output.scale_output import ROWS_FILE as SCALE_ROWS
from keras_gpu.output.scale_output import SCALE_RUN
from keras_gpu.output.tune_output import ROWS_FILE as TUNE_ROWS
from keras_gpu.output.tune_output import TUNE_RUN

__all__ = ["KerasGpuFiles", "find_log_dirs", "log_dir_of", "signature"]

_TASK_DIR = re.compile(r"^[a-z]+_\d+$")  # worker_1, ps_0: `keras_gpu.output.writer.run_dir`
_STUDY_FILES = {SCALE_RUN: SCALE_ROWS, TUNE_RUN: TUNE_ROWS}


def log_dir_of(run: tuple[str, ...]) -> tuple[str, ...] | None:
    """The log directory (path parts) a run directory of keras-gpu's shape sits in, `None` for another shape."""
    if not run:
        return None
    if run[-1] == "train":
        return run[:-2] if len(run) >= 2 and _TASK_DIR.match(run[-2]) else run[:-1]
    if run[-1] in (SCALE_RUN, TUNE_RUN):
        return run[:-1]
    if len(run) >= 2 and run[-2] == SCALE_RUN and run[-1].startswith("workers_"):
        return run[:-2]
    return None


class KerasGpuFiles:
    """Which event files hold keras-gpu data, remembered per file (a file found to hold some always does).

    Safe to share between TensorBoard's request threads.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._known: dict[str, tuple[int, bool]] = {}

    def holds(self, path: str) -> bool:
        """Whether the event file at `path` holds keras-gpu data (read again only after it grew)."""
        try:
            size = os.path.getsize(path)
        except OSError:
            return False
        with self._lock:
            known = self._known.get(path)
        if known is not None and (known[1] or known[0] == size):
            return known[1]
        found = holds_keras_gpu_data(path)
        with self._lock:
            self._known[path] = (size, found)
        return found


def find_log_dirs(root: str, files: KerasGpuFiles | None = None) -> list[str]:
    """The keras-gpu log directories under `root`, relative to it (`"."`: `root` itself), in
    `keras_gpu.output.runs_shown.natural_key` order (`run2` before `run10`).

    Args:
        root: TensorBoard's `--logdir` (a local directory; any other holds none).
        files: Where to remember which event files hold keras-gpu data.
    """
    files = files or KerasGpuFiles()
    if not root or not os.path.isdir(root):
        return []
    found: set[tuple[str, ...]] = set()
    for path, dirs, names in os.walk(root):
        dirs.sort()
        rel = os.path.relpath(path, root)
        parts = () if rel == "." else tuple(rel.split(os.sep))
        if not parts and not any(".tfevents." in n for n in names):
            continue
        owner = log_dir_of(parts) if parts else ()
        if owner is None or owner in found:
            continue
        study = _STUDY_FILES.get(parts[-1] if parts else "")
        if (study is not None and study in names) or any(
            ".tfevents." in n and files.holds(os.path.join(path, n)) for n in sorted(names)
        ):
            found.add(owner)
    return sorted((os.path.join(*parts) if parts else "." for parts in found), key=natural_key)


def signature(log_dir: str) -> tuple[tuple[str, int, int], ...]:
    """`(path, size, modification time)` of every file under `log_dir`: it changes whenever the report would."""
    out = []
    for path, dirs, names in os.walk(log_dir):
        dirs.sort()
        for name in sorted(names):
            full = os.path.join(path, name)
            try:
                st = os.stat(full)
            except OSError:
                continue
            out.append((os.path.relpath(full, log_dir), st.st_size, st.st_mtime_ns))
    return tuple(out)
