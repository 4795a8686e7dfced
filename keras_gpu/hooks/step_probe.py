"""A profiler-free probe inside every training step: when each worker computes, waits and idles.

TensorFlow's profiler cannot be trusted in multi-worker processes (a trace
stop corrupts the heap of a non-chief worker in about 5% of stops), and host
clocks alone cannot find a straggler: in synchronous training every worker's
step takes the same wall time, because the fast ones wait for the slow one
inside the gradient all-reduce. What differs is *where* each worker's time
goes, and that is what the probe measures, with `tf.timestamp()` inside the
compiled step:

* `t0`: the worker's own forward and backward pass starts (its batch has
  arrived);
* `t1`: the gradients are ready, just before the optimizer's all-reduce
  (which waits for the stamp: through the tensor the cluster view's rows
  add to its pack, `keras_gpu.hooks.row_ride`, or else an identity
  per gradient);
* `t2`: the step is done (gradients reduced, variables updated, metrics).

So per step: *compute* `t1 - t0`; *waiting in the reductions* `t2 - t1` (a
fast worker waits here for the slowest); the *gap* `t0 - t2` of the previous
step: host work between steps (Keras' loop, callbacks) and the wait for the
input. A Python timestamp at the batch's start (`StepProbe.batch_begin`,
just before Keras calls the train function) splits the gap into host time
(before the call) and input time (inside the function, before `t0`) where
each call runs one step.

The sums stay in small host variables, added to inside the step (no
collective, no device sync, no host transfer per step); `StepProbe.read`
copies them out once per window. The probe wraps `model.train_step` (a
custom override included) and `model.optimizer.apply`, so a user's `fit`
does not change; install it before `fit` builds its train function (a
callback's `set_model`), and the train function Keras builds runs the probed
step, whatever else wraps that function later. XLA cannot compile `tf.timestamp()`, so a model compiled
with `jit_compile=True` is not probed (`install` returns `None`).

A probe made with `timing=False` only counts: one integer add of (1, the
batch size) per replica to a two-element variable, no timestamp, no identity
over the outputs, no scatter (what `ThroughputLogger` needs to count samples
where the input does not say its batch size and Keras' own count cannot be
read). It works under XLA too: its counters then live on the model's device,
and a read copies them once per window. Installing with
`timing=True` later turns the same probe into a timing one (one probe per
model, never two in the step).
"""

from __future__ import annotations

import functools
import threading
import time
from dataclasses import dataclass
from typing import Any

from keras_gpu.core import keras_private
from keras_gpu.hooks.in_step import plain_variables, replica_id

__all__ = ["FIELDS", "ProbeWindow", "StepProbe", "install", "installed", "unavailable_reason"]

#: The running sums per local replica, in this order: `gap_steps` counts the
#: steps with a gap (not an epoch's first), `calls` those of them that start a
#: call of the train function, `call_prev` the previous step's end before
#: each such call, and `check` the iterator's cross-worker check within gaps.
FIELDS = ("steps", "compute", "wait", "gap", "gap_steps", "call_prev", "calls", "check", "samples")
_F = {name: i for i, name in enumerate(FIELDS)}
_ATTR = "_keras_gpu_step_probe"
_OUTSIDE = object()  # the gradients-ready mark outside a probed step's tracing


@dataclass(frozen=True)
class ProbeWindow:
    """What one worker's steps did between two reads, in seconds per step.

    Attributes:
        steps: Training steps in the window (per replica).
        compute_sec: The worker's own forward and backward pass (the slowest
            local replica's).
        communication_sec: From the gradients being ready to the end of the
            step (the all-reduce, waiting for slower workers included, the
            variable update and the metrics), and the distributed iterator's
            cross-worker check before the step.
        input_sec: The wait for this worker's own batch: the time between
            steps that is neither host time nor the distributed iterator's
            check with every worker that each has one (that check, where a
            fast worker waits for a slow one, is communication); `nan` where
            it cannot be told apart from host time (a call of the train
            function without its timestamp).
        host_sec: Host work between calls of the train function: Keras'
            loop and the callbacks (with the input wait, where that is `nan`).
        samples: Samples the window's steps processed on this worker (every
            local replica's batch).
        replica_compute_sec: Each local replica's compute, in replica order.
    """

    steps: int
    compute_sec: float
    communication_sec: float
    input_sec: float
    host_sec: float
    samples: float
    replica_compute_sec: tuple[float, ...]

    @property
    def busy_sec(self) -> float:
        """Seconds per step the worker kept the others waiting for, at most: compute, host and its own input wait.

        Waits for the other workers (the all-reduce, the iterator's check)
        are left out.
        """
        return self.compute_sec + self.host_sec + self.measured_input_sec

    @property
    def measured_input_sec(self) -> float:
        """`input_sec`, 0 where it is `nan` (then held in the host time)."""
        return 0.0 if self.input_sec != self.input_sec else self.input_sec

    @property
    def step_sec(self) -> float:
        """Wall time per step: busy, input, and waiting in the reductions."""
        return self.busy_sec + self.communication_sec


def unavailable_reason(model: Any, timing: bool = True) -> str | None:
    """Why `model`'s steps cannot be probed (with timestamps, or only counted), or `None` when they can."""
    from keras_gpu.core import backend

    if backend.name() != "tensorflow":
        return f"the probe is written for the TensorFlow backend, not {backend.name()}"
    if timing and getattr(model, "jit_compile", False) is True:
        return "XLA (jit_compile=True) cannot compile tf.timestamp(); compile with jit_compile=False to measure"
    return None


def install(model: Any, local_replicas: int, timing: bool = True) -> StepProbe | None:
    """Probe `model`'s training steps from the next train function Keras builds; `None` where it cannot.

    The first install drops the model's train function (`fit` builds it anew
    from the probed step, before its first step); installing again on the
    same model reuses the probe and the traced function, so a later `fit`
    pays no retrace. A counting probe (`timing=False`) asked for timing
    becomes a timing probe (the train function is built anew once); a timing
    probe asked only to count stays as it is. `unavailable_reason` says
    why a model cannot be probed.
    """
    if unavailable_reason(model, timing) is not None:
        return None
    probe = installed(model)
    on_device = getattr(model, "jit_compile", False) is True  # only a counting probe gets here under XLA
    if probe is None or probe.local_replicas != local_replicas or probe.on_device != on_device:
        if probe is not None:
            timing = timing or (probe.timing and not on_device)
            probe._unwrap_step(model)  # noqa: SLF001 - the module's own class
        probe = StepProbe(local_replicas, timing=timing, on_device=on_device)
        probe._wrap_step(model)  # noqa: SLF001 - the module's own class
        object.__setattr__(model, _ATTR, probe)
        keras_private.drop_train_function(model)
    elif timing and not probe.timing:
        probe.timing = probe._timed = True  # noqa: SLF001 - the module's own class
        keras_private.drop_train_function(model)  # the next trace adds the timestamps
    probe._wrap_optimizer(getattr(model, "optimizer", None))  # noqa: SLF001 - the module's own class
    per_call = max(1, int(getattr(model, "steps_per_execution", 1) or 1))
    if per_call != probe.steps_per_execution:
        probe.steps_per_execution = per_call
        keras_private.drop_train_function(model)  # the step reads it while tracing
    return probe


def installed(model: Any) -> StepProbe | None:
    """The probe installed on `model`, or `None`."""
    probe = getattr(model, _ATTR, None)
    return probe if isinstance(probe, StepProbe) else None


class StepProbe:
    """Timestamps inside the step, summed per local replica; read once per window.

    Args:
        local_replicas: Replicas of this worker (the rows of the sums).
        timing: Take timestamps (`False`: only count steps and samples).
        on_device: Keep the sums on the default device rather than the host
            (a counting probe in an XLA-compiled step).
    """

    def __init__(self, local_replicas: int, timing: bool = True, on_device: bool = False) -> None:
        import tensorflow as tf

        self.local_replicas = max(1, int(local_replicas))
        self.timing = bool(timing)
        self._timed = self.timing  # whether a timing step ever ran: its samples are in the sums
        self.on_device = bool(on_device)
        self._base = time.time()
        self._sums, self._prev, self._count, self._in_epoch, self._prev_check = plain_variables(
            tf.zeros((self.local_replicas, len(FIELDS)), tf.float64),
            tf.zeros((self.local_replicas,), tf.float64),
            tf.zeros((2,), tf.int64),  # counting steps: (steps of every local replica, samples)
            tf.zeros((self.local_replicas,), tf.int64),  # steps of the epoch so far, per replica
            tf.zeros((self.local_replicas,), tf.float64),  # the check clock's seconds at the previous step
            device=None if on_device else "/cpu:0",
        )
        with tf.device(None if on_device else "/cpu:0"):
            self._no_prev = tf.zeros((self.local_replicas,), tf.float64)
            self._no_steps = tf.zeros((self.local_replicas,), tf.int64)
        self.steps_per_execution = 1  # steps per call of the train function (read while tracing)
        self.check_clock: Any = None  # the iterator's cross-worker check clock (keras_gpu.setup.iterator_check_private)
        self.ride: Any = None  # the rows' ride on the all-reduce (keras_gpu.hooks.row_ride), where one is installed
        self._trace = threading.local()  # the step being traced: where its t1 goes
        self._calls = 0.0  # Python-side: calls whose step had a previous step in the epoch
        self._call_time = 0.0  # and the sum of their start times, relative to _base
        self._first_call = True
        self._call_start = 0.0  # the current call's start, relative to _base
        self._last = [[0.0] * len(FIELDS) for _ in range(self.local_replicas)]
        self._last_calls = (0.0, 0.0)

    # -- on the training thread, once per epoch or window ---------------------------------

    def batch_begin(self) -> None:
        """Keras is about to call the train function (Python, no device work): where the host time ends."""
        self._call_start = time.time() - self._base

    def batch_end(self) -> None:
        """The call returned with its steps: count its start (a call that found the data's end ran no step)."""
        if self._first_call:
            self._first_call = False
        else:
            self._calls += 1.0
            self._call_time += self._call_start

    def epoch_begin(self) -> None:
        """Forget the previous step: the time between epochs (validation, epoch-end callbacks) is no gap."""
        self._prev.assign(self._no_prev)
        self._in_epoch.assign(self._no_steps)
        self._first_call = True

    def read(self) -> ProbeWindow | None:
        """The window since the previous read (one small copy from host memory); `None` without a step."""
        sums = self._sums.numpy().tolist()
        calls, call_time = self._calls, self._call_time
        delta = [[a - b for a, b in zip(row, last)] for row, last in zip(sums, self._last)]
        d_calls, d_call_time = calls - self._last_calls[0], call_time - self._last_calls[1]
        self._last, self._last_calls = sums, (calls, call_time)
        return window(delta, d_calls, d_call_time)

    def reset(self) -> None:
        """Start a new window now, dropping what was summed so far (warm-up)."""
        self.read()

    def counts(self) -> tuple[int, int]:
        """Steps and samples since the probe was made (one small copy): this worker's, every local replica's batch.

        A running total that `read` does not disturb, so several readers
        can share the probe, each keeping its own last value.
        """
        counted_steps, counted_samples = (int(v) for v in self._count.numpy())
        steps, samples = counted_steps // self.local_replicas, counted_samples
        if self._timed:
            sums = self._sums.numpy()
            steps += round(float(sums[0, _F["steps"]]))
            samples += round(float(sums[:, _F["samples"]].sum()))
        return steps, samples

    # -- wrapping ---------------------------------------------------------------------------

    def _wrap_step(self, model: Any) -> None:
        original = model.train_step

        @functools.wraps(original)
        def train_step(data: Any) -> Any:
            return self._probed_step(original, data)

        object.__setattr__(train_step, _ATTR, self)
        keras_private.set_train_step(model, train_step)

    def _unwrap_step(self, model: Any) -> None:
        """Put back the step this probe wrapped (before another probe wraps it)."""
        step = keras_private.patched_train_step(model)
        if step is not None and getattr(step, _ATTR, None) is self:
            keras_private.restore_train_step(model, step.__wrapped__)

    def _wrap_optimizer(self, optimizer: Any) -> None:
        if optimizer is None or getattr(optimizer.apply, _ATTR, None) is self:
            return
        original = optimizer.apply

        @functools.wraps(original)
        def apply(grads: Any, trainable_variables: Any = None, *args: Any, **kwargs: Any) -> Any:
            if getattr(self._trace, "t1", _OUTSIDE) is not None:  # not inside a probed step, or not its first update
                return original(grads, trainable_variables, *args, **kwargs)
            if trainable_variables is not None:
                trainable_variables = list(trainable_variables)
            grads = self._mark_gradients_ready(grads)
            result = original(grads, trainable_variables, *args, **kwargs)
            self._trace.updated = _reads(trainable_variables or keras_private.optimizer_trainable_variables(optimizer))
            return result

        object.__setattr__(apply, _ATTR, self)
        keras_private.set_optimizer_apply(optimizer, apply)

    # -- inside the traced step -----------------------------------------------------------------

    def _probed_step(self, original: Any, data: Any) -> Any:
        import tensorflow as tf

        if not self.timing:
            return self._counted_step(original, data)
        t0 = _stamp_after(data)
        with tf.control_dependencies([t0]):
            data = tf.nest.map_structure(_identity, data, expand_composites=True)
        self._trace.t1, self._trace.updated = None, []
        try:
            outputs = original(data)
        finally:
            if self.ride is not None:
                self.ride.gate(replica_id(), None)
        t1, updated = self._trace.t1, self._trace.updated
        self._trace.t1, self._trace.updated = _OUTSIDE, []
        t2 = _stamp_after([outputs, updated])
        if t1 is None:  # no optimizer step: all of it is the worker's own work
            t1 = t2
        self._accumulate(t0, t1, t2, data)  # stateful: the function runs it before it returns
        return outputs

    def _counted_step(self, original: Any, data: Any) -> Any:
        """The step and one integer add of (1, its batch size): no timestamp, no dependency, no replica index.

        Every local replica adds to the same two integers (an add on a
        variable is atomic), so the steps are summed over the local replicas
        and the samples are the worker's. A stateful op: the function runs it
        before it returns.
        """
        import tensorflow as tf

        self._count.assign_add(tf.stack([tf.constant(1, tf.int64), _batch_size(data)]))
        return original(data)

    def _mark_gradients_ready(self, grads: Any) -> Any:
        """Stamp `t1` once every gradient exists, and make the all-reduce wait for the stamp.

        Where the rows' ride (`ride`) carries a tensor in the
        all-reduce's pack, that tensor waits for `t1`, and with it the
        dense gradients' packed all-reduce: one dependency (with
        `CommunicationOptions(bytes_per_pack=...)` splitting the pack, the
        last pack). Every other gradient (all of them without the ride, and
        sparse ones) passes through an identity that waits for `t1`.
        """
        import tensorflow as tf

        grads = list(grads)
        t1 = _stamp_after(grads)
        self._trace.t1 = t1
        ride = self.ride
        dense = ride is not None and ride.carries([g for g in grads if isinstance(g, tf.Tensor)])
        if dense:
            ride.gate(replica_id(), t1)
        with tf.control_dependencies([t1]):
            return [
                g if g is None or (dense and isinstance(g, tf.Tensor))
                else tf.nest.map_structure(_identity, g, expand_composites=True)
                for g in grads
            ]

    def _accumulate(self, t0: Any, t1: Any, t2: Any, data: Any) -> list[Any]:
        """Add this step's row to the sums (stateful ops: the function runs them before it returns).

        A step starts a call of the train function when its index in the
        epoch is a multiple of the steps per execution; the previous step's
        end before such a call is where the host's time begins (Keras' loop,
        the callbacks), up to the call's Python timestamp
        (`batch_begin`). The check clock's seconds at `t0`, less those
        at the previous step, are the cross-worker check's part of the gap.
        """
        import tensorflow as tf

        r = _local_replica(self.local_replicas)
        base = tf.constant(self._base, tf.float64)
        prev = self._prev[r]
        valid = tf.cast(prev > 0, tf.float64)
        in_epoch = self._in_epoch[r]
        first = tf.cast(tf.equal(tf.math.floormod(in_epoch, max(1, int(self.steps_per_execution))), 0), tf.float64)
        check, keep_check = tf.constant(0.0, tf.float64), []
        if self.check_clock is not None:
            with tf.control_dependencies([t0]):
                check_now = self.check_clock.seconds()
            check = valid * (check_now - self._prev_check[r])
            keep_check = [self._prev_check.scatter_nd_update(tf.reshape(r, (1, 1)), tf.reshape(check_now, (1,)))]
        values = tf.stack(
            [
                tf.constant(1.0, tf.float64), t1 - t0, t2 - t1, valid * (t0 - base - prev), valid,
                valid * first * prev, valid * first, check, tf.cast(_batch_size(data), tf.float64),
            ]
        )
        if isinstance(r, int):
            indices = tf.constant([[r, i] for i in range(len(FIELDS))], tf.int32)
        else:
            indices = tf.stack([tf.fill([len(FIELDS)], r), tf.range(len(FIELDS))], axis=1)
        add = self._sums.scatter_nd_add(indices, values)
        with tf.control_dependencies([prev, in_epoch, *keep_check]):
            keep = self._prev.scatter_nd_update(tf.reshape(r, (1, 1)), tf.reshape(t2 - base, (1,)))
            count = self._in_epoch.scatter_nd_add(tf.reshape(r, (1, 1)), tf.ones((1,), tf.int64))
        return [add, keep, count, *keep_check]


def window(delta: list[list[float]], calls: float, call_time: float) -> ProbeWindow | None:
    """Per-step means of summed rows (one per local replica, `FIELDS`) and Python call times.

    Each step's own part is the first replica's span from its batch to its
    step's end: the slowest replica's compute, and the rest in the
    reductions (a faster replica waits there for the slowest), so host,
    input, compute and communication add up to the first replica's time
    from one step's end to the next. The gap between steps splits three ways: host time, from the previous
    step's end to Keras calling the train function (known for every call:
    `calls` Python timestamps summing to `call_time`, matched by the calls
    the rows counted); the iterator's cross-worker check (a wait for the
    other workers: communication); and the rest, the wait for this worker's
    own batch (input). Where the calls do not match (a call without its
    timestamp), the input is `nan` and the host holds the gap less the check.
    """
    rows = [dict(zip(FIELDS, row)) for row in delta]
    steps = rows[0]["steps"]
    if steps <= 0:
        return None
    compute = [r["compute"] / r["steps"] if r["steps"] > 0 else 0.0 for r in rows]
    first = rows[0]
    # The step's span on the first replica, whose gaps are the host and input parts: the worker's compute is
    # the slowest replica's, and the rest of the span is the reductions. Every other replica waits for the
    # slowest in the all-reduce, so a mean of the replicas' waits would count half their difference twice.
    wait = max(0.0, (first["compute"] + first["wait"]) / steps - max(compute))
    gap_steps = first["gap_steps"]
    per_gap = 1.0 / gap_steps if gap_steps > 0 else 0.0
    gap, check = first["gap"] * per_gap, first["check"] * per_gap
    if gap_steps > 0 and calls == first["calls"]:
        host = max(0.0, min(gap - check, (call_time - first["call_prev"]) * per_gap))
        input_sec = max(0.0, gap - check - host)
    else:
        input_sec, host = (float("nan"), max(0.0, gap - check)) if gap_steps > 0 else (0.0, 0.0)
    return ProbeWindow(
        steps=round(steps),
        compute_sec=max(compute),
        communication_sec=wait + check * gap_steps / steps,
        input_sec=input_sec,
        host_sec=host,
        samples=sum(r["samples"] for r in rows),
        replica_compute_sec=tuple(compute),
    )


# ---------------------------------------------------------------------------------- graph helpers


def _identity(value: Any) -> Any:
    import tensorflow as tf

    return tf.identity(value) if isinstance(value, tf.Tensor) else value


def _stamp_after(structure: Any) -> Any:
    """`tf.timestamp()` once every tensor in `structure` exists."""
    import tensorflow as tf

    tensors = [t for t in tf.nest.flatten(structure, expand_composites=True) if isinstance(t, tf.Tensor)]
    with tf.control_dependencies(tensors):
        return tf.timestamp()


def _reads(variables: Any) -> list[Any]:
    """Reads of the first and last updated variable: they exist once the reduced gradients were applied.

    A read is ordered after the update of the same variable (automatic
    control dependencies), and a variable's update waits for its reduced
    gradient; two reads stay cheap for models of any size.
    """
    import tensorflow as tf

    variables = list(variables or [])
    picked = variables[:1] + variables[-1:] if len(variables) > 1 else variables
    return [tf.convert_to_tensor(getattr(v, "value", v)) for v in picked]


def _local_replica(local_replicas: int) -> Any:
    """This replica's row: its index among the worker's replicas (replicas are laid out worker by worker).

    A Python int where the replica is known while tracing (the usual case),
    else a tensor.
    """
    import tensorflow as tf

    rid = replica_id()
    if isinstance(rid, int):
        return rid % local_replicas
    return tf.cast(tf.math.floormod(rid, local_replicas), tf.int32)



def _batch_size(data: Any) -> Any:
    """Samples in this replica's batch: the first dimension of the first input."""
    import tensorflow as tf

    for leaf in tf.nest.flatten(data):
        if isinstance(leaf, tf.RaggedTensor):
            return leaf.nrows()
        if isinstance(leaf, tf.SparseTensor):
            return leaf.dense_shape[0]
        if isinstance(leaf, tf.Tensor) and leaf.shape.rank:
            return tf.shape(leaf, out_type=tf.int64)[0]
    return tf.constant(0, tf.int64)
