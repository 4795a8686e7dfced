"""Multi-worker hardening, each case a real `keras-gpu launch -n 2` job on loopback.

The worker is `tests/_workers/harden_worker.py`; each worker writes its
results to `OUT/w<rank>.json`. Jobs that several tests read run once per module.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests._util import REPO, subprocess_env

pytestmark = pytest.mark.slow

WORKER = REPO / "tests" / "_workers" / "harden_worker.py"
DEADLINE_S = 240


def launch_case(out: Path, case: str, *launcher_args: str, n: int = 2, timeout: float = DEADLINE_S):
    """Run `keras-gpu launch -n N harden_worker.py OUT --case CASE`; return (process, per-rank results)."""
    out.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [sys.executable, "-m", "keras_gpu.cli", "launch", "-n", str(n), *launcher_args, str(WORKER), str(out), "--case", case],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )
    results = [json.loads(p.read_text()) if p.exists() else None for p in (out / f"w{i}.json" for i in range(n))]
    return proc, results


@pytest.fixture(scope="module")
def core(tmp_path_factory):
    out = tmp_path_factory.mktemp("core")
    proc, results = launch_case(out, "core")
    assert proc.returncode == 0 and all(results), f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return out, results


def _max_diff(a, b) -> float:
    return max(float(np.max(np.abs(np.array(p) - np.array(q)))) for p, q in zip(a, b))


def test_steps_per_execution_4_matches_1_on_every_worker(core):
    """keras-team/keras#19246 under multi-worker: spe=4 trains, ends within 1e-4 of spe=1, workers agree."""
    _, (w0, w1) = core
    for r in (w0, w1):
        for key in ("sgd_spe1", "sgd_spe4", "adam_spe1", "adam_spe4"):
            assert "error" not in r[key], r[key]
            assert r[key]["iterations"] == 40  # 256 samples / global batch 32 x 5 epochs
        assert _max_diff(r["sgd_spe1"]["weights"], r["sgd_spe4"]["weights"]) <= 1e-4
        assert r["sgd_spe1"]["loss"] == pytest.approx(r["sgd_spe4"]["loss"], abs=1e-5)
        assert r["sgd_spe4"]["loss"][-1] < 0.5 * r["sgd_spe4"]["loss"][0]
        assert not [m for _, m in r["logs"] if "keras-team/keras#19246" in m]  # no warning where the fix holds
    for key in ("sgd_spe4", "adam_spe4"):
        assert w0[key]["weights"] == w1[key]["weights"]


def _precision(probabilities: np.ndarray, labels: np.ndarray, thresholds=(0.3, 0.5, 0.7)) -> np.ndarray:
    predicted = probabilities[:, None] > np.asarray(thresholds)
    tp = (predicted & labels[:, None]).sum(0)
    fp = (predicted & ~labels[:, None]).sum(0)
    return np.where(tp + fp > 0, tp / np.maximum(tp + fp, 1), 0.0)


def test_vector_metric_per_batch_logs_are_element_wise(core):
    """Per-batch `Precision(thresholds=[3 values])` logs keep 3 values, as a mirrored run gives.

    The truth is counted by hand from the frozen model's predictions: as with
    any strategy, Keras' per-batch log is the element-wise mean over replicas
    of each replica's running value; replica i of step k holds samples
    [32k + 16i, 32k + 16i + 16). The epoch-end value is the global one.
    """
    _, results = core
    probabilities = np.array(results[0]["probabilities"])
    labels = np.array(results[0]["labels"]).astype(bool)
    for r in results:
        assert len(r["precision_batches"]) == 8
        for k, got in enumerate(r["precision_batches"]):
            shards = [np.concatenate([np.arange(32 * j + 16 * i, 32 * j + 16 * i + 16) for j in range(k + 1)]) for i in (0, 1)]
            want = np.mean([_precision(probabilities[s], labels[s]) for s in shards], axis=0)
            assert np.shape(got) == (3,)
            np.testing.assert_allclose(got, want, atol=1e-6)
        np.testing.assert_allclose(r["precision_epoch"], _precision(probabilities, labels), atol=1e-6)


def test_invalid_axis_on_a_scalar_keeps_tensorflows_error(core):
    _, results = core
    for r in results:
        assert "Invalid reduction dimension 1" in r["scalar_axis1"]
        assert r["scalar_axis0"] == 2.0  # axis=0 on per-replica scalars: the sum across both replicas


def test_model_checkpoint_is_written_by_the_chief_only(core):
    import keras

    out, (w0, w1) = core
    assert (w0["is_chief"], w1["is_chief"]) == (True, False)
    assert w0["ckpt_writes"] == [True, True] and w1["ckpt_writes"] == [False, False]
    assert sorted(p.name for p in (out / "ckpt").iterdir()) == ["best.keras", "e1.weights.h5", "e2.weights.h5"]
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
    model.load_weights(out / "ckpt" / "e2.weights.h5")
    assert _max_diff([w.tolist() for w in model.get_weights()], w0["ckpt_weights"]) == 0.0
    assert w0["ckpt_weights"] == w1["ckpt_weights"]
    best = keras.saving.load_model(out / "ckpt" / "best.keras")
    assert _max_diff([w.tolist() for w in best.get_weights()], w0["ckpt_weights"]) == 0.0


@pytest.fixture(scope="module")
def uneven(tmp_path_factory):
    proc, results = launch_case(tmp_path_factory.mktemp("uneven"), "uneven")
    assert proc.returncode == 0 and all(results), f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return results


def test_batches_that_leave_a_replica_empty_work_and_the_process_stays_healthy(uneven):
    """A 1-sample `evaluate`, a last batch of 1 and a 3-sample `predict` on 2 workers.

    Keras' `_maybe_symbolic_build` used to all-reduce the first data batch
    itself, and shapes `[1, 8]` and `[0, 8]` aborted that collective for the
    rest of the process (sometimes with a SIGSEGV). The truth for each result
    is the worker's own forward pass of the same weights, with no collective.
    """
    results = uneven
    for r in results:
        assert r["replicas"] == 2
        for name in ("evaluate_1", "evaluate_ok", "fit_last_batch_1", "fit_ok", "evaluate_after", "predict_3"):
            assert "error" not in r[name], (name, r[name]["error"])
        for name in ("evaluate_1", "evaluate_ok", "evaluate_after"):
            assert r[name]["value"] == pytest.approx(r[name]["local"], rel=1e-5)
        np.testing.assert_allclose(r["predict_3"]["value"], r["predict_3"]["local"], rtol=1e-5)
        assert len(r["predict_3"]["value"]) == 3
        loss = r["fit_ok"]["value"]
        assert all(np.isfinite(loss)) and loss[-1] < loss[0]
    assert results[0]["weights"] == results[1]["weights"]
    assert results[0]["fit_ok"] == results[1]["fit_ok"]


def test_padded_batches_whose_shapes_differ_between_replicas(uneven):
    """Each worker pads its own shard: padded lengths differ between replicas at the same step."""
    w0, w1 = uneven
    assert any(a != b for a, b in zip(w0["padded_shapes"], w1["padded_shapes"]))
    for r in (w0, w1):
        assert "error" not in r["padded_fit"] and "error" not in r["padded_evaluate"], r
        assert r["after_padded"]["value"] == pytest.approx(r["after_padded"]["local"], rel=1e-5)
    # evaluate's loss is the mean over every sample of every worker, counted here from each worker's own pass.
    total = w0["padded_local_sse"] + w1["padded_local_sse"]
    count = w0["padded_local_count"] + w1["padded_local_count"]
    assert count == 16
    for r in (w0, w1):
        assert r["padded_evaluate"]["value"] == pytest.approx(total / count, rel=1e-5)
    assert w0["seq_weights"] == w1["seq_weights"] and w0["padded_fit"] == w1["padded_fit"]


def test_trace_time_keys_fix_a_stock_collective_mirrored_strategy_in_one_process():
    """`keras_gpu.core.tf_private.collective_keys_fixed_in_control_flow` alone, on the smallest case that fails without it."""
    from tests._util import run_python

    proc = run_python(
        """
        import json
        import keras_gpu
        keras_gpu.configure_devices(cpu_devices=2)
        import keras, numpy as np, tensorflow as tf
        from keras_gpu.core.tf_private import collective_keys_fixed_in_control_flow

        x = np.random.RandomState(0).rand(64, 4).astype("float32")
        y = x.sum(axis=1, keepdims=True)
        out = {}
        for fixed in (False, True):
            strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])  # collective all-reduce
            out[f"launchers_{fixed}"] = collective_keys_fixed_in_control_flow(strategy) if fixed else 0
            weights = {}
            for spe in (1, 4):
                with strategy.scope():
                    keras.utils.set_random_seed(1)
                    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
                    model.compile(keras.optimizers.SGD(0.1), "mse", steps_per_execution=spe)
                try:
                    model.fit(x, y, batch_size=16, epochs=2, verbose=0, shuffle=False)
                    weights[spe] = [w.tolist() for w in model.get_weights()]
                except Exception as e:
                    weights[spe] = type(e).__name__ + ": " + str(e)[:300]
            out[str(fixed)] = weights
        print("RESULT " + json.dumps(out))
        """
    )
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    out = json.loads(line[len("RESULT "):])
    assert "while/cond/Placeholder" in out["False"]["4"]  # the stock failure, same process setup
    assert out["launchers_True"] == 2  # one launcher per replica
    assert out["True"]["1"] == out["True"]["4"] == out["False"]["1"]


def test_steps_per_execution_with_batches_that_split_unevenly(uneven):
    """Global batch 33 (an odd split over 2 workers), then a last batch of 32.

    Collectives inside the multi-step loop take their keys when traced; this
    checks that every worker runs the same collectives (a mismatch would hang)
    and that the result is right.
    """
    w0, w1 = uneven
    for r in (w0, w1):
        assert "error" not in r["spe_uneven_fit"], r["spe_uneven_fit"]
        assert r["spe_uneven_evaluate"]["value"] == pytest.approx(r["spe_uneven_evaluate"]["local"], rel=1e-5)
    assert w0["spe_uneven_fit"] == w1["spe_uneven_fit"] and w0["spe_weights"] == w1["spe_weights"]
