"""Building the `tf.distribute` strategy a `StrategyPlan` names.

`build_strategy` creates the default, one-device, mirrored or
multi-worker strategy. A multi-worker strategy is created under the start-up
guards of `keras_gpu.setup.startup_guards` and `keras_gpu.setup.cluster_peers`,
and every task then checks that its cluster agrees with its peers'.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from keras_gpu.core.cluster import check_cluster_agreement
from keras_gpu.core.tf_private import runtime_initialized
from keras_gpu.core.topology import visible_gpu_count
from keras_gpu.setup.cluster_peers import (
    explain_taken_port,
    report_refused,
    startup_guard,
)
from keras_gpu.setup.startup_guards import (
    bound_registration,
    check_own_port,
    port_in_use_message,
    startup_failure_message,
    unknown_task_message,
)
from keras_gpu.setup.strategy_options import DEFAULT_STARTUP_TIMEOUT
from keras_gpu.setup.strategy_plan import StrategyPlan

if TYPE_CHECKING:  # pragma: no cover
    import tensorflow as tf

__all__ = ["build_strategy"]

_LATE_MULTIWORKER = (
    "A multi-worker strategy must be created before TensorFlow runs anything in this process "
    "(before creating tensors or models, or listing logical devices). Call "
    "keras_gpu.make_strategy() near the top of the program, right after configure_devices()."
)


def build_strategy(plan: StrategyPlan) -> tf.distribute.Strategy:
    """Create the strategy `plan` names (see `keras_gpu.make_strategy` for what each kind gets)."""
    import tensorflow as tf

    if plan.kind == "default":
        if tf.distribute.has_strategy():
            raise RuntimeError(
                "make_strategy('default') was called inside another strategy's scope, where the default "
                "strategy is not reachable; call it outside `with strategy.scope():`."
            )
        return tf.distribute.get_strategy()
    if plan.kind == "one_device":
        return tf.distribute.OneDeviceStrategy(plan.devices[0])
    if plan.kind == "mirrored":
        # Always an explicit cross-device ops object, never TensorFlow's collective default,
        # which breaks Keras 3 with steps_per_execution > 1 (keras-team/keras#19246).
        ops = {
            "nccl": tf.distribute.NcclAllReduce,
            "hierarchical_copy": tf.distribute.HierarchicalCopyAllReduce,
            "reduce_to_one_device": tf.distribute.ReductionToOneDevice,
        }[plan.cross_device_ops]
        return tf.distribute.MirroredStrategy(devices=list(plan.devices), cross_device_ops=ops())
    return _build_multiworker(plan)


def _build_multiworker(plan: StrategyPlan) -> tf.distribute.Strategy:
    import tensorflow as tf

    from keras_gpu.setup.keras_compat import KerasMultiWorkerMirroredStrategy

    if runtime_initialized():
        raise RuntimeError(_LATE_MULTIWORKER)
    num_gpus = visible_gpu_count()
    if plan.communication == "nccl" and num_gpus == 0:
        raise ValueError(
            "communication='nccl' needs GPUs, and this process sees none. Use communication='auto' or 'ring'. "
            "Received: communication='nccl'"
        )
    implementation = {
        "auto": tf.distribute.experimental.CommunicationImplementation.AUTO,
        "ring": tf.distribute.experimental.CommunicationImplementation.RING,
        "nccl": tf.distribute.experimental.CommunicationImplementation.NCCL,
    }[plan.communication]
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=implementation, timeout_seconds=plan.collective_timeout
    )
    info = plan.cluster
    resolver = info.cluster_resolver(num_gpus=num_gpus) if info.cluster else None
    if info.cluster:
        check_own_port(info)
        bound_registration(info, plan.startup_timeout or DEFAULT_STARTUP_TIMEOUT)
    # A peer that shows the tasks disagree on the cluster ends the wait below at once (keras_gpu.setup.cluster_peers).
    with startup_guard(info, plan.startup_timeout or DEFAULT_STARTUP_TIMEOUT):
        try:
            strategy = KerasMultiWorkerMirroredStrategy(cluster_resolver=resolver, communication_options=options)
        except RuntimeError as exc:
            if "startup" not in str(exc):
                raise
            raise RuntimeError(_LATE_MULTIWORKER) from exc
        except tf.errors.InvalidArgumentError as exc:
            if "Unexpected task registered" not in str(exc):
                raise
            report_refused(info)
            raise RuntimeError(unknown_task_message(info, str(exc))) from exc
        except tf.errors.UnknownError as exc:
            if "gRPC server" not in str(exc):
                raise
            why = "TensorFlow could not start its gRPC server there"
            raise RuntimeError(explain_taken_port(info) or port_in_use_message(info, why)) from exc
        except (tf.errors.DeadlineExceededError, tf.errors.UnavailableError) as exc:
            raise RuntimeError(
                startup_failure_message(info, plan.startup_timeout or DEFAULT_STARTUP_TIMEOUT, str(exc))
            ) from exc
    if info.cluster:
        check_cluster_agreement(info, min(plan.startup_timeout or DEFAULT_STARTUP_TIMEOUT, 60.0))
    return strategy
