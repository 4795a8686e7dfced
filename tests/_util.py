"""Shared test helpers: free loopback ports, TensorFlow code run in a fresh process, and its two logical CPUs."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def free_ports(n: int) -> list[int]:
    """Return ``n`` distinct TCP ports that were free on 127.0.0.1 a moment ago."""
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def alive(pid: int) -> bool:
    """Whether `pid` is a live (not zombie) process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def split_cpu(n: int = 2) -> None:
    """Split the one physical CPU into `n` logical TensorFlow devices (default two).

    With two, a `MirroredStrategy` (or `make_strategy`) has two replicas on a
    CPU-only machine. TensorFlow accepts this only before its runtime is
    initialised (before the first tensor, strategy or logical-device listing),
    so call it at the top of a fresh process: `run_python(..., logical_cpus=2)`
    does, and a worker module may call it itself. Never call it in the pytest
    process, whose TensorFlow every test shares.
    """
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * n)


def subprocess_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A quiet environment for a child Python that imports TensorFlow.

    Unless the caller's environment already sets `CUDA_VISIBLE_DEVICES`, GPUs
    are hidden so that CPU tests behave the same on a GPU machine; tests marked
    `gpu` pass their own environment.
    """
    env = dict(os.environ)
    env.pop("TF_CONFIG", None)
    for key in [k for k in env if k.startswith("SLURM_")]:
        env.pop(key)
    env.update(
        {
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "CUDA_VISIBLE_DEVICES": env.get("CUDA_VISIBLE_DEVICES", ""),
            "KERAS_BACKEND": "tensorflow",
            "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p),
        }
    )
    if extra:
        env.update(extra)
    return env


def run_overhead(out: Path, *args: str, env: Mapping[str, str] | None = None, timeout: float = 600) -> tuple[dict, str]:
    """Run `python -m benchmarks.overhead ARGS --output OUT` in a child; its JSON result and its stdout.

    A non-zero exit fails with the tail of the child's stderr.
    """
    cmd = [sys.executable, "-m", "benchmarks.overhead", *args, "--output", str(out)]
    proc = subprocess.run(
        cmd, cwd=REPO, env=subprocess_env(env), capture_output=True, text=True, timeout=timeout, check=False
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(Path(out).read_text()), proc.stdout


def run_python(
    code: str,
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 180,
    cwd: str | os.PathLike | None = None,
    check: bool = True,
    logical_cpus: int | None = None,
) -> subprocess.CompletedProcess:
    """Run ``code`` (dedented) in a fresh interpreter and return the finished process.

    With ``check=True`` a non-zero exit raises an AssertionError carrying the
    child's stdout and stderr, so failures explain themselves. With
    ``logical_cpus=n`` the child first splits its CPU into ``n`` logical
    devices (`split_cpu`), before any line of ``code`` runs.
    """
    code = textwrap.dedent(code)
    if logical_cpus is not None:
        code = f"from tests._util import split_cpu\nsplit_cpu({logical_cpus})\n{code}"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=subprocess_env(env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"child exited {proc.returncode}\n--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-6000:]}"
        )
    return proc


def check_trained(result: dict, kind: str) -> None:
    """The samples the model trained on (its own metric) are those the data holds, counted by hand.

    A `PyDataset` with worker threads is the exception: Keras hands a pass
    the batches its enqueuer had fetched before the previous pass stopped,
    and reshuffles, so an epoch of 101 batches may hold the short batch of 3
    twice or not at all: the total then differs by a multiple of 10 - 3.
    """
    if kind == "pydataset_workers":
        difference = result["truth"] - result["expected"]
        assert difference % 7 == 0 and abs(difference) <= 2 * 7  # 2 epochs
    else:
        assert result["truth"] == result["expected"]


def implied_samples(run: str) -> tuple[float, float, int]:
    """What a run's event file implies: `(samples, seconds, samples_per_sec points)`.

    Each window's samples per step (`samples_per_sec / steps_per_sec`) times
    its steps (the difference of the global steps of consecutive points),
    summed; and each window's steps over its `steps_per_sec`, summed.
    """
    from keras_gpu.output.reader import read_scalars

    scalars = read_scalars(run)
    samples = dict(scalars.get("throughput/samples_per_sec", []))
    steps = scalars["throughput/steps_per_sec"]
    total = seconds = 0.0
    previous = 0
    for step, steps_per_sec in steps:
        n = step - previous
        previous = step
        seconds += n / steps_per_sec
        if step in samples:
            total += n * samples[step] / steps_per_sec
    return total, seconds, len(samples)
