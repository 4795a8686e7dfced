"""Fixes and guards for known Keras 3 / TensorFlow defects, each citing its upstream issue.

This is the one module that works around upstream bugs. Every entry names the
issue it answers, the narrowest change that fixes it, and the test that
reproduces the stock failure, so that the workaround can be removed once
upstream is fixed.

keras-team/keras#20585: Keras 3 `fit` with `MultiWorkerMirroredStrategy`
    `KerasMultiWorkerMirroredStrategy` carries the fix (see its docstring).
    Stock failure: `tests/test_multiworker.py::test_stock_multiworker_strategy_still_fails_in_fit`.

keras-team/keras#19246: training with `steps_per_execution > 1` and collective all-reduce
    Keras 3 fails with `You must feed a value for placeholder tensor
    '...while/cond/Placeholder'`. Cause: Keras calls its one-step
    `tf.function` inside the `tf.cond` of its multi-step `tf.while_loop`. When
    the strategy all-reduces gradients with TensorFlow's collective ops
    (`CollectiveAllReduce`, the default cross-device ops of
    `tf.distribute.MirroredStrategy` and the only ones of
    `tf.distribute.MultiWorkerMirroredStrategy`), each collective's instance key
    is a call-time capture (`capture_call_time_value`). When the one-step
    function is called from the `tf.cond` branch, TensorFlow re-registers that
    deferred capture on the branch graph (`FuncGraph.capture_call_time_value`
    does not climb out of control flow the way `_next_instance_key` does), and
    control flow never feeds it: the branch keeps an unfed `int32` placeholder
    for every collective.

    Fixes, narrowest first:

    - Mirrored strategies built by `keras_gpu.make_strategy` get an explicit
      cross-device ops object (`NcclAllReduce`, `HierarchicalCopyAllReduce` or
      `ReductionToOneDevice`), none of which uses call-time captures.
    - `KerasMultiWorkerMirroredStrategy` has no other all-reduce, so its
      collectives that are traced inside control flow take their instance key
      at trace time instead (`keras_gpu.core.tf_private.collective_keys_fixed_in_control_flow`),
      the path TensorFlow itself takes outside eager mode. Every worker traces
      Keras' functions in the same order, so the keys agree; collectives traced
      outside control flow (everything with `steps_per_execution=1`) are
      unchanged. Test: `tests/test_multiworker_hardening.py::
      test_steps_per_execution_4_matches_1_on_every_worker`.

    Still affected, and only guarded by `warn_steps_per_execution`: a
    stock `tf.distribute.MirroredStrategy` or `MultiWorkerMirroredStrategy`,
    and XLA-compiled models on GPU-only mirrored strategies or on the
    multi-worker strategy (not checked), where TensorFlow uses collectives
    itself. Stock failure:
    `tests/test_strategy.py::test_stock_mirrored_with_steps_per_execution_still_fails`.

Per-batch values Keras reduces with `axis=0` under multi-worker
    Keras' `reduce_per_replica` reduces a train or test step's logs with
    `strategy.reduce("MEAN", v, axis=0)` under multi-worker, and with
    `tf.reduce_mean(local_results, axis=0)` (the element-wise mean over
    replicas) otherwise. For a rank-1 log such as `Precision(thresholds=[0.3,
    0.5, 0.7])`, TensorFlow's `axis=0` also averages the three values into one
    number, so callbacks and the progress bar saw something a mirrored run
    never gives. `KerasMultiWorkerMirroredStrategy` reduces what Keras'
    `reduce_per_replica` passes element-wise across replicas, as the mirrored
    path does. Test: `tests/test_multiworker_hardening.py::
    test_vector_metric_per_batch_logs_are_element_wise`.

Batches that do not split evenly over the replicas of every worker
    At the start of every `fit`, `evaluate` and `predict`, Keras'
    `_maybe_symbolic_build` all-reduces the whole first data batch with
    `strategy.reduce("MEAN", batch, axis=None)`, only to get tensors of the
    right structure for building the model. Under multi-worker that is a
    collective on the data itself: when replicas hold different shapes (a
    1-sample `evaluate` on 2 workers gives `[1, 8]` and `[0, 8]`; padded
    batches differ in length), it aborts with `Shape mismatch in the
    collective instance`, and every later collective of the process fails
    (sometimes with a SIGSEGV). `KerasMultiWorkerMirroredStrategy`
    answers that call with this worker's first local component of each value,
    with no collective; the values only serve to build the model. The steps
    themselves all-reduce gradients and metric states, whose shapes never
    depend on the batch, so such batches train and evaluate correctly. Test:
    `tests/test_multiworker_hardening.py::
    test_batches_that_leave_a_replica_empty_work_and_the_process_stays_healthy`.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

from keras_gpu.core.log import log_once
from keras_gpu.core.tf_private import (
    collective_cross_device_ops,
    collective_keys_fixed_in_control_flow,
    strategy_devices,
)
from keras_gpu.core.topology import device_type
from keras_gpu.setup.iterator_check_private import is_iterator_check, timed_check

__all__ = [
    "KerasMultiWorkerMirroredStrategy",
    "KerasSampleCount",
    "add_to_gradient_all_reduce",
    "keras_sample_count",
    "steps_per_execution_affected",
    "warn_steps_per_execution",
]

_ISSUE_STEPS_PER_EXECUTION = "keras-team/keras#19246"
_KERAS_TF_TRAINER = "keras.src.backend.tensorflow.trainer"


class KerasMultiWorkerMirroredStrategy(tf.distribute.MultiWorkerMirroredStrategy):
    """`tf.distribute.MultiWorkerMirroredStrategy` whose `reduce` accepts what Keras 3 passes.

    Fixes keras-team/keras#20585: with a stock multi-worker strategy, Keras 3
    `fit`, `evaluate` and `predict` fail in two places in
    `keras/src/backend/tensorflow/trainer.py`:

    1. `_maybe_symbolic_build` calls `strategy.reduce("MEAN", batch,
       axis=None)` with the whole nested `(x, y)` structure of `PerReplica`
       values, which the stock `reduce` cannot convert to a tensor.
    2. `reduce_per_replica` calls `strategy.reduce("MEAN", v, axis=0)` on
       scalar (rank-0) losses and metrics, which fails with
       `Invalid reduction dimension 0 for input with 0 dimensions`.

    `reduce` here differs from the stock one in exactly those two cases, both
    of which raise in the stock strategy:

    - a nested structure (list, tuple, dict, namedtuple) that holds at least
      one `tf.distribute.DistributedValues` is reduced leaf by leaf, with the
      same `reduce_op` and `axis`, and returned in the same structure;
    - `axis=0` (or `[0]`, `(0,)`) given for a value whose every local
      component has static rank 0 is treated as `axis=None`, i.e. the
      per-replica scalars are reduced across replicas only. Other axes on
      scalars are left to the stock `reduce`, which rejects them.

    Four further changes (see the module docstring):

    - the call from Keras' `_maybe_symbolic_build`, which only needs a data
      batch of the right structure to build the model, gets this worker's
      first local component of each value, with no collective;
    - a call from Keras' own `reduce_per_replica` (the only caller that means
      "element-wise across replicas" by `axis=0`) is reduced with
      `axis=None`, so rank-1 per-batch logs keep their shape;
    - collectives traced inside control flow get trace-time instance keys,
      so `steps_per_execution > 1` trains (keras-team/keras#19246);
    - the distributed iterator's cross-worker check (does every worker have
      a batch?) is timed where a clock is attached
      (`keras_gpu.setup.iterator_check_private`), so the step probe
      counts that wait as synchronization, not input.

    Everything else, rank >= 1 values with any `axis` from any other caller
    included, goes to the stock `reduce` unchanged. The object is a real
    `tf.distribute.MultiWorkerMirroredStrategy` (same constructor, same
    `scope()`, `run()` and `extended`), so `isinstance` checks in Keras and
    TensorFlow see it as one.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._keras_gpu_fixed_keys = collective_keys_fixed_in_control_flow(self) > 0

    def reduce(self, reduce_op: Any, value: Any, axis: Any) -> Any:
        """Reduce `value` across replicas; see the class docstring for what differs from stock."""
        caller = sys._getframe(1)
        if is_iterator_check(caller):  # the distributed iterator's cross-worker check: timed where a clock waits
            return timed_check(self, value, lambda v: super(KerasMultiWorkerMirroredStrategy, self).reduce(
                reduce_op, v, axis))
        if _is_keras_trainer_frame(caller, "_maybe_symbolic_build") and _is_nest_of_distributed(value):
            return _first_local_results(self.experimental_local_results, value)
        if _is_keras_trainer_frame(caller, "_reduce"):
            axis = None
        return _compat_reduce(super().reduce, self.experimental_local_results, reduce_op, value, axis)


def _is_keras_trainer_frame(frame: Any, function: str) -> bool:
    """Whether `frame` runs `function` of Keras' TensorFlow trainer module.

    `_reduce` is the helper of its `reduce_per_replica` (called while Keras
    traces a step function, never per step); `_maybe_symbolic_build` runs
    once at the start of `fit`, `evaluate` and `predict`.
    """
    return frame is not None and frame.f_code.co_name == function and frame.f_globals.get("__name__") == _KERAS_TF_TRAINER


def _first_local_results(local_results: Callable[[Any], Sequence[Any]], value: Any) -> Any:
    """`value` with each distributed leaf replaced by this worker's first local component."""
    return tf.nest.map_structure(
        lambda leaf: local_results(leaf)[0] if isinstance(leaf, tf.distribute.DistributedValues) else leaf, value
    )


def _compat_reduce(
    stock_reduce: Callable[[Any, Any, Any], Any],
    local_results: Callable[[Any], Sequence[Any]],
    reduce_op: Any,
    value: Any,
    axis: Any,
) -> Any:
    """The logic of `KerasMultiWorkerMirroredStrategy.reduce`, with the stock pieces passed in.

    Args:
        stock_reduce: The unpatched `Strategy.reduce(reduce_op, value, axis)`.
        local_results: `Strategy.experimental_local_results`.
        reduce_op: As for `Strategy.reduce`.
        value: A `DistributedValues`, a tensor, or a nest of them.
        axis: As for `Strategy.reduce`.
    """
    if _is_nest_of_distributed(value):
        return tf.nest.map_structure(
            lambda leaf: _reduce_leaf(stock_reduce, local_results, reduce_op, leaf, axis), value
        )
    return _reduce_leaf(stock_reduce, local_results, reduce_op, value, axis)


def _reduce_leaf(
    stock_reduce: Callable[[Any, Any, Any], Any],
    local_results: Callable[[Any], Sequence[Any]],
    reduce_op: Any,
    value: Any,
    axis: Any,
) -> Any:
    if _is_axis0(axis) and _all_rank0(local_results(value)):
        axis = None
    return stock_reduce(reduce_op, value, axis)


def _is_nest_of_distributed(value: Any) -> bool:
    if not tf.nest.is_nested(value):
        return False
    return any(isinstance(leaf, tf.distribute.DistributedValues) for leaf in tf.nest.flatten(value))


def _is_axis0(axis: Any) -> bool:
    if isinstance(axis, (list, tuple)):
        return len(axis) == 1 and _is_axis0(axis[0])
    return not isinstance(axis, bool) and isinstance(axis, int) and axis == 0


def _all_rank0(components: Sequence[Any]) -> bool:
    ranks = [getattr(getattr(c, "shape", None), "rank", None) for c in components]
    return bool(ranks) and all(r == 0 for r in ranks)


def steps_per_execution_affected(strategy: Any, *, jit_compile: bool = False) -> bool:
    """Whether `strategy` hits keras-team/keras#19246 when `steps_per_execution > 1`.

    True for a strategy with more than one replica whose gradient all-reduce
    uses TensorFlow's collective ops without this module's fix: a stock
    `MultiWorkerMirroredStrategy`, a `MirroredStrategy` built with its default
    (collective) cross-device ops, and, when the model is XLA-compiled
    (`jit_compile=True` makes TensorFlow use collectives whatever the
    cross-device ops; not checked with the fix), a `MirroredStrategy` over GPUs
    only or a `KerasMultiWorkerMirroredStrategy`. Strategies from
    `keras_gpu.make_strategy` are not affected unless compiled with XLA.

    Args:
        strategy: A `tf.distribute.Strategy`.
        jit_compile: Whether the model's train step is XLA-compiled.
    """
    if not isinstance(strategy, tf.distribute.Strategy) or strategy.num_replicas_in_sync <= 1:
        return False
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return not getattr(strategy, "_keras_gpu_fixed_keys", False) or bool(jit_compile)
    if not isinstance(strategy, tf.distribute.MirroredStrategy):
        return False
    if collective_cross_device_ops(strategy):
        return True
    devices = strategy_devices(strategy)
    return bool(jit_compile) and bool(devices) and all(device_type(d) == "GPU" for d in devices)


def warn_steps_per_execution(strategy: Any, steps_per_execution: int | None, *, jit_compile: bool = False) -> bool:
    """Log, once per process, that `strategy` with `steps_per_execution > 1` hits keras-team/keras#19246.

    With an int `steps_per_execution > 1` and an affected strategy (see
    `steps_per_execution_affected`), logs one WARNING naming the issue
    and the workaround (`steps_per_execution=1`). With
    `steps_per_execution=None` (not known yet, as in `make_strategy`), logs
    one INFO note for an affected strategy instead. Callbacks call this again
    with the model's real value at `on_train_begin`.

    Args:
        strategy: A `tf.distribute.Strategy`.
        steps_per_execution: The model's `steps_per_execution`, or `None`.
        jit_compile: Whether the model's train step is XLA-compiled.

    Returns:
        True when the combination is affected (for `None`: when the strategy
        would be affected by any `steps_per_execution > 1`), whether or not a
        message was logged this time.

    Raises:
        TypeError: `steps_per_execution` is not a positive int or `None`.
    """
    if steps_per_execution is not None and (
        not isinstance(steps_per_execution, int) or isinstance(steps_per_execution, bool) or steps_per_execution < 1
    ):
        raise TypeError(
            "`steps_per_execution` must be a positive int or None. "
            f"Received: steps_per_execution={steps_per_execution!r}"
        )
    if not steps_per_execution_affected(strategy, jit_compile=jit_compile):
        return False
    name = type(strategy).__name__
    if steps_per_execution is None:
        log_once(
            logging.INFO,
            "keras-19246-note",
            "Note: with %s, Keras 3 fails when `steps_per_execution` > 1 (%s); keep steps_per_execution=1.",
            name,
            _ISSUE_STEPS_PER_EXECUTION,
        )
        return True
    if steps_per_execution == 1:
        return False
    log_once(
        logging.WARNING,
        "keras-19246-warning",
        "steps_per_execution=%d with %s fails in Keras 3 with \"You must feed a value for placeholder tensor "
        "'...while/cond/Placeholder'\" (%s). Workaround: compile the model with steps_per_execution=1.",
        steps_per_execution,
        name,
        _ISSUE_STEPS_PER_EXECUTION,
    )
    return True



# -- Keras internals read, not fixed --------------------------------------------------------


class KerasSampleCount:
    """The samples Keras' default TensorFlow `train_step` counts, read from the host.

    That step updates the model's loss tracker (`model._loss_tracker`, a
    `keras.metrics.Mean`) with `sample_weight=tf.shape(first input)[0]`, so
    its `count` variable grows by each replica's batch size, inside the step
    Keras already runs: reading it costs the step nothing. Keras resets it
    (`reset_metrics()`) before each epoch's `on_epoch_begin` and, in
    `evaluate`, just after `on_test_begin`: a reader takes the counts
    within one epoch, and its last read before validation at the latest in
    `on_test_begin`. Under a strategy the variable is a sync-on-read sum;
    `read` copies this worker's replicas' components one by one and
    adds them on the host, never the strategy's cross-worker reduction (a
    collective). Anything else may reset the tracker within an epoch (a
    callback calling `evaluate` or `reset_metrics`): `resets` counts
    the calls of the tracker's `reset_state` (wrapped once, on the host; the
    resets run eagerly), so a reader knows its count was cut. The private
    attributes read here: `Model._loss_tracker`, Keras' TensorFlow
    `Variable._value` (the `tf.Variable`).

    Attributes:
        exact_below: Counts are exact integers below this (2**24 for a
            float32 count): beyond it a float add of a batch size rounds to
            the variable's spacing (an add of a batch smaller than half that
            spacing is lost), so a reader must stop trusting the count there.
    """

    def __init__(self, tracker: Any, variable: Any) -> None:
        import numpy as np

        self._variable = variable
        self.exact_below = float(2 ** np.finfo(variable.dtype.as_numpy_dtype).nmant) * 2.0
        self._resets = _count_resets(tracker)

    @property
    def resets(self) -> int:
        """How often the tracker was reset since it was first read here (Keras resets it before each epoch)."""
        return self._resets[0]

    def read(self) -> list[float]:
        """This worker's count per local replica (one small copy per replica)."""
        variable = self._variable
        components = variable.values if isinstance(variable, tf.distribute.DistributedValues) else (variable,)
        return [float(c.numpy()) for c in components]


def keras_sample_count(model: Any) -> KerasSampleCount | None:
    """Keras' own per-step sample count of `model`, where its training step is Keras' default one; else `None`.

    `None` where the model's class (or the model itself) overrides
    `train_step` (a step keras-gpu's step probe wraps still counts), where
    the loss tracker is missing, or where its `count` is not a float32 or
    float64 variable (a `float16` floatx counts exactly only to 2048).
    """
    try:
        from keras.src.backend.tensorflow.trainer import TensorFlowTrainer
        from keras.src.metrics import Mean
    except ImportError:
        return None
    if getattr(type(model), "train_step", None) is not TensorFlowTrainer.train_step:
        return None
    step = model.__dict__.get("train_step")
    while step is not None and getattr(step, "_keras_gpu_step_probe", None) is not None:
        step = getattr(step, "__wrapped__", None)
    if step is not None and getattr(step, "__func__", None) is not TensorFlowTrainer.train_step:
        return None
    tracker = getattr(model, "_loss_tracker", None)
    variable = getattr(getattr(tracker, "count", None), "_value", None)
    if not isinstance(tracker, Mean) or not isinstance(variable, tf.Variable):
        return None
    if variable.dtype not in (tf.float32, tf.float64):
        return None
    return KerasSampleCount(tracker, variable)


_RESETS = "_keras_gpu_resets"


def _count_resets(tracker: Any) -> list[int]:
    """A one-element list counting the calls of `tracker.reset_state` (the method wrapped once per tracker)."""
    resets = tracker.__dict__.get(_RESETS)
    if resets is None:
        resets = [0]
        original = tracker.reset_state

        def reset_state(*args: Any, **kwargs: Any) -> Any:
            resets[0] += 1
            return original(*args, **kwargs)

        object.__setattr__(tracker, "reset_state", reset_state)
        object.__setattr__(tracker, _RESETS, resets)
    return resets


_ALL_REDUCE = "_all_reduce_sum_gradients"
_ADDED = "_keras_gpu_added_to_all_reduce"
_ADDED_MARK = object()  # the variable paired with the added tensor (only ever zipped back, never updated)


def add_to_gradient_all_reduce(
    optimizer: Any, extra: Callable[[list[Any]], Any | None], reduced: Callable[[Any], None]
) -> bool:
    """Reduce one more dense tensor in the batched all-reduce of `optimizer`'s gradients, at no extra collective.

    Keras' TensorFlow optimizer sums the replicas' gradients in one call,
    `replica_context.all_reduce(SUM, gradients)` (its private
    `_all_reduce_sum_gradients`), which TensorFlow's collective ops pack into
    one collective per pack of tensors. The wrapper, set on this optimizer
    object (and on its `inner_optimizer`, where a `LossScaleOptimizer` wraps
    one), asks `extra(dense gradients)` in each replica's context for a
    tensor to add (`None`: add nothing), appends it to the gradients, and
    hands its sum over every replica to `reduced` before the optimizer
    updates the variables. The tensor must have the gradients' dtype (the
    pack is one concatenation). Wrapping again replaces the previous
    `extra` and `reduced`. Returns whether the optimizer has the method
    (`False`: nothing was wrapped).

    Examples:
        >>> import keras
        >>> optimizer = keras.optimizers.SGD()
        >>> add_to_gradient_all_reduce(optimizer, lambda grads: None, lambda total: None)
        True
    """
    wrapped = False
    for opt in (optimizer, getattr(optimizer, "inner_optimizer", None)):
        method = getattr(opt, _ALL_REDUCE, None)
        if method is None:
            continue
        original = getattr(method, "__wrapped__", method) if getattr(method, _ADDED, False) else method

        def all_reduce(grads_and_vars: Any, _original: Any = original) -> Any:
            pairs = list(grads_and_vars)
            if tf.distribute.get_replica_context() is None:
                return _original(pairs)
            tensor = extra([g for g, _ in pairs if isinstance(g, tf.Tensor)])
            if tensor is None:
                return _original(pairs)
            out = list(_original([*pairs, (tensor, _ADDED_MARK)]))
            reduced(out[-1][0])
            return out[:-1]

        all_reduce.__wrapped__ = original  # type: ignore[attr-defined]
        setattr(all_reduce, _ADDED, True)
        object.__setattr__(opt, _ALL_REDUCE, all_reduce)
        wrapped = True
    return wrapped
