"""Read profiler traces (XSpace protobufs) without TensorFlow.

TensorFlow's and JAX's profilers both write `<host>.xplane.pb` files: an
`XSpace` of planes (`/host:CPU`, `/device:GPU:0`, ...), each with lines
(threads or GPU streams) of timed events whose names live in the plane's
metadata table. This module declares the wire schema of the fields keras-gpu
reads, in its own descriptor pool (field numbers as the profiler writes
them; fields it does not declare are skipped), so a trace can be read by any
backend, in any thread, with only `protobuf` installed.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

__all__ = ["TraceEvent", "events", "find_traces", "load", "parse", "plane_stats", "planes"]

_PACKAGE = "keras_gpu.meters.xspace"

# (message, [(field name, number, type, repeated, message type)]); types are
# FieldDescriptorProto type names without the TYPE_ prefix.
_SCHEMA: tuple[tuple[str, tuple[tuple[str, int, str, bool, str | None], ...]], ...] = (
    ("XStat", (
        ("metadata_id", 1, "INT64", False, None),
        ("double_value", 2, "DOUBLE", False, None),
        ("uint64_value", 3, "UINT64", False, None),
        ("int64_value", 4, "INT64", False, None),
        ("str_value", 5, "STRING", False, None),
        ("bytes_value", 6, "BYTES", False, None),
        ("ref_value", 7, "UINT64", False, None),
    )),
    ("XEvent", (
        ("metadata_id", 1, "INT64", False, None),
        ("offset_ps", 2, "INT64", False, None),
        ("duration_ps", 3, "INT64", False, None),
        ("stats", 4, "MESSAGE", True, "XStat"),
    )),
    ("XLine", (
        ("id", 1, "INT64", False, None),
        ("name", 2, "STRING", False, None),
        ("timestamp_ns", 3, "INT64", False, None),
        ("events", 4, "MESSAGE", True, "XEvent"),
        ("display_name", 11, "STRING", False, None),
    )),
    ("XEventMetadata", (
        ("id", 1, "INT64", False, None),
        ("name", 2, "STRING", False, None),
        ("display_name", 4, "STRING", False, None),
        ("stats", 5, "MESSAGE", True, "XStat"),
    )),
    ("XStatMetadata", (
        ("id", 1, "INT64", False, None),
        ("name", 2, "STRING", False, None),
    )),
    ("EventMetadataEntry", (
        ("key", 1, "INT64", False, None),
        ("value", 2, "MESSAGE", False, "XEventMetadata"),
    )),
    ("StatMetadataEntry", (
        ("key", 1, "INT64", False, None),
        ("value", 2, "MESSAGE", False, "XStatMetadata"),
    )),
    ("XPlane", (
        ("id", 1, "INT64", False, None),
        ("name", 2, "STRING", False, None),
        ("lines", 3, "MESSAGE", True, "XLine"),
        ("event_metadata", 4, "MESSAGE", True, "EventMetadataEntry"),
        ("stat_metadata", 5, "MESSAGE", True, "StatMetadataEntry"),
        ("stats", 6, "MESSAGE", True, "XStat"),
    )),
    ("XSpace", (
        ("planes", 1, "MESSAGE", True, "XPlane"),
        ("errors", 2, "STRING", True, None),
        ("warnings", 3, "STRING", True, None),
        ("hostnames", 4, "STRING", True, None),
    )),
)

#: Fields that share one `oneof` (message: (oneof name, its fields)): the value kind of a stat.
_ONEOFS = {"XStat": ("value", ("double_value", "uint64_value", "int64_value", "str_value", "bytes_value", "ref_value"))}


@functools.lru_cache(maxsize=1)
def _xspace_class() -> Any:
    """The `XSpace` message class, built once from `_SCHEMA` in a private pool."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    proto = descriptor_pb2.FileDescriptorProto(name="keras_gpu/xspace.proto", package=_PACKAGE, syntax="proto3")
    types = descriptor_pb2.FieldDescriptorProto
    for message, fields in _SCHEMA:
        msg = proto.message_type.add(name=message)
        oneof_name, oneof_fields = _ONEOFS.get(message, ("", ()))
        if oneof_name:
            msg.oneof_decl.add(name=oneof_name)
        for name, number, kind, repeated, type_name in fields:
            field = msg.field.add(
                name=name,
                number=number,
                type=getattr(types, f"TYPE_{kind}"),
                label=types.LABEL_REPEATED if repeated else types.LABEL_OPTIONAL,
            )
            if type_name is not None:
                field.type_name = f".{_PACKAGE}.{type_name}"
            if name in oneof_fields:
                field.oneof_index = 0
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    descriptor = pool.FindMessageTypeByName(f"{_PACKAGE}.XSpace")
    return message_factory.GetMessageClass(descriptor)


def parse(data: bytes) -> Any:
    """An XSpace message from the bytes of an `.xplane.pb` file.

    Raises:
        ValueError: When the bytes do not parse as an XSpace (a truncated
            or damaged file).
    """
    from google.protobuf.message import DecodeError

    space = _xspace_class()()
    try:
        space.ParseFromString(data)
    except DecodeError:
        raise ValueError(
            "it does not parse as an XSpace protobuf (the profiler's .xplane.pb format): the file is truncated or damaged"
        ) from None
    return space


def load(path: str | os.PathLike) -> Any:
    """An XSpace message from an `.xplane.pb` file.

    Raises:
        OSError: When the file cannot be read.
        ValueError: When it does not parse (see `parse`); the message names the file.
    """
    with open(path, "rb") as f:
        data = f.read()
    try:
        return parse(data)
    except ValueError as exc:
        raise ValueError(f"{os.fspath(path)}: {exc}") from None


def find_traces(directory: str | os.PathLike) -> list[str]:
    """The `.xplane.pb` files under `directory`, oldest first (by modification time)."""
    found = []
    for root, _dirs, files in os.walk(directory):
        found.extend(os.path.join(root, f) for f in files if f.endswith(".xplane.pb"))
    return sorted(found, key=lambda p: (os.path.getmtime(p), p))


class TraceEvent(NamedTuple):
    """One timed event of a trace.

    Attributes:
        line: Name of its line (a thread such as `tf_Compute/...`, or a GPU stream).
        name: Its name (an op as `path/to/op:OpType`, a kernel, an activity).
        start_ps: Start, in picoseconds on the trace's clock.
        end_ps: End, in picoseconds on the same clock.
        stats: Its stats by name (`step_num`, `group_id`, a kernel's
            `annotation`, ...), its metadata's first; `None` unless asked for.
    """

    line: str
    name: str
    start_ps: int
    end_ps: int
    stats: dict[str, Any] | None = None


def planes(space: Any) -> dict[str, Any]:
    """The planes of a trace by name (`/host:CPU`, `/device:GPU:0`, ...)."""
    return {plane.name: plane for plane in space.planes}


def plane_stats(plane: Any) -> dict[str, Any]:
    """A plane's own stats by name (`/host:metadata` holds the versions: `gpu_version`, `jax_version`, ...)."""
    return _stats(plane.stats, {entry.key: entry.value.name for entry in plane.stat_metadata})


def events(
    plane: Any, *, stats: bool = False, lines: Callable[[str], bool] | None = None
) -> Iterator[TraceEvent]:
    """Every event of a plane, line by line.

    Args:
        plane: An XPlane (see `planes`).
        stats: Also read each event's stats (`TraceEvent.stats`).
        lines: Only the lines whose name this returns true for (default: all).
    """
    names = {entry.key: entry.value.name for entry in plane.event_metadata}
    stat_names = {entry.key: entry.value.name for entry in plane.stat_metadata} if stats else {}
    metadata_stats = (
        {entry.key: _stats(entry.value.stats, stat_names) for entry in plane.event_metadata if entry.value.stats}
        if stats
        else {}
    )
    for line in plane.lines:
        label = line.name or line.display_name
        if lines is not None and not lines(label):
            continue
        base = line.timestamp_ns * 1000
        for event in line.events:
            start = base + event.offset_ps
            found = None
            if stats:
                found = dict(metadata_stats.get(event.metadata_id, {}))
                found.update(_stats(event.stats, stat_names))
            yield TraceEvent(label, names.get(event.metadata_id, ""), start, start + event.duration_ps, found)


def _stats(stats: Any, names: dict[int, str]) -> dict[str, Any]:
    """XStats as `{name: value}`; a reference value reads as the string it refers to."""
    out: dict[str, Any] = {}
    for stat in stats:
        kind = stat.WhichOneof("value")
        value = getattr(stat, kind) if kind else None
        out[names.get(stat.metadata_id, str(stat.metadata_id))] = names.get(value, value) if kind == "ref_value" else value
    return out
