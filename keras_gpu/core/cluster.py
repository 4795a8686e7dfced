"""Where a multi-worker cluster comes from: TF_CONFIG, SLURM or an explicit host list.

:func:`resolve_cluster` turns one of those sources into a validated
:class:`ClusterInfo`. Validation happens here, before any strategy exists, so
that bad cluster input fails fast with a `ValueError` instead of leaving a
worker waiting for peers that will never arrive.

The helpers :func:`is_chief` and :func:`worker_index` answer the two questions
callbacks ask most: "do I write the shared artefacts?" and "which worker am I?".
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from keras_gpu.core.tf_private import slurm_cluster_resolver
from keras_gpu.core.topology import visible_gpu_count

__all__ = [
    "ClusterInfo",
    "SOURCES",
    "TaskNotInClusterError",
    "check_cluster_agreement",
    "cluster_difference",
    "resolve_cluster",
    "is_chief",
    "worker_index",
    "task_info",
]

SOURCES = ("auto", "tf_config", "slurm", "explicit")
"""Accepted values of the ``source`` argument of :func:`resolve_cluster`."""

_TASK_TYPES = ("chief", "worker", "evaluator", "ps")
_WORKER_TYPES = ("chief", "worker")
_HOSTPORT = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.\-]+):([0-9]{1,5})$")
_HOSTNAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
_RPC_LAYER = re.compile(r"^[a-z][a-z0-9+]*$")
_MAX_TASKS = 65536  # more tasks than any real job; bounds hostlist and task-count expansion
_MAX_GPUS = 1024  # GPUs per task; TensorFlow's SLURM resolver lists every GPU id of every task
_SLURM_VARS = ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE")


@dataclass(frozen=True)
class ClusterInfo:
    """A validated cluster description and this process's place in it.

    Attributes:
        source: Where it came from: `"tf_config"`, `"slurm"`, `"explicit"`,
            `"strategy"` (read back from a strategy by :func:`task_info`), or
            `"local"` when no cluster is configured (a single process).
        cluster: Task type to the tuple of its `host:port` addresses.
        task_type: This process's task type (`"chief"`, `"worker"`, ...).
        task_index: This process's index within its task type.
        rpc_layer: The RPC protocol, `"grpc"` unless the source says otherwise.
    """

    source: str
    cluster: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    task_type: str = "worker"
    task_index: int = 0
    rpc_layer: str = "grpc"

    @property
    def num_workers(self) -> int:
        """Number of processes that train: chief plus workers (1 when local)."""
        if not self.cluster:
            return 1
        return sum(len(self.cluster.get(t, ())) for t in _WORKER_TYPES)

    @property
    def is_multi_worker(self) -> bool:
        """Whether more than one process trains together."""
        return self.num_workers > 1

    @property
    def is_chief(self) -> bool:
        """Whether this process is the chief.

        The chief is the `"chief"` task when the cluster has one, otherwise
        worker 0. An evaluator or parameter server is never the chief.
        """
        if not self.cluster:
            return True
        if "chief" in self.cluster:
            return self.task_type == "chief"
        return self.task_type == "worker" and self.task_index == 0

    @property
    def worker_index(self) -> int | None:
        """This process's rank among the training processes.

        The chief (when there is one) is rank 0 and workers follow it. `None`
        for a task that does not train (evaluator, ps).
        """
        if self.task_type == "chief":
            return 0
        if self.task_type == "worker":
            return self.task_index + (1 if self.cluster.get("chief") else 0)
        return None

    @property
    def address(self) -> str | None:
        """This task's own `host:port`, or `None` when the cluster does not list it (local, or an outside evaluator)."""
        addresses = self.cluster.get(self.task_type, ())
        if 0 <= self.task_index < len(addresses):
            return addresses[self.task_index]
        return None

    def tf_config(self) -> dict[str, Any]:
        """The equivalent TF_CONFIG dictionary."""
        return {
            "cluster": {k: list(v) for k, v in self.cluster.items()},
            "task": {"type": self.task_type, "index": self.task_index},
        }

    def cluster_resolver(self, num_gpus: int | None = None):
        """A `tf.distribute.cluster_resolver.SimpleClusterResolver` for this cluster.

        Args:
            num_gpus: GPUs this process trains on. `None` counts the visible
                GPUs (logical ones where a GPU is split) without initialising
                TensorFlow, which a multi-worker strategy needs to be created
                first. `MultiWorkerMirroredStrategy` takes its local devices
                from this number; without it, it would train on the CPU.
        """
        import tensorflow as tf

        if num_gpus is None:
            num_gpus = visible_gpu_count()
        elif not isinstance(num_gpus, int) or isinstance(num_gpus, bool) or num_gpus < 0:
            raise ValueError(f"`num_gpus` must be a non-negative int or None. Received: num_gpus={num_gpus!r}")
        return tf.distribute.cluster_resolver.SimpleClusterResolver(
            tf.train.ClusterSpec({k: list(v) for k, v in self.cluster.items()}),
            task_type=self.task_type,
            task_id=self.task_index,
            rpc_layer=self.rpc_layer,
            num_accelerators={"GPU": num_gpus} if num_gpus else None,
        )

    def describe(self) -> str:
        """A one-line human description, for logs and `keras-gpu env`."""
        if not self.is_multi_worker:
            return f"single process (source: {self.source})"
        role = "chief" if self.is_chief else "not chief"
        return (
            f"{self.num_workers} workers from {self.source}; this process is "
            f"{self.task_type}:{self.task_index} (rank {self.worker_index}, {role})"
        )


class TaskNotInClusterError(ValueError):
    """This process's task is not in its own cluster description (unknown task type, or index out of range).

    Attributes:
        cluster_info: The description as given, with the task it names.
    """

    def __init__(self, message: str, cluster_info: ClusterInfo) -> None:
        super().__init__(message)
        self.cluster_info = cluster_info


def resolve_cluster(
    source: str = "auto",
    *,
    cluster: Mapping[str, Sequence[str]] | Sequence[str] | None = None,
    task_index: int | None = None,
    task_type: str = "worker",
    slurm_port_base: int = 8888,
    slurm_gpus_per_task: int | None = None,
    slurm_assign_gpus: bool = False,
    environ: Mapping[str, str] | None = None,
) -> ClusterInfo:
    """Find and validate the cluster this process belongs to.

    Args:
        source: `"auto"` (explicit `cluster` if given, else TF_CONFIG if set,
            else SLURM if this is a multi-task SLURM step, else a single
            local process), `"tf_config"`, `"slurm"` or `"explicit"`.
        cluster: For `"explicit"`: `{"worker": ["host:port", ...]}` (optionally
            with a `"chief"` entry), or just the list of worker addresses.
        task_index: For `"explicit"`: this process's index within `task_type`.
        task_type: For `"explicit"`: this process's task type.
        slurm_port_base: For SLURM: the first port on each node; a task's port
            is this plus its slot on its node.
        slurm_gpus_per_task: For SLURM: GPUs per task. `None` reads the node's
            GPU count from `CUDA_VISIBLE_DEVICES` or `nvidia-smi` when there is
            one; with no GPU the cluster is resolved without GPU assignment.
        slurm_assign_gpus: For SLURM: let TensorFlow's resolver set
            `CUDA_VISIBLE_DEVICES` so that each task on a node sees only its
            own GPUs. Only :func:`make_strategy` turns this on, because it
            changes the process environment.
        environ: The environment to read (default `os.environ`).

    Returns:
        The validated :class:`ClusterInfo`.

    Raises:
        ValueError: The cluster description is malformed, names an unknown
            task type, or this process's task is missing or out of range; or
            a SLURM step is malformed or larger than any real job.
        TypeError: `environ` is not a mapping of strings, or an argument has
            the wrong type.
    """
    if environ is not None and not isinstance(environ, Mapping):
        raise TypeError(f"`environ` must be a mapping of strings, or None for os.environ. Received: environ={environ!r}")
    env = _Environ(os.environ if environ is None else environ)
    if not isinstance(source, str) or source not in SOURCES:
        raise ValueError(f"`source` must be one of {SOURCES}. Received: source={source!r}")
    if source == "auto":
        if cluster is not None:
            source = "explicit"
        elif (env.get("TF_CONFIG") or "").strip():
            source = "tf_config"
        elif _slurm_step_tasks(env) > 1:
            source = "slurm"
        else:
            return ClusterInfo(source="local")
    if source != "explicit" and (cluster is not None or task_index is not None):
        raise ValueError(
            "`cluster` and `task_index` only apply to source='explicit'. "
            f"Received: source={source!r}, cluster={cluster!r}, task_index={task_index!r}"
        )
    if source == "explicit":
        return _from_explicit(cluster, task_type, task_index)
    if source == "tf_config":
        return _from_tf_config(env.get("TF_CONFIG"))
    return _from_slurm(env, slurm_port_base, slurm_gpus_per_task, slurm_assign_gpus)


class _Environ(Mapping):
    """A read-only view of an environment whose values must be strings: a non-string value is a `TypeError`."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self._env = env

    def __getitem__(self, key: str) -> str:
        value = self._env[key]
        if not isinstance(value, str):
            raise TypeError(f"Environment variable {key} must be a string. Received: {key}={value!r}")
        return value

    def __iter__(self):
        return iter(self._env)

    def __len__(self) -> int:
        return len(self._env)


def _from_explicit(
    cluster: Mapping[str, Sequence[str]] | Sequence[str] | None, task_type: str, task_index: int | None
) -> ClusterInfo:
    if cluster is None:
        raise ValueError(
            "source='explicit' needs `cluster`, e.g. cluster={'worker': ['host1:2222', 'host2:2222']}. "
            "Received: cluster=None"
        )
    if not isinstance(cluster, Mapping):
        if isinstance(cluster, (str, bytes)) or not isinstance(cluster, Sequence):
            raise TypeError(
                "`cluster` must be a dict like {'worker': ['host:port', ...]} or a list of 'host:port' "
                f"strings. Received: cluster={cluster!r}"
            )
        cluster = {"worker": list(cluster)}
    if task_index is None:
        raise ValueError(
            "An explicit `cluster` needs `task_index`, this process's index among its task type. "
            "Received: task_index=None"
        )
    spec = _validate_spec(cluster, "cluster")
    received = f"task_type={task_type!r}, task_index={task_index!r}"
    return _validate_task(ClusterInfo("explicit", spec, task_type, task_index), "`task_type`/`task_index`", received)


def _from_tf_config(raw: str | None) -> ClusterInfo:
    if raw is None or not raw.strip():
        raise ValueError("source='tf_config' but the TF_CONFIG environment variable is not set or empty.")
    try:
        config = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"TF_CONFIG is not valid JSON ({exc.msg} at position {exc.pos}). Received: TF_CONFIG={_clip(raw)}"
        ) from None
    except RecursionError:
        raise ValueError(f"TF_CONFIG is nested too deeply to be a cluster description. Received: TF_CONFIG={_clip(raw)}") from None
    if not isinstance(config, dict):
        raise ValueError(f"TF_CONFIG must be a JSON object with 'cluster' and 'task'. Received: TF_CONFIG={raw!r}")
    if "cluster" not in config:
        raise ValueError(f"TF_CONFIG has no 'cluster' entry. Received: TF_CONFIG={raw!r}")
    spec = _validate_spec(config["cluster"], "TF_CONFIG['cluster']")
    task = config.get("task")
    if not isinstance(task, dict) or "type" not in task:
        raise ValueError(
            "TF_CONFIG has no 'task' entry saying which task this process is, e.g. "
            f'"task": {{"type": "worker", "index": 0}}. Received: TF_CONFIG={raw!r}'
        )
    index = task.get("index", 0)
    if not isinstance(index, int) or isinstance(index, bool):
        raise ValueError(f"TF_CONFIG['task']['index'] must be an integer. Received: {index!r}")
    rpc = config.get("rpc_layer", "grpc")
    if not isinstance(rpc, str) or not _RPC_LAYER.match(rpc):
        raise ValueError(f"TF_CONFIG['rpc_layer'] must be a protocol name string such as 'grpc'. Received: {rpc!r}")
    info = ClusterInfo("tf_config", spec, task["type"], index, rpc)
    return _validate_task(info, "TF_CONFIG['task']", f"TF_CONFIG['task']={_clip(task)}")


def _from_slurm(env: Mapping[str, str], port_base: int, gpus_per_task: int | None, assign_gpus: bool) -> ClusterInfo:
    missing = [v for v in _SLURM_VARS if not (env.get(v) or "").strip()]
    if missing:
        raise ValueError(
            f"source='slurm' but {', '.join(missing)} is not set: run the script as a SLURM job step "
            "(`srun python train.py`), not with plain `python`."
        )
    if not isinstance(port_base, int) or isinstance(port_base, bool) or not 1 <= port_base <= 65535:
        raise ValueError(f"`slurm_port_base` must be a port number in 1..65535. Received: slurm_port_base={port_base!r}")
    if gpus_per_task is not None and (
        not isinstance(gpus_per_task, int) or isinstance(gpus_per_task, bool) or not 0 <= gpus_per_task <= _MAX_GPUS
    ):
        raise ValueError(
            f"`slurm_gpus_per_task` must be an int from 0 to {_MAX_GPUS}, or None to detect it. "
            f"Received: slurm_gpus_per_task={gpus_per_task!r}"
        )
    if not isinstance(assign_gpus, bool):
        raise TypeError(f"`slurm_assign_gpus` must be True or False. Received: slurm_assign_gpus={assign_gpus!r}")
    try:
        procid = _slurm_int(env, "SLURM_PROCID")
        num_tasks = _slurm_int(env, "SLURM_STEP_NUM_TASKS")
        if not 1 <= num_tasks <= _MAX_TASKS:
            raise ValueError(f"SLURM_STEP_NUM_TASKS must be from 1 to {_MAX_TASKS}. Received: {num_tasks}")
        hosts = _expand_hostlist(env["SLURM_STEP_NODELIST"], num_tasks)
        per_node = _expand_tasks_per_node(env["SLURM_STEP_TASKS_PER_NODE"], num_tasks)
    except ValueError as exc:
        raise ValueError(f"The SLURM step variables cannot be parsed: {exc}") from None
    if len(hosts) != len(per_node):
        raise ValueError(
            f"SLURM_STEP_NODELIST expands to {len(hosts)} hosts but SLURM_STEP_TASKS_PER_NODE to "
            f"{len(per_node)} entries. Received: {env['SLURM_STEP_NODELIST']!r}, {env['SLURM_STEP_TASKS_PER_NODE']!r}"
        )
    if len(set(hosts)) != len(hosts):
        raise ValueError(
            f"SLURM_STEP_NODELIST names a node twice; each node must appear once. Received: {_clip(env['SLURM_STEP_NODELIST'])}"
        )
    if sum(per_node) != num_tasks or not 0 <= procid < num_tasks or 0 in per_node:
        raise ValueError(
            f"Inconsistent SLURM step: SLURM_STEP_NUM_TASKS={num_tasks}, tasks per node {per_node}, "
            f"SLURM_PROCID={procid}."
        )
    max_per_node = max(per_node)
    if port_base + max_per_node - 1 > 65535:
        raise ValueError(
            f"`slurm_port_base` leaves no room for {max_per_node} tasks per node. Received: slurm_port_base={port_base}"
        )
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
    saved = {k: os.environ.get(k) for k in _SLURM_VARS}
    try:
        os.environ.update({k: env[k] for k in _SLURM_VARS})
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
    spec = _validate_spec({k: tuple(v) for k, v in spec.items()}, "The SLURM cluster")
    return _validate_task(ClusterInfo("slurm", spec, task_type, int(task_id)), "The SLURM task", f"SLURM_PROCID={procid}")


def _slurm_int(env: Mapping[str, str], name: str) -> int:
    text = env[name].strip()
    if not text.isascii() or not text.isdigit() or len(text) > 18:
        raise ValueError(f"{name} must be a non-negative integer. Received: {name}={_clip(env[name])}")
    return int(text)


def _expand_hostlist(hostlist: str, limit: int) -> list[str]:
    """Expand a SLURM hostlist such as `node[01-03,7],gpu5` in order, refusing more than `limit` hosts.

    Each comma-separated item is a host name with at most one bracketed range
    list at its end (the form SLURM writes for a job step). Numbers keep the
    zero padding of the range's start.
    """
    hosts: list[str] = []
    for item in _split_outside_brackets(hostlist):
        match = re.fullmatch(r"([^\[\],]*)(?:\[([0-9,\-]+)\])?", item)
        if match is None or not match.group(1) and match.group(2) is None:
            raise ValueError(f"SLURM_STEP_NODELIST has a malformed entry {item!r}. Received: {_clip(hostlist)}")
        prefix, ranges = match.group(1), match.group(2)
        if ranges is None:
            names: list[str] = [prefix]
        else:
            names = []
            for part in ranges.split(","):
                first, _, last = part.partition("-")
                if not first.isdigit() or (last and not last.isdigit()) or part.count("-") > 1:
                    raise ValueError(f"SLURM_STEP_NODELIST has a malformed range {part!r}. Received: {_clip(hostlist)}")
                start, stop = int(first), int(last or first)
                if stop < start or len(hosts) + len(names) + stop - start + 1 > limit:
                    raise ValueError(
                        f"SLURM_STEP_NODELIST range {part!r} is reversed or holds more nodes than the step's {limit} "
                        f"task(s). Received: {_clip(hostlist)}"
                    )
                names.extend(f"{prefix}{str(i).zfill(len(first))}" for i in range(start, stop + 1))
        for name in names:
            if not _HOSTNAME.match(name):
                raise ValueError(f"SLURM_STEP_NODELIST has a host name {name!r} that is not valid. Received: {_clip(hostlist)}")
        hosts.extend(names)
        if len(hosts) > limit:
            raise ValueError(f"SLURM_STEP_NODELIST names more nodes than the step's {limit} task(s). Received: {_clip(hostlist)}")
    if not hosts:
        raise ValueError(f"SLURM_STEP_NODELIST names no node. Received: {_clip(hostlist)}")
    return hosts


def _split_outside_brackets(text: str) -> list[str]:
    items, depth, current = [], 0, []
    for char in text:
        if char == "[":
            depth += 1
            if depth > 1:
                raise ValueError(f"SLURM_STEP_NODELIST has nested brackets. Received: {_clip(text)}")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"SLURM_STEP_NODELIST has an unmatched ']'. Received: {_clip(text)}")
        if char == "," and depth == 0:
            items.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth:
        raise ValueError(f"SLURM_STEP_NODELIST has an unclosed '['. Received: {_clip(text)}")
    items.append("".join(current))
    return items


def _expand_tasks_per_node(text: str, limit: int) -> list[int]:
    """Expand SLURM's tasks-per-node form `2(x3),1` to `[2, 2, 2, 1]`, refusing more than `limit` entries."""
    counts: list[int] = []
    for part in text.split(","):
        match = re.fullmatch(r"([0-9]{1,9})(?:\(x([0-9]{1,9})\))?", part.strip())
        if match is None:
            raise ValueError(f"SLURM_STEP_TASKS_PER_NODE has a malformed entry {part!r}. Received: {_clip(text)}")
        count, repeat = int(match.group(1)), int(match.group(2) or 1)
        if len(counts) + repeat > limit:
            raise ValueError(
                f"SLURM_STEP_TASKS_PER_NODE lists more nodes than the step's {limit} task(s). Received: {_clip(text)}"
            )
        counts.extend([count] * repeat)
    return counts


def _clip(value: Any, limit: int = 200) -> str:
    """`repr(value)`, shortened in the middle when long, for error messages."""
    shown = repr(value)
    return shown if len(shown) <= limit else f"{shown[: limit // 2]}...{shown[-limit // 2 :]} ({len(shown)} characters)"


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


def _validate_spec(spec: Any, name: str) -> dict[str, tuple[str, ...]]:
    if not isinstance(spec, Mapping) or not spec:
        raise ValueError(f"{name} must be a non-empty mapping of task type to a list of 'host:port'. Received: {spec!r}")
    out: dict[str, tuple[str, ...]] = {}
    seen: dict[str, str] = {}
    for task_type, addresses in spec.items():
        if task_type not in _TASK_TYPES:
            raise ValueError(f"{name} has unknown task type {task_type!r}; allowed: {_TASK_TYPES}. Received: {dict(spec)!r}")
        if isinstance(addresses, str) or not isinstance(addresses, Sequence) or not addresses:
            raise ValueError(f"{name}[{task_type!r}] must be a non-empty list of 'host:port' strings. Received: {addresses!r}")
        for address in addresses:
            match = _HOSTPORT.match(address) if isinstance(address, str) else None
            if match is None or not 1 <= int(match.group(1)) <= 65535:
                raise ValueError(f"{name}[{task_type!r}] has an address that is not 'host:port'. Received: {address!r}")
            if address in seen:
                raise ValueError(
                    f"{name} lists {address!r} twice ({seen[address]} and {task_type}); every task needs its own "
                    f"port. Received: {_clip(dict(spec))}"
                )
            seen[address] = task_type
        out[task_type] = tuple(addresses)
    for single in ("chief", "evaluator"):
        if single in out and len(out[single]) != 1:
            raise ValueError(f"{name}[{single!r}] must hold exactly one address. Received: {list(out[single])!r}")
    if not any(t in out for t in _WORKER_TYPES):
        raise ValueError(f"{name} has no 'worker' or 'chief' task. Received: {dict(spec)!r}")
    return out


def _validate_task(info: ClusterInfo, name: str, received: str) -> ClusterInfo:
    """Check that `info`'s own task exists in its cluster; `received` echoes what the user gave."""
    if not isinstance(info.task_type, str) or info.task_type not in _TASK_TYPES:
        raise ValueError(f"{name} has unknown task type {info.task_type!r}; use one of {_TASK_TYPES}. Received: {received}")
    if not isinstance(info.task_index, int) or isinstance(info.task_index, bool):
        raise TypeError(f"{name} index must be an int. Received: {received}")
    if info.task_type == "evaluator" and "evaluator" not in info.cluster:
        # TensorFlow lets the evaluator stay out of the cluster it watches.
        if info.task_index != 0:
            raise ValueError(f"{name} index must be 0 for the single evaluator. Received: {received}")
        return info
    if info.task_type not in info.cluster:
        raise TaskNotInClusterError(
            f"{name} says this process is a {info.task_type!r} task, but the cluster has no such task type "
            f"(it has {sorted(info.cluster)}). Received: {received}",
            info,
        )
    count = len(info.cluster[info.task_type])
    if not 0 <= info.task_index < count:
        raise TaskNotInClusterError(
            f"{name} index {info.task_index} is out of range: the cluster has {count} {info.task_type!r} "
            f"task(s), so the index must be in 0..{count - 1}. Received: {received}",
            info,
        )
    return info


def _slurm_step_tasks(env: Mapping[str, str]) -> int:
    try:
        return _slurm_int(env, "SLURM_STEP_NUM_TASKS")
    except (KeyError, ValueError):
        return 0


def task_info(strategy: Any = None) -> ClusterInfo:
    """This process's place in the cluster, as seen by a strategy.

    Reads the strategy's cluster resolver when it is a multi-worker strategy
    (so explicit and SLURM clusters are honoured), otherwise TF_CONFIG, and
    falls back to a single local process. Never raises for a missing cluster.

    Args:
        strategy: A `tf.distribute.Strategy`, or `None` for the strategy in
            scope (which is the default strategy outside any scope).
    """
    if strategy is None:
        import tensorflow as tf

        strategy = tf.distribute.get_strategy()
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is not None and getattr(resolver, "task_type", None) is not None:
        spec = {k: tuple(v) for k, v in resolver.cluster_spec().as_dict().items()}
        if spec:
            return ClusterInfo("strategy", spec, resolver.task_type, int(resolver.task_id or 0))
    if os.environ.get("TF_CONFIG", "").strip():
        try:
            return _from_tf_config(os.environ["TF_CONFIG"])
        except ValueError:
            pass
    return ClusterInfo(source="local")


def is_chief(strategy: Any = None) -> bool:
    """Whether this process is the chief: the one that writes shared artefacts.

    True for a single process, for the `"chief"` task, and for worker 0 of a
    cluster without a chief task.
    """
    return task_info(strategy).is_chief


def worker_index(strategy: Any = None) -> int:
    """This process's rank among the training processes (0 when single or chief)."""
    index = task_info(strategy).worker_index
    return 0 if index is None else index


# --------------------------------------------------------------------------- agreement between tasks
#
# Checked on TensorFlow 2.21 with two loopback workers: when worker 0's
# TF_CONFIG lists 2 workers and worker 1's lists 3, both create their strategy
# without error (2 and 3 replicas) and only fail, or hang, in the first
# collective. When one config has a chief and the other does not, the task the
# leader does not know gets `Unexpected task registered`, and the leader waits
# for `startup_timeout`.

_AGREEMENT_KEY = "keras_gpu/cluster/{job}:{index}"


def _training_spec(info: ClusterInfo) -> dict[str, list[str]]:
    return {job: list(info.cluster[job]) for job in _WORKER_TYPES if info.cluster.get(job)}


def _leader(spec: Mapping[str, Sequence[str]]) -> tuple[str, int]:
    return ("chief", 0) if spec.get("chief") else ("worker", 0)


def cluster_difference(mine: Mapping[str, Sequence[str]], theirs: Mapping[str, Sequence[str]], other: str) -> str:
    """In words, how the training jobs of cluster `theirs` (task `other`'s) differ from `mine`; "" when equal."""
    parts = []
    for job in sorted(set(mine) | set(theirs)):
        a, b = list(mine.get(job, ())), list(theirs.get(job, ()))
        if a == b:
            continue
        if not a or not b:
            parts.append(f"a '{job}' job is only in {'this task' if a else other}'s cluster")
        elif len(a) != len(b):
            parts.append(f"'{job}' has {len(a)} task(s) here and {len(b)} in {other}'s")
        else:
            diff = [f"{job}:{i} is {x} here and {y} in {other}'s" for i, (x, y) in enumerate(zip(a, b)) if x != y]
            parts.append(", ".join(diff))
    return "; ".join(parts)


def check_cluster_agreement(info: ClusterInfo, timeout_s: float) -> None:
    """Raise `RuntimeError` when this task's cluster differs from its coordination leader's (or a task's, on the leader).

    Call right after the multi-worker strategy was created, on every task.
    Each task stores its cluster (chief and worker jobs) in the coordination
    service's key-value store; the leader (the chief, else worker 0) reads
    every task's, the others read the leader's. One store and at most one
    read per task, once per process.

    Args:
        info: This task's resolved cluster.
        timeout_s: How long to wait for a peer's entry, in seconds.

    Raises:
        RuntimeError: The clusters differ (naming the difference and the
            task), or a peer stored nothing within `timeout_s`.
    """
    import json

    import tensorflow as tf

    from keras_gpu.core.tf_private import coordination_get, coordination_set

    if info.task_type not in _WORKER_TYPES or not info.is_multi_worker:
        return
    mine = _training_spec(info)
    me = f"{info.task_type}:{info.task_index}"
    coordination_set(_AGREEMENT_KEY.format(job=info.task_type, index=info.task_index), json.dumps(mine, sort_keys=True))
    leader = _leader(mine)
    if (info.task_type, info.task_index) == leader:
        peers = [(job, i) for job in _WORKER_TYPES for i in range(len(mine.get(job, ()))) if (job, i) != leader]
    else:
        peers = [leader]
    for job, index in peers:
        other = f"{job}:{index}"
        try:
            theirs = json.loads(coordination_get(_AGREEMENT_KEY.format(job=job, index=index), timeout_s))
        except (tf.errors.DeadlineExceededError, tf.errors.UnavailableError, tf.errors.NotFoundError) as exc:
            raise RuntimeError(
                f"make_strategy: {other} did not share its cluster description within {timeout_s:g}s, so this task "
                f"({me}) cannot check that both use the same cluster. Is {other} running keras_gpu.make_strategy? "
                f"TensorFlow said: {str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}"
            ) from None
        difference = cluster_difference(mine, theirs, other)
        if difference:
            raise RuntimeError(
                f"make_strategy: the tasks disagree on the cluster ({info.source} here): {difference}. "
                f"This task ({me}) has {json.dumps(mine)}; {other} has {json.dumps(theirs)}. Give every task the "
                "same cluster (TF_CONFIG's 'cluster' must be identical; only its 'task' differs)."
            )
