"""`plan_strategy` / `make_strategy`: the `auto` decision table, argument checks, and real strategies in subprocesses."""

from __future__ import annotations

import itertools
import json
import math
import os

import pytest
import tensorflow as tf

from keras_gpu.setup.keras_compat import _compat_reduce, warn_steps_per_execution
from keras_gpu.setup.strategy import (
    LocalDevices,
    StrategyPlan,
    make_strategy,
    plan_strategy,
)
from tests._util import run_python

CPU1 = LocalDevices(cpus=("/device:CPU:0",))
CPU2 = LocalDevices(cpus=("/device:CPU:0", "/device:CPU:1"))
GPU1 = LocalDevices(gpus=("/device:GPU:0",), physical_gpus=1)
GPU2 = LocalDevices(gpus=("/device:GPU:0", "/device:GPU:1"), physical_gpus=2)
GPU2_SPLIT = LocalDevices(gpus=("/device:GPU:0", "/device:GPU:1"), physical_gpus=1)
GPU2_NO_NCCL = LocalDevices(gpus=("/device:GPU:0", "/device:GPU:1"), physical_gpus=2, nccl=False)
W2 = ["127.0.0.1:2222", "127.0.0.1:2223"]


def _tf_config(cluster, task_type="worker", index=0):
    return {"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})}


def plan(kind="auto", local=CPU1, environ=None, **kwargs) -> StrategyPlan:
    return plan_strategy(kind, local_devices=local, environ={} if environ is None else environ, **kwargs)


@pytest.fixture
def no_detection(monkeypatch):
    """Fail the test if the decision lists TensorFlow's logical devices."""

    def _refuse(cls):
        raise AssertionError("plan_strategy listed logical devices although it did not need them")

    monkeypatch.setattr(LocalDevices, "detect", classmethod(_refuse))


# --- the auto decision table ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "local, kind, devices, cdo, reason",
    [
        (GPU2, "mirrored", ("/device:GPU:0", "/device:GPU:1"), "nccl", "2 GPUs are visible"),
        (GPU2_SPLIT, "mirrored", ("/device:GPU:0", "/device:GPU:1"), "reduce_to_one_device", "2 GPUs are visible"),
        (GPU2_NO_NCCL, "mirrored", ("/device:GPU:0", "/device:GPU:1"), "reduce_to_one_device", "2 GPUs"),
        (GPU1, "one_device", ("/device:GPU:0",), None, "exactly one GPU"),
        (CPU2, "mirrored", ("/device:CPU:0", "/device:CPU:1"), "reduce_to_one_device", "CPU is split into 2"),
        (CPU1, "default", (), None, "no GPU is visible and the CPU is not split"),
    ],
)
def test_auto_local_decisions(local, kind, devices, cdo, reason):
    p = plan(local=local)
    assert (p.kind, p.devices, p.cross_device_ops, p.communication) == (kind, devices, cdo, None)
    assert reason in p.reason
    assert p.cluster.source == "local" and p.notes == ()


def test_gpus_win_over_split_cpus():
    p = plan(local=LocalDevices(gpus=("/device:GPU:0",), cpus=CPU2.cpus))
    assert (p.kind, p.devices) == ("one_device", ("/device:GPU:0",))


@pytest.mark.parametrize(
    "environ, kwargs, source",
    [
        (_tf_config({"worker": W2}, index=1), {}, "tf_config"),
        (_tf_config({"chief": ["h:1"], "worker": ["h:2"]}, "chief"), {}, "tf_config"),
        (
            {"SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_NODELIST": "localhost",
             "SLURM_STEP_TASKS_PER_NODE": "2", "CUDA_VISIBLE_DEVICES": ""},
            {},
            "slurm",
        ),
        ({}, {"cluster": W2, "task_index": 1}, "explicit"),
    ],
)
def test_auto_picks_multiworker_for_a_cluster_without_listing_devices(no_detection, environ, kwargs, source):
    p = plan_strategy("auto", environ=environ, **kwargs)
    assert p.kind == "multiworker" and p.devices == () and p.cross_device_ops is None
    assert p.cluster.source == source and p.cluster.num_workers == 2
    assert p.reason == f"{source} describes 2 training tasks"
    assert p.communication == "auto" and p.collective_timeout is None


def test_multiworker_options_are_carried():
    p = plan("multiworker", environ=_tf_config({"worker": W2}), communication="ring", collective_timeout=30)
    assert (p.communication, p.collective_timeout) == ("ring", 30.0)
    assert "communication ring, timeout 30s" in p.describe() and "2 workers from tf_config" in p.describe()


def test_evaluator_runs_alone_under_auto_and_cannot_be_multiworker():
    env = _tf_config({"chief": ["h:1"], "worker": ["h:2"]}, "evaluator")
    p = plan(local=GPU1, environ=env)
    assert p.kind == "one_device" and p.reason.startswith("this process is the evaluator of a 2-worker cluster")
    with pytest.raises(ValueError, match="evaluator, which does not train"):
        plan("multiworker", environ=env)


def test_multiworker_without_a_real_cluster_trains_alone(no_detection):
    p = plan_strategy("multiworker", environ={})
    assert p.kind == "multiworker" and "no cluster is configured" in p.reason
    p = plan_strategy("multiworker", environ=_tf_config({"worker": W2[:1]}))
    assert "single task, which trains alone" in p.reason and not p.cluster.is_multi_worker


def test_local_kind_with_a_cluster_is_noted():
    p = plan("mirrored", local=CPU2, environ=_tf_config({"worker": W2}))
    assert p.kind == "mirrored"
    assert len(p.notes) == 1 and "2 training tasks, but kind='mirrored' trains this process alone" in p.notes[0]


def test_auto_notes_options_it_ignores():
    p = plan(local=GPU1, communication="ring", collective_timeout=5, cross_device_ops="hierarchical_copy")
    assert p.kind == "one_device"
    assert "cross_device_ops='hierarchical_copy', communication='ring', collective_timeout=5.0 ignored" in p.reason
    p = plan(environ=_tf_config({"worker": W2}), cross_device_ops="reduce_to_one_device")
    assert p.kind == "multiworker" and "cross_device_ops='reduce_to_one_device' ignored" in p.reason


# --- explicit kinds and devices ----------------------------------------------------------------------


def test_explicit_kinds():
    assert plan("default", local=GPU2).kind == "default"
    assert plan("one_device", local=GPU2).devices == ("/device:GPU:0",)
    assert plan("one_device", local=CPU2).devices == ("/device:CPU:0",)
    assert plan("mirrored", local=CPU1).devices == ("/device:CPU:0",)
    assert plan("mirrored", local=GPU2).devices == GPU2.gpus


@pytest.mark.parametrize("name", ["GPU:1", "gpu:1", "/gpu:1", "/device:GPU:1", "/job:localhost/replica:0/task:0/device:GPU:1"])
def test_device_names_are_normalised(name):
    assert plan("one_device", local=GPU2, devices=[name]).devices == ("/device:GPU:1",)


def test_auto_with_devices():
    p = plan(local=GPU2, devices=["GPU:1"])
    assert (p.kind, p.devices) == ("one_device", ("/device:GPU:1",))
    p = plan(local=CPU2, devices=("CPU:1", "CPU:0"))
    assert (p.kind, p.devices, p.cross_device_ops) == ("mirrored", ("/device:CPU:1", "/device:CPU:0"), "reduce_to_one_device")


@pytest.mark.parametrize(
    "cdo, local, devices, expected",
    [
        ("auto", GPU2, None, "nccl"),
        ("hierarchical_copy", GPU2, None, "hierarchical_copy"),
        ("reduce_to_one_device", GPU2, None, "reduce_to_one_device"),
        ("nccl", GPU2_SPLIT, None, "nccl"),
        ("auto", LocalDevices(gpus=GPU2.gpus, cpus=CPU1.cpus), ["GPU:0", "CPU:0"], "reduce_to_one_device"),
        ("hierarchical_copy", CPU2, None, "hierarchical_copy"),
    ],
)
def test_cross_device_ops(cdo, local, devices, expected):
    assert plan("mirrored", local=local, devices=devices, cross_device_ops=cdo).cross_device_ops == expected


@pytest.mark.parametrize(
    "kind, local, devices, match",
    [
        ("mirrored", CPU2, None, "needs GPUs only"),
        ("auto", CPU2, None, "needs GPUs only"),
        ("auto", CPU1, None, "needs GPUs, and this process has none"),
        ("mirrored", LocalDevices(gpus=GPU2.gpus, cpus=CPU1.cpus), ["GPU:0", "CPU:0"], r"include \['/device:CPU:0'\]"),
        ("mirrored", GPU2_NO_NCCL, None, "lacks"),
    ],
)
def test_nccl_needs_gpus(kind, local, devices, match):
    with pytest.raises(ValueError, match=match):
        plan(kind, local=local, devices=devices, cross_device_ops="nccl")


# --- bad arguments -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"kind": "mirror"}, ValueError, "Received: kind='mirror'"),
        ({"kind": None}, ValueError, "Received: kind=None"),
        ({"cross_device_ops": "ring"}, ValueError, "Received: cross_device_ops='ring'"),
        ({"communication": "grpc"}, ValueError, "Received: communication='grpc'"),
        ({"cluster_source": "k8s"}, ValueError, "Received: cluster_source='k8s'"),
        ({"collective_timeout": "10"}, TypeError, "Received: collective_timeout='10'"),
        ({"collective_timeout": True}, TypeError, "collective_timeout=True"),
        ({"collective_timeout": 0}, ValueError, "positive"),
        ({"collective_timeout": -3.0}, ValueError, "positive"),
        ({"collective_timeout": math.inf}, ValueError, "finite"),
        ({"devices": "GPU:0"}, TypeError, "must be a list"),
        ({"devices": []}, ValueError, "at least one device"),
        ({"devices": ["TPU:0"]}, ValueError, "Received: 'TPU:0'"),
        ({"devices": ["/job:worker/task:1/device:CPU:0"]}, ValueError, "local device names"),
        ({"devices": [0]}, ValueError, "Received: 0"),
        ({"devices": ["CPU:0", "/cpu:0"]}, ValueError, "twice"),
        ({"devices": ["CPU:1"]}, ValueError, r"does not have: \['/device:CPU:1'\]"),
        ({"kind": "one_device", "devices": ["CPU:0", "CPU:1"]}, ValueError, "exactly one device"),
        ({"kind": "default", "devices": ["CPU:0"]}, ValueError, "does not apply to kind='default'"),
        ({"kind": "multiworker", "devices": ["CPU:0"]}, ValueError, "cannot be chosen for a multi-worker"),
        ({"kind": "one_device", "cross_device_ops": "nccl"}, ValueError, "applies to kind='mirrored' only"),
        ({"kind": "multiworker", "cross_device_ops": "nccl"}, ValueError, "takes `communication` instead"),
        ({"kind": "mirrored", "communication": "ring"}, ValueError, "apply to kind='multiworker'"),
        ({"kind": "default", "collective_timeout": 10}, ValueError, "apply to kind='multiworker'"),
        ({"kind": "mirrored", "cluster": W2, "task_index": 0}, ValueError, "`cluster_source`, `cluster` and `task_index`"),
        ({"kind": "one_device", "cluster_source": "slurm"}, ValueError, "`cluster_source`, `cluster` and `task_index`"),
        ({"local_devices": {"gpus": []}}, TypeError, "local_devices"),
    ],
)
def test_bad_arguments(kwargs, exc, match):
    kwargs.setdefault("local_devices", CPU1)
    kind = kwargs.pop("kind", "auto")
    with pytest.raises(exc, match=match):
        plan_strategy(kind, environ={}, **kwargs)


@pytest.mark.parametrize(
    "environ, kwargs, match",
    [
        ({"TF_CONFIG": "{oops"}, {}, "not valid JSON"),
        (_tf_config({"worker": W2}, index=5), {}, "out of range"),
        (_tf_config({"worker": W2}, "master"), {}, "unknown task type 'master'"),
        (_tf_config({"worker": W2, "ps": ["h:9"]}), {}, "'ps' .*ParameterServerStrategy"),
        ({}, {"cluster_source": "tf_config"}, "not set or empty"),
        ({}, {"cluster_source": "slurm"}, "is not set"),
        ({}, {"cluster": W2}, "needs `task_index`"),
    ],
)
def test_bad_cluster_input_fails_before_anything_is_built(no_detection, environ, kwargs, match):
    with pytest.raises(ValueError, match=match):
        plan_strategy("multiworker", environ=environ, **kwargs)
    with pytest.raises(ValueError, match=match):
        plan_strategy("auto", environ=environ, **kwargs)


def test_the_strategy_keywords_are_declared_once():
    """plan_strategy and make_strategy take StrategyOptions' and ClusterOptions' fields, with their defaults."""
    import inspect
    from dataclasses import fields

    from keras_gpu.core.cluster import ClusterOptions
    from keras_gpu.setup import jax_strategy
    from keras_gpu.setup.strategy_options import StrategyOptions

    declared = {f.name: f.default for f in fields(StrategyOptions) if f.init and f.name != "where"}
    declared |= {("cluster_source" if f.name == "source" else f.name): f.default for f in fields(ClusterOptions)}
    plan = {p.name: p.default for p in inspect.signature(plan_strategy).parameters.values()}
    assert plan.pop("local_devices") is None
    assert plan == declared
    for make in (make_strategy, jax_strategy.make_strategy):
        params = {p.name: p.default for p in inspect.signature(make).parameters.values()}
        assert params == {k: v for k, v in declared.items() if k not in ("slurm_assign_gpus", "environ")}


def test_strategy_options_are_checked_where_they_enter():
    from keras_gpu.setup.strategy_options import StrategyOptions

    options = StrategyOptions.from_keywords({"devices": ["gpu:1", "/cpu:0"], "collective_timeout": 5, "cluster_source": "tf_config"})
    assert options.wanted == ("/device:GPU:1", "/device:CPU:0") and options.devices == ["gpu:1", "/cpu:0"]
    assert options.collective_timeout == 5.0 and isinstance(options.collective_timeout, float)
    assert options.where.source == "tf_config"
    with pytest.raises(ValueError, match="Received: cluster_source='k8s'"):
        StrategyOptions.from_keywords({"cluster_source": "k8s"})
    with pytest.raises(TypeError, match="unexpected keyword"):
        StrategyOptions.from_keywords({"local_devices": None})


def test_make_strategy_validates_before_touching_tensorflow(no_detection):
    with pytest.raises(ValueError, match="Received: kind='gpu'"):
        make_strategy("gpu")
    with pytest.raises(TypeError, match="must be a list"):
        make_strategy("mirrored", devices="GPU:0")


# --- the reduce fix, in-process with stand-ins -------------------------------------------------------------------

class _Shape:
    def __init__(self, rank):
        self.rank = rank


class _Component:
    def __init__(self, rank):
        self.shape = _Shape(rank)


class _FakePerReplica(tf.distribute.DistributedValues):
    """A `DistributedValues` holding stand-in components, built without TensorFlow's runtime."""

    def __init__(self, *ranks):
        self._values = tuple(_Component(r) for r in ranks)


class _Recorder:
    def __init__(self):
        self.calls = []

    def reduce(self, op, value, axis):
        self.calls.append((op, value, axis))
        return ("reduced", value, axis)

    @staticmethod
    def local_results(value):
        return value._values if isinstance(value, tf.distribute.DistributedValues) else (value,)

    def __call__(self, op, value, axis):
        return _compat_reduce(self.reduce, self.local_results, op, value, axis)


def test_nested_structures_are_reduced_leaf_by_leaf():
    r = _Recorder()
    x, y, w = _FakePerReplica(2, 2), _FakePerReplica(1, 1), _FakePerReplica(1, 1)
    out = r("MEAN", {"x": x, "yw": (y, w)}, None)
    assert out == {"x": ("reduced", x, None), "yw": (("reduced", y, None), ("reduced", w, None))}
    assert [c[0] for c in r.calls] == ["MEAN"] * 3


def test_rank0_axis0_becomes_none_and_nothing_else_changes():
    r = _Recorder()
    scalar, vector = _FakePerReplica(0, 0), _FakePerReplica(1, 1)
    assert r("MEAN", scalar, 0) == ("reduced", scalar, None)
    assert r("SUM", scalar, [0]) == ("reduced", scalar, None)
    assert r("SUM", scalar, (0,)) == ("reduced", scalar, None)
    assert r("SUM", scalar, -1) == ("reduced", scalar, -1)  # invalid on a scalar: left to TensorFlow's error
    assert r("SUM", scalar, 1) == ("reduced", scalar, 1)
    assert r("SUM", scalar, [0, 1]) == ("reduced", scalar, [0, 1])
    assert r("MEAN", scalar, []) == ("reduced", scalar, [])  # the stock reduce accepts an empty axis list
    assert r("MEAN", vector, 0) == ("reduced", vector, 0)
    assert r("MEAN", _FakePerReplica(0, 1), 0)[2] == 0
    assert r("MEAN", _FakePerReplica(None, None), 0)[2] == 0
    assert r("MEAN", scalar, None) == ("reduced", scalar, None)


def test_nests_without_distributed_values_go_to_the_stock_reduce_whole():
    r = _Recorder()
    value = [_Component(1), _Component(1)]
    assert r("MEAN", value, 0) == ("reduced", value, 0)
    assert r.calls == [("MEAN", value, 0)]


def test_nested_rank0_leaves_with_axis():
    r = _Recorder()
    loss, preds = _FakePerReplica(0, 0), _FakePerReplica(2, 2)
    assert r("MEAN", (loss, preds), 0) == (("reduced", loss, None), ("reduced", preds, 0))


def test_warn_steps_per_execution_rejects_bad_values_and_ignores_the_default_strategy():
    default = tf.distribute.get_strategy()
    assert warn_steps_per_execution(default, 8) is False
    for bad in (0, -1, 2.0, True, "4"):
        with pytest.raises(TypeError, match=f"Received: steps_per_execution={bad!r}"):
            warn_steps_per_execution(default, bad)


# --- real strategies, in subprocesses ---------------------------------------------------------------------------

_CHILD_HEADER = """
import json, logging
import numpy as np
import keras_gpu

records = []
class _Keep(logging.Handler):
    def emit(self, record):
        records.append([record.levelname, record.getMessage()])
log = logging.getLogger("keras_gpu"); log.setLevel(logging.INFO); log.addHandler(_Keep())
out = {}

def data():
    rs = np.random.RandomState(0)
    x = rs.rand(128, 8).astype("float32")
    return x, (x @ rs.rand(8, 1)).astype("float32")

def model(strategy, spe=1, seed=3):
    import keras
    with strategy.scope():
        keras.utils.set_random_seed(seed)
        m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
        m.compile(keras.optimizers.SGD(0.05), "mse", steps_per_execution=spe)
    return m
"""

_SPLIT_CPU_CHILD = _CHILD_HEADER + """
keras_gpu.configure_devices(cpu_devices=2)
import tensorflow as tf
from keras_gpu.setup.keras_compat import (KerasMultiWorkerMirroredStrategy, steps_per_execution_affected,
                                     warn_steps_per_execution)

s = keras_gpu.make_strategy()
out["auto"] = [type(s).__name__, s.num_replicas_in_sync, list(s.extended.worker_devices),
               type(s.extended._cross_device_ops).__name__]
out["auto_logs"] = list(records)
x, y = data()
h = model(s).fit(x, y, batch_size=32, epochs=4, verbose=0, shuffle=False)
out["auto_loss"] = h.history["loss"]

m = keras_gpu.make_strategy("mirrored", devices=["CPU:1", "/cpu:0"])
out["explicit_devices"] = list(m.extended.worker_devices)
out["affected_ours"] = steps_per_execution_affected(m)
weights = {}
for spe in (1, 4):
    mm = model(m, spe)
    hist = mm.fit(x, y, batch_size=32, epochs=2, verbose=0, shuffle=False).history["loss"]
    weights[spe] = [w.tolist() for w in mm.get_weights()]
    out[f"spe{spe}_loss"] = hist
out["spe_max_diff"] = max(float(np.max(np.abs(np.array(a) - np.array(b)))) for a, b in zip(weights[1], weights[4]))

one = keras_gpu.make_strategy("one_device", devices=["CPU:1"])
out["one_device"] = [type(one).__name__, one.extended.worker_devices[0]]
try:
    keras_gpu.make_strategy("mirrored", devices=["GPU:0"])
except ValueError as e:
    out["missing_device_error"] = str(e)

# keras-team/keras#20585: the compat reduce against the stock one on real per-replica values.
local = KerasMultiWorkerMirroredStrategy()
stock_mw = tf.distribute.MultiWorkerMirroredStrategy()
pr = lambda st, f: st.run(tf.function(f))
scalar = lambda: tf.constant(3.0)
matrix = lambda: tf.reshape(tf.range(6, dtype=tf.float32), (3, 2))
out["compat_rank0"] = float(local.reduce("MEAN", pr(local, scalar), axis=0))
try:
    stock_mw.reduce("MEAN", pr(stock_mw, scalar), axis=0)
    out["stock_rank0"] = "ok"
except Exception as e:
    out["stock_rank0"] = type(e).__name__ + ": " + str(e)[:200]
out["rank2_same"] = bool(np.array_equal(local.reduce("MEAN", pr(local, matrix), axis=0).numpy(),
                                        stock_mw.reduce("MEAN", pr(stock_mw, matrix), axis=0).numpy()))
# With one local replica `run` returns plain tensors; a nest of those is left to the stock reduce.
errors = []
for st in (local, stock_mw):
    try:
        st.reduce("SUM", {"a": pr(st, scalar)}, axis=None)
        errors.append("ok")
    except Exception as e:
        errors.append(type(e).__name__)
out["plain_nest"] = errors

# keras-team/keras#19246: a stock MirroredStrategy (collective all-reduce) with steps_per_execution > 1.
stock = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
out["affected_stock"] = [steps_per_execution_affected(stock), steps_per_execution_affected(local)]
before = len(records)
out["warn"] = [warn_steps_per_execution(stock, 4), warn_steps_per_execution(stock, 2),
               warn_steps_per_execution(stock, 1), warn_steps_per_execution(m, 4)]
out["warn_logs"] = records[before:]
try:
    model(stock, 4).fit(x, y, batch_size=32, epochs=1, verbose=0, shuffle=False)
    out["stock_spe"] = "trained"
except Exception as e:
    out["stock_spe"] = type(e).__name__ + ": " + str(e)
print("RESULT " + json.dumps(out))
"""

_PLAIN_CPU_CHILD = _CHILD_HEADER + """
import tensorflow as tf
s = keras_gpu.make_strategy("auto")
out["auto"] = [type(s).__name__, s is tf.distribute.get_strategy()]
out["auto_logs"] = list(records)
d = keras_gpu.make_strategy("default")
out["default_is_default"] = d is tf.distribute.get_strategy()
with keras_gpu.make_strategy("one_device").scope():
    try:
        keras_gpu.make_strategy("default")
    except RuntimeError as e:
        out["default_in_scope"] = str(e)
o = keras_gpu.make_strategy("one_device")
out["one_device"] = [type(o).__name__, o.extended.worker_devices[0], o.num_replicas_in_sync]
x, y = data()
out["loss"] = model(o).fit(x, y, batch_size=32, epochs=4, verbose=0, shuffle=False).history["loss"]
# TensorFlow's runtime is running now, so a multi-worker strategy can no longer be created.
try:
    keras_gpu.make_strategy("multiworker", cluster=["127.0.0.1:1", "127.0.0.1:2"], task_index=0)
    out["late_multiworker"] = "created"
except RuntimeError as e:
    out["late_multiworker"] = str(e)
print("RESULT " + json.dumps(out))
"""


def _result(proc) -> dict:
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert line, f"no RESULT line\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return json.loads(line[-1][len("RESULT "):])


@pytest.fixture(scope="module")
def split_cpu():
    return _result(run_python(_SPLIT_CPU_CHILD, timeout=240))


@pytest.fixture(scope="module")
def plain_cpu():
    return _result(run_python(_PLAIN_CPU_CHILD, timeout=180))


def test_auto_picks_mirrored_over_split_cpus_and_logs_one_line(split_cpu):
    name, replicas, devices, cdo = split_cpu["auto"]
    assert (name, replicas, cdo) == ("MirroredStrategy", 2, "ReductionToOneDevice")
    assert [d.rsplit("/", 1)[-1] for d in devices] == ["device:CPU:0", "device:CPU:1"]
    info = [msg for level, msg in split_cpu["auto_logs"] if level == "INFO" and msg.startswith("make_strategy:")]
    assert len(info) == 1
    assert info[0].startswith("make_strategy: auto chose mirrored over 2 devices (/device:CPU:0, /device:CPU:1)")
    assert "CPU is split into 2 logical devices" in info[0]
    assert not [r for r in split_cpu["auto_logs"] if r[0] == "WARNING"]


def test_mirrored_fit_on_two_logical_cpus_learns(split_cpu):
    loss = split_cpu["auto_loss"]
    assert len(loss) == 4 and all(b < a for a, b in itertools.pairwise(loss)) and loss[-1] < 0.5 * loss[0]


def test_explicit_devices_and_missing_devices(split_cpu):
    assert [d.rsplit("/", 1)[-1] for d in split_cpu["explicit_devices"]] == ["device:CPU:1", "device:CPU:0"]
    assert split_cpu["one_device"][0] == "OneDeviceStrategy" and split_cpu["one_device"][1].endswith("CPU:1")
    assert "does not have: ['/device:GPU:0']" in split_cpu["missing_device_error"]


def test_mirrored_steps_per_execution_4_matches_1(split_cpu):
    """keras-team/keras#19246 does not affect make_strategy's mirrored strategy: same weights with 4 steps per call."""
    assert split_cpu["affected_ours"] is False
    assert split_cpu["spe4_loss"][-1] < split_cpu["spe4_loss"][0]
    assert split_cpu["spe_max_diff"] < 1e-5
    assert split_cpu["spe1_loss"] == pytest.approx(split_cpu["spe4_loss"], rel=1e-5)


def test_stock_mirrored_with_steps_per_execution_still_fails(split_cpu):
    """Reproduces keras-team/keras#19246; when this fails, upstream fixed it and the guard can go."""
    assert "You must feed a value for placeholder tensor" in split_cpu["stock_spe"]
    assert "while/cond/Placeholder" in split_cpu["stock_spe"]


def test_warn_steps_per_execution(split_cpu):
    assert split_cpu["affected_stock"] == [True, False]  # a one-replica multi-worker strategy is not affected
    assert split_cpu["warn"] == [True, True, False, False]
    warnings = [msg for level, msg in split_cpu["warn_logs"] if level == "WARNING"]
    assert len(warnings) == 1
    assert "keras-team/keras#19246" in warnings[0] and "steps_per_execution=1" in warnings[0]
    assert "steps_per_execution=4 with MirroredStrategy" in warnings[0]


def test_compat_reduce_on_real_per_replica_values(split_cpu):
    assert split_cpu["compat_rank0"] == 3.0
    assert split_cpu["stock_rank0"].startswith("ValueError") and "Invalid reduction dimension 0" in split_cpu["stock_rank0"]
    assert split_cpu["rank2_same"] is True
    assert split_cpu["plain_nest"] == ["ValueError", "ValueError"]


def test_default_and_one_device_on_cpu(plain_cpu):
    assert plain_cpu["auto"] == ["_DefaultDistributionStrategy", True]
    info = [m for lvl, m in plain_cpu["auto_logs"] if lvl == "INFO" and m.startswith("make_strategy:")]
    assert info == ["make_strategy: auto chose default strategy: no GPU is visible and the CPU is not split"]
    assert plain_cpu["default_is_default"] is True
    assert "inside another strategy's scope" in plain_cpu["default_in_scope"]
    name, device, replicas = plain_cpu["one_device"]
    assert (name, replicas) == ("OneDeviceStrategy", 1) and device.endswith("CPU:0")
    loss = plain_cpu["loss"]
    assert all(b < a for a, b in itertools.pairwise(loss))


def test_late_multiworker_strategy_is_a_clear_runtime_error(plain_cpu):
    assert "must be created before TensorFlow runs anything" in plain_cpu["late_multiworker"]


_GPU_CHILD = _CHILD_HEADER + """
import tensorflow as tf
s = keras_gpu.make_strategy()
out["gpus"] = len(tf.config.list_logical_devices("GPU"))
out["type"] = type(s).__name__
out["replicas"] = s.num_replicas_in_sync
out["cdo"] = type(getattr(s.extended, "_cross_device_ops", None)).__name__
x, y = data()
weights = {}
for spe in (1, 4):
    m = model(s, spe)
    out[f"loss{spe}"] = m.fit(x, y, batch_size=32, epochs=3, verbose=0, shuffle=False).history["loss"]
    weights[spe] = m.get_weights()
out["spe_max_diff"] = max(float(np.max(np.abs(a - b))) for a, b in zip(weights[1], weights[4]))
print("RESULT " + json.dumps(out))
"""


def _gpu_env() -> dict[str, str]:
    """Show the child every GPU this machine has (the shared helper hides them by default)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES"):
        return {"CUDA_VISIBLE_DEVICES": os.environ["CUDA_VISIBLE_DEVICES"]}
    import pynvml

    pynvml.nvmlInit()
    try:
        count = pynvml.nvmlDeviceGetCount()
    finally:
        pynvml.nvmlShutdown()
    return {"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(count)), "TF_FORCE_GPU_ALLOW_GROWTH": "true"}


@pytest.mark.gpu
def test_auto_on_real_gpus():
    r = _result(run_python(_GPU_CHILD, env=_gpu_env(), timeout=300))
    assert r["gpus"] >= 1
    if r["gpus"] == 1:
        assert (r["type"], r["replicas"]) == ("OneDeviceStrategy", 1)
    else:
        assert (r["type"], r["replicas"], r["cdo"]) == ("MirroredStrategy", r["gpus"], "NcclAllReduce")
    assert r["loss1"][-1] < r["loss1"][0]
    assert r["spe_max_diff"] < 1e-4


def test_the_jax_strategy_names_its_tensorflow_only_arguments_in_good_grammar():
    from keras_gpu.setup.jax_strategy import _reject_tensorflow_only

    defaults = {"cross_device_ops": "auto", "communication": "auto", "collective_timeout": None, "slurm_gpus_per_task": None}
    with pytest.raises(ValueError, match=r"^`collective_timeout` applies to TensorFlow's strategies only.* Leave it out\. "
                       r"Received: collective_timeout=5$"):
        _reject_tensorflow_only({**defaults, "collective_timeout": 5})
    with pytest.raises(ValueError, match=r"^`cross_device_ops`, `communication` apply to .* Leave them out\. "
                       r"Received: cross_device_ops='nccl', communication='ring'$"):
        _reject_tensorflow_only({**defaults, "cross_device_ops": "nccl", "communication": "ring"})
