"""Where each worker writes, and one shared, lazily created summary writer per run directory.

Layout, for a `log_dir` shared by every worker of a job:

* the chief (or a single process) writes to ``log_dir/train``, beside Keras'
  own `TensorBoard` callback;
* worker *k* (its rank among the training processes) writes to
  ``log_dir/worker_k/train``.

No two processes ever write the same file, and one `tensorboard --logdir
log_dir` shows all of them. Within a process, every keras-gpu callback that
writes to the same run directory shares one event file through
:func:`acquire` / :func:`release`, so that enabling three callbacks does not
make three event files.

A storage failure while writing (a full disk, a vanished mount) turns logging
off for that run directory with one error line; training continues.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Mapping
from typing import Any

from keras_gpu._log import logger
from keras_gpu.cluster import ClusterInfo

__all__ = ["run_dir", "check_writable", "SummaryWriter", "acquire", "release"]


def run_dir(log_dir: str | os.PathLike, info: ClusterInfo, subdir: str = "train") -> str:
    """The run directory this process writes to.

    Args:
        log_dir: The user's log directory, shared by all workers.
        info: This process's place in the cluster.
        subdir: The run name under it (`"train"` like Keras' `TensorBoard`).
    """
    base = os.fspath(log_dir)
    if info.is_chief:
        return os.path.join(base, subdir)
    if info.worker_index is not None:
        return os.path.join(base, f"worker_{info.worker_index}", subdir)
    return os.path.join(base, f"{info.task_type}_{info.task_index}", subdir)


def check_writable(path: str, argument: str = "log_dir", received: object = None) -> None:
    """Create `path` and prove a file can be written there, or raise.

    Remote file systems (`gs://`, `s3://`, ...) are created through
    `tf.io.gfile` and not probed. Errors echo `received` (the value the
    user passed as `argument`, by default `path` itself).

    Raises:
        ValueError: `path` is empty.
        RuntimeError: The directory cannot be created or written, with the
            operating system's reason.
    """
    shown = path if received is None else received
    if not path:
        raise ValueError(f"`{argument}` must be a non-empty path. Received: {argument}={shown!r}")
    if "://" in path:
        import tensorflow as tf

        tf.io.gfile.makedirs(path)
        return
    probe = os.path.join(path, f".keras_gpu_probe_{os.getpid()}_{uuid.uuid4().hex[:8]}")
    try:
        os.makedirs(path, exist_ok=True)
        with open(probe, "wb") as f:
            f.write(b"ok")
        os.remove(probe)
    except OSError as exc:
        raise RuntimeError(
            f"Cannot write TensorBoard logs to {path!r}: {exc.strerror or exc}. "
            f"Pass a writable directory as `{argument}`. Received: {argument}={shown!r}"
        ) from None


class SummaryWriter:
    """A `tf.summary` file writer created on first use, safe to call from any thread.

    Every method is a no-op once the writer is closed or disabled, so a
    storage failure never propagates into `model.fit`.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._writer: Any = None
        self._lock = threading.RLock()
        self._closed = False
        self.disabled = False

    def _get(self) -> Any:
        if self._writer is None:
            import tensorflow as tf

            self._writer = tf.summary.create_file_writer(self.path)
        return self._writer

    def _guard(self, fn, *args) -> bool:
        with self._lock:
            if self._closed or self.disabled:
                return False
            try:
                fn(*args)
                return True
            except Exception as exc:  # noqa: BLE001 - any storage/TF failure must not stop training
                self.disabled = True
                logger.error(
                    "keras-gpu: writing TensorBoard logs to %s failed (%s: %s); logging to this "
                    "directory is turned off for the rest of the run, training continues.",
                    self.path,
                    type(exc).__name__,
                    exc,
                )
                return False

    def scalars(self, values: Mapping[str, float], step: int) -> bool:
        """Write each `tag -> value` at `step`. Returns False if nothing could be written.

        The records are exactly what `tf.summary.scalar` writes (a float32
        scalar tensor with the `scalars` plugin's metadata), but all values
        go out as one serialized `Summary`: one raw write per window costs
        about a tenth of one eager `tf.summary.scalar` call per tag.
        """
        if not values:
            return True
        serialized = _scalars_pb(values)

        def write() -> None:
            import tensorflow as tf

            with self._get().as_default():
                tf.summary.experimental.write_raw_pb(serialized, step=int(step))

        return self._guard(write)

    def text(self, tag: str, markdown: str, step: int) -> bool:
        """Write a Markdown text summary (TensorBoard's Text dashboard)."""

        def write() -> None:
            import tensorflow as tf

            with self._get().as_default(step=int(step)):
                tf.summary.text(tag, markdown)

        return self._guard(write)

    def call(self, fn, *args) -> bool:
        """Run `fn(*args)` with this writer as the default `tf.summary` writer.

        For summaries other than scalars and text (graphs, custom layouts).
        """

        def write() -> None:
            with self._get().as_default():
                fn(*args)

        return self._guard(write)

    def flush(self) -> bool:
        """Flush pending events to disk."""
        if self._writer is None:
            return True
        return self._guard(lambda: self._writer.flush())

    def close(self) -> None:
        """Flush and close; later calls are no-ops."""
        with self._lock:
            if self._closed:
                return
            if self._writer is not None and not self.disabled:
                self._guard(lambda: self._writer.close())
            self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed


def _scalars_pb(values: Mapping[str, float]) -> bytes:
    """One serialized `Summary` holding every value the way `tf.summary.scalar` records it."""
    from tensorboard.compat.proto import summary_pb2
    from tensorboard.plugins.scalar import summary_v2

    summary = summary_pb2.Summary()
    for tag, value in values.items():
        summary.value.extend(summary_v2.scalar_pb(tag, float(value)).value)
    return summary.SerializeToString()


_registry: dict[str, tuple[SummaryWriter, int]] = {}
_registry_lock = threading.Lock()


def acquire(path: str) -> SummaryWriter:
    """The shared writer for `path`, creating it on first use; pair with :func:`release`."""
    key = os.path.abspath(path) if "://" not in path else path
    with _registry_lock:
        writer, count = _registry.get(key, (None, 0))
        if writer is None or writer.closed:
            writer, count = SummaryWriter(path), 0
        _registry[key] = (writer, count + 1)
        return writer


def release(writer: SummaryWriter) -> None:
    """Give back a writer from :func:`acquire`; the last user flushes and closes it."""
    key = os.path.abspath(writer.path) if "://" not in writer.path else writer.path
    with _registry_lock:
        current, count = _registry.get(key, (None, 0))
        if current is not writer:
            writer.close()
            return
        if count > 1:
            _registry[key] = (writer, count - 1)
            writer.flush()
            return
        del _registry[key]
    writer.close()
