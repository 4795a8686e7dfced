"""A two-worker job with two replicas per worker, for tests/test_gpu_cluster_two_replicas.py (`keras-gpu launch -n 2`).

Usage: gpu_replicas_worker.py LOG_DIR OUT

Each worker takes one GPU (its own where the machine has two or more, else
the one GPU both share) and splits it into two logical GPUs of 1 GiB, so the
job trains 4 replicas in sync under `keras_gpu.make_strategy("multiworker")`
with ring collectives (NCCL refuses one physical GPU twice). Then:

* `input_spe1`, `input_spe4`: worker 1's tf.data pipeline sleeps `SLEEP` per
  batch; the default callbacks (`keras_gpu.callbacks(LOG_DIR)`, the cluster
  view on) with 1 and 4 steps per execution; every gather's rows are kept.
* `identical`: the same model trained from the same seed without and with
  the default callbacks, with 1 and 4 steps per execution; the final
  weights' digests are kept.

Writes OUT/w<rank>.json.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time

SLEEP = 0.08  # worker 1's input, per batch: longer than a step, so most of it is a wait
BATCHES, EPOCHS = 32, 3


def main() -> None:
    log_dir, out = sys.argv[1], sys.argv[2]
    rank = int(os.environ["KERAS_GPU_WORKER_INDEX"])
    import keras_gpu

    gpus = _gpu_count()
    keras_gpu.configure_devices(visible_gpus=[rank if gpus >= 2 else 0], logical_gpus=[1024, 1024])
    strategy = keras_gpu.make_strategy("multiworker", communication="ring")
    import keras
    import numpy as np
    import tensorflow as tf

    from keras_gpu.hooks import step_time_cluster
    from keras_gpu.hooks.step_time_logger import StepTimeLogger

    step_time_cluster.EPOCH_SHARE_S = 0.0  # one view of each (short) epoch: the checks read them per epoch

    record = {
        "rank": rank,
        "replicas_in_sync": int(strategy.num_replicas_in_sync),
        "local_devices": [str(d) for d in strategy.extended.worker_devices],
    }
    rng = np.random.default_rng(0)
    x, y = rng.random((64 * BATCHES, 64), dtype=np.float32), rng.random((64 * BATCHES, 10), dtype=np.float32)

    def build(spe):
        keras.utils.set_random_seed(7)
        with strategy.scope():
            model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(256, activation="relu"),
                                      keras.layers.Dense(10)])
            model.compile("sgd", "mse", steps_per_execution=spe)
        return model

    def nap(batch):
        if rank == 1:
            time.sleep(SLEEP)
        return batch

    slow = tf.data.Dataset.from_tensor_slices((x, y)).batch(64, drop_remainder=True)
    slow = slow.map(lambda a, b: (tf.ensure_shape(tf.py_function(nap, [a], tf.float32), a.shape), b))
    for spe in (1, 4):
        model = build(spe)
        callbacks = keras_gpu.callbacks(os.path.join(log_dir, f"input_spe{spe}"))
        (step_time,) = [c for c in callbacks if isinstance(c, StepTimeLogger)]
        model.fit(slow, epochs=EPOCHS, verbose=0, callbacks=callbacks)
        record[f"input_spe{spe}"] = [
            None if c is None else {
                "slowest_worker": c.slowest_worker, "part": c.part, "reporting": c.reporting,
                "rows": {str(k): v for k, v in c.rows.items()},
            }
            for c in step_time.cluster
        ]
    for spe in (1, 4):
        digests = {}
        for variant in ("plain", "kg"):
            model = build(spe)
            callbacks = keras_gpu.callbacks(os.path.join(log_dir, f"identical_spe{spe}")) if variant == "kg" else []
            model.fit(x, y, batch_size=64, epochs=EPOCHS, verbose=0, shuffle=False, callbacks=callbacks)
            digests[variant] = hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()
        record[f"identical_spe{spe}"] = digests
    with open(os.path.join(out, f"w{rank}.json"), "w") as f:
        json.dump(record, f)


def _gpu_count() -> int:
    """GPUs NVML sees (0 without a driver: the GPU settings are then skipped, and each worker has one CPU replica)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no NVML, no GPU
        return 0
    try:
        return pynvml.nvmlDeviceGetCount()
    finally:
        pynvml.nvmlShutdown()


if __name__ == "__main__":
    main()
