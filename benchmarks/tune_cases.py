"""Training scripts for `keras-gpu tune`, each with a stopwatch: host-bound, input-bound, compute-bound.

    python -m keras_gpu.cli tune benchmarks/tune_cases.py --case mlp
    python -m keras_gpu.cli tune benchmarks/tune_cases.py --case pipeline
    python -m keras_gpu.cli tune benchmarks/tune_cases.py --case pydataset
    python -m keras_gpu.cli tune benchmarks/tune_cases.py --case conv

* `mlp`: a small MLP (32 -> 64 -> 10) on NumPy arrays, batch 64: Keras' per-step host work dominates the step
  (host-bound), so `steps_per_execution` helps.
* `pipeline` (TensorFlow only, for tf.data): the same MLP fed by a tf.data pipeline whose `map` sleeps
  `--map-ms` per batch in a `py_function`, made truly sequential (no parallel map rewrite, no injected prefetch):
  input-bound, so parallel map and prefetch help, and the model's changes do not. With `--val`, a validation
  pipeline built by the same function (the same `map` lines) is validated after each epoch.
* `pydataset` (every backend): the same MLP fed by a `keras.utils.PyDataset` whose `__getitem__` sleeps `--map-ms`
  per batch: input-bound, so PyDataset workers help.
* `conv`: a small conv net on 32x32x3 images, batch 32: the step is arithmetic (compute-bound).

Every case is seeded, so two runs train the same losses. Arguments: `--case`, `--steps S` (steps per epoch),
`--epochs E`, `--stopwatch FILE` (append one JSON line per run at the end of training: each batch end's step number
and `perf_counter`, and each epoch's start), `--max-batch B` (raise "out of memory" when fit's batch is larger than B,
as a GPU would), `--no-fit` (exit before training), `--fail` (raise before training), `--calls FILE` (`pipeline`:
append one JSON line per run at the end of training: for the training and the validation pipeline, the most
`map` calls in flight at once, whether each pass took its batches in order, and the calls), `--override-fit` (the
model's class overrides `fit`, passing on a batch size of its own), `--bypass-tf-hook` (TensorFlow is imported
through a finder the script puts first in `sys.meta_path`, past any import hook).
"""

import argparse
import json
import math
import time

import numpy as np

p = argparse.ArgumentParser()
p.add_argument("--case", choices=("mlp", "pipeline", "pydataset", "conv"), default="mlp")
p.add_argument("--steps", type=int, default=200)
p.add_argument("--epochs", type=int, default=1)
p.add_argument("--batch", type=int, default=0)
p.add_argument("--map-ms", type=float, default=20.0)
p.add_argument("--stopwatch", default=None)
p.add_argument("--max-batch", type=int, default=0)
p.add_argument("--no-fit", action="store_true")
p.add_argument("--fail", action="store_true")
p.add_argument("--val", action="store_true")
p.add_argument("--calls", default=None)
p.add_argument("--override-fit", action="store_true")
p.add_argument("--bypass-tf-hook", action="store_true")
a = p.parse_args()

if a.bypass_tf_hook:
    import importlib.machinery
    import sys

    class _Finder:
        """Finds TensorFlow on sys.path itself, ahead of every other finder (as some packaging tools do)."""

        def find_spec(self, name, path, target=None):
            return importlib.machinery.PathFinder.find_spec(name, path, target) if name == "tensorflow" else None

    sys.meta_path.insert(0, _Finder())

import keras  # noqa: E402 - after the arguments, so --help needs no backend

keras.utils.set_random_seed(0)
batch = a.batch or (32 if a.case == "conv" else 64)
n = batch * a.steps
rng = np.random.default_rng(0)
if a.case == "conv":
    x = rng.normal(size=(n, 32, 32, 3)).astype("float32")
    model = keras.Sequential([
        keras.Input((32, 32, 3)),
        keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(10),
    ])
elif a.override_fit:
    class OwnFit(keras.Model):
        """A model class whose fit batches as it likes."""

        def fit(self, x=None, y=None, batch_size=None, **kwargs):
            return super().fit(x, y, batch_size=batch, **kwargs)

    x = rng.normal(size=(n, 32)).astype("float32")
    inputs = keras.Input((32,))
    model = OwnFit(inputs, keras.layers.Dense(10)(keras.layers.Dense(64, activation="relu")(inputs)))
else:
    x = rng.normal(size=(n, 32)).astype("float32")
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)])
y = rng.integers(0, 10, size=(n,)).astype("int32")
model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))

if a.fail:
    raise RuntimeError("the script failed before training (--fail)")
if a.no_fit:
    raise SystemExit(0)


class Stopwatch(keras.callbacks.Callback):
    """Each batch end's step number and time, each epoch's start; the fit's batch size checked against --max-batch."""

    def __init__(self):
        super().__init__()
        self.ends, self.epochs, self.before, self.step = [], [], 0, 0

    def on_train_begin(self, logs=None):
        steps = self.params.get("steps")
        if a.max_batch and steps and math.ceil(n / steps) > a.max_batch:
            raise RuntimeError(f"out of memory: a batch of {math.ceil(n / steps)} does not fit (--max-batch)")

    def on_epoch_begin(self, epoch, logs=None):
        self.epochs.append(time.perf_counter())

    def on_train_batch_end(self, b, logs=None):
        self.step = self.before + b + 1
        self.ends.append([self.step, time.perf_counter()])

    def on_epoch_end(self, epoch, logs=None):
        self.before = self.step

    def on_train_end(self, logs=None):
        if a.stopwatch:
            with open(a.stopwatch, "a", encoding="utf-8") as f:
                f.write(json.dumps({"ends": self.ends, "epochs": self.epochs}) + "\n")
        if a.calls:
            with open(a.calls, "a", encoding="utf-8") as f:
                f.write(json.dumps({k: v.summary() for k, v in CALLS.items()}) + "\n")


class Calls:
    """The map calls of one pipeline, as the thread that runs each sees them: how many at once, in which order."""

    def __init__(self, firsts):
        self.index = {float(v): i for i, v in enumerate(firsts)}  # each batch by its first value
        self.lock = threading.Lock()
        self.in_flight = self.most = 0
        self.order = []

    def enter(self, xb):
        with self.lock:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            self.order.append(self.index.get(float(xb[0, 0]), -1))

    def leave(self):
        with self.lock:
            self.in_flight -= 1

    def summary(self):
        in_order = all(i == 0 or i == prev + 1 for prev, i in zip([-1, *self.order], self.order))
        return {"most_in_flight": self.most, "in_order": in_order, "calls": len(self.order)}


CALLS = {}

if a.case == "pipeline":
    import threading

    import tensorflow as tf

    def pipeline(kind, xs, ys):
        calls = CALLS[kind] = Calls(xs[::batch, 0])

        def slow(xb, yb):
            calls.enter(xb.numpy())
            time.sleep(a.map_ms / 1e3)  # host work per batch that releases the interpreter, as file reads do
            calls.leave()
            return xb, yb

        ds = tf.data.Dataset.from_tensor_slices((xs, ys)).batch(batch)
        ds = ds.map(lambda xb, yb: tf.py_function(slow, [xb, yb], (tf.float32, tf.int32)))
        ds = ds.map(lambda xb, yb: (tf.ensure_shape(xb, (None, 32)), tf.ensure_shape(yb, (None,))))
        options = tf.data.Options()
        options.experimental_optimization.map_parallelization = False
        options.experimental_optimization.inject_prefetch = False
        return ds.with_options(options)

    ds = pipeline("train", x, y)
    val = {"validation_data": pipeline("val", x[: batch * 4], y[: batch * 4])} if a.val else {}
    model.fit(ds, epochs=a.epochs, verbose=0, callbacks=[Stopwatch()], **val)
elif a.case == "pydataset":
    class Batches(keras.utils.PyDataset):
        """The arrays in batches, each after `--map-ms` of host work."""

        def __init__(self, **kwargs):
            super().__init__(**kwargs)

        def __len__(self):
            return a.steps

        def __getitem__(self, i):
            time.sleep(a.map_ms / 1e3)
            return x[i * batch : (i + 1) * batch], y[i * batch : (i + 1) * batch]

    model.fit(Batches(), epochs=a.epochs, verbose=0, callbacks=[Stopwatch()])
else:
    model.fit(x, y, batch_size=batch, epochs=a.epochs, verbose=0, shuffle=False, callbacks=[Stopwatch()])
