"""`keras-gpu launch`: what one worker runs and the cluster it is told about.

The command line of a worker (always through the `keras_gpu.cli._worker`
bootstrap) and its environment: `TF_CONFIG` and the `KERAS_DISTRIBUTION_*`
variables on free loopback ports, and the `KERAS_GPU_*` variables that give a
worker its rank, the worker count and the restart count. The variables are
described in `keras_gpu.cli.launch`.
"""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Mapping, Sequence

__all__ = [
    "ENV_MAX_RESTARTS",
    "ENV_NUM_WORKERS",
    "ENV_RESTART_COUNT",
    "ENV_WORKER_INDEX",
    "LOOPBACK",
    "free_loopback_ports",
    "worker_command",
    "worker_env",
]

ENV_WORKER_INDEX = "KERAS_GPU_WORKER_INDEX"
"""Environment variable holding a launched worker's rank (0 to N-1)."""
ENV_NUM_WORKERS = "KERAS_GPU_NUM_WORKERS"
"""Environment variable holding the number of launched workers."""
ENV_RESTART_COUNT = "KERAS_GPU_RESTART_COUNT"
"""Environment variable holding how many times the job was restarted before this attempt (0 first)."""
ENV_MAX_RESTARTS = "KERAS_GPU_MAX_RESTARTS"
"""Environment variable holding the launcher's `--max-restarts`."""
LOOPBACK = "127.0.0.1"
"""The address every worker listens on: all workers run on this machine."""


def free_loopback_ports(n: int) -> list[int]:
    """Return `n` distinct TCP ports that were free on 127.0.0.1 a moment ago.

    All `n` sockets are bound at once, so the ports are distinct; they are
    closed before returning, so another process could take one in between.
    """
    sockets: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(s)
            s.bind((LOOPBACK, 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def worker_command(
    target: str,
    args: Sequence[str] = (),
    *,
    module: bool = False,
    cpu_replicas: int | None = None,
    python: str | None = None,
) -> list[str]:
    """The command line of one worker.

    Args:
        target: The script path, or the module name when `module` is True.
        args: Arguments passed to the script.
        module: Run `target` like `python -m target`.
        cpu_replicas: When set, the bootstrap splits the CPU into this many
            logical devices before the script starts.
        python: The interpreter (default `sys.executable`).

    Every worker runs through the `keras_gpu.cli._worker` bootstrap, which
    supervises it (so that it stops when told) and, under `--hang-timeout`,
    makes its `fit`, `evaluate` and `predict` report progress.
    """
    python = python or sys.executable
    run_target = ["-m", target] if module else [target]
    replicas = [] if cpu_replicas is None else ["--cpu-replicas", str(cpu_replicas)]
    return [python, "-m", "keras_gpu.cli._worker", *replicas, "--", *run_target, *args]


def worker_env(
    base: Mapping[str, str], index: int, ports: Sequence[int], *, restart_count: int = 0, max_restarts: int = 0
) -> dict[str, str]:
    """The environment of worker `index` in a job on loopback `ports` (one per worker).

    Args:
        base: The environment to start from (usually `os.environ`).
        index: The worker's rank.
        ports: One loopback port per worker.
        restart_count: How many times the job was restarted before this attempt.
        max_restarts: The launcher's `--max-restarts`.
    """
    env = dict(base)
    env["TF_CONFIG"] = json.dumps(
        {
            "cluster": {"worker": [f"{LOOPBACK}:{p}" for p in ports]},
            "task": {"type": "worker", "index": index},
        }
    )
    # What `keras.distribution.initialize()` reads when called without arguments (JAX: worker 0 coordinates).
    env["KERAS_DISTRIBUTION_JOB_ADDRESSES"] = ",".join(f"{LOOPBACK}:{p}" for p in ports)
    env["KERAS_DISTRIBUTION_NUM_PROCESSES"] = str(len(ports))
    env["KERAS_DISTRIBUTION_PROCESS_ID"] = str(index)
    env[ENV_WORKER_INDEX] = str(index)
    env[ENV_NUM_WORKERS] = str(len(ports))
    env[ENV_RESTART_COUNT] = str(restart_count)
    env[ENV_MAX_RESTARTS] = str(max_restarts)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env
