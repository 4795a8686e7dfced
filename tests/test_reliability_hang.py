"""`keras-gpu launch --hang-timeout`: a worker that stops making progress ends the job.

The decision (`HangWatch`) is tested on hand-written progress files and a
hand-driven clock; two real loopback jobs then get stuck on purpose, one in
a Python callback and one in its input pipeline (`tests/_workers/harden_worker.py`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from keras_gpu.cli.launch import EXIT_HANG, HangWatch, add_parser
from keras_gpu.progress import ProgressWriter, read_progress
from tests._util import REPO, alive, subprocess_env

WORKER = REPO / "tests" / "_workers" / "harden_worker.py"


class _Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def _write(path: Path, steps: int, active: bool = True, in_tf: bool = False, where: str = "train.py:3 in f") -> None:
    path.write_text(json.dumps({"pid": 1, "steps": steps, "active": active, "where": where, "in_tensorflow": in_tf}))


def _watch(tmp_path: Path, n: int = 2, timeout: float = 10.0):
    clock = _Clock()
    paths = [tmp_path / f"w{i}.json" for i in range(n)]
    return HangWatch([str(p) for p in paths], timeout, clock=clock), paths, clock


def _tick(watch, clock, seconds, codes=(None, None)):
    clock.now += seconds
    return watch(list(codes))


def test_progress_resets_the_clock_and_a_stall_names_the_worker_in_python(tmp_path):
    watch, (p0, p1), clock = _watch(tmp_path)
    _write(p0, 1), _write(p1, 1)
    assert not watch([None, None])
    for steps in range(2, 6):  # 4 x 4 s of progress: never stalled although 16 s passed
        _write(p0, steps), _write(p1, steps)
        assert not _tick(watch, clock, 4)
    _write(p1, 5, in_tf=False, where="train.py:40 in on_train_batch_end")
    _write(p0, 5, in_tf=True, where="train.py:12 in main")
    assert not _tick(watch, clock, 9.9)
    assert _tick(watch, clock, 0.5)  # files are read every min(0.5, timeout / 10) s
    assert [rank for rank, _ in watch.stalled] == [1, 0]
    text = watch.describe()
    assert "no progress for 10s (--hang-timeout) on worker(s) 1, 0" in text
    assert "worker 1 (5 batch(es) done; in Python at train.py:40 in on_train_batch_end)" in text
    assert "worker 0 (5 batch(es) done; waiting inside TensorFlow" in text
    assert text.endswith("Worker 1 stopped first (in Python while the others wait inside TensorFlow)")


def test_fewest_batches_first_and_a_tie_names_no_single_cause(tmp_path):
    watch, (p0, p1), clock = _watch(tmp_path)
    _write(p0, 7, in_tf=True), _write(p1, 6, in_tf=True)
    watch([None, None])
    assert _tick(watch, clock, 10)
    assert [rank for rank, _ in watch.stalled] == [1, 0]
    assert watch.describe().endswith("Worker 1 stopped first (the fewest batches)")
    (tmp_path / "tie").mkdir()
    watch, (p0, p1), clock = _watch(tmp_path / "tie")
    _write(p0, 3, in_tf=True), _write(p1, 3, in_tf=True)
    watch([None, None])
    assert _tick(watch, clock, 10)
    assert "stopped first" not in watch.describe() and "on worker(s) 0, 1" in watch.describe()


def test_idle_exited_and_silent_workers_are_not_judged(tmp_path):
    watch, (p0, p1), clock = _watch(tmp_path)
    assert not _tick(watch, clock, 60) and not watch.seen_any  # no files: nothing to judge
    _write(p0, 3, active=False), _write(p1, 3)
    assert not _tick(watch, clock, 1)
    assert not _tick(watch, clock, 60, codes=(None, 0))  # worker 1 exited: its frozen file is not a hang
    assert not _tick(watch, clock, 60)  # worker 0 idle between calls; worker 1 active again from now
    _write(p0, 3, active=True)  # an idle worker that becomes active starts a fresh clock
    assert not _tick(watch, clock, 5)
    assert _tick(watch, clock, 60)
    assert [rank for rank, _ in watch.stalled] == [0, 1]


def test_progress_writer_round_trip(tmp_path):
    path = tmp_path / "p.json"
    writer = ProgressWriter(path, interval=0.05)
    writer.begin()
    for _ in range(3):
        writer.step()
    writer.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        got = read_progress(path)
        if got is not None and got.steps == 3:
            break
        time.sleep(0.02)
    assert got is not None and (got.pid, got.steps, got.active) == (os.getpid(), 3, True)
    assert "test_progress_writer_round_trip" in got.where and got.in_tensorflow is False
    writer.end()
    while read_progress(path).active:
        time.sleep(0.02)
    assert read_progress(tmp_path / "missing.json") is None


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "soon"])
def test_bad_hang_timeout_is_a_usage_error(value, capsys):
    import argparse

    parser = argparse.ArgumentParser(prog="keras-gpu")
    add_parser(parser.add_subparsers(dest="command"))
    with pytest.raises(SystemExit) as info:
        parser.parse_args(["launch", "-n", "2", "--hang-timeout", value, "x.py"])
    assert info.value.code == 2
    assert f"Received: --hang-timeout={value}" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("case, where", [("stuck-python", "in Python"), ("stuck-pipeline", "waiting inside TensorFlow")])
def test_a_stuck_worker_ends_the_job_within_the_timeout(tmp_path, case, where):
    hang_s, grace_s = 4.0, 1.0
    cmd = [sys.executable, "-m", "keras_gpu.cli", "launch", "-n", "2", "--hang-timeout", f"{hang_s:g}",
           "--grace-period", f"{grace_s:g}", str(WORKER), str(tmp_path), "--case", case]
    proc = subprocess.run(cmd, env=subprocess_env(), capture_output=True, text=True, timeout=240, cwd=REPO)
    ended = time.time()
    assert proc.returncode == EXIT_HANG, proc.stderr[-5000:]
    message = next(line for line in proc.stderr.splitlines() if "--hang-timeout) on worker(s)" in line)
    assert re.search(r"on worker\(s\) [01, ]*1", message)  # worker 1 is named
    assert "worker 1 (" in message and where in message.split("worker 1 (", 1)[1]
    if case == "stuck-python":
        assert "Worker 1 stopped first (in Python while the others wait inside TensorFlow)" in message
    # From the moment worker 1 got stuck: the timeout, the grace period, and the launcher's reading cadence.
    stuck_at = float((tmp_path / "stuck_at").read_text())
    assert hang_s <= ended - stuck_at < hang_s + grace_s + 20
    pids = [int((tmp_path / f"pid_w{i}").read_text()) for i in range(2)]
    assert not [pid for pid in pids if alive(pid)]
