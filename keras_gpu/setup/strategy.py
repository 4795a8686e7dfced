"""`make_strategy()`: one call that picks and builds the right `tf.distribute` strategy.

The decision is a pure function, `plan_strategy`, so that it can be shown
without building anything (`keras-gpu env` prints it). `make_strategy`
checks every argument once, as a
`StrategyOptions`, plans with it,
then builds the strategy the plan names and logs one INFO line saying what it
built and why. On Keras' JAX backend it hands over to
`keras_gpu.setup.jax_strategy`.

The pieces live in modules of their own: the options in
`keras_gpu.setup.strategy_options`, the plan in
`keras_gpu.setup.strategy_plan`, the building in
`keras_gpu.setup.tf_strategy`, and the start-up guards in
`keras_gpu.setup.startup_guards`; this module serves their public names.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from keras_gpu.core.backend import require_tensorflow, selected
from keras_gpu.core.cluster import resolve_cluster
from keras_gpu.core.log import logger
from keras_gpu.setup.cluster_peers import report_unlisted
from keras_gpu.setup.strategy_options import (
    COMMUNICATIONS,
    CROSS_DEVICE_OPS,
    DEFAULT_STARTUP_TIMEOUT,
    KINDS,
    StrategyOptions,
    keyword_arguments,
    strategy_signature,
)
from keras_gpu.setup.strategy_plan import (
    LocalDevices,
    StrategyPlan,
    plan_from_options,
    plan_strategy,
)
from keras_gpu.setup.tf_strategy import (
    build_strategy as _build,  # the seam make_strategy builds through
)

if TYPE_CHECKING:  # pragma: no cover
    import tensorflow as tf

__all__ = [
    "COMMUNICATIONS",
    "CROSS_DEVICE_OPS",
    "DEFAULT_STARTUP_TIMEOUT",
    "KINDS",
    "LocalDevices",
    "StrategyOptions",
    "StrategyPlan",
    "make_strategy",
    "plan_strategy",
]


def make_strategy(kind: str = "auto", **options: Any) -> tf.distribute.Strategy:
    """Build the `tf.distribute.Strategy` for this process and log why in one INFO line.

    Takes `kind` and the keywords below; see `plan_strategy` for what
    `kind="auto"` picks. Every argument is validated before anything is
    created.

    - `"mirrored"` always gets an explicit cross-device all-reduce (never
      TensorFlow's collective default), which keeps `steps_per_execution > 1`
      working (keras-team/keras#19246).
    - `"multiworker"` returns a
      `keras_gpu.setup.keras_compat.KerasMultiWorkerMirroredStrategy`, a
      `tf.distribute.MultiWorkerMirroredStrategy` that Keras 3 `fit`,
      `evaluate` and `predict` can use (keras-team/keras#20585), with any
      `steps_per_execution` (keras-team/keras#19246). Right after creation,
      every task compares its cluster with the coordination leader's
      (`keras_gpu.core.cluster.check_cluster_agreement`). Explicit and
      SLURM clusters are passed through a `SimpleClusterResolver`;
      TF_CONFIG is read but never written. Under SLURM each task's
      `CUDA_VISIBLE_DEVICES` is narrowed to its own GPUs. Create it before
      TensorFlow runs anything in the process. With a single-task cluster or
      no cluster, `kind="multiworker"` is allowed and trains alone.

    Creating a multi-worker strategy never waits forever. Before TensorFlow
    starts this task's server, its port is checked, so a port held by
    another process fails at once and by name. TensorFlow's registration of
    the cluster's tasks is bounded by `startup_timeout`; when it runs out, the
    error lists the tasks that never came up. Without these guards TensorFlow
    2.21 waits indefinitely in the constructor for a peer that never starts,
    and reports a taken port only as `Could not start gRPC server`.

    On Keras' JAX backend it returns a `keras_gpu.setup.jax_strategy.JaxStrategy`
    instead, with `scope()` and `num_replicas_in_sync`, for the same cluster
    (see that module).

    Args:
        kind: `"auto"`, `"default"`, `"one_device"`, `"mirrored"` or
            `"multiworker"`.
        **options: The keywords below, declared once by
            `keras_gpu.setup.strategy_options.StrategyOptions` and
            `keras_gpu.core.cluster.ClusterOptions` (the function's
            `__signature__` lists them with their defaults).

    Keyword Args:
        devices: For `"one_device"` (exactly one) or `"mirrored"`: device
            names such as `"GPU:0"` or `"/device:CPU:1"`. Must exist.
        cross_device_ops: For `"mirrored"`: `"auto"`, `"nccl"`,
            `"hierarchical_copy"` or `"reduce_to_one_device"`. `"auto"` is
            NCCL over physical GPUs, otherwise `"reduce_to_one_device"`.
        communication: For `"multiworker"`: `"auto"`, `"ring"` or `"nccl"`.
        collective_timeout: For `"multiworker"`: seconds after which a
            collective that waits on a peer fails, or `None` for no timeout
            (TensorFlow only).
        startup_timeout: For `"multiworker"`: seconds to wait for every task
            of the cluster to start; `None` means 600 s.
        cluster_source: Where the cluster comes from: `"auto"` (an explicit
            `cluster`, else TF_CONFIG, else a multi-task SLURM step, else
            none), `"tf_config"`, `"slurm"` or `"explicit"`.
        cluster: An explicit cluster: `{"worker": ["host:port", ...]}` or the
            list of worker addresses.
        task_index: With `cluster`: this process's index within `task_type`.
        task_type: With `cluster`: this process's task type.
        slurm_port_base: For SLURM: the first port on each node.
        slurm_gpus_per_task: For SLURM: GPUs per task (`None`: detect;
            TensorFlow only).

    Returns:
        A `tf.distribute.Strategy` (a `JaxStrategy` on JAX).

    Raises:
        ValueError: Bad or contradictory arguments, missing devices, or a
            malformed cluster (raised before any peer is contacted).
        TypeError: An argument has the wrong type.
        RuntimeError: A multi-worker strategy was asked for after
            TensorFlow's runtime was initialised in this process; this task's
            port is taken; some tasks of the cluster did not start within
            `startup_timeout`; the tasks' cluster descriptions disagree; or
            the default strategy was asked for inside another strategy's scope.

    Examples:
        Two replicas on a CPU-only machine, in a fresh process (the CPU is
        split before TensorFlow starts):

        >>> import keras
        >>> import keras_gpu
        >>> _ = keras_gpu.configure_devices(cpu_devices=2)
        >>> strategy = keras_gpu.make_strategy()  # "auto": mirrored over the 2 logical CPUs
        >>> strategy.num_replicas_in_sync
        2
        >>> with strategy.scope():
        ...     model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        ...     model.compile(optimizer="sgd", loss="mse")
    """
    if selected() != "tensorflow":  # JAX: a keras.distribution over the same cluster; others: one clear error
        from keras_gpu.setup import jax_strategy

        return jax_strategy.make_strategy(kind, **options)
    arguments = keyword_arguments("make_strategy", kind, options)
    require_tensorflow("keras_gpu.make_strategy()", also_on_jax=True)
    options = StrategyOptions.from_keywords(arguments)
    # A task missing from its own cluster description tells the leader before it fails (keras_gpu.setup.cluster_peers).
    plan = report_unlisted(plan_from_options)(options)
    if plan.kind == "multiworker" and plan.cluster.source == "slurm":
        # Resolved again, now letting TensorFlow's resolver narrow CUDA_VISIBLE_DEVICES
        # to this task's GPUs; the first pass validated everything without side effects.
        plan = replace(
            plan,
            cluster=resolve_cluster(
                "slurm",
                slurm_port_base=options.where.slurm_port_base,
                slurm_gpus_per_task=options.where.slurm_gpus_per_task,
                slurm_assign_gpus=True,
            ),
        )
    strategy = _build(plan)
    for note in plan.notes:
        logger.warning(note)
    prefix = "auto chose " if kind == "auto" else ""
    logger.info("make_strategy: %s%s", prefix, plan.describe())
    if plan.kind in ("mirrored", "multiworker"):
        from keras_gpu.setup.keras_compat import warn_steps_per_execution

        warn_steps_per_execution(strategy, None)
    return strategy


make_strategy.__signature__ = strategy_signature(make_strategy)  # type: ignore[attr-defined]
