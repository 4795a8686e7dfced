"""One small all-gather of a row of numbers per worker, through the strategy's own collectives.

For the cluster view, where its rows cannot ride on a training step's
gradient all-reduce (`keras_gpu.hooks.row_ride`): the fit's last row,
which no step follows, or every row of a step that carries none. Each
worker of a multi-worker job hands in a row of floats at the same training
step, and every worker gets back all rows, row k from worker k. It runs on the strategy's collectives (an `all_gather`
in the replica context of one traced `tf.function`), never on a channel of
its own, and it must be called at a point every worker reaches.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["RowGather"]


class RowGather:
    """All-gather rows of `width` floats from every worker of `strategy`.

    Args:
        strategy: A multi-worker `tf.distribute` strategy (any strategy works;
            with one worker the result is the one row).
        width: Floats per row.
        workers: Workers in the job.
    """

    def __init__(self, strategy: Any, width: int, workers: int) -> None:
        import tensorflow as tf

        self.strategy = strategy
        self.width = width
        self._replicas = int(getattr(strategy, "num_replicas_in_sync", 1) or 1)
        self._per_worker = max(1, self._replicas // max(1, workers))

        def replica_fn(row: Any) -> Any:
            ctx = tf.distribute.get_replica_context()
            return ctx.all_gather(tf.reshape(row, (1, width)), axis=0)

        @tf.function(input_signature=[tf.TensorSpec((width,), tf.float64)], autograph=False)
        def gather(row: Any) -> Any:
            return strategy.run(replica_fn, args=(row,))

        self._gather = gather

    def __call__(self, row: Sequence[float]) -> list[list[float]]:
        """Every worker's row, worker 0 first; call it on every worker at the same step."""
        import tensorflow as tf

        if len(row) != self.width:
            raise ValueError(f"`row` must hold {self.width} numbers. Received: {len(row)} numbers")
        out = self._gather(tf.constant(row, tf.float64))
        local = self.strategy.experimental_local_results(out)[0].numpy()
        # Replica r of the job is worker r // replicas_per_worker; keep one row per worker.
        return [list(map(float, local[i])) for i in range(0, local.shape[0], self._per_worker)]
