"""`keras-gpu launch --hang-timeout`: a worker that stops making progress ends the job.

The decision (`HangWatch`) is tested on hand-written progress files and a
hand-driven clock. Real jobs then get stuck on purpose: two multi-worker
loopback jobs with `keras_gpu.Heartbeat`, one in a Python callback and one in
its input pipeline (`tests/_workers/harden_worker.py`), and plain Keras
scripts with their own callbacks only, stuck in `fit`, `evaluate` and
`predict` (`tests/_workers/hang_worker.py`), which report progress through
the launcher's bootstrap alone.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from keras_gpu.cli.launch import EXIT_HANG, HangWatch, add_parser
from keras_gpu.hooks.progress import Progress, ProgressWriter, read_progress
from tests._util import REPO, alive, run_python, subprocess_env

WORKER = REPO / "tests" / "_workers" / "harden_worker.py"
PLAIN = REPO / "tests" / "_workers" / "hang_worker.py"


class _Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def _write(path: Path, steps: int, active: bool = True, in_tf: bool = False, where: str = "train.py:3 in f", **extra) -> None:
    record = {"pid": 1, "steps": steps, "active": active, "where": where, "in_tensorflow": in_tf, **extra}
    path.write_text(json.dumps(record))


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


def test_one_inside_its_input_pipeline_then_the_earliest_last_batch_is_named_first(tmp_path):
    watch, (p0, p1), clock = _watch(tmp_path)
    _write(p0, 4, runtime="JAX", where="a.py:1 in main", last_batch_wall=10.0)
    _write(p1, 4, runtime="JAX", input="data.py:9 in __getitem__", last_batch_wall=10.5)
    watch([None, None])
    assert _tick(watch, clock, 10)
    assert [rank for rank, _ in watch.stalled] == [1, 0]
    text = watch.describe()
    assert "worker 1 (4 batch(es) done; in its input pipeline at data.py:9 in __getitem__)" in text
    assert "worker 0 (4 batch(es) done; waiting inside JAX (a collective, the device or its input) at a.py:1 in main)" in text
    assert text.endswith("Worker 1 stopped first (in its input pipeline at data.py:9 in __getitem__)")
    (tmp_path / "walls").mkdir()
    watch, (p0, p1), clock = _watch(tmp_path / "walls")
    _write(p0, 4, runtime="JAX", last_batch_wall=12.0)
    _write(p1, 4, runtime="JAX", last_batch_wall=11.0)
    watch([None, None])
    assert _tick(watch, clock, 10)
    assert [rank for rank, _ in watch.stalled] == [1, 0]
    assert watch.describe().endswith("Worker 1 stopped first (its last batch ended first, 1s before the next worker's)")


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
    writer.stop()  # its thread reads every thread's frames: not for the rest of the session
    steps = read_progress(path).steps
    writer.step()
    time.sleep(0.2)
    assert read_progress(path).steps == steps  # stopped: no write after it
    assert read_progress(tmp_path / "missing.json") is None


def test_the_message_says_which_call_epoch_and_batch_each_worker_was_in(tmp_path):
    watch, (p0, p1), clock = _watch(tmp_path)
    _write(p0, 30, in_tf=True, phase="fit", epoch=2, batch=18)
    _write(p1, 29, where="t.py:9 in cb", phase="fit", epoch=2, batch=17)
    watch([None, None])
    assert _tick(watch, clock, 10)
    text = watch.describe()
    assert "worker 1 stuck in fit, epoch 2, after batch 17 (29 batch(es) done; in Python at t.py:9 in cb)" in text
    assert "worker 0 stuck in fit, epoch 2, after batch 18 (30 batch(es) done; waiting inside TensorFlow" in text
    assert Progress(1, 3, True, "", False, "evaluate", 4, 2, "fit").position() == "evaluate (inside fit), epoch 4, after batch 2"
    assert Progress(1, 0, True, "", False, "predict").position() == "predict, before its first batch"
    assert Progress(1, 0, False, "", False).position() == ""


def test_no_active_worker_is_reported_once_while_the_job_runs(tmp_path, caplog):
    clock = _Clock()
    paths = [tmp_path / f"w{i}.json" for i in range(2)]
    watch = HangWatch([str(p) for p in paths], 2.0, clock=clock)  # warns after max(2 * 2, 10) = 10 s
    with caplog.at_level("WARNING", logger="keras_gpu"):
        assert not _tick(watch, clock, 9.9) and not watch.warned_quiet
        _write(paths[0], 0, active=False)  # a file, but no worker inside fit/evaluate/predict yet
        assert not _tick(watch, clock, 0.2) and watch.warned_quiet
        for _ in range(5):
            _tick(watch, clock, 1)
    quiet = [r.getMessage() for r in caplog.records if "no worker has entered fit, evaluate or predict" in r.getMessage()]
    assert quiet == [
        (
            "--hang-timeout: 10s after the start no worker has entered fit, evaluate or predict, so none is judged "
            "yet (start-up, data loading and custom training loops are not watched; a worker waiting for its peers "
            "is bounded by make_strategy's startup_timeout)"
        )
    ]
    clock2 = _Clock()
    active = HangWatch([str(paths[1])], 2.0, clock=clock2)
    _write(paths[1], 0, active=True)
    assert not _tick(active, clock2, 1.0) and active.seen_active
    clock2.now += 60
    active([None])
    assert not active.warned_quiet  # a worker was active: nothing to warn about


def test_progress_writer_reports_call_epoch_and_batch(tmp_path):
    writer = ProgressWriter(tmp_path / "p.json", interval=60)
    writer.begin("fit")
    writer.epoch(2)
    writer.step(1), writer.step(2)
    writer.begin("evaluate")  # validation inside fit
    writer.step(1)
    writer._write()
    got = read_progress(tmp_path / "p.json")
    assert (got.phase, got.parent, got.epoch, got.batch, got.steps) == ("evaluate", "fit", 2, 1, 3)
    writer.end()
    writer._write()
    got = read_progress(tmp_path / "p.json")
    assert (got.phase, got.parent, got.epoch, got.batch) == ("fit", "", 2, 2)
    writer.end()
    writer.begin("predict")
    writer._write()
    got = read_progress(tmp_path / "p.json")
    assert (got.phase, got.epoch, got.batch, got.active) == ("predict", None, None, True)


AUTO_HEARTBEAT = """
import json, os, sys
from keras_gpu.cli._worker import install_heartbeat

install_heartbeat()
assert "keras" not in sys.modules  # the script still picks the backend
import keras
import numpy as np
from keras_gpu.hooks.heartbeat import Heartbeat
from keras_gpu.hooks.progress import writer_from_env


class Mine(keras.callbacks.Callback):
    pass


x = np.random.RandomState(0).rand(64, 4).astype("float32")
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile("sgd", "mse")
mine = [Mine()]
model.fit(x, x[:, :1], batch_size=8, epochs=2, verbose=0, callbacks=mine, validation_data=(x, x[:, :1]))
model.evaluate(x, x[:, :1], batch_size=8, verbose=0)
model.predict(x, batch_size=8, verbose=0)
model.fit(x, x[:, :1], batch_size=8, epochs=1, verbose=0, callbacks=[Heartbeat()])
by_hand = keras.callbacks.CallbackList([Mine()])
print("RESULT " + json.dumps({
    "backend": keras.backend.backend(),
    "steps": writer_from_env().steps,
    "user_list": len(mine),
    "by_hand": [type(c).__name__ for c in by_hand.callbacks],
    "with_one": [type(c).__name__ for c in keras.callbacks.CallbackList([Heartbeat()]).callbacks],
}))
"""


def auto_heartbeat_result(tmp_path, env=None) -> dict:
    """Run `AUTO_HEARTBEAT` in a fresh interpreter with a progress file; return its RESULT."""
    proc = run_python(AUTO_HEARTBEAT, env={"KERAS_GPU_PROGRESS_FILE": str(tmp_path / "p.json"), **(env or {})})
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def test_the_bootstrap_puts_one_heartbeat_in_every_callback_list(tmp_path):
    result = auto_heartbeat_result(tmp_path)
    # fit: 2 epochs x (8 train + 8 validation batches); evaluate 8; predict 8; fit with its own Heartbeat 8, not 16.
    assert result["steps"] == 32 + 8 + 8 + 8, result
    assert result["user_list"] == 1  # the script's own list is left as it was
    assert result["by_hand"] == ["Mine", "Heartbeat"]
    assert result["with_one"] == ["Heartbeat"]


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
@pytest.mark.parametrize("case, where", [("stuck-python", "in Python"), ("stuck-pipeline", "in its input pipeline at")])
def test_a_stuck_worker_ends_the_job_within_the_timeout(tmp_path, case, where):
    hang_s, grace_s = 4.0, 1.0
    cmd = [sys.executable, "-m", "keras_gpu.cli", "launch", "-n", "2", "--hang-timeout", f"{hang_s:g}",
           "--grace-period", f"{grace_s:g}", str(WORKER), str(tmp_path), "--case", case]
    proc = subprocess.run(cmd, env=subprocess_env(), capture_output=True, text=True, timeout=240, cwd=REPO)
    ended = time.time()
    assert proc.returncode == EXIT_HANG, proc.stderr[-5000:]
    message = next(line for line in proc.stderr.splitlines() if "--hang-timeout) on worker(s)" in line)
    assert re.search(r"on worker\(s\) [01, ]*1", message)  # worker 1 is named
    assert "worker 1 stuck in fit, epoch " in message and where in message.split("worker 1 stuck in fit", 1)[1]
    if case == "stuck-python":
        assert "Worker 1 stopped first (in Python while the others wait inside TensorFlow)" in message
    else:  # the generator tf.data runs on a thread of its own: the worker is named first, in its input pipeline
        assert "on worker(s) 1, 0: worker 1 stuck in fit" in message, message
        assert "Worker 1 stopped first (in its input pipeline at " in message and "in samples)" in message, message
        assert "worker 0 stuck in fit" in message and "waiting inside TensorFlow" in message.split("worker 0 stuck", 1)[1]
    # From the moment worker 1 got stuck: the timeout, the grace period, and the launcher's reading cadence.
    stuck_at = float((tmp_path / "stuck_at").read_text())
    assert hang_s <= ended - stuck_at < hang_s + grace_s + 20
    pids = [int((tmp_path / f"pid_w{i}").read_text()) for i in range(2)]
    assert not [pid for pid in pids if alive(pid)]


@pytest.mark.slow
@pytest.mark.parametrize("call, position", [
    ("fit", "stuck in fit, epoch 2, after batch 4"),
    ("evaluate", "stuck in evaluate, after batch 4"),
    ("predict", "stuck in predict, after batch 4"),
])
def test_a_script_with_its_own_callbacks_only_is_watched(tmp_path, call, position):
    """No keras_gpu in the script: the bootstrap's Heartbeat reports, and worker 1's stall is named with its place."""
    hang_s, grace_s = 5.0, 1.0
    cmd = [sys.executable, "-m", "keras_gpu.cli", "launch", "-n", "2", "--hang-timeout", f"{hang_s:g}",
           "--grace-period", f"{grace_s:g}", str(PLAIN), str(tmp_path), "--call", call]
    proc = subprocess.run(cmd, check=False, env=subprocess_env(), capture_output=True, text=True, timeout=120, cwd=REPO)
    ended = time.time()
    assert proc.returncode == EXIT_HANG, proc.stderr[-5000:]
    message = next(line for line in proc.stderr.splitlines() if "--hang-timeout) on worker(s)" in line)
    assert "on worker(s) 1: worker 1 " + position + " (" in message, message
    assert "in Python at " in message and "hang_worker.py" in message and "in _batch_end" in message
    stuck_at = float((tmp_path / "stuck_at").read_text())
    assert hang_s <= ended - stuck_at < hang_s + grace_s + 20
    pids = [int((tmp_path / f"pid_w{i}").read_text()) for i in range(2)]
    assert not [pid for pid in pids if alive(pid)]


@pytest.mark.slow
def test_no_worker_in_fit_is_reported_while_the_job_runs(tmp_path):
    """Workers that never enter fit/evaluate/predict: the launcher says so during the run, not after it."""
    cmd = [sys.executable, "-m", "keras_gpu.cli", "launch", "-n", "2", "--hang-timeout", "1", "--grace-period", "1",
           str(PLAIN), str(tmp_path), "--no-keras"]
    proc = subprocess.Popen(cmd, env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO)
    started = time.monotonic()
    try:
        for line in proc.stderr:  # the workers sleep 300 s: the line must come while they run
            if "no worker has entered fit, evaluate or predict" in line:
                seen_after = time.monotonic() - started
                break
        else:
            raise AssertionError(f"the launcher ended ({proc.wait()}) without the warning")
        assert proc.poll() is None and 10 <= seen_after < 60, seen_after
        assert line.startswith("keras-gpu: --hang-timeout: 10s after the start")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM


def test_progress_writer_counts_every_batch_end_run_concurrently(tmp_path):
    # Keras runs batch ends on its thread pool (JAX, PyTorch): none may be lost to a race on the count.
    writer = ProgressWriter(tmp_path / "p.json", interval=60)
    writer.begin("fit")
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible, so that a race shows
    try:
        threads = [threading.Thread(target=lambda: [writer.step(1, "fit") for _ in range(20_000)]) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(switch)
    assert writer.steps == 8 * 20_000


def test_progress_writer_keeps_the_latest_batch_of_each_call_whatever_the_order(tmp_path):
    writer = ProgressWriter(tmp_path / "p.json", interval=60)
    writer.begin("fit")
    writer.epoch(1)
    writer.step(15, "fit")
    writer.step(4, "fit")  # a batch end the pool ran late: the position does not go back
    writer.begin("evaluate")  # validation starts while training batch ends are still on the pool
    writer.step(16, "fit")  # a late training batch end: fit's position, not the evaluation's
    writer._write()
    got = read_progress(tmp_path / "p.json")
    assert (got.phase, got.batch, got.steps) == ("evaluate", None, 3)
    writer.step(2, "evaluate")
    writer._write()
    assert read_progress(tmp_path / "p.json").batch == 2
    writer.end()
    writer._write()
    got = read_progress(tmp_path / "p.json")
    assert (got.phase, got.epoch, got.batch) == ("fit", 1, 16)
