"""A row of numbers from every worker, carried by the gradient all-reduce that each training step already runs.

The cluster view needs each worker's measurements on the chief. A separate
all-gather at an epoch's end costs a collective round trip of its own (about
2 ms on loopback gRPC, a quarter of a percent of a one-second epoch); the
gradient all-reduce runs anyway. So each worker *publishes* its row into a
small variable on its first local replica's device (one host-to-device copy
per publish), and every training step adds a `(workers, 2 * width)` tensor to
the optimizer's batched gradient all-reduce
(`keras_gpu.setup.keras_compat.add_to_gradient_all_reduce`): the
worker's first replica fills its own slot with the published row, every
other slot and every other replica holds zeros, so the sum is every worker's
row, exactly. The sum lands in a second variable on the same device; a
worker *reads* it (one small device-to-host copy) at the first batch end
after a publish. Per step that is a few tiny ops inside the step and
`(workers, 2 * width)` more numbers in the gradients' pack: no new collective,
no device sync, no host transfer.

Only where the all-reduce has two members
(`keras_gpu.hooks.step_time_cluster.rides_exactly`): the rows lengthen
the pack, which moves a ring all-reduce's chunk boundaries and so the order
in which each gradient element's terms are added; with two members each
element is one addition, the same in any order.

The pack is one concatenation, so the row travels in the gradients' dtype,
split when published into a high and a low float32 half (`x = hi + lo`),
which keeps a float64 to about 1e-14 relative; the halves are added when the
rows are read. A step
whose dense gradients are not all float32 or all float64 carries nothing
(`RowRide.rode` stays `False`), and the caller gathers another way.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import Any

from keras_gpu.core import keras_private
from keras_gpu.hooks.in_step import plain_variables, replica_id

__all__ = ["RowRide", "install_ride"]

_ATTR = "_keras_gpu_row_ride"


def install_ride(model: Any, workers: int, worker: int, width: int, local_replicas: int, device: str) -> RowRide | None:
    """A ride on `model.optimizer`'s gradient all-reduce, set up before `fit` builds its train function.

    A ride installed earlier on the same model and optimizer with the same
    layout is reused (its traced train function already carries it);
    otherwise the model's
    train function is dropped, so `fit` traces the step anew with the ride.
    `None` where the optimizer has no such all-reduce to ride on.
    """
    from keras_gpu.setup.keras_compat import add_to_gradient_all_reduce

    optimizer = getattr(model, "optimizer", None)
    ride = getattr(model, _ATTR, None)
    layout = (workers, worker, width, local_replicas, device)
    if isinstance(ride, RowRide) and ride.layout == layout and ride.optimizer is optimizer:
        return ride
    ride = RowRide(*layout)
    if optimizer is None or not add_to_gradient_all_reduce(optimizer, ride.slots, ride.received):
        return None
    ride.optimizer = optimizer
    object.__setattr__(model, _ATTR, ride)
    keras_private.drop_train_function(model)
    return ride


class RowRide:
    """Every worker's published row, summed into each worker's copy by the gradient all-reduce.

    Args:
        workers: Workers in the job (the table's rows).
        worker: This worker's index (its slot is its replicas' `r // local_replicas`).
        width: Numbers per row.
        local_replicas: Replicas per worker (replica `r` is worker `r // local_replicas`).
        device: This worker's first local replica's device, where both variables live.

    Attributes:
        rode: Whether a traced step carries the rows (set while tracing).
    """

    def __init__(self, workers: int, worker: int, width: int, local_replicas: int, device: str) -> None:
        import tensorflow as tf

        self.layout = (workers, worker, width, local_replicas, device)
        self.workers, self.worker, self.width = workers, worker, width
        self.local_replicas = max(1, local_replicas)
        self.rode = False
        self.optimizer: Any = None  # the optimizer whose all-reduce carries the rows
        self._gates: dict[Any, Any] = {}  # per replica being traced: the tensor its carried rows wait for
        # The published row as its high and low float32 halves (held as float64), and the sums as received.
        self._row, self._table = plain_variables(
            tf.fill((2 * width,), tf.constant(math.nan, tf.float64)),
            tf.zeros((workers, 2 * width), tf.float64),
            device=device,
        )

    def gate(self, replica: Any, tensor: Any) -> None:
        """While tracing `replica` (`keras_gpu.hooks.in_step.replica_id`), its carried rows wait for `tensor`.

        Keyed by the replica, not the thread: a `LossScaleOptimizer` applies
        the gradients from replica threads of their own (a `merge_call`).
        `None` removes the gate.
        """
        if not isinstance(replica, int):  # known only at run time: this thread's replica
            replica = (threading.get_ident(),)
        if tensor is None:
            self._gates.pop(replica, None)
        else:
            self._gates[replica] = tensor

    def publish(self, row: Sequence[float]) -> None:
        """This worker's row, for the next training step to carry (one small copy to the device)."""
        import numpy as np

        if len(row) != self.width:
            raise ValueError(f"`row` must hold {self.width} numbers. Received: {len(row)} numbers")
        exact = np.asarray(row, np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            hi = exact.astype(np.float32).astype(np.float64)
            lo = (exact - hi).astype(np.float32).astype(np.float64)
        self._row.assign(np.concatenate([hi, np.where(np.isfinite(hi), lo, 0.0)]))

    def read(self) -> list[list[float]]:
        """Every worker's row as the last training step carried it, worker 0 first (one small copy)."""
        table = self._table.numpy()
        return (table[:, : self.width] + table[:, self.width :]).tolist()

    def carries(self, grads: list[Any]) -> bool:
        """Whether a step with these dense gradients carries the rows: all float32, or all float64."""
        return self._dtype(grads) is not None

    # -- inside the traced step (the optimizer's all-reduce, in each replica's context) ------------

    def slots(self, grads: list[Any]) -> Any:
        """The tensor this replica adds to the all-reduce: its worker's row in its slot, or zeros (`None`: none)."""
        import tensorflow as tf

        dtype = self._dtype(grads)
        if dtype is None:
            return None
        self.rode = True
        rid = replica_id()
        gate = self._gates.get(rid if isinstance(rid, int) else (threading.get_ident(),))
        shape = (self.workers, 2 * self.width)
        with tf.control_dependencies([] if gate is None else [gate]):
            if isinstance(rid, int) and rid % self.local_replicas != 0:
                return tf.zeros(shape, dtype)  # the worker's first replica carries its row
            row = tf.cast(self._row.read_value(), dtype)  # exact: both halves are float32 numbers
            if isinstance(rid, int):
                slot = rid // self.local_replicas
                return tf.pad(row[None, :], [[slot, self.workers - slot - 1], [0, 0]])
            # Replica r of the job is worker r // local_replicas; only a worker's first replica fills its slot.
            mine = tf.logical_and(
                tf.equal(tf.range(self.workers), rid // self.local_replicas),
                tf.equal(rid % self.local_replicas, 0),
            )
            # `where`, not a product: a NaN of an unmeasured row stays in its own slot.
            return tf.where(mine[:, None], row[None, :], tf.zeros(shape, dtype))

    def received(self, total: Any) -> None:
        """Keep the summed rows on this worker's first replica (the halves are added when read)."""
        import tensorflow as tf

        rid = replica_id()
        if not isinstance(rid, int) or rid % self.local_replicas == 0:
            self._table.assign(tf.cast(total, tf.float64))

    def _dtype(self, grads: list[Any]) -> Any:
        import tensorflow as tf

        dtypes = {g.dtype for g in grads}
        return dtypes.pop() if len(dtypes) == 1 and dtypes <= {tf.float32, tf.float64} else None
