"""Reliability of `keras-gpu launch`: a worker killed mid-`fit`, restarts with `--max-restarts`, and resuming.

Every job here is a real `python -m keras_gpu.cli launch` process whose workers
train together over loopback (`tests/_workers/train_worker.py`) or stand in
for them without TensorFlow (`tests/_workers/flaky_worker.py`). The two
TensorFlow jobs run once per module and are shared by the assertions.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests._util import REPO, subprocess_env
from tests._util import alive as _alive

pytestmark = pytest.mark.slow

WORKERS = REPO / "tests" / "_workers"
TRAIN = WORKERS / "train_worker.py"
FLAKY = WORKERS / "flaky_worker.py"
GRACE_S = 2.0
STEPS_PER_EPOCH = 8  # train_worker: 256 samples, global batch 32


def _launch_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "keras_gpu.cli", "launch", *args]


def _processes_in_groups(pgids: set[int]) -> list[int]:
    """Live processes whose process group is one of `pgids` (each worker leads its own group)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if fields[0] != "Z" and int(fields[2]) in pgids:
            found.append(int(entry))
    return found


def _wait_for(predicate, timeout: float, what: str, proc: subprocess.Popen | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            _, err = proc.communicate()
            raise AssertionError(f"the launcher exited {proc.returncode} while waiting for {what}\n{err[-4000:]}")
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def _records(out_dir: Path) -> dict[tuple[int, int], list[dict]]:
    """`(attempt, rank) -> records` from train_worker's JSON-lines files."""
    result = {}
    for path in sorted((out_dir / "records").glob("a*_w*.jsonl")):
        attempt, rank = map(int, re.match(r"a(\d+)_w(\d+)", path.stem).groups())
        result[(attempt, rank)] = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return result


def _epochs(records: list[dict]) -> list[int]:
    return [r["epoch"] for r in records if r["event"] == "epoch"]


def _stop(proc: subprocess.Popen, pids: list[int]) -> None:
    """Clean-up after a failing test: kill the launcher and every worker group it may have left."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


# ----------------------------------------------------- a worker dies mid-fit


def _train_then(out: Path, interrupt) -> dict:
    """Run a long two-worker job with keras-gpu's callbacks; once both finished two epochs, call `interrupt(launcher, pids)`."""
    log_dir = out / "logs"
    cmd = _launch_cmd(
        "-n", "2", "--grace-period", str(GRACE_S), str(TRAIN), str(out),
        "--epochs", "100000", "--batch-sleep", "0.02", "--log-dir", str(log_dir),
    )
    proc = subprocess.Popen(cmd, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pids: list[int] = []
    try:
        def two_epochs_each():
            recs = _records(out)
            done = {rank: _epochs(recs.get((0, rank), [])) for rank in (0, 1)}
            return done if all(len(e) >= 2 for e in done.values()) else None

        _wait_for(two_epochs_each, 180, "two finished epochs on both workers", proc)
        pids = [int((out / "pids" / f"a0_w{rank}.pid").read_text()) for rank in (0, 1)]
        recorded = {rank: _epochs(_records(out)[(0, rank)]) for rank in (0, 1)}
        interrupt(proc, pids)
        interrupted_at = time.monotonic()
        stdout, stderr = proc.communicate(timeout=60)
        elapsed = time.monotonic() - interrupted_at
    finally:
        _stop(proc, pids)
    survivors = [p for p in pids if _alive(p)] + _processes_in_groups(set(pids))
    return {
        "returncode": proc.returncode, "stdout": stdout, "stderr": stderr, "elapsed": elapsed, "pids": pids,
        "survivors": survivors, "recorded": recorded, "log_dir": log_dir,
    }


@pytest.fixture(scope="module")
def killed_job(tmp_path_factory):
    """The test SIGKILLs worker 1 while the job trains."""
    return _train_then(tmp_path_factory.mktemp("killed"), lambda launcher, pids: os.kill(pids[1], signal.SIGKILL))


@pytest.fixture(scope="module")
def interrupted_job(tmp_path_factory):
    """Ctrl-C: the launcher gets SIGINT while the job trains."""
    return _train_then(tmp_path_factory.mktemp("interrupted"), lambda launcher, pids: launcher.send_signal(signal.SIGINT))


def test_killed_worker_fails_the_job_with_its_status_and_a_report(killed_job):
    err = killed_job["stderr"]
    assert killed_job["returncode"] == 128 + signal.SIGKILL, err[-4000:]
    assert "keras-gpu: worker 1 was killed by SIGKILL; stopping the other 1 worker(s)" in err
    # The survivor is stuck in a collective and TensorFlow catches SIGTERM, so the SIGKILL after the grace period ends it.
    stopped = [line for line in err.splitlines() if line.startswith("keras-gpu: stopped: ")]
    assert len(stopped) == 1 and "worker 0 " in stopped[0], err[-4000:]
    assert "restarting" not in err


def test_interrupted_job_stops_every_worker_and_exits_130(interrupted_job):
    err = interrupted_job["stderr"]
    assert interrupted_job["returncode"] == 128 + signal.SIGINT, err[-4000:]
    assert "keras-gpu: received SIGINT; stopping 2 worker(s)" in err
    stopped = [line for line in err.splitlines() if line.startswith("keras-gpu: stopped: ")]
    assert len(stopped) == 1 and "worker 0 " in stopped[0] and "worker 1 " in stopped[0], err[-4000:]
    assert "restarting" not in err


@pytest.mark.parametrize("job", ["killed_job", "interrupted_job"])
def test_job_ends_within_the_grace_period(request, job):
    assert request.getfixturevalue(job)["elapsed"] < GRACE_S + 10


@pytest.mark.parametrize("job", ["killed_job", "interrupted_job"])
def test_no_process_of_the_job_survives(request, job):
    result = request.getfixturevalue(job)
    assert len(result["pids"]) == 2 and result["survivors"] == []


@pytest.mark.parametrize("job", ["killed_job", "interrupted_job"])
def test_event_files_written_before_the_fault_stay_readable(request, job):
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    result = request.getfixturevalue(job)
    runs = {0: result["log_dir"] / "train", 1: result["log_dir"] / "worker_1" / "train"}
    for rank, run in runs.items():
        files = glob.glob(str(run / "events.out.tfevents.*"))
        assert len(files) == 1, (rank, files)
        steps = set()
        for event in EventFileLoader(files[0]).Load():  # raises on a corrupt record
            steps.update(event.step for value in event.summary.value if value.tag == "throughput/steps_per_sec")
        # Every epoch the worker had finished before the fault was flushed with its throughput.
        wanted = {STEPS_PER_EPOCH * (epoch + 1) for epoch in result["recorded"][rank]}
        assert len(wanted) >= 2 and wanted <= steps, (rank, sorted(wanted), sorted(steps))


# --------------------------------------------- restart and resume from backup


@pytest.fixture(scope="module")
def restarted_job(tmp_path_factory):
    """Worker 1 kills itself when epoch 2 of the first attempt begins; `--max-restarts 2` resumes the job."""
    out = tmp_path_factory.mktemp("restarted")
    cmd = _launch_cmd(
        "-n", "2", "--max-restarts", "2", "--grace-period", str(GRACE_S), str(TRAIN), str(out),
        "--epochs", "5", "--die-at", "2", "--backup",
    )
    proc = subprocess.run(cmd, env=subprocess_env(), capture_output=True, text=True, check=False, timeout=300)
    return {"proc": proc, "out": out, "records": _records(out)}


def test_failed_job_is_restarted_on_new_ports_and_completes(restarted_job):
    proc = restarted_job["proc"]
    assert proc.returncode == 0, proc.stderr[-6000:]
    err = proc.stderr
    assert "keras-gpu: worker 1 was killed by SIGKILL; stopping the other 1 worker(s)" in err
    assert "keras-gpu: restarting all 2 worker(s) on new ports (restart 1 of 2)" in err
    assert "restart 2 of 2" not in err
    started = re.findall(r"keras-gpu: started 2 worker\(s\) \(pids [\d, ]+\) on (.*)", err)
    assert len(started) == 2 and started[1].endswith(" (restart 1 of 2)")
    ports = [set(re.findall(r"127\.0\.0\.1:(\d+)", line)) for line in started]
    assert len(ports[0]) == len(ports[1]) == 2 and not ports[0] & ports[1]
    assert "keras-gpu: all 2 worker(s) finished successfully" in err
    assert sorted(p.name for p in (restarted_job["out"] / "done").iterdir()) == ["w0.json", "w1.json"]


def test_resumed_history_covers_every_epoch_exactly_once(restarted_job):
    records = restarted_job["records"]
    assert sorted(records) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for rank in (0, 1):
        first, second = records[(0, rank)], records[(1, rank)]
        resumed = second[0]
        assert resumed["event"] == "begin" and resumed["initial_epoch"] == 2
        # Epochs 0-1 before the crash, 2-4 after: no epoch repeated, none missing.
        assert _epochs(first) == [0, 1] and _epochs(second) == [2, 3, 4]
        assert sorted(_epochs(first) + _epochs(second)) == list(range(5))
        # The resumed attempt starts from exactly the weights at the end of epoch 1, not from a fresh model.
        assert resumed["weights"] == first[-1]["weights"] != first[0]["weights"]
        losses = [r["loss"] for r in first + second if r["event"] == "epoch"]
        assert all(b < a for a, b in itertools.pairwise(losses)), losses
    # Both workers trained the same model in both attempts.
    assert [r for r in records[(1, 0)] if r["event"] == "epoch"] == [r for r in records[(1, 1)] if r["event"] == "epoch"]


def test_only_the_chief_writes_the_backup(restarted_job):
    records = restarted_job["records"]
    for attempt in (0, 1):
        assert records[(attempt, 0)][0]["writes_backup"] is True
        assert records[(attempt, 1)][0]["writes_backup"] is False
    assert not (restarted_job["out"] / "backup").exists()  # the chief removed it when training completed


_ROLE = """
import json, os, sys
import keras, numpy as np
sys.path.insert(0, sys.argv[2])
from keras_gpu import BackupAndRestore

keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile("sgd", "mse")
backup = BackupAndRestore(sys.argv[1], delete_checkpoint=False)
epochs = []
record = keras.callbacks.LambdaCallback(on_epoch_begin=lambda epoch, logs: epochs.append(epoch))
model.fit(np.ones((8, 4), "float32"), np.ones((8, 1), "float32"), epochs=3, verbose=0, callbacks=[backup, record])
files = sorted(os.listdir(sys.argv[1])) if os.path.isdir(sys.argv[1]) else None
print("RESULT " + json.dumps({"writes": backup.writes_backup, "files": files, "epochs": epochs}))
"""


def test_non_chief_restores_from_the_chief_backup_but_never_writes(tmp_path):
    """The helper in one process per role: worker 0 writes the backup, worker 1 only reads it."""
    backup = tmp_path / "backup"

    def role(task: int) -> dict:
        # The process's place in the cluster comes from TF_CONFIG; it trains alone with the default strategy.
        tf_config = {"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, "task": {"type": "worker", "index": task}}
        proc = subprocess.run(
            [sys.executable, "-c", _ROLE, str(backup), str(WORKERS)],
            env=subprocess_env({"TF_CONFIG": json.dumps(tf_config)}), capture_output=True, text=True, check=False, timeout=120,
        )
        assert proc.returncode == 0, proc.stderr[-4000:]
        return json.loads(proc.stdout.split("RESULT ", 1)[1])

    worker1 = role(1)
    assert worker1 == {"writes": False, "files": None, "epochs": [0, 1, 2]}  # nothing written, nothing to restore
    chief = role(0)
    assert chief["writes"] is True and chief["files"] == ["latest.weights.h5", "training_metadata.json"]
    assert json.loads((backup / "training_metadata.json").read_text())["epoch"] == 3
    metadata = backup / "training_metadata.json"
    metadata.write_text(json.dumps({"epoch": 1, "batch": 0}))  # as if the job had died after epoch 0
    import h5py

    with h5py.File(backup / "latest.weights.h5", "a") as f:  # the epoch the weights file records wins: the same
        f.attrs["keras_gpu_backup"] = json.dumps({"epoch": 1, "batch": 0})
    before = {p.name: p.stat().st_mtime_ns for p in backup.iterdir()}
    worker1 = role(1)
    assert worker1["writes"] is False and worker1["epochs"] == [1, 2]  # resumed from the chief's backup
    assert {p.name: p.stat().st_mtime_ns for p in backup.iterdir()} == before  # and wrote nothing


# ------------------------------------------------------ restarts without TensorFlow


def _flaky_cmd(tmp_path: Path, max_restarts: int, succeed_at: int, sleep: float = 0.0) -> list[str]:
    return _launch_cmd(
        "-n", "2", "--grace-period", "1", "--max-restarts", str(max_restarts),
        str(FLAKY), str(tmp_path), str(succeed_at), str(sleep),
    )


def _attempts(tmp_path: Path) -> dict[tuple[int, int], dict]:
    out = {}
    for path in tmp_path.glob("a*_w*.json"):
        attempt, rank = map(int, re.match(r"a(\d+)_w(\d+)", path.stem).groups())
        out[(attempt, rank)] = json.loads(path.read_text())
    return out


def test_restart_count_and_fresh_ports_for_every_attempt(tmp_path):
    proc = subprocess.run(_flaky_cmd(tmp_path, 3, 2), env=subprocess_env(), capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr
    attempts = _attempts(tmp_path)
    assert sorted(attempts) == [(a, r) for a in range(3) for r in range(2)]  # two failures, then success
    ports = []
    for a in range(3):
        assert attempts[(a, 0)]["restart"] == attempts[(a, 1)]["restart"] == a
        assert attempts[(a, 0)]["max_restarts"] == 3
        assert attempts[(a, 0)]["ports"] == attempts[(a, 1)]["ports"]
        ports.append(set(attempts[(a, 0)]["ports"]))
    assert not (ports[0] & ports[1]) and not (ports[1] & ports[2])
    assert proc.stderr.count("worker 1 exited with code 3; stopping the other 1 worker(s)") == 2
    assert "restart 1 of 3" in proc.stderr and "restart 2 of 3" in proc.stderr and "restart 3 of 3" not in proc.stderr
    pids = [info["pid"] for info in attempts.values()]
    assert [p for p in pids if _alive(p)] == []


def test_exhausted_restarts_give_the_last_failure_status(tmp_path):
    proc = subprocess.run(_flaky_cmd(tmp_path, 1, 99), env=subprocess_env(), capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == 3, proc.stderr
    assert sorted(_attempts(tmp_path)) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert "keras-gpu: giving up: the job failed after 1 restart(s)" in proc.stderr


def test_without_max_restarts_nothing_is_restarted(tmp_path):
    proc = subprocess.run(_flaky_cmd(tmp_path, 0, 1), env=subprocess_env(), capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == 3, proc.stderr
    assert sorted(_attempts(tmp_path)) == [(0, 0), (0, 1)]
    assert "restart" not in proc.stderr and "giving up" not in proc.stderr


def test_signal_during_a_restarted_attempt_stops_for_good(tmp_path):
    proc = subprocess.Popen(
        _flaky_cmd(tmp_path, 3, 1, 60), env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    pids: list[int] = []
    try:
        _wait_for(lambda: len([k for k in _attempts(tmp_path) if k[0] == 1]) == 2, 30, "the restarted attempt", proc)
        pids = [info["pid"] for info in _attempts(tmp_path).values()]
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        _stop(proc, pids)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "received SIGTERM" in err and "restart 2 of 3" not in err
    assert sorted(_attempts(tmp_path)) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [p for p in pids if _alive(p)] == []


def test_max_restarts_is_validated_and_documented(capsys):
    from keras_gpu.cli.main import main

    assert main(["launch", "-n", "2", "--max-restarts", "-1", "x.py"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--max-restarts=-1" in err[0] and err[0].startswith("keras-gpu launch: error: ")
    assert main(["launch", "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--max-restarts R" in help_text and "KERAS_GPU_RESTART_COUNT" in help_text
