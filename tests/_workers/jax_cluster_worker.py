"""One two-process JAX job for tests/backends/test_jax_cluster_view.py, run under `keras-gpu launch`.

    python jax_cluster_worker.py OUT_DIR

Three fits of two epochs, each with its own `StepTimeLogger` (no tracing):

1. ``balanced``: NumPy input, every process alike;
2. ``host``: a callback sleeps at every batch end on process 1 only;
3. ``input``: a `keras.utils.PyDataset` whose `__getitem__` sleeps on process 1 only;
4. ``host_within``: as ``host``, with the gathers within an epoch every 0.3 s instead of 30 s
   (`CLUSTER_EVERY_S`), so the rows are also gathered at batch ends every process adopts.

Writes `OUT_DIR/result_<rank>.json`: per fit, each gather's slowest worker,
part and whether it was clear, where each all-gather was called from
(`at_epoch_end`, `at_batch_end` or `at_fit_end` of the schedule), and the
verdict (straggler, part, sentence).
"""

import json
import os
import sys
import time

import keras_gpu

strategy = keras_gpu.make_strategy()

import keras
import numpy as np

from keras_gpu.hooks import step_time_cluster, step_time_cluster_jax
from keras_gpu.meters.cluster_view import verdict_over

calls = []  # where each all-gather of the rows was called from: the schedule's own method
_gather = step_time_cluster_jax.JaxRowGather.__call__


def _recorded(self, row):
    import inspect

    names = [frame.function for frame in inspect.stack()[1:6]]
    calls.append(next((n for n in names if n in ("at_batch_end", "at_epoch_end", "at_fit_end")), "?"))
    return _gather(self, row)


step_time_cluster_jax.JaxRowGather.__call__ = _recorded

GLOBAL, STEPS, EPOCHS, SLEEP = 32, 16, 2, 0.05
out_dir = sys.argv[1]
rank = int(os.environ["KERAS_GPU_WORKER_INDEX"])
rng = np.random.default_rng(0)
x = rng.normal(size=(GLOBAL * STEPS, 16)).astype("float32")
y = (x @ rng.normal(size=(16, 4))).astype("float32")


class SlowHost(keras.callbacks.Callback):
    """Sleeps at every batch end on process 1: host time between steps, depending on nothing."""

    def on_train_batch_end(self, batch, logs=None):
        if rank == 1:
            time.sleep(SLEEP)


class SlowInput(keras.utils.PyDataset):
    """The same batches; on process 1 each one takes `SLEEP` longer to read."""

    def __len__(self):
        return STEPS

    def __getitem__(self, i):
        if rank == 1:
            time.sleep(SLEEP)
        return x[i * GLOBAL : (i + 1) * GLOBAL], y[i * GLOBAL : (i + 1) * GLOBAL]


with strategy.scope():
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="tanh"), keras.layers.Dense(4)])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")

result = {}
for fit, data, extra in (
    ("balanced", (x, y), []),
    ("host", (x, y), [SlowHost()]),
    ("input", (SlowInput(),), []),
    ("host_within", (x, y), [SlowHost()]),
):
    if fit == "host_within":
        step_time_cluster.CLUSTER_EVERY_S = 0.3
    step_time = keras_gpu.StepTimeLogger(os.path.join(out_dir, fit), profile_every_s=0)
    kwargs = {"batch_size": GLOBAL} if len(data) == 2 else {}
    calls.clear()
    model.fit(*data, epochs=EPOCHS, verbose=0, callbacks=[step_time, *extra], **kwargs)
    gathers = [g for g in step_time.cluster if g is not None]
    verdict = verdict_over(gathers)
    result[fit] = {
        "gathers": [
            {"slowest": g.slowest_worker, "part": g.part, "clear": g.clear, "reporting": g.reporting,
             "busy": [g.rows[k]["busy_sec"] for k in sorted(g.rows)], "step": [g.rows[k]["step_sec"] for k in sorted(g.rows)],
             "input": [g.rows[k]["input_sec"] for k in sorted(g.rows)], "host": [g.rows[k]["other_sec"] for k in sorted(g.rows)],
             "steps": [g.rows[k]["traced_steps"] for k in sorted(g.rows)]}
            for g in gathers
        ],
        "calls": list(calls),
        "straggler": verdict.straggler,
        "part": verdict.part,
        "sentence": verdict.sentence,
    }
with open(os.path.join(out_dir, f"result_{rank}.json"), "w") as f:
    json.dump(result, f)
