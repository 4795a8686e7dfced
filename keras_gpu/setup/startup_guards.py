"""Guards that keep the start of a multi-worker job from waiting forever or failing without a name.

Before TensorFlow (or JAX) starts this task's server, `check_own_port`
checks its port, so that a port held by another process fails at once and by
name. `bound_registration` bounds TensorFlow's wait for the cluster's
tasks; the messages name the tasks that never came up, or say that the tasks
disagree on the cluster.
"""

from __future__ import annotations

import logging
import re

from keras_gpu.core.cluster import ClusterInfo
from keras_gpu.core.log import log_once
from keras_gpu.core.tf_private import (
    configure_coordination_service,
    coordination_service_config,
)
from keras_gpu.setup.cluster_peers import explain_taken_port

__all__ = [
    "bound_registration",
    "check_own_port",
    "port_answers",
    "port_in_use_message",
    "startup_failure_message",
    "unknown_task_message",
]


# --- startup guard -------------------------------------------------------------------------------------------------
#
# Checked on TensorFlow 2.21 (CPU) with two loopback workers:
# - A peer that never starts: the coordination leader (worker 0 or the chief)
#   waits inside the MultiWorkerMirroredStrategy constructor indefinitely;
#   `cluster_register_timeout_in_ms` alone does not bound it. With
#   `cluster_register_with_barrier` as well, it raises DeadlineExceededError
#   after the timeout, naming the missing tasks. A non-leader task whose leader
#   never starts raises DeadlineExceededError about 5 s after the same timeout.
# - A peer that starts late, within the timeout: the cluster forms normally.
# - A taken port: TensorFlow binds `0.0.0.0:PORT` (without SO_REUSEPORT: a
#   second socket cannot share it) and raises `UnknownError: Could not start
#   gRPC server`, without naming the port or the task.


def check_own_port(info: ClusterInfo) -> None:
    """Raise `RuntimeError` when this task's port cannot be bound the way TensorFlow binds it."""
    import errno
    import socket

    address = info.address
    if address is None:
        return
    port = int(address.rsplit(":", 1)[1])
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC does: TIME_WAIT is no conflict
        try:
            probe.bind(("0.0.0.0", port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                why = "it is already in use by another process"
                raise RuntimeError(explain_taken_port(info) or port_in_use_message(info, why)) from None
            raise RuntimeError(
                f"make_strategy: cannot listen on port {address} for {info.task_type}:{info.task_index}: "
                f"{exc.strerror or exc}. Give this task another port in the cluster description."
            ) from None


def port_in_use_message(info: ClusterInfo, why: str) -> str:
    """The error for a port of this task that cannot be used, and `why`."""
    return (
        f"make_strategy: port {info.address} for {info.task_type}:{info.task_index} cannot be used: {why}. "
        "Stop the process that holds it (often a worker left over from an earlier run; see `ss -ltnp`) or give "
        f"this task another port in the cluster description ({info.source})."
    )


def bound_registration(info: ClusterInfo, timeout: float) -> None:
    """Configure TensorFlow's coordination service the way the strategy would, plus a registration deadline.

    `MultiWorkerMirroredStrategy` leaves an already configured coordination
    service alone, so this adds only `cluster_register_timeout_in_ms` and
    `cluster_register_with_barrier` to what its constructor would set.
    """
    import tensorflow as tf

    if info.task_type not in ("chief", "worker") or coordination_service_config() is not None:
        return
    spec = tf.train.ClusterSpec({k: list(v) for k, v in info.cluster.items()})
    jobs = [job for job in ("chief", "worker") if job in spec.jobs]
    config = configure_coordination_service(spec, jobs, timeout)
    if "cluster_register_with_barrier" in config.DESCRIPTOR.fields_by_name:
        config.cluster_register_with_barrier = True
    else:  # pragma: no cover - older TensorFlow
        log_once(
            logging.WARNING,
            "startup_timeout_leader",
            "This TensorFlow cannot bound the coordination leader's wait for its peers; `startup_timeout` "
            "applies to the other tasks only.",
        )


def startup_failure_message(info: ClusterInfo, timeout: float, detail: str) -> str:
    """Name the tasks that did not come up: from TensorFlow's message, else those whose port does not answer."""
    me = (info.task_type, info.task_index)
    timed_out = detail.partition("timed out task names:")[2]
    named = {(job, int(index)) for job, index in re.findall(r"/job:(\w+)/replica:\d+/task:(\d+)", timed_out)}
    tasks = [(job, i, a) for job, addresses in info.cluster.items() for i, a in enumerate(addresses) if (job, i) != me]
    missing = [t for t in tasks if (t[0], t[1]) in named]
    if not missing:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(32, max(1, len(tasks)))) as pool:
            answers = list(pool.map(port_answers, [t[2] for t in tasks]))
        missing = [t for t, up in zip(tasks, answers) if not up]
    first = detail.strip().splitlines()[0] if detail.strip() else "no detail"
    running = []
    if missing and named:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(32, len(missing))) as pool:
            answers = list(pool.map(port_answers, [t[2] for t in missing]))
        running = [t for t, up in zip(missing, answers) if up]
        missing = [t for t, up in zip(missing, answers) if not up]
    if running:
        listed = ", ".join(f"{job}:{i} ({address})" for job, i, address in running)
        what = (
            f"a process answers at the address of {listed} but never registered as that task: the tasks disagree "
            "on the cluster (e.g. a 'chief' in one TF_CONFIG and not the other, or different worker lists), so "
            "give every task the same cluster"
        )
        if missing:
            what += "; these tasks never came up: " + ", ".join(f"{job}:{i} ({address})" for job, i, address in missing)
    elif missing:
        listed = ", ".join(f"{job}:{i} ({address})" for job, i, address in missing)
        what = f"these tasks never came up: {listed}"
    else:
        what = "every task answers on its port, but the cluster did not form (are they all from the same job?)"
    return (
        f"make_strategy: the cluster from {info.source} did not come up within startup_timeout={timeout:g}s; {what}. "
        "Start every task of the cluster, check their addresses, or raise `startup_timeout`. "
        f"TensorFlow said: {first}"
    )


def port_answers(address: str, timeout: float = 1.0) -> bool:
    """Whether `host:port` accepts a TCP connection within `timeout` seconds."""
    import socket

    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def unknown_task_message(info: ClusterInfo, detail: str) -> str:
    """The coordination leader refused this task: their cluster descriptions differ."""
    spec = {job: list(addresses) for job, addresses in info.cluster.items() if job in ("chief", "worker")}
    leader = "chief:0" if spec.get("chief") else "worker:0"
    address = (spec.get("chief") or spec.get("worker") or ["?"])[0]
    return (
        f"make_strategy: the tasks disagree on the cluster: the coordination leader at {address} does not know this "
        f"task ({info.task_type}:{info.task_index}), so its cluster description differs from this one "
        f"({info.source}: {spec}), e.g. a 'chief' in one and not the other, or different worker lists. The process "
        f"at {address} is {leader} here. Give every task the same cluster (TF_CONFIG's 'cluster' must be "
        f"identical; only its 'task' differs). TensorFlow said: {detail.strip().splitlines()[0]}"
    )
