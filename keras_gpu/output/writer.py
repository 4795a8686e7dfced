"""Where each worker writes, and one shared event file per run directory, written by TensorBoard's own writer.

Layout, for a `log_dir` shared by every worker of a job:

* the chief (or a single process) writes to ``log_dir/train``, beside Keras'
  own `TensorBoard` callback;
* worker *k* (its rank among the training processes) writes to
  ``log_dir/worker_k/train``.

No two processes ever write the same file, and one `tensorboard --logdir
log_dir` shows all of them. Within a process, every keras-gpu callback that
writes to the same run directory shares one handle through `acquire` /
`release`, and every handle for that directory writes into **one event
file per process**: it is opened on first use, kept open across `fit` calls
(flushed when each `fit` ends) and closed when the process exits. Several
`fit` calls into one `log_dir` therefore append to one file, in order; per-fit
files created within the same second would sort out of order
(``...PID.10.v2`` before ``...PID.8.v2``) and TensorBoard would drop or
reorder their points.

Events are written with `tensorboard.summary.writer.event_file_writer.EventFileWriter`
(no TensorFlow needed, so every Keras backend logs the same way). Records are
the ones `tf.summary` writes: scalars are rank-0 float32 tensors carrying the
`scalars` plugin's metadata, text is a string tensor with the `text` plugin's
metadata. The calling thread only builds the record and queues it; the file
is written on the writer's own background thread.

A storage failure while writing (a full disk, a vanished mount) turns logging
off for that run directory with one error line; training continues. The next
`fit` into that directory opens a fresh event file.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from keras_gpu.core.cluster import ClusterInfo
from keras_gpu.core.log import logger
from keras_gpu.output import layout as _layout

__all__ = ["FLUSH_SECS", "SummaryWriter", "acquire", "check_writable", "release", "run_dir"]

#: Seconds between background flushes of an event file (data also goes out
#: at every `flush()`, which each callback calls when `fit` ends).
FLUSH_SECS = 5.0
# Records queued for the writer thread before a write would wait: far more than
# the few records per logging window, so the training thread never waits on disk.
_MAX_QUEUE = 4096
# Distinct tag sets whose records are kept for reuse per writer (each callback writes a few).
_MAX_TEMPLATES = 64


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
    TensorBoard's file layer (`tf.io.gfile` where TensorFlow is installed) and
    not probed. Errors echo `received` (the value the user passed as
    `argument`, by default `path` itself).

    Raises:
        ValueError: `path` is empty.
        RuntimeError: The directory cannot be created or written, with the
            operating system's reason.
    """
    shown = path if received is None else received
    if not path:
        raise ValueError(f"`{argument}` must be a non-empty path. Received: {argument}={shown!r}")
    if "://" in path:
        from tensorboard.compat import tf as tb_tf

        tb_tf.io.gfile.makedirs(path)
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


def _key(path: str) -> str:
    return path if "://" in path else os.path.abspath(path)


class _EventFile:
    """This process's one open event file in one run directory."""

    def __init__(self, path: str) -> None:
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self.path = path
        # A per-file tag in the name, so the file can be found again (see `present`).
        self.suffix = f".{uuid.uuid4().hex[:8]}.v2"
        self.writer = EventFileWriter(path, max_queue_size=_MAX_QUEUE, flush_secs=FLUSH_SECS, filename_suffix=self.suffix)
        # The custom-scalars charts of the layout last written to this file (indices into layout.CHARTS).
        self.charts: frozenset[int] = frozenset()

    def present(self) -> bool:
        """False once the file was deleted under us (say, `rm -rf logs` between two `fit` calls)."""
        if "://" in self.path:
            return True
        try:
            return any(name.endswith(self.suffix) for name in os.listdir(self.path))
        except OSError:
            return False

    def close(self) -> None:
        try:
            self.writer.close()
        except Exception:  # noqa: BLE001, S110 - a broken file has already been reported once
            pass


_files: dict[str, _EventFile] = {}
_files_lock = threading.Lock()
_exiting = False  # set when the interpreter exits and every event file was closed


def _open_file(path: str) -> _EventFile:
    """The event file for `path`, opening one if there is none yet or the last one is gone."""
    key = _key(path)
    with _files_lock:
        current = _files.get(key)
        if current is not None and current.present():
            return current
        if current is not None:
            current.close()
        _files[key] = _EventFile(path)
        return _files[key]


def _drop_file(path: str, event_file: _EventFile | None) -> None:
    """Forget a failed event file so that the next `fit` opens a fresh one."""
    with _files_lock:
        if event_file is not None and _files.get(_key(path)) is event_file:
            del _files[_key(path)]
    if event_file is not None:
        event_file.close()


@atexit.register
def _close_all() -> None:
    global _exiting
    _exiting = True
    with _files_lock:
        files = list(_files.values())
        _files.clear()
    for event_file in files:
        event_file.close()


def _scalar_metadata() -> Any:
    from tensorboard.plugins.scalar import metadata

    return metadata.create_summary_metadata(display_name=None, description=None)


_SCALAR_METADATA: Any = None


def _scalars_summary(values: Mapping[str, float]) -> Any:
    """One `Summary` holding each value the way `tf.summary.scalar` records it (rank-0 float32)."""
    global _SCALAR_METADATA
    from tensorboard.compat.proto import summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2

    if _SCALAR_METADATA is None:
        _SCALAR_METADATA = _scalar_metadata()
    summary = summary_pb2.Summary()
    scalar_shape = tensor_shape_pb2.TensorShapeProto()
    for tag, value in values.items():
        tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, tensor_shape=scalar_shape, float_val=[float(value)])
        summary.value.add(tag=tag, metadata=_SCALAR_METADATA, tensor=tensor)
    return summary


class SummaryWriter:
    """A handle on a run directory's event file, opened on first use, safe to call from any thread.

    Every method is a no-op once the handle is closed or disabled, so a
    storage failure never propagates into `model.fit`. Closing a handle
    flushes the file; the file itself stays open for later `fit` calls into
    the same directory and is closed when the process exits.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._file: _EventFile | None = None
        self._lock = threading.RLock()
        self._closed = False
        self.disabled = False
        self._templates: dict[tuple[str, ...], Any] = {}  # tag set -> its Summary, refilled on each write
        self._charted: set[tuple[str, ...]] = set()  # tag sets whose charts are in the run's layout

    def _get(self) -> Any:
        """The `EventFileWriter` to add events to."""
        return self._event_file().writer

    def _event_file(self) -> _EventFile:
        if self._file is None:
            self._file = _open_file(self.path)
        return self._file

    def _guard(self, fn: Callable[..., Any], *args: Any) -> bool:
        with self._lock:
            if self._closed or self.disabled:
                return False
            try:
                fn(*args)
                return True
            except Exception as exc:  # noqa: BLE001 - any storage failure must not stop training
                self.disabled = True
                failed, self._file = self._file, None
                _drop_file(self.path, failed)
                if _exiting:  # the process is ending and its files were closed: nothing failed, nothing continues
                    logger.debug("keras-gpu: %s was closed at exit; a late write was dropped", self.path)
                    return False
                logger.error(
                    "keras-gpu: writing TensorBoard logs to %s failed (%s: %s); logging to this "
                    "directory is turned off for the rest of the run, training continues.",
                    self.path,
                    type(exc).__name__,
                    exc,
                )
                return False

    def event(self, event: Any) -> bool:
        """Queue one `event_pb2.Event` for writing. Returns False if logging is off."""
        return self._guard(lambda: self._get().add_event(event))

    def summary(self, summary: Any, step: int) -> bool:
        """Write a `summary_pb2.Summary` at `step` (its values must carry their plugin's metadata)."""
        from tensorboard.compat.proto import event_pb2, summary_pb2

        if not isinstance(summary, summary_pb2.Summary):  # TensorFlow's own class, from a plugin helper under TF
            summary = summary_pb2.Summary.FromString(summary.SerializeToString())
        return self.event(event_pb2.Event(wall_time=time.time(), step=int(step), summary=summary))

    def scalars(self, values: Mapping[str, float], step: int) -> bool:
        """Write each `tag -> value` at `step`, as one event. Returns False if nothing could be written.

        Costs the caller one small protobuf, serialized, and a queue put
        (about 15 microseconds for 10 tags: the records of a tag set are
        built once and then only get new values); the file is written on the
        writer's thread.
        """
        if not values:
            return True
        from tensorboard.compat.proto import event_pb2

        wall_time = time.time()

        def write() -> None:  # under self._lock: the template is filled and serialized by one thread at a time
            key = tuple(values)
            if key not in self._charted:  # a tag set's first write (a few per fit): chart its tags
                self._add_charts(key)
                if len(self._charted) < _MAX_TEMPLATES:
                    self._charted.add(key)
            summary = self._scalars_template(values)
            self._get().add_event(event_pb2.Event(wall_time=wall_time, step=int(step), summary=summary))

        return self._guard(write)

    def chart(self, names: Iterable[str]) -> bool:
        """Add the custom-scalars charts that show the tag `names` to the run's layout (see `keras_gpu.output.layout`).

        `scalars` charts the tags it writes by itself. The layout is written
        again, at step 0, only where it gained a chart, so that TensorBoard
        (which shows a run's last layout) never shows a chart the run leaves
        empty. Returns False if logging is off.
        """
        names = tuple(names)
        return self._guard(lambda: self._add_charts(names))

    def _add_charts(self, names: Iterable[str]) -> None:
        """Under `_guard`: write the layout again where `names` bring a chart it lacks."""
        event_file = self._event_file()
        charts = event_file.charts | _layout.charts_of(names)
        if charts == event_file.charts:
            return
        from tensorboard.compat.proto import event_pb2

        summary = _layout.layout_summary(charts)
        event_file.writer.add_event(event_pb2.Event(wall_time=time.time(), step=0, summary=summary))
        event_file.charts = charts

    def _scalars_template(self, values: Mapping[str, float]) -> Any:
        key = tuple(values)
        template = self._templates.get(key)
        if template is None:
            template = _scalars_summary(values)
            if len(self._templates) < _MAX_TEMPLATES:
                self._templates[key] = template
            return template
        for record, value in zip(template.value, values.values()):
            record.tensor.float_val[0] = float(value)
        return template

    def text(self, tag: str, markdown: str, step: int) -> bool:
        """Write a Markdown text summary (TensorBoard's Text dashboard)."""
        from tensorboard.plugins.text.summary_v2 import text_pb

        return self.summary(text_pb(tag, markdown), step)

    def graph(self, graph_def: Any) -> bool:
        """Write a graph (a `GraphDef` proto or its serialized bytes) for TensorBoard's Graphs dashboard."""
        from tensorboard.compat.proto import event_pb2

        data = graph_def if isinstance(graph_def, bytes) else graph_def.SerializeToString()
        return self.event(event_pb2.Event(wall_time=time.time(), graph_def=data))

    def call(self, fn: Callable[..., Any], *args: Any) -> bool:
        """Run `fn(*args)` under the storage guard and write the `Event`(s) it returns, if any.

        For records other than scalars, text and graphs: `fn` returns one
        `event_pb2.Event`, an iterable of them, or None.
        """

        def write() -> None:
            out = fn(*args)
            events: Iterable[Any] = () if out is None else (out,) if hasattr(out, "SerializeToString") else out
            writer = self._get()
            for event in events:
                writer.add_event(event)

        return self._guard(write)

    def open(self) -> bool:
        """Open the run's event file now, if it is not open yet; False if logging is off.

        A callback opens it when `fit` starts, so that the file, the writer's
        thread and the modules they need exist before anything is written:
        a trace read after `fit` may write its points while the interpreter
        exits, when no new module that registers an exit hook can be
        imported.
        """
        return self._guard(self._get)

    def flush(self) -> bool:
        """Write every queued event to disk (waits for the writer thread)."""
        if self._file is None:
            return True
        return self._guard(lambda: self._get().flush())

    def close(self) -> None:
        """Flush; later calls on this handle are no-ops. The file stays open for this directory's next `fit`."""
        with self._lock:
            if self._closed:
                return
            if self._file is not None and not self.disabled:
                self.flush()
            self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed


_registry: dict[str, tuple[SummaryWriter, int]] = {}
_registry_lock = threading.Lock()


def acquire(path: str) -> SummaryWriter:
    """The shared writer for `path`, creating it on first use; pair with `release`."""
    key = _key(path)
    with _registry_lock:
        writer, count = _registry.get(key, (None, 0))
        if writer is None or writer.closed:
            writer, count = SummaryWriter(path), 0
        _registry[key] = (writer, count + 1)
        return writer


def release(writer: SummaryWriter) -> None:
    """Give back a writer from `acquire`; the last user flushes and closes it."""
    key = _key(writer.path)
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
