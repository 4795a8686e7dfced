"""`PlacementLogger` on real `fit` calls: files, TensorBoard events, retracing, and a mirrored model."""

from __future__ import annotations

import inspect
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_accumulator as ea
from tensorflow.python.eager import context

from keras_gpu.hooks.placement_logger import PlacementLogger
from keras_gpu.meters import placement_report as R
from tests._util import run_python

CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"
TEXT_TAGS = ("placement/strategy", "placement/variables", "placement/ops_per_device", "placement/copies", "placement/cpu_fallbacks")


def _cnn() -> keras.Model:
    model = keras.Sequential(
        [
            keras.Input((8, 8, 1)),
            keras.layers.Conv2D(4, 3, activation="relu"),
            keras.layers.BatchNormalization(),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(3),
        ]
    )
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _data(n: int = 64, side: int = 8):
    rng = np.random.default_rng(0)
    return rng.random((n, side, side, 1), dtype=np.float32), rng.integers(0, 3, n)


def _events(run_dir: str) -> ea.EventAccumulator:
    acc = ea.EventAccumulator(run_dir, size_guidance={ea.TENSORS: 0, ea.GRAPH: 0, ea.SCALARS: 0})
    acc.Reload()
    return acc


def _values(acc: ea.EventAccumulator, tag: str) -> list[tuple[int, object]]:
    out = []
    for event in acc.Tensors(tag):
        value = tf.make_ndarray(event.tensor_proto)
        out.append((event.step, value.item().decode() if value.dtype == object else float(value)))
    return out


def _recorded_after_the_fact() -> int:
    context.context().export_run_metadata()

    @tf.function
    def fresh(v):
        return tf.reduce_sum(v * 7.0)

    fresh(tf.ones(3))
    return len(context.context().export_run_metadata().function_graphs)


class _Probe(keras.callbacks.Callback):
    """Records `model.train_function` at the start of `fit` and after the first batch."""

    def __init__(self):
        super().__init__()
        self.at_begin = []
        self.after_first = []

    def on_train_begin(self, logs=None):
        self.at_begin.append(self.model.train_function)

    def on_train_batch_end(self, batch, logs=None):
        if batch == 0:
            self.after_first.append(self.model.train_function)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One model, two `fit` calls with the same callback (the second must reuse the analysis)."""
    log_dir = str(tmp_path_factory.mktemp("placement_logs"))
    model = _cnn()
    x, y = _data()
    cb = PlacementLogger(log_dir)
    before, after = _Probe(), _Probe()
    model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[before, cb, after])
    first = {"count": cb.analysis_count, "overhead": cb.overhead_s, "analysis": cb.last_analysis_s, "report": cb.report}
    recorded = _recorded_after_the_fact()
    acc_first = _events(cb.run_dir)
    model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[before, cb, after])
    second = {"count": cb.analysis_count, "overhead": cb.overhead_s, "report": cb.report}
    return {
        "log_dir": log_dir, "model": model, "cb": cb, "first": first, "second": second, "before": before,
        "after": after, "recorded": recorded, "acc_first": acc_first, "acc": _events(cb.run_dir),
    }


def test_placement_json_lists_variables_and_ops_on_cpu0(trained):
    path = os.path.join(trained["log_dir"], "train", "placement.json")
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    model = trained["model"]
    paths = {v["path"] for v in data["variables"]}
    assert {v.path for v in model.trainable_variables + model.non_trainable_variables} <= paths
    assert {v.path for v in model.optimizer.variables} <= paths
    assert all(v["devices"] == [CPU0] for v in data["variables"])
    assert data["ops_per_device"][CPU0] > 50 and set(data["ops_per_device"]) == {CPU0}
    assert data["cpu_fallback_count"] == 0 and data["fallbacks_checked"] is False
    assert data["strategy"]["kind"] == "default" and data["step"] == 1
    assert R.read_json(path) == trained["cb"].report


def test_text_tags_scalars_and_graph_read_back_with_tensorboard(trained):
    acc = trained["acc_first"]
    for tag in TEXT_TAGS:
        assert acc.SummaryMetadata(tag).plugin_data.plugin_name == "text"
    (step, strategy), = _values(acc, "placement/strategy")
    assert step == 1 and "keras-gpu kind `default`" in strategy and "`CPU:0`" in strategy
    (_, variables), = _values(acc, "placement/variables")
    kernel = trained["model"].trainable_variables[0].path  # the first Conv2D kernel
    assert f"`{kernel}` | trainable | (3, 3, 1, 4) | float32 | ResourceVariable | `CPU:0` |" in variables
    (_, ops), = _values(acc, "placement/ops_per_device")
    total = trained["first"]["report"].ops.total_ops
    assert f"| `CPU:0` | {total} |" in ops
    assert _values(acc, "placement/cpu_fallback_ops") == [(1, 0.0)]
    assert _values(acc, "placement/copy_ops") == [(1, 0.0)]
    assert _values(acc, "placement/host_device_copy_ops") == [(1, 0.0)]
    graph = acc.Graph()
    assert len(graph.node) == total
    assert {n.device for n in graph.node} == {CPU0}
    assert any(n.op == "IteratorGetNext" for n in graph.node)


def test_train_function_is_restored_after_the_first_step(trained):
    before, after = trained["before"], trained["after"]
    assert len(before.at_begin) == len(after.after_first) == 2
    for keras_fn, seen_after_first in zip(before.at_begin, after.after_first, strict=True):
        assert seen_after_first is keras_fn
        assert not hasattr(seen_after_first, "__wrapped__")
    assert trained["model"].train_function is before.at_begin[-1]


def test_graph_collection_is_off_after_the_capture(trained):
    assert trained["recorded"] == 0
    assert _recorded_after_the_fact() == 0


def test_first_fit_analyses_within_budget_and_a_second_fit_reuses_it(trained):
    first, second = trained["first"], trained["second"]
    assert first["count"] == 1 and first["analysis"] < 2.0
    assert second["count"] == 1
    assert second["report"] is first["report"]
    assert second["overhead"] < 0.1
    # nothing was written again
    assert len(trained["acc"].Tensors("placement/strategy")) == 1
    assert len(trained["acc"].Tensors("placement/cpu_fallback_ops")) == 1


def test_new_input_shape_and_new_compile_retrace_and_are_analysed_again(tmp_path):
    model = keras.Sequential([keras.Input((None, 2)), keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    cb = PlacementLogger(str(tmp_path))
    rng = np.random.default_rng(1)
    fit = lambda length: model.fit(  # noqa: E731
        rng.random((32, length, 2), dtype=np.float32), rng.random((32, 1), dtype=np.float32), batch_size=8, verbose=0, callbacks=[cb]
    )
    fit(4)
    assert cb.analysis_count == 1
    fit(4)
    assert cb.analysis_count == 1
    fit(6)  # a new input shape: Keras retraces the step
    assert cb.analysis_count == 2
    assert cb.report.step == 9  # analysed right after the first step of that fit
    model.compile("adam", "mse")  # a new training function
    fit(6)
    assert cb.analysis_count == 3
    assert any(v.group == "optimizer" and v.path.startswith("adam") for v in cb.report.variables)
    acc = _events(cb.run_dir)
    # the new compile built a new optimizer, so the global step starts again at 0
    assert [s for s, _ in _values(acc, "placement/copy_ops")] == [1, 9, 1]
    assert len(acc.Graph().node) == cb.report.ops.total_ops  # TensorBoard shows the newest graph


def test_a_new_callback_instance_reuses_the_analysis_and_writes_its_own_run_dir(trained, tmp_path):
    model = trained["model"]
    x, y = _data(32)
    cb = PlacementLogger(str(tmp_path))
    model.fit(x, y, batch_size=16, verbose=0, callbacks=[cb])
    assert cb.analysis_count == 0
    assert cb.report is trained["first"]["report"]
    assert R.read_json(os.path.join(cb.run_dir, "placement.json")) == cb.report
    assert len(_values(_events(cb.run_dir), "placement/strategy")) == 1


def test_attached_after_the_step_was_compiled_it_retraces_once(tmp_path):
    model = _cnn()
    x, y = _data(64)
    model.fit(x, y, batch_size=16, verbose=0)  # compiled and instantiated without the callback
    cb = PlacementLogger(str(tmp_path))
    model.fit(x, y, batch_size=16, verbose=0, callbacks=[cb])
    assert cb.analysis_count == 1
    assert cb.report.ops is not None and cb.report.ops.ops_per_device[CPU0] > 50
    assert cb.report.step == 6  # 4 steps before, then the capture on the second step of this fit
    model.fit(x, y, batch_size=16, verbose=0, callbacks=[cb])
    assert cb.analysis_count == 1


def test_run_eagerly_logs_strategy_and_variables_without_ops(tmp_path):
    model = _cnn()
    model.compile("sgd", "mse", run_eagerly=True)
    x, y = _data(16)
    cb = PlacementLogger(str(tmp_path))
    model.fit(x, y.astype("float32")[:, None], batch_size=8, verbose=0, callbacks=[cb])
    with open(os.path.join(cb.run_dir, "placement.json"), encoding="utf-8") as f:
        data = json.load(f)
    assert data["ops_available"] is False and "run_eagerly=True" in data["ops_unavailable_reason"]
    assert {v.path for v in model.trainable_variables} <= {v["path"] for v in data["variables"]}
    assert cb.report.scalars() == {}
    (_, text), = _values(_events(cb.run_dir), "placement/ops_per_device")
    assert text.startswith("Op placement not captured: `run_eagerly=True`")


def test_a_step_that_raises_leaves_nothing_behind(tmp_path):
    def broken_loss(y_true, y_pred):
        raise RuntimeError("broken loss")

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("sgd", broken_loss)
    cb = PlacementLogger(str(tmp_path))
    with pytest.raises(RuntimeError, match="broken loss"):
        model.fit(np.ones((8, 3), "float32"), np.ones((8, 1), "float32"), verbose=0, callbacks=[cb])
    assert not hasattr(model.train_function, "__wrapped__")
    assert _recorded_after_the_fact() == 0
    model.compile("sgd", "mse")  # fixed: the same callback works on the next fit
    model.fit(np.ones((8, 3), "float32"), np.ones((8, 1), "float32"), verbose=0, callbacks=[cb])
    assert cb.analysis_count == 1 and cb.report.ops is not None


def test_two_loggers_on_one_fit_capture_once(tmp_path):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    first, second = PlacementLogger(str(tmp_path / "a")), PlacementLogger(str(tmp_path / "b"))
    model.fit(np.ones((16, 3), "float32"), np.ones((16, 1), "float32"), batch_size=8, verbose=0, callbacks=[first, second])
    assert first.analysis_count == 1 and first.report.ops is not None
    assert second.analysis_count == 0 and second.report is None
    assert not hasattr(model.train_function, "__wrapped__")


def test_xla_compiled_step_lists_its_cluster_and_write_graph_false_skips_the_graph(tmp_path):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile("sgd", "mse", jit_compile=True)
    cb = PlacementLogger(str(tmp_path), write_graph=False)
    model.fit(np.ones((16, 3), "float32"), np.ones((16, 2), "float32"), batch_size=8, verbose=0, callbacks=[cb])
    (cluster,) = cb.report.ops.xla_clusters
    assert cluster.device == CPU0 and cluster.function.startswith("__inference_one_step_on_data")
    assert cluster.ops > 10
    acc = _events(cb.run_dir)
    (_, text), = _values(acc, "placement/ops_per_device")
    assert "**Compiled by XLA**" in text and f"| {cluster.ops} |" in text
    assert not acc.Tags()["graph"]


def test_hooks_exist_on_keras_callback_and_there_is_no_batch_hook():
    defined = {name for name, _ in inspect.getmembers(PlacementLogger, inspect.isfunction) if name.startswith("on_")}
    own = {name for name in defined if getattr(PlacementLogger, name) is not getattr(keras.callbacks.Callback, name, None)}
    assert own == {"on_train_begin", "on_train_end"}
    for name in own:
        base = getattr(keras.callbacks.Callback, name)
        assert inspect.signature(getattr(PlacementLogger, name)) == inspect.signature(base)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"log_dir": 3}, TypeError, r"Received: log_dir=3"),
        ({"log_dir": "d", "max_rows": 0}, ValueError, r"`max_rows` must be a positive integer.*Received: max_rows=0"),
        ({"log_dir": "d", "max_rows": 2.5}, TypeError, r"Received: max_rows=2.5"),
        ({"log_dir": "d", "write_graph": "yes"}, TypeError, r"Received: write_graph='yes'"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        PlacementLogger(**kwargs)


MIRRORED_CHILD = r"""
import json, os, sys, time
import tensorflow as tf
import keras, numpy as np
from keras_gpu.hooks.placement_logger import PlacementLogger

strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
with strategy.scope():
    model = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Conv2D(4, 3, activation="relu"),
                              keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(3)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
rng = np.random.default_rng(0)
x, y = rng.random((64, 8, 8, 1), dtype=np.float32), rng.integers(0, 3, 64)
cb = PlacementLogger(sys.argv[1])
model.fit(x, y, batch_size=16, verbose=0, callbacks=[cb])
first = cb.analysis_count
model.fit(x, y, batch_size=16, verbose=0, callbacks=[cb])
print(json.dumps({"first": first, "second": cb.analysis_count, "overhead": cb.overhead_s,
                  "analysis": cb.last_analysis_s, "report": cb.report.to_dict()}))
"""


@pytest.mark.slow
def test_mirrored_on_two_logical_cpus_spreads_ops_and_mirrors_variables(tmp_path):
    proc = run_python(MIRRORED_CHILD.replace("sys.argv[1]", repr(str(tmp_path))), timeout=240, logical_cpus=2)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    report = out["report"]
    cpu1 = CPU0[:-1] + "1"
    assert report["strategy"]["kind"] == "mirrored" and report["strategy"]["num_replicas_in_sync"] == 2
    assert report["strategy"]["replica_devices"] == [CPU0, cpu1]
    assert set(report["ops_per_device"]) == {CPU0, cpu1}
    assert min(report["ops_per_device"].values()) > 50
    assert report["copies_by_kind"].get("host_to_host", 0) > 0 and report["host_device_copy_ops"] == 0
    assert report["cpu_fallback_count"] == 0 and not report["fallbacks_checked"]
    variables = report["variables"]
    assert variables and all(v["devices"] == [CPU0, cpu1] for v in variables)
    assert all(v["kind"] in ("MirroredVariable", "SyncOnReadVariable") for v in variables)
    assert out["first"] == 1 and out["second"] == 1
    assert out["analysis"] < 2.0 and out["overhead"] < 0.1
    assert os.path.exists(tmp_path / "train" / "placement.json")
