"""Several `fit` calls into one `log_dir`: one event file per process, every point served in order by a real TensorBoard."""

from __future__ import annotations

import os

import numpy as np
import pytest

from keras_gpu.output import writer as _writer
from tests._tensorboard import tensorboard_server

pytestmark = pytest.mark.slow


def _event_files(path) -> list[str]:
    return sorted(name for name in os.listdir(path) if "tfevents" in name)


def _served(tb, run: str, tag: str) -> list[tuple[int, float]]:
    return [(step, value) for _wall, step, value in tb.get("/data/plugin/scalars/scalars", run=run, tag=tag)]


def test_many_writer_lifetimes_in_one_second_append_to_one_file_served_in_order(tmp_path):
    # Twelve acquire/write/release cycles, as twelve short `fit` calls make: with
    # one file per cycle their names would sort `.10.v2` before `.8.v2`.
    path = str(tmp_path / "exp" / "train")
    written = []
    for i in range(12):
        writer = _writer.acquire(path)
        assert writer.scalars({"x/value": 0.5 * i}, step=10 * i)
        written.append((10 * i, 0.5 * i))
        _writer.release(writer)
        assert writer.closed
    assert len(_event_files(path)) == 1
    with tensorboard_server(str(tmp_path)) as tb:
        points = tb.wait_for(lambda s: (p := _served(s, "exp/train", "x/value")) and p[-1][0] == 110 and p)
    assert points == written


def test_repeated_fits_into_one_log_dir_serve_every_point_in_order(tmp_path, monkeypatch):
    import keras

    import keras_gpu

    written: dict[str, list[tuple[int, float]]] = {}
    original = _writer.SummaryWriter.scalars

    def spy(self, values, step):  # the truth: every value handed to the writer, in call order
        for tag, value in values.items():
            written.setdefault(tag, []).append((int(step), float(np.float32(value))))
        return original(self, values, step)

    monkeypatch.setattr(_writer.SummaryWriter, "scalars", spy)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 8)).astype("float32")
    y = rng.normal(size=(256, 1)).astype("float32")
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    log_dir = tmp_path / "exp"
    for _ in range(11):
        model.fit(x, y, batch_size=32, epochs=1, verbose=0,
                  callbacks=keras_gpu.callbacks(log_dir, throughput=False, placement=False, every_s=0.05))
    run_path = log_dir / "train"
    assert len(_event_files(run_path)) == 1
    tag = "memory/host/rss_bytes"
    expected = written[tag]
    assert len(expected) >= 11 and [s for s, _ in expected] == sorted(s for s, _ in expected)
    with tensorboard_server(str(tmp_path)) as tb:
        last = expected[-1][0]
        points = tb.wait_for(lambda s: (p := _served(s, "exp/train", tag)) and p[-1][0] == last and p)
    assert [s for s, _ in points] == [s for s, _ in expected]
    assert np.allclose([v for _, v in points], [v for _, v in expected], rtol=1e-6, atol=0)
