"""The placement analysis on hand-built `RunMetadata`/`GraphDef` protos, plus the graph capture switch."""

from __future__ import annotations

import json
import os

import pytest
from tensorflow.core.framework import function_pb2, node_def_pb2
from tensorflow.core.protobuf import config_pb2

from keras_gpu.meters import placement as P
from keras_gpu.meters import placement_capture as C
from keras_gpu.meters import placement_report as R
from keras_gpu.output.placement_markdown import render

HOST = "/job:localhost/replica:0/task:0/device:"
CPU0, CPU1, GPU0, GPU1 = HOST + "CPU:0", HOST + "CPU:1", HOST + "GPU:0", HOST + "GPU:1"


def _node(name: str, op: str, device: str, inputs=(), **attrs) -> node_def_pb2.NodeDef:
    node = node_def_pb2.NodeDef(name=name, op=op, device=device)
    node.input.extend(inputs)
    for key, value in attrs.items():
        if isinstance(value, bool):
            node.attr[key].b = value
        else:
            node.attr[key].s = value.encode()
    return node


def _send(name, src, dst, tensor, op="_Send"):
    return _node(name, op, src, send_device=src, recv_device=dst, tensor_name=tensor)


def _recv(name, src, dst, tensor, op="_Recv"):
    return _node(name, op, dst, send_device=src, recv_device=dst, tensor_name=tensor)


def _function_graph(*partitions, library=()) -> config_pb2.RunMetadata.FunctionGraphs:
    fg = config_pb2.RunMetadata.FunctionGraphs()
    for i, nodes in enumerate(partitions):
        pg = fg.partition_graphs.add()
        pg.node.extend(nodes)
        if i == 0:
            for fdef in library:
                pg.library.function.add().CopyFrom(fdef)
    return fg


def _gpu_step() -> config_pb2.RunMetadata.FunctionGraphs:
    """A single-GPU training step as TensorFlow partitions it: input on the host, compute on the GPU."""
    host = [
        _node("iterator", "_Arg", CPU0),
        _node("IteratorGetNext", "IteratorGetNext", CPU0, ["iterator"]),
        _send("x/_0", CPU0, GPU0, "edge_1_x"),
        _send("y/_2", CPU0, GPU0, "edge_2_y"),
        _node("unique", "Unique", CPU0, ["labels/_5"]),
        _recv("labels/_5", GPU0, CPU0, "edge_5_labels"),
        _node("fmt", "StringFormat", CPU0),
        _node("c_host", "Const", CPU0),
        _node("noop", "NoOp", CPU0),
        _node("loss_out", "_Retval", CPU0, ["loss/_7"]),
        _recv("loss/_7", GPU0, CPU0, "edge_7_loss"),
        _recv("shape/_9", GPU0, CPU0, "edge_9_shape"),
    ]
    gpu = [
        _recv("x/_1", CPU0, GPU0, "edge_1_x"),
        _recv("y/_3", CPU0, GPU0, "edge_2_y"),
        _node("matmul", "MatMul", GPU0, ["x/_1", "w"]),
        _node("w", "ReadVariableOp", GPU0),
        _node("labels", "Identity", GPU0, ["y/_3"]),
        _send("labels/_4", GPU0, CPU0, "edge_5_labels"),
        _node("loss", "Mean", GPU0, ["matmul"]),
        _send("loss/_6", GPU0, CPU0, "edge_7_loss"),
        _send("shape/_8", GPU0, CPU0, "edge_9_shape", op="_HostSend"),
        _node("c_gpu", "Const", GPU0),
    ]
    return _function_graph(host, gpu)


# ---------------------------------------------------------------- ops per device


def test_ops_per_device_counts_every_placed_node_and_compute_ops_skip_host_bound():
    ops = P.analyze_ops([_gpu_step()], [GPU0])
    assert ops.ops_per_device == {CPU0: 12, GPU0: 10}
    assert list(ops.ops_per_device) == [CPU0, GPU0]
    # CPU compute: Unique, StringFormat; GPU compute: MatMul, ReadVariableOp, Mean.
    assert ops.compute_ops_per_device == {CPU0: 2, GPU0: 3}
    assert ops.total_ops == 22
    assert (ops.function_graphs, ops.partitions) == (1, 2)


def test_nodes_without_device_are_counted_as_unplaced():
    fg = _function_graph([_node("a", "Add", ""), _node("b", "Add", CPU0)])
    ops = P.analyze_ops([fg], [CPU0])
    assert ops.ops_per_device == {CPU0: 1, "(unplaced)": 1}


# ---------------------------------------------------------------- copies


def test_copies_are_counted_once_per_pair_with_direction():
    ops = P.analyze_ops([_gpu_step()], [GPU0])
    kinds = {t.tensor: t.kind for t in ops.transfers}
    assert kinds == {
        "edge_1_x": "host_to_device",
        "edge_2_y": "host_to_device",
        "edge_5_labels": "device_to_host",
        "edge_7_loss": "device_to_host",
        "edge_9_shape": "host_memory",
    }
    assert ops.copy_ops == 5
    assert ops.host_device_copy_ops == 4
    assert ops.copies_by_kind == {"device_to_host": 2, "host_memory": 1, "host_to_device": 2}
    x = next(t for t in ops.transfers if t.tensor == "edge_1_x")
    assert (x.src, x.dst, x.send_op, x.recv_op) == (CPU0, GPU0, "_Send", "_Recv")
    shape = next(t for t in ops.transfers if t.tensor == "edge_9_shape")
    assert (shape.send_op, shape.recv_op) == ("_HostSend", "_Recv")


def test_copy_kinds_between_like_devices_one_sided_pairs_and_same_device():
    fg = _function_graph(
        [
            _send("a", GPU0, GPU1, "t_dd"),
            _send("b", CPU0, CPU1, "t_hh"),
            _send("c", CPU0, GPU0, "t_hostrecv"),
            _send("d", CPU0, CPU0, "t_same"),  # not a transfer
            _send("e", GPU0, CPU0, "t_remote_half"),  # its _Recv lives in another process
        ],
        [_recv("a2", GPU0, GPU1, "t_dd"), _recv("b2", CPU0, CPU1, "t_hh"), _recv("c2", CPU0, GPU0, "t_hostrecv", op="_HostRecv")],
    )
    ops = P.analyze_ops([fg], [GPU0, GPU1])
    kinds = {t.tensor: t.kind for t in ops.transfers}
    assert kinds == {
        "t_dd": "device_to_device",
        "t_hh": "host_to_host",
        "t_hostrecv": "host_memory",
        "t_remote_half": "device_to_host",
    }
    half = next(t for t in ops.transfers if t.tensor == "t_remote_half")
    assert (half.send_op, half.recv_op) == ("_Send", "")
    assert ops.host_device_copy_ops == 1


def test_same_tensor_name_in_two_functions_is_two_transfers():
    a = _function_graph([_send("s", CPU0, CPU1, "edge_1")], [_recv("r", CPU0, CPU1, "edge_1")])
    b = _function_graph([_send("s", CPU0, CPU1, "edge_1")], [_recv("r", CPU0, CPU1, "edge_1")])
    assert P.analyze_ops([a, b], [CPU0, CPU1]).copy_ops == 2


# ---------------------------------------------------------------- CPU fallbacks


def test_cpu_fallbacks_when_replicas_sit_on_gpus():
    ops = P.analyze_ops([_gpu_step()], [GPU0])
    assert ops.fallbacks_checked
    assert [(op.op_type, op.name, op.device) for op in ops.cpu_fallbacks] == [
        ("Unique", "unique", CPU0),
        ("StringFormat", "fmt", CPU0),
    ]
    assert ops.cpu_fallback_count == 2
    assert ops.fallbacks_by_type == {"Unique": 1, "StringFormat": 1}


def test_no_fallbacks_when_replicas_are_cpus_even_with_cpu_compute():
    ops = P.analyze_ops([_gpu_step()], [CPU0])
    assert not ops.fallbacks_checked
    assert ops.cpu_fallbacks == ()


def test_without_replica_devices_the_graph_decides():
    assert P.analyze_ops([_gpu_step()]).fallbacks_checked
    cpu_only = _function_graph([_node("u", "Unique", CPU0), _node("m", "MatMul", CPU1)])
    ops = P.analyze_ops([cpu_only])
    assert not ops.fallbacks_checked and ops.cpu_fallbacks == ()


@pytest.mark.parametrize("op_type", sorted(P.HOST_BOUND_OPS))
def test_every_excluded_op_type_is_never_a_fallback(op_type):
    fg = _function_graph([_node("n", op_type, CPU0)], [_node("g", "MatMul", GPU0)])
    assert P.analyze_ops([fg], [GPU0]).cpu_fallbacks == ()


@pytest.mark.parametrize(
    "op_type, host_bound",
    [
        ("IteratorGetNext", True),
        ("MultiDeviceIteratorGetNextFromShard", True),
        ("AnonymousIteratorV3", True),
        ("PrefetchDataset", True),
        ("OptionalHasValue", True),
        ("_Arg", True),
        ("Const", True),
        ("MatMul", False),
        ("Unique", False),
        ("Where", False),
        ("ResourceApplyAdam", False),
        ("StatefulPartitionedCall", False),
    ],
)
def test_is_host_bound(op_type, host_bound):
    assert P.is_host_bound(op_type) is host_bound


def test_xla_cluster_is_listed_with_its_body_size_and_is_a_fallback_on_cpu():
    body = function_pb2.FunctionDef()
    body.signature.name = "__inference_one_step_on_data_42"
    body.node_def.extend([_node("a", "MatMul", ""), _node("b", "Relu", ""), _node("c", "Mean", "")])
    call = _node("StatefulPartitionedCall", "StatefulPartitionedCall", GPU0, _XlaMustCompile=True)
    call.attr["f"].func.name = "__inference_one_step_on_data_42"
    launch = _node("cluster_0", "_XlaRun", CPU0)
    # the library may sit in another partition than the call
    fg = _function_graph([launch], [call, _node("plain", "StatefulPartitionedCall", GPU0)], library=[body])
    ops = P.analyze_ops([fg], [GPU0])
    assert [(c.name, c.op_type, c.function, c.device, c.ops) for c in ops.xla_clusters] == [
        ("cluster_0", "_XlaRun", "", CPU0, None),
        ("StatefulPartitionedCall", "StatefulPartitionedCall", "__inference_one_step_on_data_42", GPU0, 3),
    ]
    assert [op.name for op in ops.cpu_fallbacks] == ["cluster_0"]


# ---------------------------------------------------------------- step selection and merged graph


def test_step_function_graphs_keeps_only_graphs_that_pull_a_batch():
    helper = _function_graph([_node("v", "VarHandleOp", CPU0), _node("r", "_Retval", CPU0)])
    step = _gpu_step()
    mirrored = _function_graph([_node("g", "MultiDeviceIteratorGetNextFromShard", CPU0)])
    assert C.step_function_graphs([helper, step, helper, mirrored]) == [step, mirrored]
    assert C.step_function_graphs([helper]) == []


def test_placed_graph_def_merges_partitions_links_copies_and_keeps_devices():
    big = _node("big", "Const", GPU0)
    big.attr["value"].tensor.dtype = 1
    big.attr["value"].tensor.tensor_shape.dim.add().size = 4096
    big.attr["value"].tensor.tensor_content = b"\0" * 4096 * 4
    small = _node("small", "Const", GPU0)
    small.attr["value"].tensor.dtype = 1
    small.attr["value"].tensor.float_val.append(2.0)
    body = function_pb2.FunctionDef()
    body.signature.name = "f_body"
    step = _gpu_step()
    step.partition_graphs[1].node.extend([big, small])
    step.partition_graphs[0].library.function.add().CopyFrom(body)
    other = _function_graph(
        [_node("matmul", "MatMul", GPU1, ["w:1", "^noop"]), _node("w", "ReadVariableOp", GPU1), _node("noop", "NoOp", GPU1)]
    )
    other.partition_graphs[0].library.function.add().CopyFrom(body)
    graph = P.placed_graph_def([step, other])

    names = [n.name for n in graph.node]
    assert len(names) == len(set(names)) == 22 + 2 + 3
    by_name = {n.name: n for n in graph.node}
    assert by_name["matmul"].device == GPU0
    renamed = [n for n in graph.node if n.op == "MatMul" and n.device == GPU1]
    assert len(renamed) == 1 and renamed[0].name != "matmul"
    # inputs inside the renamed partition follow the renames
    w_name = next(n.name for n in graph.node if n.op == "ReadVariableOp" and n.device == GPU1)
    noop_name = next(n.name for n in graph.node if n.op == "NoOp" and n.device == GPU1)
    assert list(renamed[0].input) == [f"{w_name}:1", f"^{noop_name}"]
    # each _Recv waits on its _Send, so TensorBoard draws the copy
    assert list(by_name["x/_1"].input) == ["^x/_0"]
    assert "^labels/_4" in by_name["labels/_5"].input
    # big constant values are dropped, dtype and shape stay; small ones are kept
    assert by_name["big"].attr["value"].tensor.tensor_content == b""
    assert by_name["big"].attr["value"].tensor.tensor_shape.dim[0].size == 4096
    assert list(by_name["small"].attr["value"].tensor.float_val) == [2.0]
    assert [f.signature.name for f in graph.library.function] == ["f_body"]


# ---------------------------------------------------------------- devices


@pytest.mark.parametrize(
    "device, short, kind",
    [
        (GPU0, "GPU:0", "GPU"),
        (CPU1, "CPU:1", "CPU"),
        ("/job:worker/replica:0/task:3/device:GPU:1", "worker:3/GPU:1", "GPU"),
        ("/device:CPU:0", "CPU:0", "CPU"),
        ("/cpu:2", "CPU:2", "CPU"),
        ("", "(unplaced)", ""),
        ("GPU:3", "GPU:3", "GPU"),
        ("/job:localhost/replica:0/task:0", "/job:localhost/replica:0/task:0", ""),
    ],
)
def test_device_names(device, short, kind):
    assert P.short_device(device) == short
    assert P.device_type(device) == kind


# ---------------------------------------------------------------- report, tables, JSON


def _report(ops: R.OpPlacement | None = None, n_vars: int = 3, reason: str | None = None) -> R.PlacementReport:
    strategy = R.StrategyInfo("MirroredStrategy", "mirrored", 2, (GPU0, GPU1), 0, 1, True)
    variables = (*tuple(R.VariableInfo(f"model/dense_{i}/kernel", "trainable", (4, 3), "float32", "MirroredVariable", (GPU0, GPU1)) for i in range(n_vars)), R.VariableInfo("adam/iteration", "optimizer", (), "int64", "MirroredVariable", (GPU0, GPU1)))
    return R.PlacementReport(step=7, strategy=strategy, variables=variables, ops=ops, ops_unavailable_reason=reason)


def test_markdown_tables_cover_every_section():
    tables = render(_report(P.analyze_ops([_gpu_step()], [GPU0, GPU1])))
    assert set(tables) == {
        "placement/strategy",
        "placement/variables",
        "placement/ops_per_device",
        "placement/copies",
        "placement/cpu_fallbacks",
    }
    assert "`MirroredStrategy` (keras-gpu kind `mirrored`)" in tables["placement/strategy"]
    assert "`GPU:0`, `GPU:1`" in tables["placement/strategy"]
    row = "| `model/dense_0/kernel` | trainable | (4, 3) | float32 | MirroredVariable | `GPU:0`, `GPU:1` |"
    assert row in tables["placement/variables"]
    assert "| `GPU:0`, `GPU:1` | 4 | 152 B |" in tables["placement/variables"]  # 3 x 48 B + 8 B
    assert "| `CPU:0` | 12 | 2 | 40.0% |" in tables["placement/ops_per_device"]
    assert "| `host_to_device` | 2 |" in tables["placement/copies"]
    assert "| `Unique` | `unique` | `CPU:0` |" in tables["placement/cpu_fallbacks"]
    assert "2 op(s) ran on the CPU" in tables["placement/cpu_fallbacks"]


def test_markdown_explains_missing_ops_and_cpu_replicas():
    tables = render(_report(None, reason="`run_eagerly=True`"))
    assert tables["placement/ops_per_device"] == "Op placement not captured: `run_eagerly=True`."
    cpu = R.PlacementReport(7, R.StrategyInfo("X", None, 1, (CPU0,), 0, 1, True), (), P.analyze_ops([_gpu_step()], [CPU0]))
    assert "no op counts as a CPU fallback" in render(cpu)["placement/cpu_fallbacks"]
    assert "keras-gpu kind" not in render(cpu)["placement/strategy"]


def test_tables_are_bounded():
    fallbacks = _function_graph([_node(f"u{i}", "Unique", CPU0) for i in range(120)], [_node("g", "MatMul", GPU0)])
    report = _report(P.analyze_ops([fallbacks], [GPU0]), n_vars=30)
    tables = render(report, max_rows=10)
    rows = [line for line in tables["placement/cpu_fallbacks"].splitlines() if line.startswith("| `Unique` | `u")]
    assert len(rows) == 10
    assert "... and 110 more (all of them are in `placement.json`)." in tables["placement/cpu_fallbacks"]
    var_rows = [line for line in tables["placement/variables"].splitlines() if line.startswith("| `model/")]
    assert len(var_rows) == 10
    assert "... and 21 more" in tables["placement/variables"]
    assert len(report.to_dict()["cpu_fallbacks"]) == 120  # the JSON keeps everything


def test_scalars():
    assert _report(P.analyze_ops([_gpu_step()], [GPU0])).scalars() == {
        "placement/cpu_fallback_ops": 2.0,
        "placement/copy_ops": 5.0,
        "placement/host_device_copy_ops": 4.0,
    }
    assert _report(None).scalars() == {}


def test_json_round_trip_is_atomic_and_readable_by_scripts(tmp_path):
    report = _report(P.analyze_ops([_gpu_step()], [GPU0]))
    path = str(tmp_path / "placement.json")
    R.write_json(report, path)
    assert os.listdir(tmp_path) == ["placement.json"]  # no temporary file left behind
    assert R.read_json(path) == report
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    assert data["cpu_fallback_count"] == 2
    assert [op["op_type"] for op in data["cpu_fallbacks"]] == ["Unique", "StringFormat"]
    assert data["ops_per_device"] == {CPU0: 12, GPU0: 10}
    assert data["copy_ops"] == 5 and data["host_device_copy_ops"] == 4
    assert data["variables"][0]["bytes"] == 48 and data["variables"][-1]["bytes"] == 8
    # overwriting replaces the file whole
    R.write_json(_report(None, reason="r"), path)
    assert R.read_json(path).ops is None and R.read_json(path).ops_unavailable_reason == "r"


def test_from_dict_rejects_foreign_json():
    with pytest.raises(ValueError, match=r"Not a keras-gpu placement report.*Received: format='x'"):
        R.PlacementReport.from_dict({"format": "x"})
    data = _report(None).to_dict()
    data["version"] = 99
    with pytest.raises(ValueError, match="Received: version=99"):
        R.PlacementReport.from_dict(data)


# ---------------------------------------------------------------- capture, strategy and variables (real TensorFlow)


def _recorded_after_the_fact() -> int:
    """Instantiate a brand-new function outside any capture and count what the context recorded."""
    import tensorflow as tf
    from tensorflow.python.eager import context

    context.context().export_run_metadata()

    @tf.function
    def fresh(v):
        return tf.reduce_sum(v * 5.0)

    fresh(tf.ones(3))
    return len(context.context().export_run_metadata().function_graphs)


def test_capture_records_the_placed_graph_and_switches_collection_off():
    import tensorflow as tf

    @tf.function
    def step(it):
        return tf.reduce_sum(it.get_next() * 3.0)

    iterator = iter(tf.data.Dataset.from_tensors(tf.ones(4)).repeat())
    with C.capture_graphs() as captured:
        assert float(step(iterator)) == 12.0
    graphs = C.step_function_graphs(captured.function_graphs)
    assert len(graphs) == 1
    ops = P.analyze_ops(graphs, [CPU0])
    assert ops.ops_per_device[CPU0] > 0 and set(ops.ops_per_device) == {CPU0}
    assert _recorded_after_the_fact() == 0
    # an instantiated function records nothing on later calls
    with C.capture_graphs() as again:
        step(iterator)
    assert C.step_function_graphs(again.function_graphs) == []


def test_capture_switches_off_when_the_block_raises():
    import tensorflow as tf

    @tf.function
    def boom(v):
        return tf.reduce_sum(v)

    with pytest.raises(ZeroDivisionError):
        with C.capture_graphs() as captured:
            boom(tf.ones(2))
            1 / 0  # noqa: B018
    assert len(captured.function_graphs) >= 1
    assert _recorded_after_the_fact() == 0


def test_strategy_and_variables_of_a_default_strategy_model():
    import keras
    import tensorflow as tf

    # Explicit names: Keras numbers default names per process, so they depend on test order.
    model = keras.Sequential(
        [keras.Input((3,)), keras.layers.Dense(2, name="dense"), keras.layers.BatchNormalization(name="batch_normalization")],
        name="sequential",
    )
    model.compile("sgd", "mse")
    info = P.strategy_info(model.distribute_strategy)
    assert (info.class_name, info.kind, info.num_replicas_in_sync) == ("_DefaultDistributionStrategy", "default", 1)
    assert info.replica_devices == (CPU0,)
    assert (info.worker_index, info.num_workers, info.is_chief) == (0, 1, True)
    assert P.strategy_kind(tf.distribute.OneDeviceStrategy("/cpu:0")) == "one_device"
    variables = P.variable_info(model)
    by_path = {v.path: v for v in variables}
    kernel = by_path["sequential/dense/kernel"]
    assert (kernel.group, kernel.shape, kernel.dtype, kernel.devices, kernel.nbytes) == ("trainable", (3, 2), "float32", (CPU0,), 24)
    assert by_path["sequential/batch_normalization/moving_mean"].group == "non_trainable"
    assert {v.group for v in variables} >= {"trainable", "non_trainable", "optimizer"}
    assert len(by_path) == len(variables)


def test_the_analysis_module_still_serves_the_capture_and_record_names():
    for module in (C, R):
        for name in module.__all__:
            if name in P.__all__:
                assert getattr(P, name) is getattr(module, name), name
    assert {"GraphCapture", "capture_graphs", "PlacementReport", "read_json", "write_json"} <= set(P.__all__)
