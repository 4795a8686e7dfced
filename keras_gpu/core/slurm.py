"""A SLURM job step as a cluster: the `SLURM_*` variables, parsed and laid out host by host.

Pure parsing of the step's variables (hostlists such as `node[01-03,7]`,
tasks-per-node forms such as `2(x3),1`) plus the layout TensorFlow's SLURM
resolver makes of them. `keras_gpu.core.cluster.resolve_cluster` turns
the layout into a validated `ClusterInfo`; the JAX strategy reuses the
parsing.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from keras_gpu.core.checks import clip_repr
from keras_gpu.core.tf_private import slurm_cluster_resolver

__all__ = [
    "MAX_GPUS_PER_TASK",
    "SLURM_STEP_VARS",
    "check_gpus_per_task",
    "check_port_base",
    "expand_hostlist",
    "expand_tasks_per_node",
    "slurm_int",
    "slurm_layout",
    "step_layout",
    "step_tasks",
]

SLURM_STEP_VARS = ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE")
"""The variables of a SLURM job step that describe its tasks."""

MAX_GPUS_PER_TASK = 1024
"""GPUs per task at most; TensorFlow's SLURM resolver lists every GPU id of every task."""

_MAX_TASKS = 65536  # more tasks than any real job; bounds hostlist and task-count expansion
_HOSTNAME = re.compile(r"^[A-Za-z0-9_.\-]+$")


def check_port_base(port_base: Any) -> int:
    """`slurm_port_base` when it is a port number in 1..65535; `ValueError` otherwise."""
    if not isinstance(port_base, int) or isinstance(port_base, bool) or not 1 <= port_base <= 65535:
        raise ValueError(f"`slurm_port_base` must be a port number in 1..65535. Received: slurm_port_base={port_base!r}")
    return port_base


def check_gpus_per_task(gpus_per_task: Any) -> int | None:
    """`slurm_gpus_per_task` when it is None or an int in 0..`MAX_GPUS_PER_TASK`; `ValueError` otherwise."""
    if gpus_per_task is not None and (
        not isinstance(gpus_per_task, int) or isinstance(gpus_per_task, bool) or not 0 <= gpus_per_task <= MAX_GPUS_PER_TASK
    ):
        raise ValueError(
            f"`slurm_gpus_per_task` must be an int from 0 to {MAX_GPUS_PER_TASK}, or None to detect it. "
            f"Received: slurm_gpus_per_task={gpus_per_task!r}"
        )
    return gpus_per_task


def step_layout(env: Mapping[str, str], port_base: int) -> tuple[int, list[str], list[int]]:
    """This SLURM step's `SLURM_PROCID`, its nodes and its tasks per node, every variable checked.

    Args:
        env: The environment holding the step's `SLURM_*` variables.
        port_base: The first port on each node: it must leave room for the
            most tasks a node runs.

    Raises:
        ValueError: A variable is missing, malformed, inconsistent with the
            others, or describes more tasks than any real job.
    """
    missing = [v for v in SLURM_STEP_VARS if not (env.get(v) or "").strip()]
    if missing:
        raise ValueError(
            f"source='slurm' but {', '.join(missing)} is not set: run the script as a SLURM job step "
            "(`srun python train.py`), not with plain `python`."
        )
    try:
        procid = slurm_int(env, "SLURM_PROCID")
        num_tasks = slurm_int(env, "SLURM_STEP_NUM_TASKS")
        if not 1 <= num_tasks <= _MAX_TASKS:
            raise ValueError(f"SLURM_STEP_NUM_TASKS must be from 1 to {_MAX_TASKS}. Received: {num_tasks}")
        hosts = expand_hostlist(env["SLURM_STEP_NODELIST"], num_tasks)
        per_node = expand_tasks_per_node(env["SLURM_STEP_TASKS_PER_NODE"], num_tasks)
    except ValueError as exc:
        raise ValueError(f"The SLURM step variables cannot be parsed: {exc}") from None
    if len(hosts) != len(per_node):
        raise ValueError(
            f"SLURM_STEP_NODELIST expands to {len(hosts)} hosts but SLURM_STEP_TASKS_PER_NODE to "
            f"{len(per_node)} entries. Received: {env['SLURM_STEP_NODELIST']!r}, {env['SLURM_STEP_TASKS_PER_NODE']!r}"
        )
    if len(set(hosts)) != len(hosts):
        raise ValueError(
            f"SLURM_STEP_NODELIST names a node twice; each node must appear once. Received: {clip_repr(env['SLURM_STEP_NODELIST'])}"
        )
    if sum(per_node) != num_tasks or not 0 <= procid < num_tasks or 0 in per_node:
        raise ValueError(
            f"Inconsistent SLURM step: SLURM_STEP_NUM_TASKS={num_tasks}, tasks per node {per_node}, "
            f"SLURM_PROCID={procid}."
        )
    if port_base + max(per_node) - 1 > 65535:
        raise ValueError(
            f"`slurm_port_base` leaves no room for {max(per_node)} tasks per node. Received: slurm_port_base={port_base}"
        )
    return procid, hosts, per_node


def slurm_layout(
    env: Mapping[str, str], port_base: int, gpus_per_task: int | None, assign_gpus: bool
) -> tuple[dict[str, list[str]], str, int, int]:
    """Lay this SLURM step out as a cluster with TensorFlow's SLURM resolver.

    Args:
        env: The environment holding the step's `SLURM_*` variables.
        port_base: The first port on each node (checked by `check_port_base`).
        gpus_per_task: GPUs per task (checked by `check_gpus_per_task`);
            `None` reads the node's GPU count.
        assign_gpus: Let the resolver set `CUDA_VISIBLE_DEVICES` to this task's GPUs.

    Returns:
        The cluster spec as TensorFlow lays it out, this task's type and
        index, and its `SLURM_PROCID`.

    Raises:
        ValueError: A variable is missing, malformed, inconsistent with the
            others, or describes more tasks than any real job.
    """
    procid, _hosts, per_node = step_layout(env, port_base)
    max_per_node = max(per_node)
    # TensorFlow's own resolver does the host/port layout. Two of its defaults do
    # not fit CPU-only nodes: with no nvidia-smi it raises FileNotFoundError, and
    # with gpus_per_node=0 cluster_spec() divides by a zero step. On such nodes
    # hand it one notional "GPU" per task and turn GPU assignment off.
    kwargs: dict[str, Any] = {"port_base": port_base, "rpc_layer": "grpc"}
    if gpus_per_task is None:
        gpus_per_task = _node_gpu_count(env) // max_per_node
    if gpus_per_task == 0:
        kwargs.update(gpus_per_node=max_per_node, gpus_per_task=1, auto_set_gpu=False)
    else:
        kwargs.update(gpus_per_node=gpus_per_task * max_per_node, gpus_per_task=gpus_per_task, auto_set_gpu=assign_gpus)
    saved = {k: os.environ.get(k) for k in SLURM_STEP_VARS}
    try:
        os.environ.update({k: env[k] for k in SLURM_STEP_VARS})
        resolver = slurm_cluster_resolver(**kwargs)
        spec = resolver.cluster_spec().as_dict()
        task_type, task_id = resolver.task_type, resolver.task_id
    except RuntimeError as exc:
        raise ValueError(f"The SLURM step cannot be turned into a cluster: {exc}") from None
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return spec, task_type, int(task_id), procid


def slurm_int(env: Mapping[str, str], name: str) -> int:
    """The SLURM variable `name` as a non-negative int; `ValueError` naming it otherwise."""
    text = env[name].strip()
    if not text.isascii() or not text.isdigit() or len(text) > 18:
        raise ValueError(f"{name} must be a non-negative integer. Received: {name}={clip_repr(env[name])}")
    return int(text)


def expand_hostlist(hostlist: str, limit: int) -> list[str]:
    """Expand a SLURM hostlist such as `node[01-03,7],gpu5` in order, refusing more than `limit` hosts.

    Each comma-separated item is a host name with at most one bracketed range
    list at its end (the form SLURM writes for a job step). Numbers keep the
    zero padding of the range's start.
    """
    hosts: list[str] = []
    for item in _split_outside_brackets(hostlist):
        match = re.fullmatch(r"([^\[\],]*)(?:\[([0-9,\-]+)\])?", item)
        if match is None or (not match.group(1) and match.group(2) is None):
            raise ValueError(f"SLURM_STEP_NODELIST has a malformed entry {item!r}. Received: {clip_repr(hostlist)}")
        prefix, ranges = match.group(1), match.group(2)
        if ranges is None:
            names: list[str] = [prefix]
        else:
            names = []
            for part in ranges.split(","):
                first, _, last = part.partition("-")
                if not first.isdigit() or (last and not last.isdigit()) or part.count("-") > 1:
                    raise ValueError(f"SLURM_STEP_NODELIST has a malformed range {part!r}. Received: {clip_repr(hostlist)}")
                start, stop = int(first), int(last or first)
                if stop < start or len(hosts) + len(names) + stop - start + 1 > limit:
                    raise ValueError(
                        f"SLURM_STEP_NODELIST range {part!r} is reversed or holds more nodes than the step's {limit} "
                        f"task(s). Received: {clip_repr(hostlist)}"
                    )
                names.extend(f"{prefix}{str(i).zfill(len(first))}" for i in range(start, stop + 1))
        for name in names:
            if not _HOSTNAME.match(name):
                raise ValueError(f"SLURM_STEP_NODELIST has a host name {name!r} that is not valid. Received: {clip_repr(hostlist)}")
        hosts.extend(names)
        if len(hosts) > limit:
            raise ValueError(f"SLURM_STEP_NODELIST names more nodes than the step's {limit} task(s). Received: {clip_repr(hostlist)}")
    if not hosts:
        raise ValueError(f"SLURM_STEP_NODELIST names no node. Received: {clip_repr(hostlist)}")
    return hosts


def _split_outside_brackets(text: str) -> list[str]:
    items, depth, current = [], 0, []
    for char in text:
        if char == "[":
            depth += 1
            if depth > 1:
                raise ValueError(f"SLURM_STEP_NODELIST has nested brackets. Received: {clip_repr(text)}")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"SLURM_STEP_NODELIST has an unmatched ']'. Received: {clip_repr(text)}")
        if char == "," and depth == 0:
            items.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth:
        raise ValueError(f"SLURM_STEP_NODELIST has an unclosed '['. Received: {clip_repr(text)}")
    items.append("".join(current))
    return items


def expand_tasks_per_node(text: str, limit: int) -> list[int]:
    """Expand SLURM's tasks-per-node form `2(x3),1` to `[2, 2, 2, 1]`, refusing more than `limit` entries."""
    counts: list[int] = []
    for part in text.split(","):
        match = re.fullmatch(r"([0-9]{1,9})(?:\(x([0-9]{1,9})\))?", part.strip())
        if match is None:
            raise ValueError(f"SLURM_STEP_TASKS_PER_NODE has a malformed entry {part!r}. Received: {clip_repr(text)}")
        count, repeat = int(match.group(1)), int(match.group(2) or 1)
        if len(counts) + repeat > limit:
            raise ValueError(
                f"SLURM_STEP_TASKS_PER_NODE lists more nodes than the step's {limit} task(s). Received: {clip_repr(text)}"
            )
        counts.extend([count] * repeat)
    return counts


def _node_gpu_count(env: Mapping[str, str]) -> int:
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    import shutil
    import subprocess

    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "--list-gpus"], capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(line.startswith("GPU ") for line in out.splitlines())


def step_tasks(env: Mapping[str, str]) -> int:
    """`SLURM_STEP_NUM_TASKS` as an int; 0 when it is unset or not a number."""
    try:
        return slurm_int(env, "SLURM_STEP_NUM_TASKS")
    except (KeyError, ValueError):
        return 0
