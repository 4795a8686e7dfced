"""Faults in a two-process Keras-on-JAX job end it promptly and resume it exactly (tests/_workers/fault_worker.py).

Every check is a count or a message of a real loopback job (gloo collectives
on CPU); the subprocess timeouts only keep a broken build from hanging the
suite.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np

from tests._util import REPO, free_ports, subprocess_env
from tests.backends._common import JAX_ONLY

pytestmark = JAX_ONLY

WORKER = str(REPO / "tests" / "_workers" / "fault_worker.py")


def _launch(out, *options, fault="", timeout=400):
    env = subprocess_env({"KERAS_BACKEND": "jax", "FAULT": fault})
    command = [sys.executable, "-m", "keras_gpu.cli", "launch", "-n", "2", "--grace-period", "4", *options, WORKER, str(out)]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def _weights(out, rank):
    return [np.asarray(w) for w in json.loads((out / f"result_{rank}.json").read_text())["weights"]]


def _max_diff(a, b):
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b, strict=True))


def test_a_worker_that_raises_ends_the_launched_job_with_its_exit_code(tmp_path):
    job = _launch(tmp_path, "--hang-timeout", "120", fault="raise")
    assert job.returncode == 1, job.stderr[-4000:]
    assert "RuntimeError: worker 1 fails" in job.stderr
    assert "keras-gpu: worker 1 exited with code 1; stopping the other 1 worker(s)" in job.stderr
    assert "stopped making progress" not in job.stderr and "--hang-timeout) on worker" not in job.stderr
    assert "Writer is closed" not in job.stderr and "training continues" not in job.stderr
    assert "TensorFlow" not in job.stderr


def test_without_the_launcher_a_failing_process_ends_its_blocked_peer(tmp_path):
    ports = free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    procs = []
    for rank in (0, 1):
        tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": rank}})
        env = subprocess_env({"KERAS_BACKEND": "jax", "FAULT": "raise", "TF_CONFIG": tf_config, "RANK": str(rank)})
        procs.append(subprocess.Popen([sys.executable, WORKER, str(tmp_path)], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=400) for p in procs]  # JAX alone would hold both for its 300 s shutdown barrier
    codes = [p.returncode for p in procs]
    assert codes[1] == 1, outs[1][1][-3000:]
    assert codes[0] != 0, outs[0][1][-3000:]  # its collective failed with the peer gone
    assert "RuntimeError: worker 1 fails" in outs[1][1]
    ended = "this process failed; it exits now with status 1 instead of waiting at JAX's exit-time"
    assert outs[1][1].count(ended) == 1
    assert not list(tmp_path.glob("result_*.json"))


def test_kills_inside_the_backup_writes_resume_to_the_uninterrupted_weights(tmp_path):
    clean, killed = tmp_path / "clean", tmp_path / "killed"
    # The uninterrupted run starts beside a torn backup of an older version: set aside once, no restart.
    (clean / "backup").mkdir(parents=True)
    (clean / "backup" / "latest.weights.h5").write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 88)  # 96 bytes, truncated
    (clean / "backup" / "training_metadata.json").write_text('{"epoch": 3, "batch": 0}')
    job = _launch(clean, "--max-restarts", "1")
    assert job.returncode == 0, job.stderr[-4000:]
    assert job.stderr.count("cannot be read") == 1
    assert f"it was moved to {clean / 'backup-unreadable' / 'latest.weights.h5'}" in job.stderr
    assert "restarting" not in job.stderr
    assert (clean / "backup-unreadable" / "latest.weights.h5").stat().st_size == 96

    job = _launch(killed, "--max-restarts", "2", fault="backup_kills")
    assert job.returncode == 0, job.stderr[-4000:]
    assert job.stderr.count("worker 0 was killed by SIGKILL") == 2
    assert "restarting all 2 worker(s) on new ports (restart 2 of 2)" in job.stderr
    assert "cannot be read" not in job.stderr
    result = json.loads((killed / "result_0.json").read_text())
    assert (result["attempt"], result["epochs_run"]) == (2, 2)  # epochs 3 and 4: the weights of epoch 2 were renamed in
    for rank in (0, 1):
        assert _max_diff(_weights(killed, rank), _weights(clean, rank)) <= 1e-6


def test_a_worker_stuck_in_its_input_pipeline_is_named_first_in_jax_words(tmp_path):
    job = _launch(tmp_path, "--hang-timeout", "10", fault="input")
    assert job.returncode == 124, job.stderr[-4000:]
    verdict = next(line for line in job.stderr.splitlines() if "(--hang-timeout) on worker(s)" in line)
    assert "on worker(s) 1, 0: worker 1 stuck in fit" in verdict
    assert "in its input pipeline at " in verdict and "fault_worker.py" in verdict and "in __getitem__" in verdict
    assert "Worker 1 stopped first (in its input pipeline at " in verdict
    assert "worker 0 stuck in fit" in verdict and "waiting inside JAX" in verdict and "in Python" not in verdict
    # Worker 0 blocked in a collective outlasts SIGTERM: the note names JAX, never TensorFlow.
    assert "JAX's preemption service catches SIGTERM" in job.stderr
    assert "TensorFlow" not in job.stderr


def test_a_lonely_jax_task_says_whom_it_waits_for_while_it_waits(tmp_path):
    ports = free_ports(2)
    tf_config = json.dumps({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]}, "task": {"type": "worker", "index": 1}})
    env = subprocess_env({"KERAS_BACKEND": "jax", "TF_CONFIG": tf_config, "KERAS_GPU_WAIT_LOG_S": "1"})
    code = "import keras_gpu; keras_gpu.make_strategy(startup_timeout=600)"
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE, text=True)
    lines = []
    try:
        for line in proc.stderr:  # worker 0 never comes: the task waits, and says so once per interval
            if "make_strategy: waiting for " in line:
                lines.append(line.strip())
                if len(lines) == 2:
                    break
    finally:
        proc.kill()
        proc.communicate(timeout=60)
    assert len(lines) == 2
    for line in lines:
        assert line.startswith(f"keras-gpu: make_strategy: waiting for worker:0 (the JAX coordinator) at 127.0.0.1:{ports[0]} (")
        assert line.endswith(" s of 600 s)")


def test_a_task_whose_coordinator_never_comes_fails_in_words_at_the_timeout():
    ports = free_ports(2)
    tf_config = json.dumps({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]}, "task": {"type": "worker", "index": 1}})
    code = textwrap.dedent(
        """
        import keras_gpu
        try:
            keras_gpu.make_strategy(startup_timeout=3)
        except RuntimeError as exc:
            print("ERROR", exc)
        """
    )
    env = subprocess_env({"KERAS_BACKEND": "jax", "TF_CONFIG": tf_config})
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]  # a Python exception, not JAX's abort
    assert "ERROR make_strategy: the 2 processes from tf_config did not join within startup_timeout=3s" in proc.stdout
    assert f"The coordinator never answered at 127.0.0.1:{ports[0]}." in proc.stdout
