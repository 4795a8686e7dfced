"""The TensorBoard custom-scalars layout: each metric's per-replica and per-GPU series on one chart."""

from __future__ import annotations

from keras_gpu import tags as _tags
from keras_gpu.loggers._writer import SummaryWriter

__all__ = ["CHARTS", "write_layout"]

# (category, chart title, tag regex), derived from the tag table: regexes match
# every replica, device and GPU, so one layout serves any cluster shape.
CHARTS: tuple[tuple[str, str, str], ...] = tuple(_tags.charts())


def _layout_proto():
    from tensorboard.plugins.custom_scalar import layout_pb2

    categories: dict[str, list] = {}
    for category, title, regex in CHARTS:
        chart = layout_pb2.Chart(title=title, multiline=layout_pb2.MultilineChartContent(tag=[regex]))
        categories.setdefault(category, []).append(chart)
    return layout_pb2.Layout(category=[layout_pb2.Category(title=t, chart=c) for t, c in categories.items()])


def write_layout(writer: SummaryWriter) -> bool:
    """Write the layout into `writer`'s run once per writer; later calls do nothing."""
    if getattr(writer, "_layout_written", False):
        return True

    from tensorboard.plugins.custom_scalar import summary as custom_scalar

    ok = writer.summary(custom_scalar.pb(_layout_proto()), step=0)
    writer._layout_written = ok  # type: ignore[attr-defined]
    return ok
