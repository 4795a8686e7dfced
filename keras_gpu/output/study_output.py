"""A study of `keras-gpu scale` or `keras-gpu tune` in `--log-dir`: one writer and one reader for both.

Layout of `--log-dir DIR` for the command `tool` (`scale`, `tune`):

* `DIR/<tool>`: the custom-scalars layout, the table as the text summary
  `<tool>/table`, the scalars of the study's run itself, and `<tool>.json`,
  the study as the command's `--json` prints it (which `keras-gpu report`
  shows);
* `DIR/<tool>/<name>`: the scalars of a named sub-run (`scale`: one per
  worker count, so that TensorBoard draws one line each).

Examples:
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> study = {"rows": [{"change": "spe16"}]}
    >>> run = write_study(folder, "tune", study, "| change |", "tune/table",
    ...                   [("", 1, {"tune/speedup": 2.0})])
    >>> read_study(folder, "tune")["rows"]
    [{'change': 'spe16'}]
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from keras_gpu.output.writer import acquire, release

__all__ = ["read_study", "study_file", "write_study"]


def study_file(tool: str) -> str:
    """The study's JSON file name for `tool` (`scale.json`, `tune.json`)."""
    return f"{tool}.json"


def write_study(
    log_dir: str | os.PathLike,
    tool: str,
    study: Mapping[str, Any],
    table: str,
    table_tag: str,
    scalars: Sequence[tuple[str, int, Mapping[str, float]]] = (),
) -> str:
    """Write the study to `log_dir` (see the module's text); returns the study's run directory.

    Args:
        log_dir: The `--log-dir` given to the command.
        tool: `"scale"` or `"tune"`: the run directory's name.
        study: What `--json` prints (JSON-serialisable).
        table: The table as Markdown.
        table_tag: The text summary's tag (the tag registry's).
        scalars: `(sub-run, step, {tag: value})`; sub-run `""` is the study's run itself.
    """
    run = os.path.join(os.fspath(log_dir), tool)
    os.makedirs(run, exist_ok=True)
    main = acquire(run)  # one event file for the study's run: its table and its own scalars
    try:
        main.text(table_tag, table, step=0)
        for name, step, values in scalars:
            if not name:
                main.scalars(dict(values), step=step)
    finally:
        release(main)
    for name, step, values in scalars:
        if name:
            writer = acquire(os.path.join(run, name))
            try:
                writer.scalars(dict(values), step=step)
            finally:
                release(writer)
    with open(os.path.join(run, study_file(tool)), "w", encoding="utf-8") as f:
        json.dump(dict(study), f, indent=1)
    return run


def read_study(log_dir: str | os.PathLike, tool: str) -> dict[str, Any] | None:
    """The study `write_study` wrote under `log_dir` (or in `log_dir` itself, the study's own run directory).

    Returns `None` where there is none, or it cannot be read.
    """
    folder = os.fspath(log_dir)
    for path in (os.path.join(folder, tool, study_file(tool)), os.path.join(folder, study_file(tool))):
        try:
            with open(path, encoding="utf-8") as f:
                study = json.load(f)
        except (OSError, ValueError):
            continue
        if isinstance(study, dict):
            return study
    return None
