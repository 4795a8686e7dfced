"""Two real worker processes on loopback: Keras 3 `fit`, `evaluate` and `predict` with `make_strategy`.

Every run starts two fresh interpreters that train together over gRPC on
127.0.0.1. If a run overstays its deadline, both process groups are killed
so that nothing is left waiting on a peer.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from tests._util import free_ports, subprocess_env

pytestmark = pytest.mark.slow

_DEADLINE_S = 120

_WORKER = textwrap.dedent(
    """
    import json, logging, os, sys
    import numpy as np

    records = []
    class _Keep(logging.Handler):
        def emit(self, record):
            records.append([record.levelname, record.getMessage()])
    log = logging.getLogger("keras_gpu"); log.setLevel(logging.INFO); log.addHandler(_Keep())

    import keras_gpu
    mode = os.environ["KG_MODE"]
    if mode == "stock":
        import tensorflow as tf
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    elif mode == "explicit":
        strategy = keras_gpu.make_strategy(
            "multiworker", cluster_source="explicit", communication=os.environ.get("KG_COMMUNICATION", "auto"),
            cluster=json.loads(os.environ["KG_CLUSTER"]), task_index=int(os.environ["KG_INDEX"]))
    elif mode == "slurm":
        strategy = keras_gpu.make_strategy(
            "multiworker", cluster_source="slurm", slurm_port_base=int(os.environ["KG_PORT_BASE"]))
    else:
        strategy = keras_gpu.make_strategy(mode)

    import tensorflow as tf
    import keras

    out = {
        "type": type(strategy).__name__,
        "is_mwms": isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy),
        "replicas": strategy.num_replicas_in_sync,
        "local_devices": list(strategy.extended.worker_devices),
        "is_chief": keras_gpu.is_chief(strategy),
        "worker_index": keras_gpu.worker_index(strategy),
        "logs": records,
    }

    def result():
        print("RESULT " + json.dumps(out), flush=True)

    rs = np.random.RandomState(0)
    x = rs.rand(256, 8).astype("float32")
    y = (x @ rs.rand(8, 1)).astype("float32")

    def build(spe=1):
        with strategy.scope():
            keras.utils.set_random_seed(7)
            model = keras.Sequential(
                [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
            model.compile(keras.optimizers.SGD(0.05), "mse", metrics=["mae"], steps_per_execution=spe)
        return model

    model = build()
    try:
        history = model.fit(x, y, batch_size=32, epochs=4, verbose=0, shuffle=False)
    except Exception as e:
        out["fit_error"] = type(e).__name__ + ": " + str(e)
        result()
        sys.exit(0)
    out["loss"] = history.history["loss"]
    out["weights"] = [w.tolist() for w in model.get_weights()]
    out["evaluate"] = model.evaluate(x, y, batch_size=32, verbose=0)
    pred = model.predict(x, batch_size=32, verbose=0)
    out["predict_shape"] = list(pred.shape)
    out["predict_matches_local"] = bool(np.allclose(pred, model(x).numpy(), atol=1e-5))

    if os.environ.get("KG_REDUCE") == "1":
        rid = lambda: tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32)
        scalar = strategy.run(tf.function(lambda: rid() + 1.0))                  # 1 and 2
        ragged = strategy.run(tf.function(lambda: tf.fill(tf.cast([2 + 1 * rid()], tf.int32), 1 + 3 * rid())))
        out["rank0_mean_axis0"] = float(strategy.reduce("MEAN", scalar, axis=0))
        out["ragged_mean_axis0"] = float(strategy.reduce("MEAN", ragged, axis=0))
        # A nest of PerReplica values, as Keras' `_maybe_symbolic_build` passes it.
        xs = np.arange(16, dtype="float32").reshape(8, 2)
        dataset = tf.data.Dataset.from_tensor_slices((xs, {"y": xs[:, :1] * 10})).batch(4)
        batch = next(iter(strategy.experimental_distribute_dataset(dataset)))
        out["batch_types"] = [type(v).__name__ for v in tf.nest.flatten(batch)]
        out["batch_local"] = [strategy.experimental_local_results(v)[0].numpy().tolist() for v in tf.nest.flatten(batch)]
        reduced = strategy.reduce("MEAN", batch, axis=None)
        out["batch_reduced_structure"] = [type(reduced).__name__, sorted(reduced[1])]
        out["batch_reduced"] = [v.numpy().tolist() for v in tf.nest.flatten(reduced)]

    if os.environ.get("KG_SPE") == "1":
        before = len(records)
        from keras_gpu.setup.keras_compat import warn_steps_per_execution
        out["spe_affected"] = warn_steps_per_execution(strategy, 2)
        out["spe_logs"] = records[before:]
        try:
            build(2).fit(x, y, batch_size=32, epochs=1, verbose=0, shuffle=False)
            out["spe_fit"] = "trained"
        except Exception as e:
            out["spe_fit"] = type(e).__name__ + ": " + str(e)
    result()
    """
)


def _run_workers(envs: list[dict[str, str]], deadline_s: float = _DEADLINE_S) -> list[dict]:
    """Start one worker per environment, wait for all, and return their RESULT dictionaries."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER],
            env=subprocess_env(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        for env in envs
    ]
    outputs: list[tuple[str, str]] = []
    end = time.monotonic() + deadline_s
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=max(1.0, end - time.monotonic())))
    except subprocess.TimeoutExpired:
        _kill_all(procs)
        pytest.fail(f"the workers did not finish within {deadline_s} s; both were killed")
    finally:
        _kill_all(procs)
    results = []
    for i, (proc, (stdout, stderr)) in enumerate(zip(procs, outputs)):
        lines = [ln for ln in stdout.splitlines() if ln.startswith("RESULT ")]
        assert proc.returncode == 0 and lines, (
            f"worker {i} exited {proc.returncode}\n--- stdout ---\n{stdout[-3000:]}\n--- stderr ---\n{stderr[-6000:]}"
        )
        results.append(json.loads(lines[-1][len("RESULT "):]))
    return results


def _kill_all(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _tf_config_envs(mode: str, **extra: str) -> list[dict[str, str]]:
    ports = free_ports(2)
    workers = [f"127.0.0.1:{p}" for p in ports]
    return [
        {
            "KG_MODE": mode,
            "TF_CONFIG": json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}}),
            **extra,
        }
        for i in range(2)
    ]


def _consecutive_free_ports() -> int:
    """A port p such that p and p + 1 were both free on 127.0.0.1 a moment ago."""
    for _ in range(50):
        base = free_ports(1)[0]
        if base >= 65535:
            continue
        with socket.socket() as a, socket.socket() as b:
            try:
                a.bind(("127.0.0.1", base))
                b.bind(("127.0.0.1", base + 1))
            except OSError:
                continue
        return base
    raise RuntimeError("found no two consecutive free ports on 127.0.0.1")


def _assert_trained_together(results: list[dict]) -> None:
    w0, w1 = results
    for r in results:
        assert r["type"] == "KerasMultiWorkerMirroredStrategy" and r["is_mwms"] is True
        assert r["replicas"] == 2
        assert "fit_error" not in r, r.get("fit_error")
        loss = r["loss"]
        assert len(loss) == 4 and all(b < a for a, b in itertools.pairwise(loss)) and loss[-1] < 0.5 * loss[0]
        assert r["predict_shape"] == [256, 1] and r["predict_matches_local"] is True
    assert w0["loss"] == w1["loss"]
    assert len(w0["weights"]) == len(w1["weights"]) == 4
    assert all(np.array_equal(np.array(a), np.array(b)) for a, b in zip(w0["weights"], w1["weights"]))
    assert w0["evaluate"] == w1["evaluate"] and len(w0["evaluate"]) == 2
    assert (w0["is_chief"], w0["worker_index"], w1["is_chief"], w1["worker_index"]) == (True, 0, False, 1)


@pytest.fixture(scope="module")
def multiworker_run():
    return _run_workers(_tf_config_envs("multiworker", KG_REDUCE="1", KG_SPE="1"))


def test_multiworker_fit_evaluate_predict(multiworker_run):
    _assert_trained_together(multiworker_run)
    for r in multiworker_run:
        info = [m for lvl, m in r["logs"] if lvl == "INFO" and m.startswith("make_strategy:")]
        assert info == [
            "make_strategy: multiworker (2 workers from tf_config; this process is "
            f"worker:{r['worker_index']} (rank {r['worker_index']}, {'chief' if r['is_chief'] else 'not chief'}); "
            "communication auto): kind='multiworker' was asked for"
        ]


def test_multiworker_reduce_on_real_per_replica_values(multiworker_run):
    w0, w1 = multiworker_run
    assert w0["batch_local"] != w1["batch_local"]  # each worker holds its own shard
    for r in multiworker_run:
        assert r["rank0_mean_axis0"] == 1.5  # rank-0 values with axis=0: mean across replicas
        assert r["batch_types"] == ["PerReplica", "PerReplica"]
        assert r["batch_reduced_structure"] == ["tuple", ["y"]]  # a nest, reduced leaf by leaf
        expected = [(np.array(a) + np.array(b)) / 2 for a, b in zip(w0["batch_local"], w1["batch_local"])]
        assert all(np.array_equal(np.array(got), want) for got, want in zip(r["batch_reduced"], expected))
        assert r["ragged_mean_axis0"] == pytest.approx((2 * 1 + 3 * 4) / 5)  # rank 1 keeps axis=0 semantics


def test_multiworker_steps_per_execution_trains_and_is_not_flagged(multiworker_run):
    """keras-team/keras#19246 is fixed for keras-gpu's multi-worker strategy: no warning, and it trains."""
    for r in multiworker_run:
        assert r["spe_affected"] is False
        assert r["spe_fit"] == "trained"
        assert not [m for lvl, m in r["logs"] if "keras-team/keras#19246" in m]


def test_auto_picks_multiworker_from_tf_config():
    results = _run_workers(_tf_config_envs("auto"))
    _assert_trained_together(results)
    for r in results:
        info = [m for lvl, m in r["logs"] if lvl == "INFO" and m.startswith("make_strategy:")]
        assert len(info) == 1 and info[0].startswith("make_strategy: auto chose multiworker (2 workers from tf_config")
        assert info[0].endswith("tf_config describes 2 training tasks")


def test_explicit_cluster():
    cluster = json.dumps({"worker": [f"127.0.0.1:{p}" for p in free_ports(2)]})
    results = _run_workers([{"KG_MODE": "explicit", "KG_CLUSTER": cluster, "KG_INDEX": str(i)} for i in range(2)])
    _assert_trained_together(results)
    assert all("2 workers from explicit" in m for r in results for lvl, m in r["logs"] if m.startswith("make_strategy:"))


def test_slurm_shaped_cluster():
    base = _consecutive_free_ports()
    envs = [
        {
            "KG_MODE": "slurm",
            "KG_PORT_BASE": str(base),
            "SLURM_PROCID": str(i),
            "SLURM_STEP_NUM_TASKS": "2",
            "SLURM_STEP_NODELIST": "localhost",
            "SLURM_STEP_TASKS_PER_NODE": "2",
        }
        for i in range(2)
    ]
    results = _run_workers(envs)
    _assert_trained_together(results)
    assert all("2 workers from slurm" in m for r in results for lvl, m in r["logs"] if m.startswith("make_strategy:"))


def test_stock_multiworker_strategy_still_fails_in_fit():
    """keras-team/keras#20585; when this fails, upstream fixed it and the compat strategy can go."""
    results = _run_workers(_tf_config_envs("stock"))
    for r in results:
        assert r["type"] == "CollectiveAllReduceStrategy" and r["replicas"] == 2
        assert "loss" not in r
        assert "PerReplica" in r["fit_error"] and "to a Tensor" in r["fit_error"]


def _gpu_count() -> int:
    import pynvml

    pynvml.nvmlInit()
    try:
        return pynvml.nvmlDeviceGetCount()
    finally:
        pynvml.nvmlShutdown()


@pytest.mark.gpu
def test_explicit_cluster_trains_on_gpus():
    """Each worker of an explicit (SimpleClusterResolver) cluster must train on its GPU, not its CPU."""
    n = _gpu_count()
    cluster = json.dumps({"worker": [f"127.0.0.1:{p}" for p in free_ports(2)]})
    envs = [
        {
            "KG_MODE": "explicit",
            "KG_CLUSTER": cluster,
            "KG_INDEX": str(i),
            # Two GPUs: one each. One GPU: shared, with ring collectives (NCCL refuses a GPU twice).
            "CUDA_VISIBLE_DEVICES": str(i if n >= 2 else 0),
            "KG_COMMUNICATION": "auto" if n >= 2 else "ring",
            "TF_FORCE_GPU_ALLOW_GROWTH": "true",
        }
        for i in range(2)
    ]
    results = _run_workers(envs, deadline_s=300)
    _assert_trained_together(results)
    for r in results:
        assert len(r["local_devices"]) == 1 and r["local_devices"][0].endswith("GPU:0")
