"""Keras on JAX across processes: make_strategy, keras-gpu launch, the callbacks and configure_devices without TensorFlow.

One launched job does it all (`tests/_workers/jax_job_worker.py`): two
processes with two CPU devices each (4 replicas), three fits from the same
initial weights (NumPy, a `PyDataset`, and a resumed one), evaluate and
predict; worker 1 is killed in the first attempt and `--max-restarts 1`
starts both again, now joining with `keras.distribution.initialize()` and no
arguments. The same script run alone, on one device, is the reference.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from keras_gpu.output import reader as report
from tests._util import REPO, run_python, subprocess_env
from tests.backends._common import JAX_ONLY

pytestmark = JAX_ONLY

WORKER = str(REPO / "tests" / "_workers" / "jax_job_worker.py")
GLOBAL, STEPS = 64, 24  # global batch, steps per epoch (the worker's)


def _max_diff(a, b) -> float:
    return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y)))) for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """The launched job's attempts, its launcher output, and the single-process reference."""
    root = tmp_path_factory.mktemp("jax_job")
    env = subprocess_env({"KERAS_BACKEND": "jax", "KILL_AT_EPOCH": "2", "KERAS_INITIALIZE_ON_RESTART": "1"})
    command = [sys.executable, "-m", "keras_gpu.cli", "launch", "-n", "2", "--cpu-replicas", "2",
               "--max-restarts", "1", "--grace-period", "4", WORKER, str(root / "launched")]
    launched = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert launched.returncode == 0, launched.stderr[-6000:]
    attempt = root / "launched" / "attempt_1"
    checkpoint = attempt / "ckpt_0.weights.h5"
    single_env = {"KERAS_BACKEND": "jax", "LOAD_CHECKPOINT": str(checkpoint)}
    run_python(f"import runpy, sys; sys.argv = [{WORKER!r}, {str(root / 'single')!r}]; runpy.run_path(sys.argv[0])",
               env=single_env, timeout=300)
    results = [json.loads((attempt / f"result_{rank}.json").read_text()) for rank in (0, 1)]
    single = json.loads((root / "single" / "attempt_single" / "result_0.json").read_text())
    return root / "launched", launched, results, single


def test_launched_fit_matches_one_process_on_the_same_global_batches(job):
    _, _, results, single = job
    assert single["replicas"] == 1 and single["kind"] == "default"
    for result in results:
        assert (result["replicas"], result["kind"]) == (4, "multiworker")
        rank = result["rank"]  # the launcher's KERAS_GPU_WORKER_INDEX
        assert result["place"] == [rank == 0, rank, rank == 0, rank]
        for fit in ("numpy", "pydataset"):
            assert _max_diff(result[fit], single[fit]) < 1e-5, fit
    assert sorted(r["rank"] for r in results) == [0, 1]
    assert single["place"] == [True, 0, True, 0]
    for fit in ("numpy", "pydataset", "resumed"):
        assert _max_diff(results[0][fit], results[1][fit]) < 1e-6, fit  # both processes end with the same weights
    assert _max_diff(results[0]["numpy"], results[0]["pydataset"]) > 1e-3  # the two fits saw different orders


def test_evaluate_and_predict_return_the_single_process_results(job):
    _, _, results, single = job
    for result in results:
        assert result["evaluate"] == pytest.approx(single["evaluate"], rel=1e-5)
        predicted = np.asarray(result["predict"])
        assert predicted.shape == (4 * GLOBAL, 4)  # every process holds all rows
        assert np.max(np.abs(predicted - np.asarray(single["predict"]))) < 1e-5


def test_a_killed_worker_restarts_and_resumes_from_the_chiefs_backup(job):
    root, launched, results, single = job
    assert "worker 1 was killed by SIGKILL" in launched.stderr
    assert "restarting all 2 worker(s) on new ports (restart 1 of 1)" in launched.stderr
    assert not list((root / "attempt_0").glob("result_*.json"))  # the first attempt never finished
    for result in results:
        assert result["resumed_epochs"] == 2  # epochs 2 and 3; 0 and 1 came from the backup
        assert _max_diff(result["resumed"], single["resumed"]) < 1e-5  # the uninterrupted run


def test_model_checkpoint_has_one_writer_and_its_file_loads(job):
    root, _, results, single = job
    assert [r["writes_checkpoints"] for r in results] == [True, False]
    assert sorted(p.name for p in (root / "attempt_1").glob("ckpt_*")) == ["ckpt_0.weights.h5"]
    assert _max_diff(single["checkpoint"], results[0]["numpy"]) == 0.0  # the chief's weights after the last epoch


def test_chief_logs_global_samples_per_second_and_each_worker_its_run(job):
    root, launched, results, _ = job
    chief = report.read_scalars(str(root / "attempt_1" / "logs" / "train"))
    points = chief["throughput/samples_per_sec"]
    assert [step for step, _ in points] == list(range(2, 2 * STEPS + 1, 2))
    # Windows of 2 global batches of GLOBAL samples: the time they imply for the second epoch is the stopwatch's.
    implied = sum(2 * GLOBAL / value for step, value in points if step > STEPS)
    assert implied == pytest.approx(results[0]["stopwatch"][1], rel=0.02)
    summary = results[0]["summary"]
    assert (summary["steps"], summary["samples"], summary["num_replicas"]) == (2 * STEPS, 2 * STEPS * GLOBAL, 4)
    # The PyDataset fit passes no batch size anywhere: its samples are counted, global, once (not per process).
    for result in results:
        counted = result["pydataset_summary"]
        assert (counted["steps"], counted["samples"], counted["num_replicas"]) == (2 * STEPS, 2 * STEPS * GLOBAL, 4)
    assert (root / "attempt_1" / "logs" / "worker_1" / "train").is_dir()
    assert not (root / "attempt_1" / "logs" / "worker_0").exists()
    # The cluster view on JAX: the chief's end-of-fit line in each attempt's StepTimeLogger fit, balanced.
    assert "no cluster view" not in launched.stderr
    assert launched.stderr.count("[worker 0] keras-gpu: cluster view (2 of 2 workers") == 2
    assert launched.stderr.count("2 gathers): no straggler") == 2
    assert "[worker 1] keras-gpu: cluster view" not in launched.stderr


DEVICES = """
import json, os
import keras_gpu
from keras_gpu.setup.jax_devices import backends_started

def attempt(**kwargs):
    import jax
    env = dict(os.environ)
    before = (jax.config.jax_num_cpu_devices, str(jax.config.jax_default_matmul_precision))
    try:
        keras_gpu.configure_devices(**kwargs)
    except (ValueError, TypeError, RuntimeError) as exc:
        after = (jax.config.jax_num_cpu_devices, str(jax.config.jax_default_matmul_precision))
        return [type(exc).__name__, str(exc), before == after and env == dict(os.environ), backends_started()]
    return ["no error"]

out = {
    "no_jax_meaning": attempt(cpu_devices=2, tf32=False, xla=True, intra_op_threads=2),
    "contradiction": attempt(cpu_devices=2, memory_growth=True, memory_limit_mb=512),
    "bad_value": attempt(cpu_devices=0),
}
record = keras_gpu.configure_devices(cpu_devices=2, tf32=False)
import jax
strategy = keras_gpu.make_strategy()
out.update(
    applied=dict(record.applied), devices=len(jax.devices()), kind=strategy.kind, replicas=strategy.num_replicas_in_sync,
    again=dict(keras_gpu.configure_devices(cpu_devices=2).in_force), late=attempt(cpu_devices=3),
)
print("RESULT", json.dumps(out))
"""


def test_configure_devices_on_jax_splits_the_cpu_and_refuses_before_changing_anything():
    proc = run_python(DEVICES, env={"KERAS_BACKEND": "jax"})
    out = json.loads(proc.stdout.split("RESULT", 1)[1])
    kind, message, unchanged, started = out["no_jax_meaning"]
    assert kind == "ValueError" and unchanged and not started
    assert "`xla`, `intra_op_threads` have no meaning on Keras' JAX backend" in message
    assert "Received: xla=True, intra_op_threads=2" in message
    kind, message, unchanged, started = out["contradiction"]
    assert kind == "ValueError" and "memory_growth=True" in message and unchanged and not started
    kind, message, unchanged, started = out["bad_value"]
    assert kind == "ValueError" and "cpu_devices=0" in message and unchanged and not started
    assert out["applied"] == {"cpu_devices": 2, "tf32": False}
    assert (out["devices"], out["kind"], out["replicas"]) == (2, "mirrored", 2)
    assert out["again"] == {"cpu_devices": 2}  # already in force: a no-op
    kind, message, unchanged, started = out["late"]
    assert kind == "RuntimeError" and "cpu_devices (in force: 2, asked: 3)" in message
    assert "Nothing was changed" in message and unchanged and started


def test_make_strategy_on_pytorch_names_the_supported_backends():
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    code = textwrap.dedent(
        """
        import keras_gpu
        try:
            keras_gpu.make_strategy()
        except RuntimeError as exc:
            print("ERROR", exc)
        """
    )
    out = run_python(code, env={"KERAS_BACKEND": "torch"}).stdout
    assert "ERROR keras_gpu.make_strategy() works on Keras' TensorFlow and JAX backends" in out
    assert "Received: backend='torch'" in out
