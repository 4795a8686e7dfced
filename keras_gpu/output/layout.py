"""The TensorBoard custom-scalars layout: each metric's per-replica and per-GPU series on one chart."""

from __future__ import annotations

from keras_gpu.output import tags as _tags
from keras_gpu.output.writer import SummaryWriter

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
    if writer.layout_written:
        return True

    from tensorboard.compat.proto import summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
    from tensorboard.plugins.custom_scalar import metadata

    # What the custom-scalars plugin's own `pb()` writes, built without TensorFlow.
    tensor = tensor_pb2.TensorProto(
        dtype=types_pb2.DT_STRING,
        tensor_shape=tensor_shape_pb2.TensorShapeProto(),
        string_val=[_layout_proto().SerializeToString()],
    )
    summary = summary_pb2.Summary()
    summary.value.add(tag=metadata.CONFIG_SUMMARY_TAG, metadata=metadata.create_summary_metadata(), tensor=tensor)
    ok = writer.summary(summary, step=0)
    writer.layout_written = ok
    return ok
