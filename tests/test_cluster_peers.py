"""Tasks whose cluster descriptions disagree end fast, on every task, naming the disagreement.

The jobs run as real worker processes on 127.0.0.1, each started directly
with its own TF_CONFIG (as a scheduler that generated them wrongly would),
all at once by one module fixture so that their waits overlap. Each worker
gets `startup_timeout=300`: a job that is not ended by the disagreement
check outlives the generous subprocess deadline and fails the test.
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

from keras_gpu.core import tf_private as _tf
from keras_gpu.core.cluster import ClusterInfo
from keras_gpu.setup.cluster_peers import view_difference
from tests._util import REPO, free_ports, subprocess_env

WORKER = REPO / "tests" / "_workers" / "disagree_worker.py"
STARTUP_S = 300  # what the workers would wait without the check
DEADLINE_S = 150  # generous on a loaded machine, far below STARTUP_S
DISAGREE = "RuntimeError: make_strategy: the tasks disagree on the cluster: "
_ERROR_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*(?:Error|Exception)): .*$", re.MULTILINE)


def _config(workers: list[str], index: int, chief: list[str] | None = None, task: str = "worker") -> dict:
    cluster = {"worker": workers} if chief is None else {"chief": chief, "worker": workers}
    return {"cluster": cluster, "task": {"type": task, "index": index}}


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """Start every job's workers at once; `{name: {"addresses": [...], "tasks": [{returncode, error, seconds}]}}`."""
    a = {}
    plans = {}
    for name in ("swapped", "same_index", "unknown_index", "same_address", "index_out_of_range"):
        x, y, z = (f"127.0.0.1:{p}" for p in free_ports(3))
        a[name] = [x, y, z]
    x, y, z = a["swapped"]
    plans["swapped"] = [_config([x, y], 0), _config([y, x], 0)]
    x, y, z = a["same_index"]
    plans["same_index"] = [_config([x, y], 0), _config([x, y], 0)]
    x, y, z = a["unknown_index"]
    plans["unknown_index"] = [_config([x, y], 0), _config([x, y, z], 2)]
    x, y, z = a["same_address"]
    plans["same_address"] = [_config([x, x], 0), _config([x, x], 1)]
    x, y, z = a["index_out_of_range"]
    plans["index_out_of_range"] = [_config([x, y], 0), _config([x, y], 2)]
    procs: dict[str, list[tuple[subprocess.Popen, float]]] = {}
    logs = {}
    results: dict[str, dict] = {}
    try:
        for name, configs in plans.items():
            procs[name] = [
                (
                    subprocess.Popen(
                        [sys.executable, str(WORKER), str(STARTUP_S)],
                        env=subprocess_env({"TF_CONFIG": json.dumps(c)}),
                        stdout=subprocess.PIPE,
                        stderr=logs.setdefault((name, i), tmp_path_factory.mktemp(name).joinpath("stderr").open("w+")),
                        text=True,
                        start_new_session=True,
                    ),
                    time.monotonic(),
                )
                for i, c in enumerate(configs)
            ]
        ended: dict[subprocess.Popen, tuple[str, float, float | None]] = {}

        def wait(proc: subprocess.Popen, started: float) -> None:
            out, imported = [], None
            for line in proc.stdout:  # ends when the worker exits (or is killed at the deadline)
                out.append(line)
                if line.startswith("IMPORTED") and imported is None:
                    imported = time.monotonic()
            proc.wait()
            end = time.monotonic()
            ended[proc] = ("".join(out), end - started, None if imported is None else end - imported)

        def kill_at_deadline() -> None:
            time.sleep(DEADLINE_S)
            for group in procs.values():
                for proc, _ in group:
                    if proc.poll() is None:
                        with contextlib.suppress(ProcessLookupError):
                            os.killpg(proc.pid, signal.SIGKILL)

        threading.Thread(target=kill_at_deadline, daemon=True).start()

        waiters = [threading.Thread(target=wait, args=pair, daemon=True) for group in procs.values() for pair in group]
        for waiter in waiters:
            waiter.start()
        for waiter in waiters:
            waiter.join(DEADLINE_S + 10)
        for name, group in procs.items():
            tasks = []
            for i, (proc, _) in enumerate(group):
                assert proc in ended, f"{name}: a task still runs after {DEADLINE_S}s"
                out, seconds, after_import = ended[proc]
                logs[name, i].seek(0)
                err = logs[name, i].read()
                errors = _ERROR_LINE.findall(err)  # TensorFlow logs more lines after the traceback
                tasks.append(
                    {
                        "returncode": proc.returncode,
                        "error": errors[-1] if errors else "",
                        "seconds": seconds,
                        "after_import": after_import,
                        "stdout": out,
                        "stderr": err[-3000:],
                    }
                )
            results[name] = {"addresses": a[name], "tasks": tasks}
    finally:
        for group in procs.values():
            for proc, _ in group:
                if proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        for log in logs.values():
            log.close()
    print(
        "\nseconds from start to exit (from TensorFlow imported to exit), per task:",
        {n: [f"{t['seconds']:.1f} ({t['after_import'] or 0:.1f})" for t in r["tasks"]] for n, r in results.items()},
    )
    return results


def _ended_with_one_line(job: dict) -> list[str]:
    """Every task exited 1 with a one-line error; return those lines."""
    for task in job["tasks"]:
        assert task["returncode"] == 1, task
        assert "CREATED" not in task["stdout"], task
    return [task["error"] for task in job["tasks"]]


@pytest.mark.slow
def test_swapped_worker_lists_end_both_tasks_naming_each_others_place(jobs):
    job = jobs["swapped"]
    x, y, _ = job["addresses"]
    first, second = _ended_with_one_line(job)
    assert first.startswith(DISAGREE), first
    assert f"the task at {y} is worker:0 in its own cluster description, but worker:0 at {x} (tf_config) lists {y} as worker:1" in first
    assert "different order on each task" in first
    assert second.startswith(DISAGREE), second
    assert f"the task at {x} is worker:0 in its own cluster description, but worker:0 at {y} (tf_config) lists {x} as worker:1" in second


@pytest.mark.slow
def test_two_tasks_with_the_same_index_both_end_naming_it(jobs):
    job = jobs["same_index"]
    x, _, _ = job["addresses"]
    lines = _ended_with_one_line(job)
    for line in lines:
        assert line.startswith(f"RuntimeError: make_strategy: two tasks were started as worker:0 ({x})"), line
        assert "the same task index given to two tasks" in line


@pytest.mark.slow
def test_a_task_index_the_leader_does_not_know_ends_both_tasks(jobs):
    job = jobs["unknown_index"]
    x, _, z = job["addresses"]
    leader, stranger = _ended_with_one_line(job)
    assert stranger.startswith(
        f"RuntimeError: make_strategy: the tasks disagree on the cluster: the coordination leader at {x} does not know "
        "this task (worker:2)"
    ), stranger
    assert leader.startswith(DISAGREE), leader
    assert f"worker:2 at {z} tried to join, but the coordination leader at {x} has no such task" in leader
    assert f"(This task: worker:0 at {x}.)" in leader


@pytest.mark.slow
def test_the_same_address_twice_ends_every_task_before_tensorflow_starts(jobs):
    job = jobs["same_address"]
    x, _, _ = job["addresses"]
    for line in _ended_with_one_line(job):
        assert line.startswith(f"ValueError: TF_CONFIG['cluster'] lists '{x}' twice"), line


@pytest.mark.slow
def test_an_index_outside_the_list_ends_that_task_at_once_and_tells_the_leader(jobs):
    job = jobs["index_out_of_range"]
    x, _, _ = job["addresses"]
    leader, outside = _ended_with_one_line(job)
    assert outside.startswith(
        "keras_gpu.core.cluster.TaskNotInClusterError: TF_CONFIG['task'] index 2 is out of range: the cluster has 2 'worker'"
    ), outside
    assert leader.startswith(DISAGREE), leader
    assert "a task started as worker:2 (tf_config), which its own cluster description does not have" in leader
    assert f"(This task: worker:0 at {x}.)" in leader


# ------------------------------------------------------------------ in-process parts


def _info(workers, index, chief=None, task="worker", source="tf_config"):
    cluster = {"worker": tuple(workers)} if chief is None else {"chief": tuple(chief), "worker": tuple(workers)}
    return ClusterInfo(source, cluster, task, index)


def test_view_difference_names_the_peer_and_both_places():
    info = _info(["h:1", "h:2"], 0)
    assert view_difference(info, "h:2", ("worker", 1)) is None
    assert view_difference(info, "h:9", ("worker", 0)) is None  # not in this task's description
    line = view_difference(info, "h:2", ("worker", 0))
    assert line.startswith("make_strategy: the tasks disagree on the cluster: the task at h:2 is worker:0 in its own")
    assert "worker:0 at h:1 (tf_config) lists h:2 as worker:1 (e.g. the worker list in a different order" in line
    assert "TF_CONFIG's 'cluster' must be identical on every task" in line
    assert "\n" not in line
    chief = view_difference(_info(["h:1", "h:2"], 1), "h:1", ("chief", 0))
    assert "the task at h:1 is chief:0" in chief and "lists h:1 as worker:0." in chief  # no order hint across jobs
    explicit = view_difference(_info(["h:1", "h:2"], 0, source="explicit"), "h:2", ("worker", 0))
    assert "pass the same `cluster` to every task" in explicit


def test_protobuf_fields_round_trip():
    message = _tf._field(1, "key") + _tf._field(2, b"\x00\xff") + _tf._field(3, 300) + _tf._field(4, _tf._task("worker", 7))
    fields = _tf._fields(message)
    assert fields[:3] == [(1, b"key"), (2, b"\x00\xff"), (3, 300)]
    assert _tf._fields(fields[3][1]) == [(1, b"worker"), (2, 7)]
    assert _tf._fields(_tf._task("chief", 0)) == [(1, b"chief")]  # proto3 leaves the default index out


def test_nothing_or_something_else_at_an_address_is_no_task():
    (port,) = free_ports(1)
    start = time.monotonic()
    assert _tf.server_task(f"127.0.0.1:{port}", 2.0) is None  # nothing listens
    assert _tf.service_try_get(f"127.0.0.1:{port}", "k", 2.0) is None
    assert _tf.cancel_registration(f"127.0.0.1:{port}", "worker", 0, 2.0) is None  # nobody to tell
    with socket.socket() as listener:  # something that is not a TensorFlow server
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        assert _tf.server_task(f"127.0.0.1:{listener.getsockname()[1]}", 1.0) is None
    assert time.monotonic() - start < 30
