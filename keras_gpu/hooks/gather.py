"""One small all-gather of a row of numbers per worker, through the strategy's own collectives.

For the cluster view, where its rows cannot ride on a training step's
gradient all-reduce (`keras_gpu.hooks.row_ride`): the fit's last row,
which no step follows, or every row of a step that carries none. Each
worker of a multi-worker job hands in a row of floats at the same training
step, and every worker gets back all rows, row k from worker k. It runs on the strategy's collectives (an `all_gather`
in the replica context of one traced `tf.function`), never on a channel of
its own, and it must be called at a point every worker reaches.

The collective orders its members by their device names, as strings:
`/job:worker/replica:0/task:10` comes before `.../task:2`, so in a job of
more than ten workers the k-th gathered row is not worker k's (in a job of
16 workers, worker 15's row came back 8th). Each row therefore travels with
its worker's index, and comes back in its place.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["RowGather", "in_worker_order"]


class RowGather:
    """All-gather rows of `width` floats from every worker of `strategy`.

    Args:
        strategy: A multi-worker `tf.distribute` strategy (any strategy works;
            with one worker the result is the one row).
        width: Floats per row.
        workers: Workers in the job.
        worker: This worker's index: each row travels with it and comes back
            in its place (`None`: the rows in the collective's own order).
    """

    def __init__(self, strategy: Any, width: int, workers: int, worker: int | None = None) -> None:
        import tensorflow as tf

        self.strategy = strategy
        self.width = width
        self.workers = max(1, workers)
        self.worker = worker
        self._replicas = int(getattr(strategy, "num_replicas_in_sync", 1) or 1)
        self._per_worker = max(1, self._replicas // self.workers)
        sent = width + (worker is not None)

        def replica_fn(row: Any) -> Any:
            ctx = tf.distribute.get_replica_context()
            return ctx.all_gather(tf.reshape(row, (1, sent)), axis=0)

        @tf.function(input_signature=[tf.TensorSpec((sent,), tf.float64)], autograph=False)
        def gather(row: Any) -> Any:
            return strategy.run(replica_fn, args=(row,))

        self._gather = gather

    def __call__(self, row: Sequence[float]) -> list[list[float]]:
        """Every worker's row, worker 0 first; call it on every worker at the same step."""
        import tensorflow as tf

        if len(row) != self.width:
            raise ValueError(f"`row` must hold {self.width} numbers. Received: {len(row)} numbers")
        sent = list(row) if self.worker is None else [float(self.worker), *row]
        out = self._gather(tf.constant(sent, tf.float64))
        local = self.strategy.experimental_local_results(out)[0].numpy().tolist()
        if self.worker is None:
            # Replica r of the job is worker r // replicas_per_worker; keep one row per worker.
            return [list(map(float, local[i])) for i in range(0, len(local), self._per_worker)]
        return in_worker_order(local, self.workers)


def in_worker_order(rows: Sequence[Sequence[float]], workers: int) -> list[list[float]]:
    """Gathered rows, each led by its worker's index, as one row per worker in index order (without the index).

    Rows of the same worker (one per replica) are alike: the last one is
    kept. A worker whose row is missing gets a row of NaN ("not available").

    Examples:
        >>> rows = [[0, 0.5], [10, 1.5], [1, 2.5], [1, 2.5]]  # worker 1: two replicas
        >>> in_worker_order(rows, 11)[:2], in_worker_order(rows, 11)[10]
        ([[0.5], [2.5]], [1.5])
    """
    width = max((len(r) - 1 for r in rows), default=0)
    out = [[math.nan] * width for _ in range(workers)]
    for r in rows:
        k = int(r[0])
        if 0 <= k < workers:
            out[k] = [float(v) for v in r[1:]]
    return out
