"""End to end: train with `keras_gpu.callbacks()`, then read the run back from a real TensorBoard server."""

from __future__ import annotations

import re

import pytest

from keras_gpu.output import tags as tags_registry
from tests._tensorboard import tensorboard_server
from tests._util import run_python

pytestmark = pytest.mark.slow

TRAIN = """
import numpy as np, keras, keras_gpu
strategy = keras_gpu.make_strategy("auto")
assert strategy.num_replicas_in_sync == 2, strategy
rng = np.random.default_rng(0)
x = rng.normal(size=(1000, 256)).astype("float32"); y = (x[:, :4].sum(1) > 0).astype("int32")
with strategy.scope():
    model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(512, activation="relu"), keras.layers.Dense(2)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(x, y, batch_size=64, epochs=2, verbose=0, callbacks=keras_gpu.callbacks({log_dir!r}, profile_every_s=300))
"""


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("tb")
    log_dir = root / "exp1"
    run_python(TRAIN.format(log_dir=str(log_dir)), timeout=240, logical_cpus=2)
    return root


def _scalar_tags(server, run):
    tags = server.get("/data/plugin/scalars/tags")
    return tags.get(run, {})


def test_real_tensorboard_serves_throughput_memory_and_placement(trained_run):
    run = "exp1/train"
    with tensorboard_server(str(trained_run)) as tb:
        tags = tb.wait_for(lambda s: (t := _scalar_tags(s, run)) and "throughput/samples_per_sec" in t and t)
        for tag in (
            "throughput/samples_per_sec",
            "throughput/steps_per_sec",
            "throughput/samples_per_sec_per_replica",
            "time/epoch_sec",
            "step_time/step_sec",
            "step_time/replica_0_CPU_0/compute_sec",
            "step_time/replica_1_CPU_1/compute_sec",
            "memory/allocator/CPU_0/current_bytes",
            "memory/allocator/CPU_0/peak_bytes",
            "memory/host/rss_bytes",
            "placement/cpu_fallback_ops",
        ):
            assert tag in tags, (tag, sorted(tags))

        points = tb.get("/data/plugin/scalars/scalars", run=run, tag="throughput/samples_per_sec")
        assert points and all(value > 0 for _wall, _step, value in points)
        steps = [step for _wall, step, _value in points]
        assert steps == sorted(steps) and steps[-1] <= 2 * 16

        # Large enough tensors (256x512 weights) for the CPU allocator to count them.
        peak = tb.get("/data/plugin/scalars/scalars", run=run, tag="memory/allocator/CPU_0/peak_bytes")
        assert peak and max(v for _w, _s, v in peak) >= 256 * 512 * 4

        fallbacks = tb.get("/data/plugin/scalars/scalars", run=run, tag="placement/cpu_fallback_ops")
        assert [v for _w, _s, v in fallbacks] == [0.0]

        text_tags = tb.wait_for(lambda s: s.get("/data/plugin/text/tags").get(run))
        assert any(t.startswith("placement/") for t in text_tags), text_tags

        layout = tb.get("/data/plugin/custom_scalars/layout")
        titles = [c["title"] for c in layout["category"]]
        assert titles == ["keras-gpu: throughput", "keras-gpu: where the time goes", "keras-gpu: memory",
                          "keras-gpu: placement"]
        # Only the charts this run fills: every chart shows a tag of the run, every charted tag of the run is shown.
        regexes = [c["multiline"]["tag"][0] for cat in layout["category"] for c in cat["chart"]]
        assert all(any(re.match(r, tag) for tag in tags) for r in regexes), regexes
        charted = [tag for tag in tags if tags_registry.match(tag)[0].chart is not None]
        assert charted and all(any(re.match(r, tag) for r in regexes) for tag in charted), sorted(tags)
        chart_titles = [c["title"] for cat in layout["category"] for c in cat["chart"]]
        assert "MFU (0..1)" not in chart_titles and "tokens/s, all replicas" not in chart_titles

        graph_runs = tb.get("/data/plugin/graphs/info")
        assert graph_runs.get(run, {}).get("run_graph"), graph_runs
