"""Hand-built XSpace traces for the trace-reading tests: known events at known times."""

from __future__ import annotations

from keras_gpu.meters import xspace

__all__ = ["US", "space"]

US = 1_000_000  # picoseconds per microsecond


def space(planes: dict) -> object:
    """An XSpace from `{plane: {line: [(name, start_us, end_us[, {stat: value}])]}}`, serialised and parsed back."""
    built = xspace._xspace_class()()
    for plane_name, lines in planes.items():
        plane = built.planes.add(name=plane_name)
        ids: dict[str, int] = {}
        stat_ids: dict[str, int] = {}
        for line_name, events in lines.items():
            line = plane.lines.add(name=line_name, timestamp_ns=0)
            for name, start, end, *stats in events:
                if name not in ids:
                    ids[name] = len(ids) + 1
                    entry = plane.event_metadata.add(key=ids[name])
                    entry.value.id, entry.value.name = ids[name], name
                event = line.events.add(metadata_id=ids[name], offset_ps=start * US, duration_ps=(end - start) * US)
                for key, value in (stats[0] if stats else {}).items():
                    if key not in stat_ids:
                        stat_ids[key] = len(stat_ids) + 1
                        meta = plane.stat_metadata.add(key=stat_ids[key])
                        meta.value.id, meta.value.name = stat_ids[key], key
                    stat = event.stats.add(metadata_id=stat_ids[key])
                    if isinstance(value, str):
                        stat.str_value = value
                    else:
                        stat.int64_value = value
    return xspace.parse(built.SerializeToString())
