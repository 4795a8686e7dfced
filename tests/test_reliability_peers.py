"""Multi-worker startup never waits forever: missing peers, late peers, taken ports, dead peers, SIGTERM.

The scenarios run as real worker processes on loopback
(`tests/_workers/startup_worker.py`), all started at once by one module
fixture so that their waits overlap. The pieces of the startup guard that need
no TensorFlow are tested in-process.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from keras_gpu.core.cluster import ClusterInfo
from keras_gpu.setup.startup_guards import check_own_port, startup_failure_message
from keras_gpu.setup.strategy import (
    DEFAULT_STARTUP_TIMEOUT,
    LocalDevices,
    plan_strategy,
)
from tests._util import REPO, alive, free_ports, subprocess_env

WORKER = REPO / "tests" / "_workers" / "startup_worker.py"
STARTUP_S = 3.0
COLLECTIVE_S = 3.0
DEADLINE_S = 150
WAIT_STARTUP_S, WAIT_LOG_S = 8.0, 2.0  # a lonely task's startup timeout, and the waiting lines' interval


def _tf_config(ports: list[int], index: int) -> str:
    return json.dumps(
        {"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]}, "task": {"type": "worker", "index": index}}
    )


@pytest.fixture(scope="module")
def scenarios():
    """Start every scenario's workers at once; return `{name: [result of each worker, ...]}` plus the ports."""
    plans = {
        # name: [(index, args), ...] -- only the listed workers of a 2-worker cluster are started
        "leader_alone": [(0, [str(STARTUP_S)])],
        "follower_alone": [(1, [str(STARTUP_S)])],
        "port_taken": [(0, ["30", "--hold-port"])],
        "late_peer": [(0, ["60"]), (1, ["60", "--late", "2"])],
        "peer_dies": [(0, ["60", "--collective-timeout", str(COLLECTIVE_S)]), (1, ["60", "--exit-after-create"])],
        "follower_waits": [(1, [str(WAIT_STARTUP_S)])],
        "duplicate_index": [(1, [str(WAIT_STARTUP_S)]), (1, [str(WAIT_STARTUP_S)])],
    }
    ports = {name: free_ports(2) for name in plans}
    procs: dict[str, list[subprocess.Popen]] = {}
    started = time.monotonic()
    try:
        for name, workers in plans.items():
            procs[name] = [
                subprocess.Popen(
                    [sys.executable, str(WORKER), *args],
                    env=subprocess_env({"TF_CONFIG": _tf_config(ports[name], index), "KERAS_GPU_WAIT_LOG_S": str(WAIT_LOG_S)}),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    start_new_session=True,
                )
                for index, args in workers
            ]
        results: dict[str, list[dict]] = {}
        for name, group in procs.items():
            results[name] = []
            for proc in group:
                out, err = proc.communicate(timeout=max(1.0, DEADLINE_S - (time.monotonic() - started)))
                lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
                assert lines, f"{name}: worker exited {proc.returncode} without a result\n{err[-4000:]}"
                results[name].append(dict(json.loads(lines[0][len("RESULT "):]), returncode=proc.returncode, stderr=err))
    finally:
        for group in procs.values():
            for proc in group:
                if proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
    return {"results": results, "ports": ports}


def test_leader_whose_peer_never_starts_fails_after_the_timeout_naming_it(scenarios):
    (result,) = scenarios["results"]["leader_alone"]
    port = scenarios["ports"]["leader_alone"][1]
    assert result["created"] is False and result["returncode"] == 0
    assert result["error"].startswith("RuntimeError: make_strategy: the cluster from tf_config did not come up")
    assert f"within startup_timeout={STARTUP_S:g}s; these tasks never came up: worker:1 (127.0.0.1:{port})." in result["error"]
    assert STARTUP_S <= result["create_s"] < STARTUP_S + 15, result["create_s"]


def test_worker_whose_leader_never_starts_fails_after_the_timeout_naming_it(scenarios):
    (result,) = scenarios["results"]["follower_alone"]
    port = scenarios["ports"]["follower_alone"][0]
    assert result["created"] is False and result["returncode"] == 0
    assert f"these tasks never came up: worker:0 (127.0.0.1:{port})." in result["error"]
    assert STARTUP_S <= result["create_s"] < STARTUP_S + 20, result["create_s"]


def test_a_lonely_task_says_whom_it_waits_for_while_it_waits(scenarios):
    (result,) = scenarios["results"]["follower_waits"]
    port = scenarios["ports"]["follower_waits"][0]
    assert result["created"] is False
    lines = [line for line in result["stderr"].splitlines() if "make_strategy: waiting for " in line]
    assert 1 <= len(lines) <= WAIT_STARTUP_S / WAIT_LOG_S + 1, result["stderr"][-3000:]  # at most one per interval
    for line in lines:
        assert re.fullmatch(rf"keras-gpu: make_strategy: waiting for worker:0 at 127\.0\.0\.1:{port} \(\d+ s of 8 s\)", line), line


def test_of_two_tasks_with_the_same_index_the_one_that_waits_says_so(scenarios):
    port = scenarios["ports"]["duplicate_index"][0]
    waiting = [
        [line for line in result["stderr"].splitlines() if "make_strategy: waiting for " in line]
        for result in scenarios["results"]["duplicate_index"]
    ]
    assert all(result["created"] is False for result in scenarios["results"]["duplicate_index"])
    assert any(waiting), [r["stderr"][-2000:] for r in scenarios["results"]["duplicate_index"]]
    for line in (line for lines in waiting for line in lines):
        assert f"waiting for worker:0 at 127.0.0.1:{port} (" in line


def test_taken_port_fails_at_once_naming_port_and_task(scenarios):
    (result,) = scenarios["results"]["port_taken"]
    port = scenarios["ports"]["port_taken"][0]
    assert result["created"] is False and result["returncode"] == 0
    assert result["error"].startswith(
        f"RuntimeError: make_strategy: port 127.0.0.1:{port} for worker:0 cannot be used: it is already in use by "
        "another process."
    )
    assert result["create_s"] < 5  # at once, not after the 30 s startup timeout


def test_late_peer_within_the_timeout_joins_normally(scenarios):
    results = scenarios["results"]["late_peer"]
    assert [(r["created"], r["error"], r["sum"]) for r in results] == [(True, None, 2.0), (True, None, 2.0)]
    assert results[0]["create_s"] >= 2.0  # the leader really waited for the late worker


def test_peer_that_dies_after_startup_fails_the_first_collective_after_collective_timeout(scenarios):
    leader, peer = scenarios["results"]["peer_dies"]
    assert peer["created"] is True
    assert leader["created"] is True and leader["sum"] is None
    assert leader["reduce_error"].startswith("DeadlineExceededError") or leader["reduce_error"].startswith(
        "UnavailableError"
    ), leader["reduce_error"]
    assert leader["reduce_s"] < COLLECTIVE_S + 15, leader["reduce_s"]


# ------------------------------------------------------------------ in-process parts


CPU1 = LocalDevices(cpus=("/device:CPU:0",))
W2 = ["127.0.0.1:2222", "127.0.0.1:2223"]


def _plan(kind="multiworker", **kwargs):
    return plan_strategy(kind, local_devices=CPU1, environ={}, cluster=kwargs.pop("cluster", W2),
                         task_index=kwargs.pop("task_index", 0), **kwargs)


def test_startup_timeout_is_carried_with_a_bounded_default():
    assert _plan().startup_timeout == DEFAULT_STARTUP_TIMEOUT == 600.0
    assert _plan(startup_timeout=5).startup_timeout == 5.0
    assert _plan("auto", startup_timeout=2.5).startup_timeout == 2.5
    local = plan_strategy("auto", local_devices=CPU1, environ={}, startup_timeout=5)
    assert local.kind == "default" and local.startup_timeout is None
    assert "startup_timeout=5.0 ignored" in local.reason


@pytest.mark.parametrize(
    "value, exc, match",
    [
        ("10", TypeError, "Received: startup_timeout='10'"),
        (True, TypeError, "Received: startup_timeout=True"),
        (0, ValueError, "positive, finite"),
        (-1.0, ValueError, "positive, finite"),
        (float("nan"), ValueError, "positive, finite"),
        (float("inf"), ValueError, "positive, finite"),
        (10**400, ValueError, "positive, finite"),
        (7 * 24 * 3600 + 1, ValueError, "at most 604800 seconds"),
    ],
)
def test_bad_startup_timeout(value, exc, match):
    with pytest.raises(exc, match=match):
        _plan(startup_timeout=value)


def test_startup_timeout_does_not_apply_to_local_kinds():
    with pytest.raises(ValueError, match=r"`startup_timeout` apply to kind='multiworker'.*startup_timeout=5"):
        plan_strategy("mirrored", local_devices=CPU1, environ={}, startup_timeout=5)


def test_own_port_check():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        info = ClusterInfo("explicit", {"worker": ("127.0.0.1:1", f"127.0.0.1:{port}")}, "worker", 1)
        with pytest.raises(RuntimeError, match=rf"port 127\.0\.0\.1:{port} for worker:1 cannot be used: it is already in use"):
            check_own_port(info)
    (free,) = free_ports(1)
    check_own_port(ClusterInfo("explicit", {"worker": (f"127.0.0.1:{free}", "127.0.0.1:2")}, "worker", 0))
    check_own_port(ClusterInfo("local"))  # nothing to check


def test_failure_message_names_tasks_from_tensorflow_or_by_probing():
    with socket.socket() as up:
        up.bind(("127.0.0.1", 0))
        up.listen()
        up_port = up.getsockname()[1]
        (down_port,) = free_ports(1)
        cluster = {"chief": (f"127.0.0.1:{up_port}",), "worker": ("127.0.0.1:9", f"127.0.0.1:{down_port}")}
        info = ClusterInfo("tf_config", cluster, "worker", 0)
        leader_detail = (
            "Barrier timed out. Id: x\n# of tasks that reached the barrier: 2/3.\nThe first task at the barrier: "
            "/job:chief/replica:0/task:0. Some timed out task names:\n/job:worker/replica:0/task:1\n"
        )
        message = startup_failure_message(info, 3.0, leader_detail)
        assert f"these tasks never came up: worker:1 (127.0.0.1:{down_port})." in message
        assert "chief:0" not in message and message.endswith("TensorFlow said: Barrier timed out. Id: x")
        probed = startup_failure_message(info, 3.0, "Deadline Exceeded")
        assert f"these tasks never came up: worker:1 (127.0.0.1:{down_port})." in probed
        everyone = ClusterInfo("tf_config", {"worker": ("127.0.0.1:9", f"127.0.0.1:{up_port}")}, "worker", 0)
        assert "every task answers on its port" in startup_failure_message(everyone, 3.0, "")
    assert re.search(r"startup_timeout=3s", message)


# ------------------------------------------------------------------ stopping a waiting worker


@pytest.mark.slow
def test_sigterm_to_a_worker_waiting_for_a_missing_peer_ends_it_within_the_grace_period(tmp_path):
    """TensorFlow ignores SIGTERM while it waits for peers; the launcher's supervisor ends the worker anyway."""
    grace_s = 4.0
    cmd = [sys.executable, "-m", "keras_gpu.cli", "launch", "-n", "2", "--grace-period", f"{grace_s:g}",
           str(REPO / "tests" / "_workers" / "peer_wait_worker.py"), str(tmp_path)]
    launcher = subprocess.Popen(cmd, env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(launcher.stderr), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "waiting").exists():
            assert launcher.poll() is None and time.monotonic() < deadline, "".join(lines)[-4000:]
            time.sleep(0.1)
        time.sleep(2.0)  # well inside make_strategy's wait for worker 1
        supervisor = int(re.search(r"started 2 worker\(s\) \(pids (\d+),", "".join(lines)).group(1))
        os.kill(supervisor, signal.SIGTERM)  # to worker 0 alone, as the launcher lists it
        sent = time.monotonic()
        launcher.wait(timeout=120)
        elapsed = time.monotonic() - sent
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
    reader.join(timeout=10)
    err = "".join(lines)
    assert launcher.returncode == 128 + signal.SIGTERM, err[-4000:]
    assert "worker 0 was killed by SIGTERM; stopping the other 1 worker(s)" in err
    assert f"the worker did not end within {grace_s / 2:g}s of SIGTERM" in err
    assert "SIGKILL (" not in err  # nobody waited for the launcher's SIGKILL
    assert elapsed < grace_s + 2, elapsed  # half the grace period, then worker 1's stop
    worker = int((tmp_path / "pid_w0").read_text())
    assert not alive(worker)
