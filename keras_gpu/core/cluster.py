"""Where a multi-worker cluster comes from: TF_CONFIG, SLURM or an explicit host list.

`resolve_cluster` turns one of those sources into a validated
`ClusterInfo`. Validation happens here, before any strategy exists, so
that bad cluster input fails fast with a `ValueError` instead of leaving a
worker waiting for peers that will never arrive. Its keyword arguments, which
`plan_strategy` and `make_strategy` share, are declared once, as
`ClusterOptions`, and checked when one is built.

The helpers `is_chief` and `worker_index` answer the two questions
callbacks ask most: "do I write the shared artefacts?" and "which worker am I?".
The record lives in `keras_gpu.core.cluster_info`, the SLURM parsing in
`keras_gpu.core.slurm`, and the check that every task was given the same
cluster in `keras_gpu.core.cluster_agreement`; their public names are served
here too.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from keras_gpu.core.checks import check_bool, check_keywords, clip_repr, declared_signature
from keras_gpu.core.cluster_agreement import check_cluster_agreement, cluster_difference
from keras_gpu.core.cluster_info import TASK_TYPES, TRAINING_TASK_TYPES, ClusterInfo
from keras_gpu.core.slurm import (
    check_gpus_per_task,
    check_port_base,
    slurm_layout,
    step_tasks,
)

__all__ = [
    "SOURCES",
    "ClusterInfo",
    "ClusterOptions",
    "TaskNotInClusterError",
    "check_cluster_agreement",
    "cluster_difference",
    "resolve_cluster",
    "task_info",
]

SOURCES = ("auto", "tf_config", "slurm", "explicit")
"""Accepted values of the ``source`` argument of `resolve_cluster`."""

_HOSTPORT = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.\-]+):([0-9]{1,5})$")
_RPC_LAYER = re.compile(r"^[a-z][a-z0-9+]*$")


class TaskNotInClusterError(ValueError):
    """This process's task is not in its own cluster description (unknown task type, or index out of range).

    Attributes:
        cluster_info: The description as given, with the task it names.
    """

    def __init__(self, message: str, cluster_info: ClusterInfo) -> None:
        super().__init__(message)
        self.cluster_info = cluster_info


@dataclass(frozen=True)
class ClusterOptions:
    """Where to find the cluster: the keyword arguments of `resolve_cluster`, each checked once, here.

    `keras_gpu.plan_strategy` and `keras_gpu.make_strategy` take the same
    keywords (`source` is their `cluster_source`); each builds one
    `ClusterOptions` where the values enter. See `resolve_cluster` for
    what each field means. `cluster`, `task_index` and `task_type` are
    checked against the source when it is resolved, since they apply to an
    explicit cluster only.

    Raises:
        TypeError: `environ` is not a mapping, or `slurm_assign_gpus` not a bool.
        ValueError: `source` is not one of `SOURCES`, or a SLURM option is out of range.
    """

    source: str = "auto"
    cluster: Mapping[str, Sequence[str]] | Sequence[str] | None = None
    task_index: int | None = None
    task_type: str = "worker"
    slurm_port_base: int = 8888
    slurm_gpus_per_task: int | None = None
    slurm_assign_gpus: bool = False
    environ: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        if self.environ is not None and not isinstance(self.environ, Mapping):
            raise TypeError(
                f"`environ` must be a mapping of strings, or None for os.environ. Received: environ={self.environ!r}"
            )
        if not isinstance(self.source, str) or self.source not in SOURCES:
            raise ValueError(f"`source` must be one of {SOURCES}. Received: source={self.source!r}")
        check_port_base(self.slurm_port_base)
        check_gpus_per_task(self.slurm_gpus_per_task)
        check_bool("slurm_assign_gpus", self.slurm_assign_gpus)

    def resolve(self) -> ClusterInfo:
        """The validated `ClusterInfo` these options describe (see `resolve_cluster`)."""
        env = _Environ(os.environ if self.environ is None else self.environ)
        source, cluster, task_index = self.source, self.cluster, self.task_index
        if source == "auto":
            if cluster is not None:
                source = "explicit"
            elif (env.get("TF_CONFIG") or "").strip():
                source = "tf_config"
            elif step_tasks(env) > 1:
                source = "slurm"
            else:
                return ClusterInfo(source="local")
        if source != "explicit" and (cluster is not None or task_index is not None):
            raise ValueError(
                "`cluster` and `task_index` only apply to source='explicit'. "
                f"Received: source={source!r}, cluster={cluster!r}, task_index={task_index!r}"
            )
        if source == "explicit":
            return _from_explicit(cluster, self.task_type, task_index)
        if source == "tf_config":
            return _from_tf_config(env.get("TF_CONFIG"))
        spec, task_type, task_id, procid = slurm_layout(
            env, self.slurm_port_base, self.slurm_gpus_per_task, self.slurm_assign_gpus
        )
        spec = _validate_spec({k: tuple(v) for k, v in spec.items()}, "The SLURM cluster")
        return _validate_task(ClusterInfo("slurm", spec, task_type, task_id), "The SLURM task", f"SLURM_PROCID={procid}")


def resolve_cluster(source: str = "auto", **options: Any) -> ClusterInfo:
    """Find and validate the cluster this process belongs to.

    Args:
        source: `"auto"` (explicit `cluster` if given, else TF_CONFIG if set,
            else SLURM if this is a multi-task SLURM step, else a single
            local process), `"tf_config"`, `"slurm"` or `"explicit"`.
        **options: The keywords below, declared once by `ClusterOptions`
            (the function's `__signature__` lists them with their defaults).

    Keyword Args:
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
            own GPUs. Only `make_strategy` turns this on, because it
            changes the process environment.
        environ: The environment to read (default `os.environ`).

    Returns:
        The validated `ClusterInfo`.

    Raises:
        ValueError: The cluster description is malformed, names an unknown
            task type, or this process's task is missing or out of range; or
            a SLURM step is malformed or larger than any real job.
        TypeError: `environ` is not a mapping of strings, an argument has
            the wrong type, or a keyword is not one of the above.

    Examples:
        >>> import json
        >>> import keras_gpu
        >>> workers = ["node0:12345", "node1:12345"]
        >>> info = keras_gpu.resolve_cluster(cluster=workers, task_index=1)
        >>> info.source, info.num_workers, info.is_chief
        ('explicit', 2, False)
        >>> tf_config = {"cluster": {"worker": ["node0:12345", "node1:12345"]},
        ...              "task": {"type": "worker", "index": 0}}
        >>> environ = {"TF_CONFIG": json.dumps(tf_config)}
        >>> print(keras_gpu.resolve_cluster(environ=environ).describe())
        2 workers from tf_config; this process is worker:0 (rank 0, chief)
        >>> print(keras_gpu.resolve_cluster(environ={}).describe())
        single process (source: local)
    """
    check_keywords("resolve_cluster", options, _KEYWORDS)
    return ClusterOptions(source, **options).resolve()


_KEYWORDS = tuple(f.name for f in fields(ClusterOptions))
"""The keywords of `resolve_cluster`: `ClusterOptions`' fields, declared there once."""

resolve_cluster.__signature__ = declared_signature(  # type: ignore[attr-defined]
    resolve_cluster, ClusterOptions, positional=("source",)
)


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
            f"TF_CONFIG is not valid JSON ({exc.msg} at position {exc.pos}). Received: TF_CONFIG={clip_repr(raw)}"
        ) from None
    except RecursionError:
        raise ValueError(f"TF_CONFIG is nested too deeply to be a cluster description. Received: TF_CONFIG={clip_repr(raw)}") from None
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
    return _validate_task(info, "TF_CONFIG['task']", f"TF_CONFIG['task']={clip_repr(task)}")


def _validate_spec(spec: Any, name: str) -> dict[str, tuple[str, ...]]:
    if not isinstance(spec, Mapping) or not spec:
        raise ValueError(f"{name} must be a non-empty mapping of task type to a list of 'host:port'. Received: {spec!r}")
    out: dict[str, tuple[str, ...]] = {}
    seen: dict[str, str] = {}
    for task_type, addresses in spec.items():
        if task_type not in TASK_TYPES:
            raise ValueError(f"{name} has unknown task type {task_type!r}; allowed: {TASK_TYPES}. Received: {dict(spec)!r}")
        if isinstance(addresses, str) or not isinstance(addresses, Sequence) or not addresses:
            raise ValueError(f"{name}[{task_type!r}] must be a non-empty list of 'host:port' strings. Received: {addresses!r}")
        for address in addresses:
            match = _HOSTPORT.match(address) if isinstance(address, str) else None
            if match is None or not 1 <= int(match.group(1)) <= 65535:
                raise ValueError(f"{name}[{task_type!r}] has an address that is not 'host:port'. Received: {address!r}")
            if address in seen:
                raise ValueError(
                    f"{name} lists {address!r} twice ({seen[address]} and {task_type}); every task needs its own "
                    f"port. Received: {clip_repr(dict(spec))}"
                )
            seen[address] = task_type
        out[task_type] = tuple(addresses)
    for single in ("chief", "evaluator"):
        if single in out and len(out[single]) != 1:
            raise ValueError(f"{name}[{single!r}] must hold exactly one address. Received: {list(out[single])!r}")
    if not any(t in out for t in TRAINING_TASK_TYPES):
        raise ValueError(f"{name} has no 'worker' or 'chief' task. Received: {dict(spec)!r}")
    return out


def _validate_task(info: ClusterInfo, name: str, received: str) -> ClusterInfo:
    """Check that `info`'s own task exists in its cluster; `received` echoes what the user gave."""
    if not isinstance(info.task_type, str) or info.task_type not in TASK_TYPES:
        raise ValueError(f"{name} has unknown task type {info.task_type!r}; use one of {TASK_TYPES}. Received: {received}")
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
