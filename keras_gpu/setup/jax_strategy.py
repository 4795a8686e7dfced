"""`make_strategy()` on Keras' JAX backend: a data-parallel distribution over one process or all of them.

`make_strategy` takes the arguments of `keras_gpu.make_strategy` and
returns a `JaxStrategy`, so that the same script runs on TensorFlow and
on JAX:

```python
strategy = keras_gpu.make_strategy()
with strategy.scope():
    model = build()
    model.compile(...)
model.fit(x, y, batch_size=GLOBAL)
```

The cluster comes from the same sources as on TensorFlow
(`keras_gpu.core.cluster.resolve_cluster`: TF_CONFIG, which `keras-gpu launch`
sets, SLURM, or an explicit `cluster=`) and is mapped onto
`jax.distributed.initialize`: the chief (else worker 0) is the coordinator,
at its address; the number of training tasks is the number of processes;
each task's rank is its process id. A job whose processes were already
joined (the script called `keras.distribution.initialize()`) is used as it
is, after checking that it agrees with the cluster description. On CPUs
JAX's collectives run over gloo; on GPUs JAX picks its own (NCCL).

Training uses `keras_gpu.setup.jax_global_batch.GlobalBatchDataParallel`:
`batch_size` is the global batch of all processes, and every process feeds
the same data. Importing this module imports neither JAX nor Keras.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from keras_gpu.core.cluster import ClusterInfo, ClusterOptions
from keras_gpu.core.log import logger
from keras_gpu.core.slurm import step_layout
from keras_gpu.setup.jax_exit import end_promptly_on_failure, join_timeouts
from keras_gpu.setup.startup_guards import check_own_port
from keras_gpu.setup.startup_wait import WaitNotes
from keras_gpu.setup.strategy_options import (
    DEFAULT_STARTUP_TIMEOUT,
    StrategyOptions,
    keyword_arguments,
    strategy_signature,
)

__all__ = ["JaxPlan", "JaxStrategy", "make_strategy", "plan_strategy"]

_POLL_S = 0.5  # how often a task asks whether the coordinator is up
_PLATFORMS = {"GPU": ("gpu", "cuda", "rocm"), "CPU": ("cpu",)}


class JaxStrategy:
    """What `keras_gpu.make_strategy()` returns on Keras' JAX backend.

    Attributes:
        kind: `"default"`, `"one_device"`, `"mirrored"` or `"multiworker"`.
        distribution: The `keras.distribution.Distribution` the scope sets
            (a `GlobalBatchDataParallel`),
            or `None` for `"default"`.
        cluster: This process's place in the job (`cluster.worker_index`,
            `cluster.num_workers`, `cluster.is_chief`); a single local
            process unless `kind` is `"multiworker"` with several processes.
        reason: Why this kind was chosen, in words.
    """

    def __init__(self, kind: str, distribution: Any, cluster: ClusterInfo, reason: str) -> None:
        self.kind = kind
        self.distribution = distribution
        self.cluster = cluster
        self.reason = reason

    @property
    def num_replicas_in_sync(self) -> int:
        """Replicas training in sync over all processes: the devices of the distribution's mesh (1 without one)."""
        return 1 if self.distribution is None else int(self.distribution.num_model_replicas)

    @property
    def devices(self) -> tuple[str, ...]:
        """This process's replica devices, as TensorFlow-style names (`/device:CPU:0`); empty for `"default"`."""
        if self.distribution is None:
            return ()
        import jax

        return tuple(
            _tf_name(d) for d in self.distribution.device_mesh.devices.flatten() if d.process_index == jax.process_index()
        )

    @contextlib.contextmanager
    def scope(self) -> Iterator[JaxStrategy]:
        """Make the distribution Keras' distribution: models built in the block are laid out on its devices.

        The distribution stays in force after the block. Keras on JAX reads
        it from the process's global state in every `fit`, `evaluate` and
        `predict`, so a model built in the scope is trained outside it on the
        devices that hold its variables, as with a TensorFlow strategy.
        """
        if self.distribution is not None:
            import keras

            keras.distribution.set_distribution(self.distribution)
        yield self

    def describe(self) -> str:
        """One line: the kind, its devices or processes, and the reason."""
        if self.kind == "default":
            what = "default (no distribution)"
        elif self.kind == "multiworker":
            what = f"multiworker ({self.cluster.describe()}; {self.num_replicas_in_sync} replicas)"
        else:
            what = f"{self.kind} over {', '.join(self.devices)}"
        return f"{what}: {self.reason}"

    def __repr__(self) -> str:
        return f"JaxStrategy({self.describe()})"


def make_strategy(kind: str = "auto", **options: Any) -> JaxStrategy:
    """Build the `JaxStrategy` for this process and log why in one INFO line.

    Takes `keras_gpu.make_strategy`'s arguments. `kind="auto"` picks
    `"multiworker"` when the cluster has several training tasks (or the
    processes were already joined), `"mirrored"` over all local devices when
    there are two or more (GPUs, or a CPU split with `configure_devices(
    cpu_devices=N)`), `"one_device"` for one GPU, else `"default"`.
    `"multiworker"` trains on every device of every process.

    `startup_timeout` bounds the wait for every process to join (default
    600 s); while it waits, the task logs whom it waits for every 30 s. The
    job is joined with 30 s heartbeat and 120 s shutdown timeouts, and a
    process whose script raises exits at once rather than at JAX's exit-time
    barrier, so its blocked peers' collectives fail and they end too (see
    `keras_gpu.setup.jax_exit`). `cross_device_ops`, `communication`, `collective_timeout` and
    `slurm_gpus_per_task` have no JAX meaning and raise when set.

    Raises:
        ValueError: A bad argument, a missing device, a malformed cluster, or
            a cluster JAX cannot train (an evaluator or `ps` task).
        TypeError: An argument has the wrong type.
        RuntimeError: The backend is not JAX; a multi-process job was asked
            for after JAX started its backends; the processes did not join
            within `startup_timeout`; or they were joined with another
            process count or rank than the cluster describes.
    """
    options = _checked("make_strategy", kind, options)
    kind, wanted = options.kind, options.wanted
    info = _resolve(options.where)
    if _trains_together(options, info):
        timeout = options.startup_timeout
        strategy = _multiworker(kind, info, DEFAULT_STARTUP_TIMEOUT if timeout is None else timeout)
    else:
        strategy = _local(kind, wanted, info)
    logger.info("make_strategy: %s%s", "auto chose " if kind == "auto" else "", strategy.describe())
    return strategy


class JaxPlan(NamedTuple):
    """What `make_strategy()` would build on JAX, decided by the same code but built and joined to nothing.

    Attributes:
        kind: `"default"`, `"one_device"`, `"mirrored"` or `"multiworker"`.
        devices: This process's replica devices, as TensorFlow-style names.
        cluster: This process's place in the job (as `JaxStrategy.cluster`).
        reason: Why this kind was chosen, in words.
    """

    kind: str
    devices: tuple[str, ...]
    cluster: ClusterInfo
    reason: str


def plan_strategy(kind: str = "auto", **options: Any) -> JaxPlan:
    """What `make_strategy` would build for these arguments, without building it (`keras-gpu env` shows it).

    Lists the local devices (which starts JAX's backends in this process, so
    a multi-process job can no longer be joined here), but joins no process
    and sets no distribution.

    Raises:
        ValueError: As `make_strategy`: a bad argument, a missing device, or
            a cluster JAX cannot train.
        TypeError: An argument has the wrong type.
        RuntimeError: The backend is not JAX, or the processes were joined
            with another process count or rank than the cluster describes.
    """
    checked = _checked("plan_strategy", kind, options)
    info = _resolve(checked.where)
    import jax

    if _trains_together(checked, info):
        info, reason = _multiworker_cluster(checked.kind, info)
        return JaxPlan("multiworker", tuple(_tf_name(d) for d in jax.local_devices()), info, reason)
    chosen_kind, chosen, reason = _choose_local(checked.kind, checked.wanted, info, jax.local_devices())
    return JaxPlan(chosen_kind, tuple(_tf_name(d) for d in chosen), ClusterInfo(source="local"), reason)


def _checked(function: str, kind: str, options: Mapping[str, Any]) -> StrategyOptions:
    """The checked options of `make_strategy` or `plan_strategy`; `RuntimeError` off the JAX backend."""
    arguments = keyword_arguments(function, kind, options)
    from keras_gpu.core import backend

    current = backend.selected()
    if current != "jax":
        raise RuntimeError(
            "keras_gpu.make_strategy() works on Keras' TensorFlow and JAX backends: set KERAS_BACKEND=tensorflow "
            f"or KERAS_BACKEND=jax before importing keras. Received: backend={current!r}"
        )
    _reject_tensorflow_only(arguments)
    return StrategyOptions.from_keywords(arguments)


def _trains_together(options: StrategyOptions, info: ClusterInfo) -> bool:
    """Whether the options and the cluster (or an already joined JAX job) make a multi-worker strategy.

    Raises:
        ValueError: It is multi-worker, and `devices` was given.
    """
    import jax

    joined = jax.distributed.is_initialized()
    together = (info.is_multi_worker and info.task_type != "evaluator") or (joined and jax.process_count() > 1)
    if not (options.kind == "multiworker" or (options.kind == "auto" and together)):
        return False
    if options.wanted is not None:
        raise ValueError(
            "`devices` cannot be chosen for a multi-worker strategy: each process trains on all its devices. "
            f"Limit them with configure_devices(visible_gpus=...) or CUDA_VISIBLE_DEVICES. Received: devices={options.devices!r}"
        )
    return True


def _reject_tensorflow_only(arguments: Mapping[str, Any]) -> None:
    """`ValueError` naming the arguments that only TensorFlow's strategies take, when any is set."""
    unsupported = {
        "cross_device_ops": "auto",
        "communication": "auto",
        "collective_timeout": None,
        "slurm_gpus_per_task": None,
    }
    given = {name: arguments[name] for name, default in unsupported.items() if arguments[name] != default}
    if given:
        shown = ", ".join(f"{k}={v!r}" for k, v in given.items())
        raise ValueError(
            f"{', '.join(f'`{k}`' for k in given)} {'applies' if len(given) == 1 else 'apply'} to TensorFlow's "
            "strategies only; on JAX, XLA chooses the collectives, and a stuck peer is caught by `keras-gpu launch "
            f"--hang-timeout`. Leave {'it' if len(given) == 1 else 'them'} out. "
            f"Received: {shown}"
        )


def _resolve(where: ClusterOptions) -> ClusterInfo:
    """The cluster description; SLURM is laid out here (TensorFlow's resolver is not needed on JAX)."""
    env = os.environ
    if where.source == "slurm" or (where.source == "auto" and where.cluster is None and not env.get("TF_CONFIG", "").strip()
                                   and env.get("SLURM_STEP_NUM_TASKS", "").strip() not in ("", "0", "1")):
        return _slurm_cluster(env, where.slurm_port_base)
    info = where.resolve()
    if "ps" in info.cluster:
        raise ValueError(
            "The cluster has 'ps' (parameter server) tasks, which JAX has no use for; remove the 'ps' entry. "
            f"Received: cluster={ {k: list(v) for k, v in info.cluster.items()} !r}"
        )
    return info


def _slurm_cluster(env: Mapping[str, str], port_base: int) -> ClusterInfo:
    """This SLURM step as a cluster: tasks laid out node by node, ports `port_base` plus the task's slot on its node."""
    procid, hosts, per_node = step_layout(env, port_base)
    addresses = tuple(f"{host}:{port_base + slot}" for host, count in zip(hosts, per_node) for slot in range(count))
    return ClusterInfo("slurm", {"worker": addresses}, "worker", procid)


def _multiworker(kind: str, info: ClusterInfo, timeout: float) -> JaxStrategy:
    import jax

    from keras_gpu.setup.jax_global_batch import GlobalBatchDataParallel

    joined = jax.distributed.is_initialized()
    info, reason = _multiworker_cluster(kind, info)
    if joined:
        if jax.process_count() > 1:
            end_promptly_on_failure()
    elif info.is_multi_worker:
        _join(info, timeout)
    return JaxStrategy("multiworker", GlobalBatchDataParallel(jax.devices()), info, reason)


def _multiworker_cluster(kind: str, info: ClusterInfo) -> tuple[ClusterInfo, str]:
    """A multi-worker strategy's cluster and reason, decided before joining; raises for a job JAX cannot train."""
    import jax

    if info.task_type == "evaluator":
        raise ValueError(
            "kind='multiworker' was asked for, but this process is the cluster's evaluator, which does not train; "
            "use kind='auto' (or a local kind) for the evaluator."
        )
    if jax.distributed.is_initialized():
        count, index = jax.process_count(), jax.process_index()
        if info.is_multi_worker and (count, index) != (info.num_workers, info.worker_index):
            raise RuntimeError(
                f"make_strategy: this process was joined to a JAX job of {count} processes as process {index}, but "
                f"the cluster from {info.source} has {info.num_workers} training tasks and this is rank "
                f"{info.worker_index}. Describe the same job to both (keras.distribution.initialize's arguments or "
                "KERAS_DISTRIBUTION_* variables, and TF_CONFIG), or call only keras_gpu.make_strategy()."
            )
        if not info.is_multi_worker and count > 1:
            info = ClusterInfo("jax.distributed", {"worker": tuple(f"process_{i}" for i in range(count))}, "worker", index)
        reason = f"the {count} processes of this job were already joined"
    elif info.is_multi_worker:
        reason = f"{info.source} describes {info.num_workers} training tasks"
    else:
        reason = "kind='multiworker' was asked for; no cluster of several tasks is configured, so this process trains alone"
    if kind == "multiworker" and info.is_multi_worker and not reason.startswith("the "):
        reason = "kind='multiworker' was asked for"
    return info, reason


_LATE = (
    "A multi-process JAX job must be joined before JAX starts its backends in this process (before creating "
    "arrays or models, or listing devices). Call keras_gpu.make_strategy() near the top of the program, right "
    "after configure_devices()."
)


def _join(info: ClusterInfo, timeout: float) -> None:
    """`jax.distributed.initialize` for this task, then Keras' shared random seed (as `keras.distribution.initialize`)."""
    import jax

    from keras_gpu.core.keras_private import jax_initialize_rng
    from keras_gpu.setup.jax_devices import backends_started

    if backends_started():
        raise RuntimeError(_LATE)
    coordinator = info.cluster["chief"][0] if info.cluster.get("chief") else info.cluster["worker"][0]
    if info.is_chief:
        check_own_port(info)  # the coordinator listens at its own address
    if str(jax.config.jax_cpu_collectives_implementation or "none") == "none":
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    failure = (
        f"make_strategy: the {info.num_workers} processes from {info.source} did not join within "
        f"startup_timeout={timeout:g}s (coordinator {coordinator}, this is rank {info.worker_index}). Start every "
        "task of the cluster, check the coordinator's address, or raise `startup_timeout`."
    )
    deadline = time.monotonic() + timeout
    try:
        with WaitNotes(lambda: _awaited(info, coordinator), timeout, on_timeout=f"{failure} JAX ends the process."):
            if not info.is_chief and not _coordinator_up(coordinator, deadline):
                # JAX ends the process (abort) when its own connection attempt times out: fail first, in words.
                raise RuntimeError(f"{failure} The coordinator never answered at {coordinator}.")
            jax.distributed.initialize(
                coordinator_address=coordinator,
                num_processes=info.num_workers,
                process_id=info.worker_index,
                initialization_timeout=max(1, math.ceil(deadline - time.monotonic())),
                **join_timeouts(),
            )
    except RuntimeError as exc:
        if str(exc).startswith(failure):
            raise
        raise RuntimeError(f"{failure} JAX said: {_first_line(exc)}") from exc
    except Exception as exc:
        raise RuntimeError(f"{failure} JAX said: {_first_line(exc)}") from exc
    end_promptly_on_failure()  # a failed process does not wait at JAX's exit-time barrier for its blocked peers
    jax_initialize_rng()  # one random seed for every process: equal initial weights and shuffles


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _coordinator_up(coordinator: str, deadline: float) -> bool:
    """Wait until the coordinator's port accepts a connection (True), or the deadline passes (False)."""
    from keras_gpu.setup.startup_guards import port_answers

    while True:
        if port_answers(coordinator):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_S)


def _awaited(info: ClusterInfo, coordinator: str) -> str:
    """Whom this task waits for while JAX's processes join: the coordinator, or the other tasks."""
    from keras_gpu.setup.startup_guards import port_answers

    lead = "chief:0" if info.cluster.get("chief") else "worker:0"
    if not info.is_chief and not port_answers(coordinator):
        return f"{lead} (the JAX coordinator) at {coordinator}"
    others = [f"{kind}:{i}" for kind in ("chief", "worker") for i, _ in enumerate(info.cluster.get(kind, ()))]
    me = f"{info.task_type}:{info.task_index}"
    rest = [name for name in others if name not in (me, lead)] if info.is_chief else [n for n in others if n != me]
    return f"{', '.join(rest) or 'the other tasks'} to join the JAX coordinator at {coordinator}"


def _local(kind: str, wanted: tuple[str, ...] | None, info: ClusterInfo) -> JaxStrategy:
    import jax

    from keras_gpu.setup.jax_global_batch import GlobalBatchDataParallel

    kind, chosen, reason = _choose_local(kind, wanted, info, jax.local_devices())
    if info.is_multi_worker and info.task_type != "evaluator":
        logger.warning(
            "The cluster from %s has %d training tasks, but kind=%r trains this process alone; use "
            "kind='multiworker' (or 'auto') to train together.", info.source, info.num_workers, kind,
        )
    distribution = GlobalBatchDataParallel(chosen) if kind != "default" else None
    return JaxStrategy(kind, distribution, ClusterInfo(source="local"), reason)


def _choose_local(
    kind: str, wanted: tuple[str, ...] | None, info: ClusterInfo, local: list[Any]
) -> tuple[str, list[Any], str]:
    """The local kind, its devices among `local` and the reason, for `kind` and the wanted devices."""
    gpus = [d for d in local if d.platform in _PLATFORMS["GPU"]]
    if wanted is not None:
        chosen = [_find(name, local) for name in wanted]
    elif kind in ("auto", "mirrored"):
        chosen = gpus or [d for d in local if d.platform == "cpu"] or local
    elif kind == "one_device":
        chosen = (gpus or local)[:1]
    else:
        chosen = []
    if kind == "auto":
        if wanted is not None:
            kind, reason = ("one_device", "one device was given") if len(chosen) == 1 else ("mirrored", f"{len(chosen)} devices were given")
        elif len(chosen) > 1:
            what = f"{len(chosen)} GPUs are visible" if gpus else f"no GPU is visible and the CPU is split into {len(chosen)} devices"
            kind, reason = "mirrored", what
        elif gpus:
            kind, reason = "one_device", "exactly one GPU is visible"
        else:
            kind, reason, chosen = "default", "no GPU is visible and the CPU is not split", []
        if info.task_type == "evaluator" and info.is_multi_worker:
            reason = f"this process is the evaluator of a {info.num_workers}-worker cluster, so it runs alone; {reason}"
    else:
        reason = f"kind={kind!r} was asked for"
        if kind == "one_device" and len(chosen) != 1:
            raise ValueError(f"kind='one_device' needs exactly one device. Received: devices={list(wanted or ())!r}")
    return kind, chosen, reason


def _find(name: str, local: list[Any]) -> Any:
    """The local `jax.Device` for a normalised name like `/device:GPU:1`; `ValueError` listing them when absent."""
    kind, index = name.rsplit(":", 2)[-2:]
    for device in local:
        if device.platform in _PLATFORMS[kind] and _local_index(device, local) == int(index):
            return device
    raise ValueError(
        f"`devices` names {name}, which this process does not have; its devices are "
        f"{[_tf_name(d) for d in local]}. Received: {name!r}"
    )


def _local_index(device: Any, local: list[Any]) -> int:
    """The device's index among this process's devices of its platform (its CUDA ordinal for a GPU)."""
    return [d for d in local if d.platform == device.platform].index(device)


def _tf_name(device: Any) -> str:
    from keras_gpu.core.backend import device_name

    return device_name(device.platform, device.id)


make_strategy.__signature__ = strategy_signature(make_strategy)  # type: ignore[attr-defined]
plan_strategy.__signature__ = strategy_signature(plan_strategy)  # type: ignore[attr-defined]
