"""The private parts of Keras' `BackupAndRestore` and `Model` that keras-gpu's saving callbacks rely on.

Checked on Keras 3.15: `BackupAndRestore` keeps its file paths in
`_weights_path` and `_training_metadata_path`, its position in
`_current_epoch` and `_last_batch_seen`, and writes through `_save_model()`;
`fit` resumes from `model._initial_epoch`. Each access is a named function
here so that a Keras change breaks one place (tests/test_reliability_backup.py
checks them).
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator
from typing import Any

from keras_gpu.core.atomic_file import replace_atomically

__all__ = ["atomic_saves", "backup_files", "backup_position", "resume_from"]


def backup_files(callback: Any) -> tuple[str, str]:
    """The weights file and the metadata file of a Keras `BackupAndRestore`."""
    return str(callback._weights_path), str(callback._training_metadata_path)


def backup_position(callback: Any) -> tuple[int, int]:
    """The epoch a restore would start from and the last batch seen, as Keras' `_save_model` records them."""
    return int(callback._current_epoch), int(callback._last_batch_seen)


def resume_from(model: Any, epoch: int | None) -> None:
    """Make the next `fit` of `model` start at `epoch` (`None`: at its `initial_epoch` argument)."""
    model._initial_epoch = epoch


@contextlib.contextmanager
def atomic_saves(model: Any) -> Iterator[None]:
    """While the block runs, `model.save_weights` and `model.save` replace their file atomically.

    Keras' `ModelCheckpoint` writes through these two methods; wrapping them
    on this model instance for the duration of its hook makes every write a
    temporary file, fsynced, renamed into place.
    """
    originals = {name: getattr(model, name) for name in ("save_weights", "save")}

    def atomic(original: Any) -> Any:
        @functools.wraps(original)
        def save(filepath: Any, *args: Any, **kwargs: Any) -> Any:
            if not isinstance(filepath, (str, os.PathLike)):
                return original(filepath, *args, **kwargs)
            out: list[Any] = []
            replace_atomically(os.fspath(filepath), lambda path: out.append(original(path, *args, **kwargs)))
            return out[0] if out else None

        return save

    for name, original in originals.items():
        setattr(model, name, atomic(original))
    try:
        yield
    finally:
        for name in originals:
            with contextlib.suppress(AttributeError):
                delattr(model, name)  # back to the class's methods
