"""The per-worker run directory layout and the shared, fault-tolerant summary writer."""

from __future__ import annotations

import logging
import os

import pytest

from keras_gpu.core.checks import check_log_dir, check_positive
from keras_gpu.core.cluster import ClusterInfo
from keras_gpu.output import writer as _writer
from tests import _events

TWO = {"worker": ("127.0.0.1:1", "127.0.0.1:2")}
WITH_CHIEF = {"chief": ("h:1",), "worker": ("h:2", "h:3"), "evaluator": ("h:4",)}


@pytest.mark.parametrize(
    ("info", "expected"),
    [
        (ClusterInfo("local"), "logs/train"),
        (ClusterInfo("tf_config", TWO, "worker", 0), "logs/train"),
        (ClusterInfo("tf_config", TWO, "worker", 1), "logs/worker_1/train"),
        (ClusterInfo("tf_config", WITH_CHIEF, "chief", 0), "logs/train"),
        (ClusterInfo("tf_config", WITH_CHIEF, "worker", 0), "logs/worker_1/train"),
        (ClusterInfo("tf_config", WITH_CHIEF, "worker", 1), "logs/worker_2/train"),
        (ClusterInfo("tf_config", WITH_CHIEF, "evaluator", 0), "logs/evaluator_0/train"),
    ],
)
def test_run_dir_gives_every_process_its_own_directory(info, expected):
    assert _writer.run_dir("logs", info) == os.path.join(*expected.split("/"))


def test_check_writable_creates_the_directory(tmp_path):
    target = tmp_path / "a" / "b"
    _writer.check_writable(str(target))
    assert target.is_dir() and list(target.iterdir()) == []


def test_check_writable_explains_an_unwritable_path(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(RuntimeError, match=r"Cannot write TensorBoard logs to .*file/sub.*Pass a writable directory as `log_dir`"):
        _writer.check_writable(str(blocker / "sub"))
    with pytest.raises(RuntimeError, match=r"Received: log_dir='user/given'$"):
        _writer.check_writable(str(blocker / "sub" / "train"), received="user/given")


@pytest.mark.parametrize("bad", [None, 3, True, b"x"])
def test_check_log_dir_rejects_non_paths(bad):
    with pytest.raises(TypeError, match="log_dir"):
        check_log_dir(bad)


@pytest.mark.parametrize("bad", ["", "   "])
def test_check_log_dir_rejects_empty(bad):
    with pytest.raises(ValueError, match="Received: log_dir="):
        check_log_dir(bad)


@pytest.mark.parametrize("bad, error", [(0, ValueError), (-1, ValueError), (float("nan"), ValueError),
                                        (float("inf"), ValueError), (True, TypeError), ("5", TypeError)])
def test_check_positive_rejects(bad, error):
    with pytest.raises(error, match="every_s"):
        check_positive("every_s", bad)


def test_check_positive_integer_and_none():
    assert check_positive("n", 3, integer=True) == 3
    assert check_positive("n", None, allow_none=True) is None
    with pytest.raises(TypeError, match="positive integer"):
        check_positive("n", 2.5, integer=True)


_read_scalars = _events.read_scalars


def test_writers_are_shared_per_directory_and_closed_by_the_last_user(tmp_path):
    path = str(tmp_path / "train")
    a = _writer.acquire(path)
    b = _writer.acquire(path)
    assert a is b
    a.scalars({"x/a": 1.0}, step=3)
    _writer.release(a)
    assert not b.closed
    b.scalars({"x/b": 2.5}, step=4)
    _writer.release(b)
    assert b.closed
    assert len([f for f in os.listdir(path) if "tfevents" in f]) == 1
    assert _read_scalars(path) == {"x/a": [(3, 1.0)], "x/b": [(4, 2.5)]}
    c = _writer.acquire(path)
    assert c is not a
    _writer.release(c)


def test_a_storage_failure_turns_logging_off_with_one_error(tmp_path, caplog, monkeypatch):
    writer = _writer.SummaryWriter(str(tmp_path / "train"))

    def broken():
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writer, "_get", broken)
    with caplog.at_level(logging.ERROR, logger="keras_gpu"):
        assert writer.scalars({"a": 1.0}, step=1) is False
        assert writer.scalars({"a": 2.0}, step=2) is False
        assert writer.text("t", "x", step=2) is False
    assert writer.disabled
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "No space left on device" in errors[0].getMessage()
    writer.close()
    assert writer.closed


def _layouts(path):
    """Every custom-scalars layout written to the run at `path`, in order."""
    from tensorboard.backend.event_processing import event_accumulator
    from tensorboard.plugins.custom_scalar import layout_pb2, metadata

    acc = event_accumulator.EventAccumulator(path, size_guidance={event_accumulator.TENSORS: 0})
    acc.Reload()
    if metadata.CONFIG_SUMMARY_TAG not in acc.Tags()["tensors"]:
        return []
    out = []
    for event in acc.Tensors(metadata.CONFIG_SUMMARY_TAG):
        layout = layout_pb2.Layout()
        layout.ParseFromString(event.tensor_proto.string_val[0])
        out.append(layout)
    return out


def _titles(layout):
    return [(cat.title, chart.title) for cat in layout.category for chart in cat.chart]


def test_the_layout_holds_the_charts_of_the_tags_written_and_grows_with_them(tmp_path):
    from keras_gpu.output.layout import CHARTS

    path = str(tmp_path / "train")
    writer = _writer.acquire(path)
    writer.text("placement/strategy", "text is not charted", step=0)
    writer.flush()
    assert _layouts(path) == []
    writer.scalars({"throughput/samples_per_sec": 1.0, "memory/host/rss_bytes": 2.0}, step=1)
    writer.scalars({"throughput/samples_per_sec": 3.0, "memory/host/rss_bytes": 4.0}, step=2)  # nothing new
    writer.scalars({"gpu/0/power_watts": 5.0, "gpu/1/power_watts_max": 6.0}, step=2)
    _writer.release(writer)
    layouts = _layouts(path)
    assert len(layouts) == 2  # written again only where a chart was added
    first, last = (_titles(layout) for layout in layouts)
    assert first == [
        ("keras-gpu: throughput", "samples/s, all replicas: wall clock, and steady state per epoch"),
        ("keras-gpu: memory", "host RSS (bytes)"),
    ]
    assert last == [*first, ("keras-gpu: GPU", "power (W), per GPU")]
    # The charts keep the order of the tag table, and each chart's regex is the one of CHARTS.
    regexes = [chart.multiline.tag[0] for cat in layouts[-1].category for chart in cat.chart]
    assert regexes == [regex for category, title, regex in CHARTS if (category, title) in last]
    # A second writer of the same run in this process (the next `fit`) adds to the same layout.
    writer = _writer.acquire(path)
    writer.scalars({"memory/host/rss_bytes": 1.0}, step=3)
    writer.scalars({"time/epoch_sec": 1.0}, step=3)
    _writer.release(writer)
    layouts = _layouts(path)
    assert len(layouts) == 3
    assert set(_titles(layouts[-1])) == {*last, ("keras-gpu: where the time goes", "epoch time and its parts (s)")}


def test_index_charts_are_margin_charts_which_tensorboard_does_not_smooth(tmp_path):
    path = str(tmp_path / "train")
    writer = _writer.acquire(path)
    values = {"cluster/slowest_worker": 1.0, "cluster/imbalance": 0.2, "cluster/slowdown": 1.1,
              "cluster/slowdown_worker": 0.0, "cluster/straggler_part": 2.0}
    writer.scalars(values, step=1)
    _writer.release(writer)
    (layout,) = _layouts(path)
    # TensorBoard draws a category's margin charts after the others, last first: they have a category of their own,
    # first, listed last first.
    assert _titles(layout) == [
        ("keras-gpu: cluster: which worker", "slowdown against each worker's own best window"),
        ("keras-gpu: cluster: which worker", "slowest worker's part (0 compute, 1 input, 2 host)"),
        ("keras-gpu: cluster: which worker", "slowest worker (index)"),
        ("keras-gpu: cluster", "imbalance (slowest busy - median busy) / step"),
    ]
    charts = {chart.title: chart for cat in layout.category for chart in cat.chart}
    margin = {
        title: [(s.value, s.lower, s.upper) for s in chart.margin.series]
        for title, chart in charts.items()
        if chart.HasField("margin")
    }
    assert margin == {
        "slowest worker (index)": [("cluster/slowest_worker",) * 3],
        "slowest worker's part (0 compute, 1 input, 2 host)": [("cluster/straggler_part",) * 3],
        "slowdown against each worker's own best window": [
            ("cluster/slowdown",) * 3, ("cluster/slowdown_median",) * 3, ("cluster/slowdown_worker",) * 3
        ],
    }
    assert charts["imbalance (slowest busy - median busy) / step"].HasField("multiline")

