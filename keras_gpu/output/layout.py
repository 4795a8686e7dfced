"""The TensorBoard custom-scalars layout: each metric's per-replica and per-GPU series on one chart.

A run's layout holds only the charts its scalars fill: the writer adds a
chart the first time it writes a tag the chart shows, and writes the layout
again then (`keras_gpu.output.writer.SummaryWriter.chart`). A CPU fit
therefore shows no GPU chart, a single process no cluster chart, a run
without a known peak no MFU chart and one without `tokens_per_sample` no
tokens/s chart. TensorBoard shows the last layout of each run, merged over
the runs of a log directory.

Charts whose values are indices (the slowest worker, its part, the worker
that slowed) are *margin* charts, which TensorBoard draws without its
smoothing (0.6 by default): smoothed, an index becomes a fraction between
two workers. They have a category of their own (`keras-gpu: cluster: which
worker`), shown first. Every other chart is a multi-line chart of one tag
regex.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from keras_gpu.output import tags as _tags

__all__ = ["CHARTS", "INDEX_SUFFIX", "UNSMOOTHED", "charts_of", "layout_summary"]

# (category, chart title, tag regex), derived from the tag table: regexes match
# every replica, device and GPU, so one layout serves any cluster shape.
CHARTS: tuple[tuple[str, str, str], ...] = tuple(_tags.charts())

UNSMOOTHED: frozenset[_tags.Tag] = frozenset(
    {_tags.CLUSTER_SLOWEST_WORKER, _tags.CLUSTER_PART, _tags.CLUSTER_SLOWDOWN_WORKER}
)
"""Tags whose values are indices: their charts are drawn unsmoothed (margin charts)."""

INDEX_SUFFIX = ": which worker"
"""Added to a category's title for the category of its index charts, shown before it."""

_COMPILED = tuple(re.compile(regex) for _, _, regex in CHARTS)


def _margin_series() -> dict[int, tuple[str, ...]]:
    """Chart index -> the tag names of each series, for the charts that hold an `UNSMOOTHED` tag."""
    out: dict[int, tuple[str, ...]] = {}
    for i, (category, title, _) in enumerate(CHARTS):
        members = [t for t in _tags.TAGS if t.chart == (category, title) and not t.text]
        if any(t in UNSMOOTHED for t in members):
            # A margin chart names its tags one by one: only tags without fields can be listed.
            if any(t.fields for t in members):
                raise ValueError(f"The chart {title!r} holds an index tag and a tag with fields: split it.")
            out[i] = tuple(t.pattern for t in members)
    return out


_MARGIN = _margin_series()


def _ordered(indices: Iterable[int]) -> list[int]:
    """The charts `indices`, category by category in `CHARTS`' order, each category's index charts first.

    TensorBoard (2.21) draws a category's margin charts after its other
    charts, and last first: the index charts go to a category of their own
    (`INDEX_SUFFIX`), before the one they come from, listed last first so
    that they show in `CHARTS`' order.
    """
    chosen = set(indices)
    out: list[int] = []
    for category in dict.fromkeys(c for c, _, _ in CHARTS):
        members = [i for i, chart in enumerate(CHARTS) if i in chosen and chart[0] == category]
        out += sorted((i for i in members if i in _MARGIN), reverse=True) + [i for i in members if i not in _MARGIN]
    return out


def charts_of(names: Iterable[str]) -> frozenset[int]:
    """The indices into `CHARTS` of the charts that show any of the tag `names`."""
    found = set()
    for name in names:
        for i, regex in enumerate(_COMPILED):
            if i not in found and regex.match(name):
                found.add(i)
    return frozenset(found)


def _chart(index: int) -> Any:
    from tensorboard.plugins.custom_scalar import layout_pb2

    _, title, regex = CHARTS[index]
    if index in _MARGIN:
        series = [layout_pb2.MarginChartContent.Series(value=t, lower=t, upper=t) for t in _MARGIN[index]]
        return layout_pb2.Chart(title=title, margin=layout_pb2.MarginChartContent(series=series))
    return layout_pb2.Chart(title=title, multiline=layout_pb2.MultilineChartContent(tag=[regex]))


def layout_summary(indices: Iterable[int]) -> Any:
    """The `summary_pb2.Summary` of a layout holding the charts `indices` (into `CHARTS`), in `CHARTS`' order.

    What the custom-scalars plugin's own `pb()` writes, built without TensorFlow.
    """
    from tensorboard.compat.proto import summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
    from tensorboard.plugins.custom_scalar import layout_pb2, metadata

    categories: dict[str, list[Any]] = {}
    for index in _ordered(indices):
        category = CHARTS[index][0] + (INDEX_SUFFIX if index in _MARGIN else "")
        categories.setdefault(category, []).append(_chart(index))
    layout = layout_pb2.Layout(category=[layout_pb2.Category(title=t, chart=c) for t, c in categories.items()])
    tensor = tensor_pb2.TensorProto(
        dtype=types_pb2.DT_STRING,
        tensor_shape=tensor_shape_pb2.TensorShapeProto(),
        string_val=[layout.SerializeToString()],
    )
    summary = summary_pb2.Summary()
    summary.value.add(tag=metadata.CONFIG_SUMMARY_TAG, metadata=metadata.create_summary_metadata(), tensor=tensor)
    return summary
