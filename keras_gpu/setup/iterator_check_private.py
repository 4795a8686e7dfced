"""The time a multi-worker input iterator spends checking with every worker that each has a batch.

In a multi-worker TensorFlow job, the distributed iterator's `get_next`
first fetches this worker's batch from its own pipeline, then all-reduces
across the workers how many replicas have one (TensorFlow's private
`input_lib._calculate_replicas_with_values`, through `strategy.reduce`), so
that every worker ends its epoch at the same step. A worker whose batch is
ready early waits there for the slowest worker: that wait is
synchronization, not input. `IteratorCheckClock` stamps
`tf.timestamp()` just before that all-reduce (once the local batch exists;
the all-reduce waits for the stamp) and just after it, and sums the
difference in a host variable: one add per fetched batch, no collective, no
host transfer. The step probe reads the sum once per window and moves the
time from input to communication.

Only the strategy's own `reduce` sees the call
(`keras_gpu.setup.keras_compat.KerasMultiWorkerMirroredStrategy`),
and only where a clock was attached before the train function was traced.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["IteratorCheckClock", "attach_clock", "attached_clock", "is_iterator_check", "timed_check"]

_ATTR = "_keras_gpu_iterator_check_clock"
_INPUT_LIB = "tensorflow.python.distribute.input_lib"
_CHECK = "_calculate_replicas_with_values"


class IteratorCheckClock:
    """Seconds spent in the iterator's cross-worker check, and how many checks, summed on the host.

    Examples:
        >>> clock = IteratorCheckClock()
        >>> clock.read()
        (0.0, 0)
    """

    def __init__(self) -> None:
        import tensorflow as tf

        made: list[Any] = []

        def create() -> None:  # a thread of its own: outside any strategy's scope (scopes are per thread)
            with tf.device("/cpu:0"):
                made.append(tf.Variable(tf.zeros((2,), tf.float64), trainable=False))

        thread = threading.Thread(target=create, name="keras-gpu-iterator-check-clock")
        thread.start()
        thread.join()
        if not made:
            raise RuntimeError("could not create the iterator check clock's variable")
        self._sums = made[0]

    def read(self) -> tuple[float, int]:
        """`(seconds, checks)` since the clock was made (one small host copy); a running total."""
        seconds, checks = self._sums.numpy().tolist()
        return float(seconds), round(checks)

    def seconds(self) -> Any:
        """The seconds summed so far, as a tensor (a read inside a traced function)."""
        return self._sums.read_value()[0]

    def around(self, value: Any, reduce: Any) -> Any:
        """`reduce(value)` between two timestamps, the difference added to the sums (inside a traced function)."""
        import tensorflow as tf

        with tf.control_dependencies([value]):
            before = tf.timestamp()
        with tf.control_dependencies([before]):
            value = tf.identity(value)
        result = reduce(value)
        with tf.control_dependencies([result]):
            after = tf.timestamp()
        add = self._sums.assign_add(tf.stack([after - before, tf.constant(1.0, tf.float64)]))
        with tf.control_dependencies([add]):
            return tf.identity(result)


def attach_clock(strategy: Any) -> IteratorCheckClock:
    """The clock of `strategy`'s iterator checks, made on the first call (eagerly, before tracing)."""
    clock = attached_clock(strategy)
    if clock is None:
        clock = IteratorCheckClock()
        object.__setattr__(strategy, _ATTR, clock)
    return clock


def attached_clock(strategy: Any) -> IteratorCheckClock | None:
    """The clock attached to `strategy`, or `None`."""
    clock = getattr(strategy, _ATTR, None)
    return clock if isinstance(clock, IteratorCheckClock) else None


def is_iterator_check(frame: Any) -> bool:
    """Whether `frame` is TensorFlow's distributed iterator counting the replicas that have a batch."""
    return frame is not None and frame.f_code.co_name == _CHECK and frame.f_globals.get("__name__") == _INPUT_LIB


def timed_check(strategy: Any, value: Any, reduce: Any) -> Any:
    """`reduce(value)`, timed by `strategy`'s clock where one is attached and a function is being traced."""
    import tensorflow as tf

    clock = attached_clock(strategy)
    if clock is None or tf.executing_eagerly():
        return reduce(value)
    return clock.around(value, reduce)
