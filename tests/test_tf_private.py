"""keras_gpu.core.tf_private against the installed TensorFlow: each private call still does what keras-gpu relies on.

Run these first after a TensorFlow upgrade: a failure names the private API that moved.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

tf = pytest.importorskip("tensorflow")

from keras_gpu.core import tf_private as _tf
from tests._util import run_python


def test_runtime_initialized_is_false_in_a_fresh_process_and_true_after_a_tensor():
    code = (
        "import tensorflow as tf\n"
        "from keras_gpu.core import tf_private as _tf\n"
        "before = _tf.runtime_initialized()\n"
        "tf.config.list_physical_devices('CPU')\n"
        "after_listing = _tf.runtime_initialized()\n"
        "tf.constant(1.0)\n"
        "print(before, after_listing, _tf.runtime_initialized())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.split()[-3:] == ["False", "False", "True"]


def test_clearing_a_logical_configuration_restores_one_device_before_init_and_refuses_after():
    code = (
        "import tensorflow as tf\n"
        "from keras_gpu.core import tf_private as _tf\n"
        "cpu = tf.config.list_physical_devices('CPU')[0]\n"
        "_tf.clear_logical_configuration(cpu)\n"
        "print(tf.config.get_logical_device_configuration(cpu))\n"
        "print(len(tf.config.list_logical_devices('CPU')))\n"
        "try:\n"
        "    _tf.clear_logical_configuration(cpu)\n"
        "except RuntimeError as e:\n"
        "    print('refused', 'initialized' in str(e))\n"
    )
    out = run_python(code, timeout=300, logical_cpus=2)
    assert out.stdout.split("\n")[-4:-1] == ["None", "1", "refused True"]


def test_graph_collection_records_placed_graphs_only_while_on():
    _tf.export_run_metadata()  # drain

    @tf.function
    def first(x):
        return x * 2.0 + 1.0

    @tf.function
    def second(x):
        return x - 3.0

    _tf.graph_collection(True)
    try:
        first(tf.constant(1.0))
        recorded = _tf.export_run_metadata()  # export before switching off: switching off drops the record
    finally:
        _tf.graph_collection(False)
    nodes = [n for fg in recorded.function_graphs for pg in fg.partition_graphs for n in pg.node]
    assert any(n.op == "Mul" for n in nodes)
    assert all(n.device for n in nodes if n.op == "Mul")

    second(tf.constant(1.0))
    assert list(_tf.export_run_metadata().function_graphs) == []


def test_new_graph_def_is_an_empty_graph_def_proto():
    graph_def = _tf.new_graph_def()
    assert type(graph_def).__name__ == "GraphDef" and len(graph_def.node) == 0


def test_function_body_graph_finds_a_called_function_and_constant_value_folds():
    @tf.function
    def inner(x):
        return tf.matmul(x, x)

    @tf.function
    def outer(x):
        return inner(x) + tf.constant(2.0) * 3.0

    graph = outer.get_concrete_function(tf.TensorSpec([2, 2], tf.float32)).graph
    call = next(op for op in graph.get_operations() if op.type in ("PartitionedCall", "StatefulPartitionedCall"))
    body = _tf.function_body_graph(graph, call.get_attr("f").name)
    assert body is not None and any(op.type == "MatMul" for op in body.get_operations())
    assert _tf.function_body_graph(graph, "no_such_function") is None

    const = next(op for op in graph.get_operations() if op.type == "Const")
    assert float(_tf.constant_value(const.outputs[0])) == 2.0
    placeholder = next(op for op in graph.get_operations() if op.type == "Placeholder")
    assert _tf.constant_value(placeholder.outputs[0]) is None


def test_has_kernel_tells_registered_ops_from_unknown_ones():
    assert _tf.has_kernel("MatMul") is True
    assert _tf.has_kernel("NoSuchOpAnywhere") is False


def test_strategy_devices_and_collective_ops():
    assert _tf.strategy_devices(tf.distribute.get_strategy()) == ()
    one = tf.distribute.OneDeviceStrategy("/cpu:0")
    assert _tf.strategy_devices(one) == ("/job:localhost/replica:0/task:0/device:CPU:0",)
    assert _tf.strategy_devices(object()) == ()

    stock = tf.distribute.MirroredStrategy(["/cpu:0"])
    assert _tf.collective_cross_device_ops(stock) is True
    explicit = tf.distribute.MirroredStrategy(["/cpu:0"], cross_device_ops=tf.distribute.ReductionToOneDevice())
    assert _tf.collective_cross_device_ops(explicit) is False
    assert _tf.collective_cross_device_ops(one) is False


def test_coordination_service_is_unconfigured_in_a_plain_process():
    code = "from keras_gpu.core import tf_private as _tf\nprint(_tf.coordination_service_config())\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.split()[-1] == "None"
