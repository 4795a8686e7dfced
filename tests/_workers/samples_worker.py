"""Fit one small model per input kind, with no `batch_size=`, and report what `ThroughputLogger` logged.

Run as `python -m tests._workers.samples_worker LOG_DIR` with `KERAS_BACKEND`
set. Every kind holds 1003 samples a pass, in batches of 10 with a short last
batch of 3 (101 batches), and trains 2 epochs. For each kind the worker
prints, in one `RESULT` JSON line:

* `truth`: the samples the model really trained on, read from the model
  itself: a metric adds each train step's batch size (`y`'s first
  dimension, inside the step), and a callback after the logger sums its
  value at each epoch's end;
* `expected`: the samples the data holds, counted by hand (2006, or less
  where a kind drops the short batch). The two agree for every kind but
  `pydataset_workers`: its enqueuer reshuffles each pass and hands a pass
  first the batches it had fetched when the previous one stopped. On JAX
  and PyTorch, Keras takes one batch to build the model's shapes before
  the first epoch and stops there, so each epoch starts with about ten
  batches of another order: an epoch may train the short batch twice or
  not at all (1999 or 2013 samples in about 1 run of 4; TensorFlow skips
  that probe without a distribution strategy);
* `implied`: what the event file implies: each window's samples per step
  (`samples_per_sec / steps_per_sec`) times its steps (the difference of
  the global steps of consecutive points);
* `implied_sec`: each window's steps over its `steps_per_sec`, summed;
* `stopwatch_sec`: a callback placed right after the logger: from each
  epoch's start to its last training batch end, summed over the epochs;
* `points`: how many `throughput/samples_per_sec` points were written.

The interpreter's thread switch interval is 1 ms (not 5): the logger's clock
and the stopwatch's are read in adjacent callbacks, and a `PyDataset`'s
worker threads or the writer's thread holding the GIL between the two would
otherwise put up to 5 ms between them.
"""

from __future__ import annotations

import json
import os
import sys
import time

import keras
import numpy as np

N, BATCH, EPOCHS = 1003, 10, 2
BACKEND = keras.backend.backend()

if BACKEND == "tensorflow":
    import tensorflow as tf

    from tests._util import split_cpu

    split_cpu(2)

import keras_gpu  # after the logical devices
from tests._callbacks import TrainedSamples
from tests._util import implied_samples

rng = np.random.default_rng(0)
X = rng.random((N, 8), dtype=np.float32)
X2 = rng.random((N, 6), dtype=np.float32)
Y = rng.random((N, 1), dtype=np.float32)
STARTS = range(0, N, BATCH)


class Trained(keras.callbacks.Callback):
    """Sums `TrainedSamples` over the epochs (Keras resets metrics at each epoch's start)."""

    def __init__(self):
        super().__init__()
        self.samples = 0.0

    def on_epoch_end(self, epoch, logs=None):
        self.samples += float(logs["trained_samples"])


class Stopwatch(keras.callbacks.Callback):
    """Seconds from each epoch's start to its last training batch end."""

    def __init__(self):
        super().__init__()
        self.total, self.t0, self.last = 0.0, None, None

    def on_epoch_begin(self, epoch, logs=None):
        self.t0, self.last = time.perf_counter(), None

    def on_train_batch_end(self, batch, logs=None):
        self.last = time.perf_counter()

    def on_test_begin(self, logs=None):
        self._close()

    def on_epoch_end(self, epoch, logs=None):
        self._close()

    def _close(self):
        if self.t0 is not None and self.last is not None:
            self.total += self.last - self.t0
        self.t0 = None


def one_input(compile_kwargs=None):
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
    model.compile("sgd", "mse", metrics=[TrainedSamples()], **(compile_kwargs or {}))
    return model


def two_inputs(compile_kwargs=None):
    a, b = keras.Input((8,), name="a"), keras.Input((6,), name="b")
    h = keras.layers.Dense(32, activation="relu")(keras.layers.Concatenate()([a, b]))
    model = keras.Model({"a": a, "b": b}, keras.layers.Dense(1)(h))
    model.compile("sgd", "mse", metrics=[TrainedSamples()], **(compile_kwargs or {}))
    return model


def list_inputs():
    a, b = keras.Input((8,)), keras.Input((6,))
    h = keras.layers.Dense(32, activation="relu")(keras.layers.Concatenate()([a, b]))
    model = keras.Model([a, b], keras.layers.Dense(1)(h))
    model.compile("sgd", "mse", metrics=[TrainedSamples()])
    return model


def cycle():
    """An endless generator of the pass's batches (steps_per_epoch=101 takes one pass per epoch)."""
    while True:
        for i in STARTS:
            yield X[i : i + BATCH], Y[i : i + BATCH]


class Batches(keras.utils.PyDataset):
    def __len__(self):
        return len(STARTS)

    def __getitem__(self, index):
        i = STARTS[index]
        return X[i : i + BATCH], Y[i : i + BATCH]


FULL = EPOCHS * N


def kinds():
    """`name -> (model, fit kwargs, samples the data holds over the epochs)` for this backend."""
    out = {
        "numpy": lambda: (one_input(), {"x": X, "y": Y, "batch_size": BATCH}, FULL),
        "numpy_list": lambda: (list_inputs(), {"x": [X, X2], "y": Y, "batch_size": BATCH}, FULL),
        "generator": lambda: (one_input(), {"x": cycle(), "steps_per_epoch": len(STARTS)}, FULL),
        "pydataset_workers": lambda: (one_input(), {"x": Batches(workers=2)}, FULL),
    }
    if BACKEND != "torch":  # PyTorch trains one step per execution
        out["pydataset_spe4"] = lambda: (one_input({"steps_per_execution": 4}), {"x": Batches()}, FULL)
        out["numpy_dict_spe3"] = lambda: (
            two_inputs({"steps_per_execution": 3}), {"x": {"a": X, "b": X2}, "y": Y, "batch_size": BATCH}, FULL
        )
    if BACKEND == "tensorflow":
        ds = tf.data.Dataset.from_tensor_slices((X, Y))
        out["tf_data_static"] = lambda: (one_input(), {"x": ds.batch(BATCH, drop_remainder=True)}, EPOCHS * 1000)
        out["tf_data_dynamic"] = lambda: (one_input(), {"x": ds.batch(BATCH)}, FULL)
        out["tf_data_dynamic_spe4"] = lambda: (one_input({"steps_per_execution": 4}), {"x": ds.batch(BATCH)}, FULL)
        out["tf_data_filtered_spe4"] = lambda: (  # unknown length: the last execution stops early
            one_input({"steps_per_execution": 4}),
            {"x": ds.batch(BATCH).filter(lambda x, y: tf.constant(True))},
            FULL,
        )
        dict_ds = tf.data.Dataset.from_tensor_slices(({"a": X, "b": X2}, Y)).batch(BATCH)
        out["tf_data_dict"] = lambda: (two_inputs(), {"x": dict_ds}, FULL)
        out["tf_data_dynamic_xla"] = lambda: (one_input({"jit_compile": True}), {"x": ds.batch(BATCH)}, FULL)

        def mirrored():
            with tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]).scope():
                model = one_input()
            return model, {"x": ds.batch(BATCH)}, FULL  # the short batch of 3 splits 2 + 1

        out["tf_data_dynamic_mirrored"] = mirrored
    if BACKEND == "torch":
        import torch
        from torch.utils.data import DataLoader, Dataset, TensorDataset

        class Pairs(Dataset):
            def __len__(self):
                return N

            def __getitem__(self, i):
                return {"a": torch.from_numpy(X[i]), "b": torch.from_numpy(X2[i])}, torch.from_numpy(Y[i])

        loader = DataLoader(TensorDataset(torch.from_numpy(X), torch.from_numpy(Y)), batch_size=BATCH)
        out["dataloader"] = lambda: (one_input(), {"x": loader}, FULL)
        out["dataloader_dict"] = lambda: (two_inputs(), {"x": DataLoader(Pairs(), batch_size=BATCH)}, FULL)
    return out


def main(log_dir: str) -> None:
    import logging

    sys.setswitchinterval(1e-3)
    messages = []

    class Collect(logging.Handler):
        def emit(self, record):
            messages.append(record.getMessage())

    logging.getLogger("keras_gpu").addHandler(Collect(logging.WARNING))
    results = {}
    for name, make in kinds().items():
        model, fit_kwargs, expected = make()
        run_dir = os.path.join(log_dir, name)
        callbacks = keras_gpu.callbacks(run_dir, memory=False, placement=False, step_time=False, every_s=0.1)
        watch, trained = Stopwatch(), Trained()
        model.fit(epochs=EPOCHS, verbose=0, callbacks=[*callbacks, watch, trained], **fit_kwargs)
        samples, seconds, points = implied_samples(os.path.join(run_dir, "train"))
        results[name] = {
            "truth": trained.samples,
            "expected": expected,
            "implied": samples,
            "implied_sec": seconds,
            "stopwatch_sec": watch.total,
            "points": points,
            "summary_samples": callbacks[0].summary["samples"],
        }
    print("RESULT", json.dumps({"results": results, "warnings": messages}))


if __name__ == "__main__":
    main(sys.argv[1])
