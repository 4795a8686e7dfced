"""Cluster-view test worker: a multi-worker `fit` with StepTimeLogger, one worker made slow on demand.

Usage: cluster_worker.py LOG_DIR MODE OUT   (run under `keras-gpu launch`)

MODE:
- `balanced`: every worker does the same work;
- `compute`: worker 1's model runs eight extra 384x384 matmuls per step (no
  extra variables, so the collectives still match);
- `host`: a callback on worker 1 sleeps 15 ms after every step (`host-<ms>ms`:
  that many milliseconds, `host-20ms` for the keras-gpu tab's browser test);
- `rotate`: in epoch e, worker e (mod the number of workers) sleeps 15 ms after
  every step, so each epoch-end gather has another straggler;
- `custom`: as `compute`, in a model whose class overrides `train_step`;
- `soak`: balanced, 4 short epochs (many jobs in a row, each must end well);
- `rotate-<kind>-<spe>` (kind `compute`, `input` or `host`; spe the steps per
  execution): in epoch e, worker e is slowed in that part: 48 extra matmuls
  over its batch inside the model, an 80 ms sleep per batch in its tf.data
  pipeline, or a sleep of 20 ms per step after each call of the train function
  (80 ms after a call of 4 steps: a signal that stands out of a loaded
  machine's noise);
- `input`: worker 1's tf.data pipeline sleeps 80 ms per batch, every epoch;
- `host4-custom`, `host4-lso`: worker 1 sleeps 80 ms after each call of the
  train function, 4 steps per call, in a model whose class writes its own
  `train_step`, or with a `LossScaleOptimizer`;
- `slowdown`: every worker sleeps 20 ms after each batch from epoch 1 on
  (the whole cluster turns slow: no straggler, a slowdown);
- `measure`: balanced, 6 epochs of 32 steps (the false-alarm measurement of
  `benchmarks/studies/straggler_rule.py`);
- `identical`: the same model trained twice from the same seed, without and
  with the callbacks, with 1 and with 4 steps per execution; OUT/w<rank>.json
  holds the final weights' digests (`identical-ride` forces the rows' ride on
  the gradient all-reduce whatever the worker count, to show what it moves).

The callbacks are `keras_gpu.callbacks(LOG_DIR)`, the defaults, except that
every epoch's end shares the rows (`EPOCH_SHARE_S` = 0). Each worker
writes OUT/w<rank>.json: its own last breakdown, what it received at each
gather, whether the steps carried the rows, how often it all-gathered rows,
and how many all-reduces and all-gathers TensorFlow traced for the fit (in
`balanced` mode also the all-reduces for the same model trained without
keras-gpu's callbacks, first).
"""

from __future__ import annotations

import json
import os
import sys
import time

EPOCHS = 3
#: Host sleep of a slowed worker, per step: `steps_per_execution` times this after each call.
HOST_SLEEP_PER_STEP_S = 0.02


def main() -> None:
    log_dir, mode, out = sys.argv[1], sys.argv[2], sys.argv[3]
    import keras_gpu

    strategy = keras_gpu.make_strategy("multiworker")
    import keras
    import numpy as np
    import tensorflow as tf
    from tensorflow.python.ops import collective_ops

    from keras_gpu.hooks import gather as row_gather
    from keras_gpu.hooks import step_time_cluster
    from keras_gpu.hooks import step_time_logger as step_time

    # Every epoch's end shares, however short the epoch: these checks read one view per epoch. By default
    # a gathered share at a later epoch end waits for EPOCH_SHARE_S of steps (tests/test_row_ride.py).
    step_time_cluster.EPOCH_SHARE_S = 0.0

    rank = keras_gpu.worker_index(strategy)
    counts = {"traced_all_reduce_v2": 0, "traced_all_gather_v2": 0, "gathers": 0}

    def counted(key, original, traced=False):
        def call(*args, **kwargs):
            if not (traced and tf.executing_eagerly()):
                counts[key] += 1
            return original(*args, **kwargs)

        return call

    for name in ("all_reduce_v2", "all_gather_v2"):  # outside eager mode, each call traces one collective op
        setattr(collective_ops, name, counted(f"traced_{name}", getattr(collective_ops, name), traced=True))
    row_gather.RowGather.__call__ = counted("gathers", row_gather.RowGather.__call__)

    class Extra(keras.layers.Layer):
        """Eight matmuls whose result is multiplied by 0: more work, same variables."""

        def compute_output_shape(self, shape):
            return shape

        def call(self, x):
            m = tf.random.uniform((384, 384))
            for _ in range(8):
                m = tf.matmul(m, m) / 384.0
            return x + 0.0 * tf.reduce_sum(m)

    class Sleep(keras.callbacks.Callback):
        def __init__(self, seconds):
            super().__init__()
            self.seconds = seconds

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

        def on_train_batch_end(self, batch, logs=None):
            seconds = self.seconds(self.epoch) if callable(self.seconds) else self.seconds
            if seconds:
                time.sleep(seconds)

    class Custom(keras.Sequential):
        """A model whose class writes its own training step."""

        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                loss = self.compute_loss(x=x, y=y, y_pred=self(x, training=True))
            grads = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
            return {"loss": loss}

    def build():
        with strategy.scope():
            # Steps of several ms of real compute, so that host jitter stays small beside them.
            layers = [keras.Input((256,))]
            if mode in ("compute", "custom") and rank == 1:
                layers.append(Extra())
            layers += [keras.layers.Dense(512, activation="relu"), keras.layers.Dense(10)]
            model = (Custom if mode == "custom" else keras.Sequential)(layers)
            model.compile("sgd", "mse")
        return model

    if mode.startswith(("rotate-", "host4-")) or mode in ("input", "slowdown"):
        return kinds(strategy, rank, log_dir, out, mode, step_time)
    if mode.startswith("identical"):
        return identical(strategy, rank, log_dir, out, force_ride=mode == "identical-ride")

    rng = np.random.default_rng(0)
    steps = {"soak": 12, "measure": 32}.get(mode, 64)
    x, y = rng.random((256 * steps, 256), dtype=np.float32), rng.random((256 * steps, 10), dtype=np.float32)
    plain_collectives = None
    if mode == "balanced":
        build().fit(x[:1024], y[:1024], batch_size=256, epochs=1, verbose=0)
        plain_collectives, counts["traced_all_reduce_v2"] = counts["traced_all_reduce_v2"], 0
    model = build()
    callbacks = keras_gpu.callbacks(log_dir)
    (cb,) = [c for c in callbacks if isinstance(c, step_time.StepTimeLogger)]
    if (mode == "host" or mode.startswith("host-")) and rank == 1:
        callbacks.append(Sleep(0.015 if mode == "host" else float(mode.removeprefix("host-").removesuffix("ms")) / 1e3))
    epochs = {"soak": 4, "measure": 6}.get(mode, EPOCHS)
    if mode == "rotate":
        workers = strategy.num_replicas_in_sync
        callbacks.append(Sleep(lambda epoch: 0.015 if epoch % workers == rank else 0.0))
        epochs = workers
    model.fit(x, y, batch_size=256, epochs=epochs, verbose=0, callbacks=callbacks)
    record = {
        "rank": rank,
        "rode": bool(getattr(getattr(model, "_keras_gpu_row_ride", None), "rode", False)),
        "plain_collectives": plain_collectives,
        **counts,
        "last": None if cb.last is None else cb.last.as_dict(),
        "cluster": [
            None
            if c is None
            else {
                "slowest_worker": c.slowest_worker,
                "imbalance": c.imbalance,
                "reporting": c.reporting,
                "rows": {str(k): v for k, v in c.rows.items()},
            }
            for c in cb.cluster
        ],
    }
    with open(os.path.join(out, f"w{rank}.json"), "w") as f:
        json.dump(record, f)


def kinds(strategy, rank, log_dir, out, mode, step_time):
    """One kind of slow worker at a time, fed by tf.data; every slowing depends on the batch or the clock."""
    import keras
    import numpy as np
    import tensorflow as tf

    import keras_gpu

    workers = strategy.num_replicas_in_sync
    kind, spe = (mode.split("-")[1], int(mode.split("-")[2])) if mode.startswith("rotate-") else (mode, 1)
    if mode.startswith("host4-"):
        kind, spe = "host", 4
    epochs = workers if mode.startswith("rotate-") else EPOCHS
    state = {"epoch": 0}

    def slowed(epoch):
        if mode.startswith("rotate-"):
            return epoch % workers == rank
        if mode == "input" or mode.startswith("host4-"):
            return rank == 1
        return epoch >= 1  # slowdown: every worker from epoch 1

    # A variable the model reads: 1.0 while this worker's model is slowed (no retrace between epochs).
    with tf.device("/cpu:0"):
        flag = tf.Variable(0.0, trainable=False)

    class Extra(keras.layers.Layer):
        """48 matmuls over the batch where the flag is set, multiplied by 0: more work, same variables."""

        def compute_output_shape(self, shape):
            return shape

        def call(self, x):
            def heavy():
                m = tf.matmul(x, x, transpose_a=True) / 256.0
                for _ in range(48):
                    m = tf.matmul(m, m) / 256.0
                return tf.reduce_sum(m)

            extra = tf.cond(flag.read_value() > 0, heavy, lambda: tf.constant(0.0))
            return x + 0.0 * extra

    class Slow(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            state["epoch"] = epoch
            flag.assign(1.0 if kind == "compute" and slowed(epoch) else 0.0)

        def on_train_batch_end(self, batch, logs=None):
            if kind in ("host", "slowdown") and slowed(state["epoch"]):
                time.sleep(HOST_SLEEP_PER_STEP_S * spe)

    def nap(batch):
        if kind == "input" and slowed(state["epoch"]):
            # Longer than a balanced step even at a high load: the pipeline runs ahead of the step (prefetch),
            # so only what exceeds the step is a wait.
            time.sleep(0.08)
        return batch

    rng = np.random.default_rng(0)
    x, y = rng.random((256 * 48, 256), dtype=np.float32), rng.random((256 * 48, 10), dtype=np.float32)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(256, drop_remainder=True)
    ds = ds.map(lambda a, b: (tf.ensure_shape(tf.py_function(nap, [a], tf.float32), a.shape), b))
    class Custom(keras.Sequential):
        """A model whose class writes its own training step."""

        def train_step(self, data):
            a, b = data
            with tf.GradientTape() as tape:
                loss = self.compute_loss(x=a, y=b, y_pred=self(a, training=True))
            grads = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
            return {"loss": loss}

    with strategy.scope():
        layers = [keras.Input((256,)), Extra(), keras.layers.Dense(512, activation="relu"), keras.layers.Dense(10)]
        model = (Custom if mode == "host4-custom" else keras.Sequential)(layers)
        optimizer = keras.optimizers.SGD()
        if mode == "host4-lso":
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        model.compile(optimizer, "mse", steps_per_execution=spe)
    callbacks = [Slow(), *keras_gpu.callbacks(log_dir)]
    (cb,) = [c for c in callbacks if isinstance(c, step_time.StepTimeLogger)]
    model.fit(ds, epochs=epochs, verbose=0, callbacks=callbacks)
    record = {
        "rank": rank,
        "last": None if cb.last is None else cb.last.as_dict(),
        "cluster": [
            None if c is None else {
                key: getattr(c, key)
                for key in ("slowest_worker", "imbalance", "part", "part_sec", "part_median_sec", "excess_sec",
                            "spread_sec", "clear", "slowdown", "slowdown_worker", "slowdown_median", "reporting")
            } | {"rows": {str(k): v for k, v in c.rows.items()}}
            for c in cb.cluster
        ],
    }
    with open(os.path.join(out, f"w{rank}.json"), "w") as f:
        json.dump(record, f)


def identical(strategy, rank, log_dir, out, force_ride):
    """Final weights without and with the default callbacks, for 1 and 4 steps per execution."""
    import hashlib

    import keras
    import numpy as np

    import keras_gpu
    from keras_gpu.hooks import step_time_cluster

    if force_ride:
        step_time_cluster.rides_exactly = lambda replicas_in_sync: True
    rng = np.random.default_rng(0)
    x, y = rng.random((64 * 24, 64), dtype=np.float32), rng.random((64 * 24, 10), dtype=np.float32)
    record = {"rank": rank}
    for spe in (1, 4):
        weights = {}
        for variant in ("plain", "kg"):
            keras.utils.set_random_seed(7)
            with strategy.scope():
                model = keras.Sequential(
                    [keras.Input((64,)), keras.layers.Dense(256, activation="relu"), keras.layers.Dense(10)]
                )
                model.compile("adam", "mse", steps_per_execution=spe)
            callbacks = keras_gpu.callbacks(os.path.join(log_dir, f"spe{spe}")) if variant == "kg" else []
            model.fit(x, y, batch_size=64, epochs=3, verbose=0, callbacks=callbacks)
            weights[variant] = [w.copy() for w in model.get_weights()]
            if variant == "kg":
                record[f"rode_spe{spe}"] = bool(getattr(getattr(model, "_keras_gpu_row_ride", None), "rode", False))
        plain, kg = weights["plain"], weights["kg"]
        record[f"spe{spe}"] = {
            variant: hashlib.sha256(b"".join(w.tobytes() for w in ws)).hexdigest() for variant, ws in weights.items()
        }
        record[f"spe{spe}"]["max_diff"] = max(float(np.max(np.abs(a - b))) for a, b in zip(plain, kg))
    with open(os.path.join(out, f"w{rank}.json"), "w") as f:
        json.dump(record, f)


if __name__ == "__main__":
    main()
