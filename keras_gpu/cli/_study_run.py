"""`keras-gpu scale` and `keras-gpu tune`: running the user's script once per configuration, and reading its record.

Both commands run every configuration (a `scale` row, a `tune` candidate)
here, the same way. Each is a job of `workers` processes through the
launcher's own pieces (`keras_gpu.cli._launch_env.worker_command`, the
worker bootstrap, `keras_gpu.cli._launch_workers.WorkerGroup`): loopback
`TF_CONFIG` and `KERAS_DISTRIBUTION_*` variables where there are several
workers, none where there is one, so that `keras_gpu.make_strategy()` sees
exactly the configuration. Replicas are the first GPUs of the machine
(worker `i` gets GPUs `i*k` to `i*k+k-1`), or on a machine without a GPU `k`
logical CPUs per worker, as `keras-gpu launch --cpu-replicas` makes them.

Each worker is told its part by the one child protocol
(`keras_gpu.hooks.study_env`: the folder, the window, the tool, the
change); the bootstrap's injection into `fit` (`keras_gpu.hooks.study`)
measures the window and writes one record per worker, which `run_config`
reads back as a `Measured`: the window's `RunResult` and the chief's record
of what the run trained.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from keras_gpu.cli._launch_env import free_loopback_ports, worker_command, worker_env
from keras_gpu.cli._launch_hang import HangWatch
from keras_gpu.cli._launch_workers import WorkerGroup
from keras_gpu.cli._worker import ENV_STOP_DELAY
from keras_gpu.hooks.progress import ENV_HANG_TIMEOUT, ENV_PROGRESS_FILE
from keras_gpu.hooks.study_env import result_path, study_env
from keras_gpu.meters.scale_table import AllReduce, RunResult

__all__ = ["Config", "Measured", "ScaleError", "available_gpus", "check_devices", "run_config"]

_GRACE_S = 5.0
_CLUSTER_VARIABLES = (
    "TF_CONFIG",
    "KERAS_DISTRIBUTION_JOB_ADDRESSES",
    "KERAS_DISTRIBUTION_NUM_PROCESSES",
    "KERAS_DISTRIBUTION_PROCESS_ID",
)


class ScaleError(RuntimeError):
    """A configuration could not be measured; the message says why and what to do."""


@dataclass(frozen=True)
class Measured:
    """One configuration's run, as its workers recorded it.

    Attributes:
        result: The window: steps, seconds, samples and the step's parts.
        record: What the chief's run trained (`keras_gpu.hooks.study`): the
            change, what applied and what did not, the facts of its `fit`,
            the losses, the model's settings and the peak memory.
    """

    result: RunResult
    record: Mapping[str, Any]


@dataclass(frozen=True)
class Config:
    """One row to measure.

    Attributes:
        workers: Worker processes.
        replicas: Replicas per worker.
        gpus: GPUs per worker (0: logical CPUs, or every GPU hidden).
        hide_gpus: The `--cpu` row: every GPU hidden.
    """

    workers: int
    replicas: int
    gpus: int
    hide_gpus: bool = False

    @property
    def label(self) -> str:
        """How the table names the row's devices."""
        if self.hide_gpus:
            return "CPU (GPUs hidden)"
        return f"{self.replicas} GPU" if self.gpus else f"{self.replicas} CPU"


def available_gpus(env: Mapping[str, str] | None = None) -> list[str]:
    """The GPUs a worker may be given: `CUDA_VISIBLE_DEVICES`'s entries where it is set, else NVML's GPUs."""
    env = os.environ if env is None else env
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [v.strip() for v in visible.split(",") if v.strip() and v.strip() != "-1"]
    from keras_gpu.core import nvml_session

    return [str(i) for i in range(nvml_session.device_count())]


def check_devices(workers: list[int], replicas: list[int], gpus: int, cpus: int) -> list[tuple[int, int]]:
    """The `(workers, replicas)` pairs that fit the machine, each worker count with each replica count.

    A pair needing more devices than the machine has is left out (the
    caller says so); a `--replicas` or `--workers` value that fits no pair
    at all is an error.

    Raises:
        ScaleError: A value of `workers` or `replicas` needs more devices than the machine has.
    """
    have, kind = (gpus, "GPU(s)") if gpus else (cpus, "CPU core(s) and no GPU (replicas are logical CPUs)")
    for name, values, other in (("--replicas", replicas, min(workers)), ("--workers", workers, min(replicas))):
        too_many = [v for v in values if v * other > have]
        if too_many:
            raise ScaleError(
                f"{name} {too_many[0]} needs at least {too_many[0] * other} devices, and this machine has {have} "
                f"{kind}: use smaller values. Received: {name} {','.join(map(str, values))}"
            )
    return [(w, r) for w in workers for r in replicas if w * r <= have]


def run_config(
    config: Config,
    target: str,
    args: list[str],
    module: bool,
    warmup: int,
    steps: int,
    gpu_ids: list[str],
    hang_timeout: float = 0.0,
    device: str = "CPU",
    tool: str = "scale",
    change: Mapping[str, Any] | None = None,
    where: str | None = None,
) -> Measured:
    """Run the script in `config` (with `change` applied) and return what its workers measured and recorded.

    `device` names the GPUs of a GPU configuration (`"CPU"` for the others).
    With `hang_timeout`, the run is stopped when a worker inside `fit`,
    `evaluate` or `predict` finishes no batch for that long (the launcher's
    `--hang-timeout` watch). `tool` (`"scale"`, `"tune"`) is the command the
    run is for; `where` names the run in errors.

    Raises:
        ScaleError: The script failed (its `fit`'s error where it raised),
            never called `fit`, trained too few steps, counted no samples, or
            its strategy did not train on the configuration's replicas.
    """
    cpu_replicas = None if config.gpus or config.hide_gpus else config.replicas
    command = worker_command(target, args, module=module, cpu_replicas=cpu_replicas)
    with tempfile.TemporaryDirectory(prefix=f"keras-gpu-{tool}-") as folder:
        envs = [dict(env, **study_env(folder, warmup, steps, tool, change)) for env in _envs(config, gpu_ids)]
        watch = None
        if hang_timeout:
            paths = [os.path.join(folder, f"progress{i}.json") for i in range(config.workers)]
            for env, path in zip(envs, paths):
                env[ENV_PROGRESS_FILE], env[ENV_HANG_TIMEOUT] = path, f"{hang_timeout:g}"
            watch = HangWatch(paths, hang_timeout)
        code = _run_group(command, envs, watch)
        found = [_read(result_path(folder, i)) for i in range(config.workers)]
    where = where or f"with {config.workers} worker(s) x {config.replicas} replica(s)"
    chief = _checked(found, code, watch, where, warmup, steps, tool)
    expected = config.workers * config.replicas
    if chief["replicas_total"] != expected or chief["workers"] != config.workers:
        raise ScaleError(
            f"the run {where} gave the script {expected} replica(s) in all, but its model trained on "
            f"{chief['replicas_total']} replica(s) (its strategy saw {chief['workers']} worker(s)): build the model "
            "under keras_gpu.make_strategy() (or a strategy over every device it is given)"
        )
    # Each worker counts the samples it read: its share, or (JAX under make_strategy) the whole global batch.
    samples = float(chief["samples"] if chief.get("samples_global") else sum(r["samples"] for r in found))
    if not samples > 0:
        raise ScaleError(f"the run {where} counted no samples in its window ({chief.get('note') or 'no count'}): "
                         f"`keras-gpu {tool}` cannot give a rate for it")
    allreduce = None
    if chief.get("allreduce_sec"):
        allreduce = AllReduce(int(chief["grad_bytes"]), float(chief["allreduce_sec"]), expected)
    halves = chief.get("halves")
    result = RunResult(
        workers=config.workers,
        replicas=config.replicas,
        steps=int(chief["steps"]),
        seconds=float(chief["seconds"]),
        samples=samples,
        parts=chief.get("parts"),
        grad_bytes=int(chief["grad_bytes"]),
        allreduce=allreduce,
        label=config.label,
        note=chief.get("note", ""),
        halves=tuple(halves) if halves else None,
        device="CPU" if not config.gpus else device,
        shares=_shares(config, os.cpu_count() or 1),
        versus_gpu=config.hide_gpus,
    )
    return Measured(result, chief.get("run") or {})


def _checked(found: list[dict | None], code: int, watch: HangWatch | None, where: str, warmup: int, steps: int,
             tool: str) -> dict[str, Any]:
    """The chief's record, once every worker's says its window was measured.

    Raises:
        ScaleError: Why not, in the user's words.
    """
    if watch is not None and watch.stalled:
        raise ScaleError(f"the run {where} was stopped: {watch.describe()}")
    error = next((r["error"] for r in found if r and r.get("error")), None)
    if error and code != 0:
        raise ScaleError(f"the script's fit raised {error} {where}")
    if error:
        raise ScaleError(f"{error} {where}")
    if code != 0:
        raise ScaleError(f"the script failed {where}: a worker exited with status {code} (its output is above); fix the script and run again")
    if any(r is None for r in found):
        raise ScaleError(
            f"the script never called fit {where}: `keras-gpu {tool}` measures the training steps of `model.fit`"
        )
    short = [r for r in found if r["status"] != "done"]
    if short:
        raise ScaleError(
            f"the script trained {short[0]['steps_trained']} step(s) {where}, fewer than --warmup {warmup} + "
            f"--steps {steps}: lower them, or let the script train longer"
        )
    return found[0]


def _shares(config: Config, cores: int) -> str:
    """How the replicas of `config` share hardware, in words; empty where each has a GPU of its own."""
    total = config.workers * config.replicas
    if config.gpus or config.hide_gpus or total < 2:
        return ""
    return (
        f"{total} replicas in {_plural(config.workers, 'process', 'processes')} of "
        f"{_plural(config.replicas, 'logical CPU', 'logical CPUs')} on {_plural(cores, 'CPU core', 'CPU cores')}"
    )


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _envs(config: Config, gpu_ids: list[str]) -> list[dict[str, str]]:
    """Each worker's environment for `config`: its place in the job, its devices."""
    base = {k: v for k, v in os.environ.items() if k not in _CLUSTER_VARIABLES}
    if config.workers > 1:
        ports = free_loopback_ports(config.workers)
        envs = [worker_env(base, i, ports) for i in range(config.workers)]
    else:
        envs = [dict(base, KERAS_GPU_WORKER_INDEX="0", KERAS_GPU_NUM_WORKERS="1", PYTHONUNBUFFERED="1")]
    for i, env in enumerate(envs):
        env[ENV_STOP_DELAY] = f"{_GRACE_S / 2:g}"
        if config.hide_gpus:
            env["CUDA_VISIBLE_DEVICES"] = ""
        elif config.gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpu_ids[i * config.gpus : (i + 1) * config.gpus])
    return envs


def _run_group(command: list[str], envs: list[dict[str, str]], watch: HangWatch | None) -> int:
    """Run the job; stop every worker when one fails or `watch` finds it stuck. Returns a failure's status, or 0."""
    group = WorkerGroup([command] * len(envs), envs, stdout=sys.stderr, stderr=sys.stderr)
    try:
        group.start()
        failure = group.wait(watch=watch)
        if watch is not None and watch.stalled:
            group.stop(signal.SIGTERM, _GRACE_S)
            return 1
        if failure is None:
            return 0
        group.stop(signal.SIGTERM, _GRACE_S)
        return failure.exit_code
    finally:
        group.stop(signal.SIGKILL, 0.0)


def _read(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (FileNotFoundError, ValueError):
        return None
