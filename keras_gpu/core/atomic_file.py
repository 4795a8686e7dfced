"""Files replaced whole or not at all: write a temporary file beside the target, fsync it, rename it into place.

A process killed at any instant leaves either the previous file or the new
one, never a torn one: the rename is atomic on a POSIX file system, and the
data and the directory entry are flushed to disk (fsync) before and after
it. Remote paths (`gs://`, `s3://`, ...) are written in place: their file
layers have no rename of this kind.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable

__all__ = ["replace_atomically", "temporary_beside"]

_EXTENSIONS = (".weights.h5", ".weights.json", ".keras", ".h5", ".json")  # kept at the end: Keras checks them


def temporary_beside(path: str) -> str:
    """A temporary file name in `path`'s directory, hidden, keeping the extension Keras checks (`.weights.h5`)."""
    folder, name = os.path.split(path)
    ext = next((e for e in _EXTENSIONS if name.endswith(e)), os.path.splitext(name)[1])
    stem = name[: len(name) - len(ext)] if ext else name
    return os.path.join(folder, f".{stem}.tmp-{os.getpid()}{ext}")


def replace_atomically(path: str, write: Callable[[str], None]) -> None:
    """Call `write(temporary)`, then make `temporary` the file at `path` in one step, durably.

    Args:
        path: The file to replace (or create).
        write: Writes the whole new content to the path it is given.

    Raises:
        Whatever `write` raises (the temporary file is removed and `path` is
        left as it was), or `OSError` from the file system.
    """
    if "://" in path:
        write(path)
        return
    temporary = temporary_beside(path)
    try:
        write(temporary)
        _fsync_file(temporary)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise
    _fsync_dir(os.path.dirname(path) or ".")


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(folder: str) -> None:
    """Flush the directory entry of a rename (not possible on every platform or file system)."""
    with contextlib.suppress(OSError, AttributeError):
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
