"""The TensorBoard custom-scalars layout: each metric's per-replica and per-GPU series on one chart."""

from __future__ import annotations

from keras_gpu.loggers._writer import SummaryWriter

__all__ = ["CHARTS", "write_layout"]

# (category, chart title, tag regex). Regexes match every replica, device and
# GPU, so one layout serves any cluster shape and any worker's run.
CHARTS: tuple[tuple[str, str, str], ...] = (
    ("keras-gpu: throughput", "samples/s (global)", r"^throughput/samples_per_sec$"),
    (
        "keras-gpu: throughput",
        "samples/s per replica",
        r"^throughput/(replica_[^/]+/samples_per_sec|samples_per_sec_per_replica)$",
    ),
    ("keras-gpu: throughput", "steps/s", r"^throughput/steps_per_sec$"),
    ("keras-gpu: throughput", "TFLOP/s", r"^throughput/tflops_per_sec$"),
    ("keras-gpu: throughput", "MFU (0..1)", r"^throughput/mfu$"),
    ("keras-gpu: throughput", "first execution of each epoch (s)", r"^throughput/first_step_sec$"),
    ("keras-gpu: memory", "allocator in use (bytes), per device", r"^memory/allocator/[^/]+/current_bytes$"),
    ("keras-gpu: memory", "allocator peak (bytes), window and run, per device", r"^memory/allocator/[^/]+/(run_)?peak_bytes$"),
    ("keras-gpu: memory", "GPU memory of this process (bytes), per GPU", r"^gpu/\d+/process_memory_bytes(_max)?$"),
    ("keras-gpu: memory", "GPU memory used, all processes (bytes), per GPU", r"^gpu/\d+/memory_(used|total)_bytes(_max)?$"),
    ("keras-gpu: memory", "host RSS (bytes)", r"^memory/host/(peak_)?rss_bytes$"),
    ("keras-gpu: GPU", "utilization (%), per GPU", r"^gpu/\d+/utilization_percent(_max)?$"),
    ("keras-gpu: GPU", "memory bandwidth utilization (%), per GPU", r"^gpu/\d+/memory_utilization_percent(_max)?$"),
    ("keras-gpu: GPU", "power (W), per GPU", r"^gpu/\d+/power_watts(_max)?$"),
    ("keras-gpu: GPU", "temperature (C), per GPU", r"^gpu/\d+/temperature_c(_max)?$"),
    ("keras-gpu: GPU", "SM clock (MHz), per GPU", r"^gpu/\d+/sm_clock_mhz(_max)?$"),
)


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
