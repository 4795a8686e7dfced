"""Cluster resolution: TF_CONFIG, SLURM and explicit host lists, their errors, and the chief/rank helpers."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest

from keras_gpu.core.cluster import (
    ClusterInfo,
    resolve_cluster,
    task_info,
)
from keras_gpu.core.place import is_chief, worker_index

W2 = ["127.0.0.1:2222", "127.0.0.1:2223"]


def _tf_config(cluster, task_type="worker", index=0, **extra):
    config = {"cluster": cluster, "task": {"type": task_type, "index": index}, **extra}
    return {"TF_CONFIG": json.dumps(config)}


def _slurm(procid, num_tasks, nodelist, tasks_per_node, **extra):
    env = {
        "SLURM_PROCID": str(procid),
        "SLURM_STEP_NUM_TASKS": str(num_tasks),
        "SLURM_STEP_NODELIST": nodelist,
        "SLURM_STEP_TASKS_PER_NODE": tasks_per_node,
        "CUDA_VISIBLE_DEVICES": "",
    }
    env.update(extra)
    return env


# --- TF_CONFIG -----------------------------------------------------------------------------------


def test_tf_config_two_workers():
    info = resolve_cluster(environ=_tf_config({"worker": W2}, index=1))
    assert info == ClusterInfo("tf_config", {"worker": tuple(W2)}, "worker", 1, "grpc")
    assert info.num_workers == 2 and info.is_multi_worker
    assert not info.is_chief and info.worker_index == 1
    assert info.tf_config() == {"cluster": {"worker": W2}, "task": {"type": "worker", "index": 1}}
    assert "2 workers from tf_config" in info.describe() and "worker:1" in info.describe()


def test_tf_config_rpc_layer_and_default_index():
    raw = json.dumps({"cluster": {"worker": W2}, "task": {"type": "worker"}, "rpc_layer": "grpc+verbs"})
    info = resolve_cluster("tf_config", environ={"TF_CONFIG": raw})
    assert info.task_index == 0 and info.rpc_layer == "grpc+verbs"


def test_no_cluster_is_local():
    info = resolve_cluster(environ={})
    assert info.source == "local" and info.num_workers == 1 and not info.is_multi_worker
    assert info.is_chief and info.worker_index == 0
    assert info.describe() == "single process (source: local)"


def test_single_task_slurm_step_is_local():
    assert resolve_cluster(environ=_slurm(0, 1, "localhost", "1")).source == "local"


@pytest.mark.parametrize(
    "raw, match",
    [
        ("{not json", "TF_CONFIG is not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        (json.dumps({"task": {"type": "worker", "index": 0}}), "no 'cluster' entry"),
        (json.dumps({"cluster": {"worker": W2}}), "no 'task' entry"),
        (json.dumps({"cluster": {"worker": W2}, "task": {"index": 0}}), "no 'task' entry"),
        (json.dumps({"cluster": {"worker": W2}, "task": {"type": "worker", "index": 2}}), r"index 2 is out of range.*0\.\.1"),
        (json.dumps({"cluster": {"worker": W2}, "task": {"type": "worker", "index": -1}}), "out of range"),
        (json.dumps({"cluster": {"worker": W2}, "task": {"type": "worker", "index": "1"}}), "must be an integer"),
        (json.dumps({"cluster": {"worker": W2}, "task": {"type": "boss", "index": 0}}), "unknown task type 'boss'"),
        (json.dumps({"cluster": {"trainer": W2}, "task": {"type": "worker", "index": 0}}), "unknown task type 'trainer'"),
        (json.dumps({"cluster": {"worker": W2}, "task": {"type": "chief", "index": 0}}), "no such task type"),
        (json.dumps({"cluster": {"worker": [W2[0], W2[0]]}, "task": {"type": "worker", "index": 0}}), "twice"),
        (json.dumps({"cluster": {"worker": ["127.0.0.1:0"]}, "task": {"type": "worker", "index": 0}}), "not 'host:port'"),
        (json.dumps({"cluster": {"worker": ["127.0.0.1:70000"]}, "task": {"type": "worker", "index": 0}}), "not 'host:port'"),
        (json.dumps({"cluster": {"worker": ["127.0.0.1"]}, "task": {"type": "worker", "index": 0}}), "not 'host:port'"),
        (json.dumps({"cluster": {"worker": "127.0.0.1:2222"}, "task": {"type": "worker", "index": 0}}), "non-empty list"),
        (json.dumps({"cluster": {}, "task": {"type": "worker", "index": 0}}), "non-empty mapping"),
        (json.dumps({"cluster": {"evaluator": ["h:1"]}, "task": {"type": "evaluator", "index": 0}}), "no 'worker' or 'chief'"),
        (
            json.dumps({"cluster": {"chief": ["h:1", "h:2"], "worker": ["h:3"]}, "task": {"type": "chief", "index": 0}}),
            "exactly one",
        ),
        (json.dumps({"cluster": {"worker": W2}, "task": {"type": "evaluator", "index": 1}}), "must be 0"),
        (json.dumps({"cluster": {"worker": W2}, "task": {"type": "worker", "index": 0}, "rpc_layer": 3}), "rpc_layer"),
    ],
)
def test_bad_tf_config(raw, match):
    with pytest.raises(ValueError, match=match):
        resolve_cluster(environ={"TF_CONFIG": raw})


def test_tf_config_source_needs_the_variable():
    with pytest.raises(ValueError, match="TF_CONFIG environment variable is not set"):
        resolve_cluster("tf_config", environ={})


def test_bad_source_and_misplaced_explicit_arguments():
    with pytest.raises(ValueError, match=r"Received: source='tfconfig'"):
        resolve_cluster("tfconfig", environ={})
    with pytest.raises(ValueError, match="only apply to source='explicit'"):
        resolve_cluster("tf_config", cluster=W2, task_index=0, environ=_tf_config({"worker": W2}))


def test_evaluator_may_stay_out_of_the_cluster():
    info = resolve_cluster(environ=_tf_config({"chief": ["h:1"], "worker": ["h:2"]}, "evaluator", 0))
    assert info.task_type == "evaluator" and info.num_workers == 2
    assert not info.is_chief and info.worker_index is None


# --- SLURM -----------------------------------------------------------------------------------------


def test_slurm_localhost_two_tasks():
    info = resolve_cluster(environ=_slurm(1, 2, "localhost", "2"), slurm_port_base=9100)
    assert info == ClusterInfo("slurm", {"worker": ("localhost:9100", "localhost:9101")}, "worker", 1)
    assert info.worker_index == 1 and not info.is_chief


def test_slurm_hostlist_and_repeated_task_counts():
    env = _slurm(2, 4, "node[01-02]", "2(x2)")
    info = resolve_cluster("slurm", environ=env)
    assert info.cluster == {"worker": ("node01:8888", "node01:8889", "node02:8888", "node02:8889")}
    assert (info.task_type, info.task_index, info.num_workers) == ("worker", 2, 4)
    assert resolve_cluster("slurm", environ=dict(env, SLURM_PROCID="0")).is_chief


def test_slurm_resolution_leaves_the_environment_alone(monkeypatch):
    monkeypatch.setenv("SLURM_PROCID", "7")
    for var in ("SLURM_STEP_NUM_TASKS", "SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE"):
        monkeypatch.delenv(var, raising=False)
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    resolve_cluster("slurm", environ=_slurm(1, 2, "localhost", "2"), slurm_gpus_per_task=1)
    assert os.environ["SLURM_PROCID"] == "7" and "SLURM_STEP_NODELIST" not in os.environ
    assert os.environ.get("CUDA_VISIBLE_DEVICES") == before


def test_slurm_gpu_assignment_narrows_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    env = _slurm(1, 2, "localhost", "2", CUDA_VISIBLE_DEVICES="0,1,2,3")
    info = resolve_cluster("slurm", environ=env, slurm_gpus_per_task=2, slurm_assign_gpus=True)
    assert info.task_index == 1
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "2,3"


def test_slurm_missing_variables():
    env = _slurm(0, 2, "localhost", "2")
    del env["SLURM_STEP_NODELIST"]
    with pytest.raises(ValueError, match=r"SLURM_STEP_NODELIST is not set.*srun"):
        resolve_cluster("slurm", environ=env)


@pytest.mark.parametrize(
    "env, kwargs, match",
    [
        (_slurm(0, 3, "localhost", "2"), {}, "Inconsistent SLURM step"),
        (_slurm(2, 2, "localhost", "2"), {}, "Inconsistent SLURM step"),
        (_slurm(0, 2, "node[01-02]", "2"), {}, "expands to 2 hosts"),
        (_slurm("x", 2, "localhost", "2"), {}, "cannot be parsed"),
        (_slurm(0, 2, "localhost", "2"), {"slurm_port_base": 0}, "slurm_port_base"),
        (_slurm(0, 2, "localhost", "2"), {"slurm_port_base": 65535}, "no room"),
        (_slurm(0, 2, "localhost", "2"), {"slurm_gpus_per_task": -1}, "slurm_gpus_per_task"),
    ],
)
def test_bad_slurm(env, kwargs, match):
    with pytest.raises(ValueError, match=match):
        resolve_cluster("slurm", environ=env, **kwargs)


def test_the_jax_strategy_lays_out_a_slurm_step_node_by_node():
    from keras_gpu.setup.jax_strategy import _slurm_cluster

    info = _slurm_cluster(_slurm(3, 4, "node[1-2]", "2(x2)"), 9000)
    assert info.cluster == {"worker": ("node1:9000", "node1:9001", "node2:9000", "node2:9001")}
    assert (info.source, info.task_type, info.task_index) == ("slurm", "worker", 3)


@pytest.mark.parametrize(
    "env, port_base, match",
    [
        (_slurm(0, 3, "localhost", "2"), 8888, "Inconsistent SLURM step"),
        (_slurm(0, 2, "node[01-02]", "2"), 8888, "expands to 2 hosts"),
        (_slurm(0, 2, "node1,node1", "1(x2)"), 8888, "names a node twice"),
        (_slurm("x", 2, "localhost", "2"), 8888, "cannot be parsed"),
        (_slurm(0, 2, "localhost", "2"), 65535, "no room"),
    ],
)
def test_the_jax_strategy_checks_a_slurm_step_as_the_tensorflow_one_does(env, port_base, match):
    from keras_gpu.setup.jax_strategy import _slurm_cluster

    with pytest.raises(ValueError, match=match):
        _slurm_cluster(env, port_base)


# --- explicit ----------------------------------------------------------------------------------------


def test_explicit_list_and_mapping():
    info = resolve_cluster(cluster=W2, task_index=0, environ={})
    assert info == ClusterInfo("explicit", {"worker": tuple(W2)}, "worker", 0)
    info = resolve_cluster(
        "explicit", cluster={"chief": ["h:1"], "worker": ["h:2", "h:3"]}, task_type="worker", task_index=1, environ={}
    )
    assert info.worker_index == 2 and not info.is_chief and info.num_workers == 3


def test_explicit_wins_over_tf_config_in_auto():
    info = resolve_cluster(cluster=W2, task_index=1, environ=_tf_config({"worker": ["other:1"]}))
    assert info.source == "explicit" and info.task_index == 1


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"cluster": None, "task_index": 0}, ValueError, "needs `cluster`"),
        ({"cluster": W2}, ValueError, "needs `task_index`"),
        ({"cluster": "127.0.0.1:2222", "task_index": 0}, TypeError, "Received: cluster='127.0.0.1:2222'"),
        ({"cluster": W2, "task_index": 2}, ValueError, "out of range"),
        ({"cluster": W2, "task_index": True}, TypeError, "must be an int"),
        ({"cluster": W2, "task_index": 0, "task_type": "chief"}, ValueError, "no such task type"),
        ({"cluster": ["a:1", "a:1"], "task_index": 0}, ValueError, "twice"),
        ({"cluster": ["a:x"], "task_index": 0}, ValueError, "not 'host:port'"),
    ],
)
def test_bad_explicit(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        resolve_cluster("explicit", environ={}, **kwargs)


# --- chief and rank ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, task_type, index, chief, rank",
    [
        ({"worker": ["h:1", "h:2"]}, "worker", 0, True, 0),
        ({"worker": ["h:1", "h:2"]}, "worker", 1, False, 1),
        ({"chief": ["h:10"], "worker": ["h:1", "h:2"]}, "chief", 0, True, 0),
        ({"chief": ["h:10"], "worker": ["h:1", "h:2"]}, "worker", 0, False, 1),
        ({"chief": ["h:10"], "worker": ["h:1", "h:2"]}, "worker", 1, False, 2),
        ({"chief": ["h:10"], "worker": ["h:1"], "evaluator": ["h:9"]}, "evaluator", 0, False, None),
    ],
)
def test_chief_and_rank_layouts(spec, task_type, index, chief, rank):
    info = resolve_cluster(environ=_tf_config(spec, task_type, index))
    assert info.is_chief is chief
    assert info.worker_index == rank


def _fake_strategy(spec, task_type, task_id):
    resolver = SimpleNamespace(task_type=task_type, task_id=task_id, cluster_spec=lambda: SimpleNamespace(as_dict=lambda: spec))
    return SimpleNamespace(cluster_resolver=resolver)


def test_helpers_read_the_strategy_resolver(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": W2}, "task": {"type": "worker", "index": 0}}))
    strategy = _fake_strategy({"chief": ["h:10"], "worker": ["h:1", "h:2"]}, "worker", 1)
    assert task_info(strategy).source == "strategy"
    assert is_chief(strategy) is False
    assert worker_index(strategy) == 2
    assert is_chief(_fake_strategy({"chief": ["h:10"], "worker": ["h:1"]}, "chief", 0)) is True


def test_helpers_fall_back_to_tf_config_then_local(monkeypatch):
    no_resolver = SimpleNamespace(cluster_resolver=None)
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": W2}, "task": {"type": "worker", "index": 1}}))
    assert (is_chief(no_resolver), worker_index(no_resolver)) == (False, 1)
    monkeypatch.setenv("TF_CONFIG", "{broken")
    assert task_info(no_resolver).source == "local"
    monkeypatch.delenv("TF_CONFIG")
    assert (is_chief(no_resolver), worker_index(no_resolver)) == (True, 0)
    evaluator = _fake_strategy({"worker": ["h:1"], "evaluator": ["h:9"]}, "evaluator", 0)
    assert (is_chief(evaluator), worker_index(evaluator)) == (False, 0)


def test_cluster_resolver_carries_the_layout_and_gpu_count():
    info = resolve_cluster(cluster={"chief": ["h:10"], "worker": ["h:1"]}, task_type="worker", task_index=0, environ={})
    resolver = info.cluster_resolver(num_gpus=2)
    assert resolver.cluster_spec().as_dict() == {"chief": ["h:10"], "worker": ["h:1"]}
    assert (resolver.task_type, resolver.task_id, resolver.rpc_layer) == ("worker", 0, "grpc")
    assert resolver.num_accelerators() == {"GPU": 2}
    assert info.cluster_resolver(num_gpus=0).num_accelerators() == {}
    with pytest.raises(ValueError, match="Received: num_gpus=-1"):
        info.cluster_resolver(num_gpus=-1)


# --- the keyword set -----------------------------------------------------------------------------


def test_resolve_cluster_takes_exactly_the_cluster_options():
    """The keyword set is declared once, as ClusterOptions; resolve_cluster's signature mirrors it."""
    import inspect
    from dataclasses import fields

    from keras_gpu.core.cluster import ClusterOptions

    params = list(inspect.signature(resolve_cluster).parameters.values())
    assert [(p.name, p.default, p.annotation) for p in params] == [
        (f.name, f.default, f.type) for f in fields(ClusterOptions)
    ]
    assert [p.kind for p in params] == [inspect.Parameter.POSITIONAL_OR_KEYWORD] + [inspect.Parameter.KEYWORD_ONLY] * (
        len(params) - 1
    )
    assert resolve_cluster("explicit", cluster=["h:1", "h:2"], task_index=1).worker_index == 1  # `source` by position
    with pytest.raises(TypeError, match=r"^resolve_cluster\(\) got an unexpected keyword argument 'task_id'\. It takes source, "):
        resolve_cluster(task_id=1)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"slurm_port_base": 0}, ValueError, "Received: slurm_port_base=0"),
        ({"slurm_gpus_per_task": -1}, ValueError, "Received: slurm_gpus_per_task=-1"),
        ({"slurm_assign_gpus": 1}, TypeError, "Received: slurm_assign_gpus=1"),
        ({"environ": [("TF_CONFIG", "{}")]}, TypeError, "`environ` must be a mapping"),
        ({"source": "k8s"}, ValueError, "Received: source='k8s'"),
    ],
)
def test_a_bad_option_is_refused_where_it_enters(kwargs, exc, match):
    """Each value is checked when the options are built, before any source is read."""
    from keras_gpu.core.cluster import ClusterOptions

    kwargs.setdefault("environ", {})
    with pytest.raises(exc, match=match):
        ClusterOptions(**kwargs)
    with pytest.raises(exc, match=match):
        resolve_cluster(**kwargs)
