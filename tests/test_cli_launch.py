"""Tests of the `keras-gpu` command framework and `keras-gpu launch`.

The launcher is run as a real `python -m keras_gpu.cli launch ...` subprocess
with small worker scripts from `tests/_workers/`; one test trains
`examples/multiworker_fit.py` on two loopback workers.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from keras_gpu.cli import launch as launch_mod
from keras_gpu.cli.main import SUBCOMMANDS, build_parser, main
from tests._util import REPO, subprocess_env
from tests._util import alive as _alive

WORKERS = REPO / "tests" / "_workers"
EXAMPLE = REPO / "examples" / "multiworker_fit.py"
LINE = re.compile(r"^\[worker (\d+)\] (.*)$")


def _launch_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "keras_gpu.cli", "launch", *args]


def _launch(*args: str, timeout: float = 60, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        _launch_cmd(*args), env=subprocess_env(), cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def _by_worker(text: str) -> dict[int, list[str]]:
    """Group `[worker i] ...` lines by `i`; fails on a worker line that lost its prefix."""
    out: dict[int, list[str]] = {}
    for line in text.splitlines():
        match = LINE.match(line)
        if match:
            out.setdefault(int(match.group(1)), []).append(match.group(2))
    return out


def _wait_dead(pids: list[int], timeout: float = 5.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [p for p in pids if _alive(p)]
        if not alive:
            return []
        time.sleep(0.05)
    return [p for p in pids if _alive(p)]


def _read_pids(piddir: Path, n: int, timeout: float = 30.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        files = sorted(piddir.glob("*.pid"))
        if len(files) == n:
            return [int(p) for f in files for p in f.read_text().split()]
        time.sleep(0.05)
    raise AssertionError(f"workers did not write {n} pid files within {timeout}s: {list(piddir.iterdir())}")


@pytest.fixture
def kill_leftovers():
    """Record pids a test started; SIGKILL any still alive afterwards so a failing test leaves nothing behind."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


# ----------------------------------------------------------------- framework


def test_every_subcommand_module_registers_its_parser():
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command")
    assert {"env", "launch"} <= set(subparsers.choices)
    assert "keras_gpu.cli.launch" in SUBCOMMANDS and "keras_gpu.cli.env" in SUBCOMMANDS


def test_console_script_and_module_print_the_version():
    from keras_gpu import __version__

    script = Path(sys.executable).parent / "keras-gpu"
    assert script.exists(), "run `pip install -e .` so that the keras-gpu console script exists"
    for cmd in ([str(script), "--version"], [sys.executable, "-m", "keras_gpu.cli", "--version"]):
        proc = subprocess.run(cmd, env=subprocess_env(), capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == f"keras-gpu {__version__}"


def test_unknown_command_is_one_line_and_exit_2(capsys):
    assert main(["frobnicate"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "invalid choice: 'frobnicate'" in err


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["launch", "-n", "0", "x.py"], "-n=0"),
        (["launch", "-n", "two", "x.py"], "-n=two"),
        (["launch", "x.py"], "required: -n/--nproc"),
        (["launch", "-n", "2", "--cpu-replicas", "0", "x.py"], "--cpu-replicas=0"),
        (["launch", "-n", "2", "--grace-period", "-1", "x.py"], "--grace-period=-1"),
        (["launch", "-n", "2", "does_not_exist.py"], "script='does_not_exist.py'"),
        (["launch", "-n", "2"], "no script given"),
        (["launch", "-n", "2", "-m"], "`-m` needs a module name"),
        (["launch", "-n", "2", "-m", "not a module"], "Received: -m 'not a module'"),
    ],
)
def test_bad_launch_arguments_are_one_clear_line(capsys, argv, needle):
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("keras-gpu launch: error: ")
    assert needle in lines[0]
    assert "Traceback" not in err


# ----------------------------------------------------------------- pure parts


def test_worker_env_gives_each_worker_its_tf_config():
    env = launch_mod.worker_env({"PATH": "/bin", "PYTHONUNBUFFERED": "0"}, 1, [1111, 2222, 3333])
    assert json.loads(env["TF_CONFIG"]) == {
        "cluster": {"worker": ["127.0.0.1:1111", "127.0.0.1:2222", "127.0.0.1:3333"]},
        "task": {"type": "worker", "index": 1},
    }
    assert env["KERAS_GPU_WORKER_INDEX"] == "1"
    assert env["KERAS_GPU_NUM_WORKERS"] == "3"
    assert env["PATH"] == "/bin"
    assert env["PYTHONUNBUFFERED"] == "0"  # a user's own setting wins
    assert launch_mod.worker_env({}, 0, [1])["PYTHONUNBUFFERED"] == "1"


def test_worker_command_forms():
    boot = ["py", "-m", "keras_gpu.cli._worker"]
    assert launch_mod.worker_command("t.py", ["-a"], python="py") == [*boot, "--", "t.py", "-a"]
    assert launch_mod.worker_command("pkg.m", ["-a"], module=True, python="py") == [*boot, "--", "-m", "pkg.m", "-a"]
    assert launch_mod.worker_command("t.py", ["-a"], cpu_replicas=4, python="py") == [
        *boot, "--cpu-replicas", "4", "--", "t.py", "-a",
    ]


def test_worker_exit_descriptions():
    assert launch_mod.WorkerExit(1, -9).describe() == "worker 1 was killed by SIGKILL"
    assert launch_mod.WorkerExit(1, -9).exit_code == 137
    assert launch_mod.WorkerExit(0, 3).describe() == "worker 0 exited with code 3"
    assert launch_mod.WorkerExit(0, 3).exit_code == 3


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--cpu-replicas", "2", "t.py"], "usage:"),
        (["--cpu-replicas", "0", "--", "t.py"], "Received: --cpu-replicas '0'"),
        (["--cpu-replicas", "two", "--", "t.py"], "Received: --cpu-replicas 'two'"),
        (["--cpu-replicas", "2", "--", "-m"], "`-m` needs a module name"),
        (["--cpu-replicas"], "usage:"),
        (["t.py"], "usage:"),
        (["--"], "usage:"),
    ],
)
def test_worker_bootstrap_rejects_malformed_arguments(argv, needle):
    from keras_gpu.cli import _worker

    with pytest.raises(SystemExit, match=re.escape(needle)):
        _worker._parse(argv)
    assert _worker._parse(["--cpu-replicas", "2", "--", "-m", "mod", "-x"]) == (2, ["-m", "mod", "-x"])
    assert _worker._parse(["--", "t.py", "--cpu-replicas", "3"]) == (None, ["t.py", "--cpu-replicas", "3"])


def test_free_loopback_ports_are_distinct():
    ports = launch_mod.free_loopback_ports(8)
    assert len(set(ports)) == 8 and all(1024 <= p <= 65535 for p in ports)


# ------------------------------------------------------------ real processes


def test_output_is_prefixed_line_by_line_and_workers_get_their_environment():
    proc = _launch("-n", "2", str(WORKERS / "echo_worker.py"), "150", timeout=60)
    assert proc.returncode == 0, proc.stderr
    out, err = _by_worker(proc.stdout), _by_worker(proc.stderr)
    # Nothing on stdout lacks a prefix; stderr has only worker lines and the launcher's own.
    assert all(LINE.match(line) for line in proc.stdout.splitlines())
    assert all(LINE.match(line) or line.startswith("keras-gpu: ") for line in proc.stderr.splitlines())
    ports = None
    for rank in (0, 1):
        info = json.loads(out[rank][0].removeprefix("info "))
        assert info["rank"] == rank and info["num_workers"] == "2"
        assert info["tf_config"]["task"] == {"type": "worker", "index": rank}
        ports = ports or info["tf_config"]["cluster"]["worker"]
        assert info["tf_config"]["cluster"]["worker"] == ports
        assert info["argv"][1:] == ["150"]
        # Each half-written line arrived whole, in order, under its own worker's prefix.
        assert out[rank][1:-1] == [f"out {rank} {k}" for k in range(150)]
        assert err[rank] == [f"err {rank} {k}" for k in range(150)]
        assert out[rank][-1] == f"tail {rank} without newline"
    assert len(ports) == 2 and all(p.startswith("127.0.0.1:") for p in ports) and ports[0] != ports[1]
    assert "all 2 worker(s) finished successfully" in proc.stderr


def test_failing_worker_stops_the_others_and_its_code_is_returned(tmp_path, kill_leftovers):
    start = time.monotonic()
    proc = _launch("-n", "2", str(WORKERS / "behave_worker.py"), "fail", str(tmp_path), timeout=60)
    elapsed = time.monotonic() - start
    pids = _read_pids(tmp_path, 2, timeout=1)
    kill_leftovers.extend(pids)
    assert proc.returncode == 3, proc.stderr
    assert "worker 1 exited with code 3" in proc.stderr
    assert elapsed < 20  # the sleeping worker would have run for 120 s
    assert _wait_dead(pids) == []  # workers and the processes they started


_HELD_AT_EXIT = """
import atexit, os, sys, threading
if os.environ["KERAS_GPU_WORKER_INDEX"] == "1":
    atexit.register(threading.Event().wait)  # an exit handler that never returns, as JAX's shutdown barrier may
    {fail}
threading.Event().wait()
"""


@pytest.mark.parametrize("fail, code", [("raise RuntimeError('boom')", 1), ("sys.exit(5)", 5)])
def test_a_failed_script_held_at_exit_ends_the_job_with_its_status(tmp_path, fail, code):
    script = tmp_path / "held.py"
    script.write_text(_HELD_AT_EXIT.replace("{fail}", fail))
    proc = _launch("-n", "2", "--grace-period", "2", "--hang-timeout", "300", str(script), timeout=120)
    assert proc.returncode == code, proc.stderr
    assert f"worker 1 exited with code {code}; stopping the other 1 worker(s)" in proc.stderr
    note = f"[worker 1] keras-gpu: the script failed (exit status {code}) but its process did not end within 1s"
    assert proc.stderr.count(note) == 1, proc.stderr
    assert "(an exit handler or a thread of the script is still running); ending it" in proc.stderr
    assert "--hang-timeout) on worker" not in proc.stderr


def test_worker_killed_by_signal_gives_128_plus_signal(tmp_path, kill_leftovers):
    proc = _launch("-n", "2", str(WORKERS / "behave_worker.py"), "sigkill", str(tmp_path), timeout=60)
    pids = _read_pids(tmp_path, 2, timeout=1)
    kill_leftovers.extend(pids)
    assert proc.returncode == 137, proc.stderr
    assert "worker 1 was killed by SIGKILL" in proc.stderr
    assert _wait_dead(pids) == []


def test_worker_ignoring_sigterm_is_killed_after_the_grace_period(tmp_path, kill_leftovers):
    start = time.monotonic()
    proc = _launch(
        "-n", "2", "--grace-period", "1", str(WORKERS / "behave_worker.py"), "ignore-term", str(tmp_path), timeout=60
    )
    elapsed = time.monotonic() - start
    pids = _read_pids(tmp_path, 2, timeout=1)
    kill_leftovers.extend(pids)
    assert proc.returncode == 3, proc.stderr
    assert 1.0 <= elapsed < 20
    assert _wait_dead(pids) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_to_launcher_stops_every_worker(tmp_path, kill_leftovers, sig):
    launcher = subprocess.Popen(
        _launch_cmd("-n", "2", str(WORKERS / "behave_worker.py"), "sleep", str(tmp_path)),
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    kill_leftovers.append(launcher.pid)
    try:
        pids = _read_pids(tmp_path, 2)
        kill_leftovers.extend(pids)
        assert len(pids) == 4  # two workers, each with a `sleep` child
        launcher.send_signal(sig)
        out, err = launcher.communicate(timeout=20)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
    assert launcher.returncode == 128 + sig, err
    assert f"received {sig.name}" in err
    assert _wait_dead(pids) == []
    assert "[worker 0] ready 0" in out and "[worker 1] ready 1" in out


def test_sigkilled_launcher_leaves_no_worker_behind(tmp_path, kill_leftovers):
    launcher = subprocess.Popen(
        _launch_cmd("-n", "2", str(WORKERS / "behave_worker.py"), "nochild", str(tmp_path)),
        env=subprocess_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    kill_leftovers.append(launcher.pid)
    try:
        pids = _read_pids(tmp_path, 2)
        kill_leftovers.extend(pids)
        assert all(_alive(p) for p in pids)
    finally:
        launcher.kill()
        launcher.wait(timeout=10)
    assert _wait_dead(pids) == []  # the parent-death signal took them down


def test_cpu_replicas_give_each_worker_logical_cpus_and_plain_python_startup():
    script = WORKERS / "devices_worker.py"
    proc = _launch("-n", "2", "--cpu-replicas", "2", str(script), "--flag", "x", timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = _by_worker(proc.stdout)
    for rank in (0, 1):
        info = json.loads(next(line for line in lines[rank] if line.startswith("devices ")).removeprefix("devices "))
        assert info == {
            "rank": rank,
            "logical_cpus": 2,
            "argv": [str(script), "--flag", "x"],
            "path0": str(WORKERS),
            "name": "__main__",
        }


def test_module_target_with_cpu_replicas():
    proc = _launch("-n", "1", "--cpu-replicas", "3", "-m", "devices_worker", "-k", "v", cwd=WORKERS, timeout=120)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(_by_worker(proc.stdout)[0][0].removeprefix("devices "))
    assert info["logical_cpus"] == 3
    assert info["argv"] == [str(WORKERS / "devices_worker.py"), "-k", "v"]
    assert info["path0"] == str(WORKERS)
    assert info["name"] == "__main__"


def test_module_target_without_bootstrap(tmp_path):
    (tmp_path / "argv_echo.py").write_text("import os, sys\nprint(os.environ['KERAS_GPU_WORKER_INDEX'], sys.argv[1:])\n")
    proc = _launch("-n", "2", "-m", "argv_echo", "-n", "7", cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = _by_worker(proc.stdout)
    assert lines == {0: ["0 ['-n', '7']"], 1: ["1 ['-n', '7']"]}


@pytest.mark.slow
def test_two_worker_fit_trains_identically_on_both_workers(tmp_path):
    out_dir = tmp_path / "run"
    log_dir = tmp_path / "logs"
    proc = _launch(
        "-n", "2", str(EXAMPLE), "--out", str(out_dir), "--epochs", "3", "--log-dir", str(log_dir), timeout=240
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-6000:]}"
    results = [json.loads((out_dir / f"worker{rank}.json").read_text()) for rank in (0, 1)]
    assert [r["worker_index"] for r in results] == [0, 1]
    assert all(r["num_replicas_in_sync"] == 2 for r in results)
    assert results[0]["loss"] == results[1]["loss"]
    losses = results[0]["loss"]
    assert len(losses) == 3 and losses[-1] < losses[0]
    for w0, w1 in zip(results[0]["weights"], results[1]["weights"]):
        np.testing.assert_array_equal(np.asarray(w0), np.asarray(w1))
    assert any(line.startswith("[worker 0] Epoch 3/3") for line in proc.stdout.splitlines())

    # keras-gpu's callbacks: each worker wrote its own run, and no file is shared.
    from keras_gpu.output.reader import find_runs, read_scalars

    assert find_runs(str(log_dir)) == ["train", os.path.join("worker_1", "train")]
    for run in ("train", os.path.join("worker_1", "train")):
        scalars = read_scalars(str(log_dir / run))
        # 512 samples / global batch 32 = 16 steps per epoch, 3 epochs.
        assert max(step for step, _ in scalars["throughput/samples_per_sec"]) == 48, run
        assert "throughput/samples_per_sec_per_replica" in scalars, (run, sorted(scalars))
        assert "memory/allocator/CPU_0/current_bytes" in scalars
        placement = json.loads((log_dir / run / "placement.json").read_text())
        assert placement["strategy"]["num_replicas_in_sync"] == 2
    event_files = [p.name for p in log_dir.rglob("*tfevents*")]
    assert len(event_files) == len(set(event_files)) == 2
