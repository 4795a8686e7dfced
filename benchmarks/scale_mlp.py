"""The scaling study's workload: a small MLP trained under keras_gpu.make_strategy(), with a stopwatch.

`keras-gpu scale` runs it unchanged in `benchmarks/gpu_check.py` and `benchmarks/studies/scale_time.py`, and the
tests of `keras-gpu scale` compare its rows with the stopwatch. On TensorFlow it reads a `tf.data` pipeline,
on JAX NumPy arrays; `--batch` is per replica, so the global batch grows with the replicas.

    python -m keras_gpu.cli scale --replicas 1,2 --workers 1,2 benchmarks/scale_mlp.py --steps 300

Arguments: `--steps S` (training steps, one epoch), `--batch B` (per replica), `--width W` (hidden units),
`--input-ms M` (host work per sample in a tf.data `py_function`, in ms/64 samples: grows with the batch),
`--stopwatch FILE` (the chief writes each batch end's perf_counter, one JSON list, to FILE.<total replicas> at the
end of training, or to FILE.<total replicas>.again where that exists: the study's second baseline run), `--no-fit` (build the model and exit without training), `--fail` (exit 3 before training),
`--fail-replicas K` (exit 3 before training where the strategy has K replicas), `--epochs E` (the steps
split into E epochs), `--val-sleep S` (validate after each epoch, and sleep S seconds in it), `--plain` (build the model outside
the strategy's scope: it trains on one replica whatever the strategy has), `--hang-at K` (sleep for an hour
at the end of batch K), `--jit` (compile with `jit_compile=True`).
"""

import argparse
import contextlib
import json
import os
import time

import numpy as np

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=200)
p.add_argument("--batch", type=int, default=64)
p.add_argument("--width", type=int, default=64)
p.add_argument("--input-ms", type=float, default=0.0)
p.add_argument("--stopwatch", default=None)
p.add_argument("--no-fit", action="store_true")
p.add_argument("--fail", action="store_true")
p.add_argument("--fail-replicas", type=int, default=0)
p.add_argument("--epochs", type=int, default=1)
p.add_argument("--plain", action="store_true")
p.add_argument("--hang-at", type=int, default=-1)
p.add_argument("--val-sleep", type=float, default=0.0)
p.add_argument("--jit", action="store_true")
a = p.parse_args()

import keras  # noqa: E402 - after the arguments, so --help needs no backend

import keras_gpu  # noqa: E402

strategy = keras_gpu.make_strategy()
global_batch = a.batch * strategy.num_replicas_in_sync
rng = np.random.default_rng(0)
n = global_batch * a.steps
x = rng.normal(size=(n, 32)).astype("float32")
y = rng.integers(0, 10, size=(n,)).astype("int32")

if a.fail or strategy.num_replicas_in_sync == a.fail_replicas:
    raise SystemExit(3)

with contextlib.nullcontext() if a.plain else strategy.scope():
    model = keras.Sequential(
        [keras.Input((32,)), keras.layers.Dense(a.width, activation="relu"), keras.layers.Dense(10)]
    )
    model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=True if a.jit else "auto")

if a.no_fit:
    raise SystemExit(0)


class Stopwatch(keras.callbacks.Callback):
    """Each batch end's and epoch start's time; a sleep in validation where asked."""

    def __init__(self):
        super().__init__()
        self.ends, self.epochs = [], []

    def on_epoch_begin(self, epoch, logs=None):
        self.epochs.append(time.perf_counter())

    def on_train_batch_end(self, batch, logs=None):
        self.ends.append(time.perf_counter())
        if batch == a.hang_at:
            time.sleep(3600)

    def on_test_end(self, logs=None):
        time.sleep(a.val_sleep)

    def on_train_end(self, logs=None):
        if a.stopwatch and os.environ.get("KERAS_GPU_WORKER_INDEX", "0") == "0":
            path = f"{a.stopwatch}.{strategy.num_replicas_in_sync}"
            with open(f"{path}.again" if os.path.exists(path) else path, "w") as f:
                json.dump({"ends": self.ends, "epochs": self.epochs}, f)


validation = {}
if a.val_sleep:
    validation = {"validation_data": (x[:global_batch], y[:global_batch])}


if keras.backend.backend() == "tensorflow":
    import tensorflow as tf

    data = tf.data.Dataset.from_tensor_slices((x, y))
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    if a.input_ms:
        def slow(xb, yb):
            def work(v):
                time.sleep(a.input_ms / 1000 * v.shape[0] / 64)
                return v
            xb = tf.py_function(work, [xb], tf.float32)
            xb.set_shape((None, 32))
            return xb, yb
        data = data.batch(global_batch).map(slow)
        options.experimental_optimization.map_parallelization = False
        options.experimental_optimization.inject_prefetch = False
    else:
        data = data.batch(global_batch)
    data = data.with_options(options)
    model.fit(data.repeat(), epochs=a.epochs, steps_per_epoch=a.steps // a.epochs, verbose=0, callbacks=[Stopwatch()],
              **validation)
else:
    model.fit(x, y, batch_size=global_batch, epochs=a.epochs, steps_per_epoch=a.steps // a.epochs, verbose=0,
              shuffle=False, callbacks=[Stopwatch()], **validation)
