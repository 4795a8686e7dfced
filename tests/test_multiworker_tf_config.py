"""Workers whose TF_CONFIGs disagree get a keras-gpu error naming the disagreement.

Two real worker processes on 127.0.0.1, each given its own (conflicting)
TF_CONFIG, as a scheduler that generated them wrongly would.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from keras_gpu.core.cluster import cluster_difference
from tests._util import free_ports, subprocess_env

_WORKER = textwrap.dedent(
    """
    import json, time
    import keras_gpu
    start = time.monotonic()
    try:
        s = keras_gpu.make_strategy("multiworker", startup_timeout=15)
        out = {"ok": s.num_replicas_in_sync}
    except Exception as e:
        out = {"error": type(e).__name__ + ": " + str(e)}
    out["seconds"] = time.monotonic() - start
    print("RESULT " + json.dumps(out), flush=True)
    """
)


def _run(configs: list[dict]) -> list[dict]:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER],
            env=subprocess_env({"TF_CONFIG": json.dumps(c)}),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for c in configs
    ]
    results = []
    try:
        for proc in procs:
            stdout, stderr = proc.communicate(timeout=120)
            lines = [ln for ln in stdout.splitlines() if ln.startswith("RESULT ")]
            assert lines, f"exit {proc.returncode}\n{stdout[-2000:]}\n{stderr[-4000:]}"
            results.append(json.loads(lines[-1][len("RESULT "):]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return results


def test_cluster_difference_names_sizes_jobs_and_addresses():
    two = {"worker": ["h:1", "h:2"]}
    assert cluster_difference(two, dict(two), "worker:0") == ""
    assert cluster_difference(two, {"worker": ["h:1", "h:2", "h:3"]}, "worker:0") == (
        "'worker' has 2 task(s) here and 3 in worker:0's"
    )
    assert cluster_difference(two, {"chief": ["h:1"], "worker": ["h:2"]}, "chief:0") == (
        "a 'chief' job is only in chief:0's cluster; 'worker' has 2 task(s) here and 1 in chief:0's"
    )
    assert cluster_difference(two, {"worker": ["h:1", "h:9"]}, "worker:0") == "worker:1 is h:2 here and h:9 in worker:0's"


@pytest.mark.slow
def test_different_cluster_sizes_are_named_on_both_workers():
    a, b, c = (f"127.0.0.1:{p}" for p in free_ports(3))
    w0, w1 = _run(
        [
            {"cluster": {"worker": [a, b]}, "task": {"type": "worker", "index": 0}},
            {"cluster": {"worker": [a, b, c]}, "task": {"type": "worker", "index": 1}},
        ]
    )
    # TensorFlow itself accepts this: worker 0 builds 2 replicas, worker 1 builds 3.
    assert "ok" not in w0 and "ok" not in w1
    assert w0["error"].startswith("RuntimeError: make_strategy: the tasks disagree on the cluster")
    assert "'worker' has 2 task(s) here and 3 in worker:1's" in w0["error"]
    assert w1["error"].startswith("RuntimeError: make_strategy: the tasks disagree on the cluster")
    assert "'worker' has 3 task(s) here and 2 in worker:0's" in w1["error"]
    assert "only its 'task' differs" in w1["error"]


@pytest.mark.slow
def test_a_chief_in_one_config_only_ends_both_tasks_naming_it():
    a, b = (f"127.0.0.1:{p}" for p in free_ports(2))
    chief, worker = _run(
        [
            {"cluster": {"chief": [a], "worker": [b]}, "task": {"type": "chief", "index": 0}},
            {"cluster": {"worker": [a, b]}, "task": {"type": "worker", "index": 1}},
        ]
    )
    # The worker learns it first, from the refusal or from the chief's own server (whichever comes first).
    assert worker["error"].startswith("RuntimeError: make_strategy: the tasks disagree on the cluster")
    assert (
        f"the coordination leader at {a} does not know this task (worker:1)" in worker["error"]
        or f"the task at {a} is chief:0 in its own cluster description, but worker:1 at {b}" in worker["error"]
    ), worker["error"]
    # (A worker whose registration is still retrying when the chief has already ended waits out startup_timeout.)
    # It tells the chief, which stops waiting for a worker that will not register (else: "did not come up").
    assert chief["error"].startswith("RuntimeError: make_strategy: the tasks disagree on the cluster"), chief["error"]
    assert "chief:0" in chief["error"] and a in chief["error"] and b in chief["error"], chief["error"]


@pytest.mark.slow
def test_agreeing_workers_still_form_the_cluster():
    a, b = (f"127.0.0.1:{p}" for p in free_ports(2))
    cluster = {"worker": [a, b]}
    results = _run([{"cluster": cluster, "task": {"type": "worker", "index": i}} for i in range(2)])
    assert [r.get("ok") for r in results] == [2, 2], results
