"""Multi-worker hardening test worker: one case per run, results in OUT/w<rank>.json.

Usage: harden_worker.py OUT --case CASE

Run under `keras-gpu launch`. Cases:

- `core`: `steps_per_execution` 1 against 4 (SGD and Adam), per-batch logs of
  a vector metric (`Precision(thresholds=[...])`) with a frozen model, an
  invalid `axis` on a scalar, and `keras_gpu.ModelCheckpoint` next to Keras' own.
- `uneven`: `evaluate` on a 1-sample input (one replica gets no sample),
  then a valid `evaluate`, `fit` with a last batch of 1, `fit`, `evaluate`
  and a 3-sample `predict`, each next to this worker's own forward pass.
- `stuck-python`, `stuck-pipeline`: train with `keras_gpu.Heartbeat`; worker 1
  blocks forever after 3 batches, in a callback or in its input pipeline
  (for `keras-gpu launch --hang-timeout`). Each worker writes `pid_w<rank>` first.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

records: list[list[str]] = []


class _Keep(logging.Handler):
    def emit(self, record):
        records.append([record.levelname, record.getMessage()])


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:2000]


def core(out: dict, args, strategy) -> None:
    import keras
    import numpy as np
    import tensorflow as tf

    import keras_gpu

    rs = np.random.RandomState(0)
    x = rs.rand(256, 8).astype("float32")
    y = (x @ rs.rand(8, 1)).astype("float32")

    def regression(make_optimizer, spe):
        with strategy.scope():
            keras.utils.set_random_seed(7)
            model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
            model.compile(make_optimizer(), "mse", steps_per_execution=spe)
        return model

    for name, make in (("sgd", lambda: keras.optimizers.SGD(0.05)), ("adam", lambda: keras.optimizers.Adam(1e-2))):
        for spe in (1, 4):
            model = regression(make, spe)
            try:
                history = model.fit(x, y, batch_size=32, epochs=5, verbose=0, shuffle=False)  # 40 steps
            except Exception as exc:  # noqa: BLE001 - reported to the test
                out[f"{name}_spe{spe}"] = {"error": _error(exc)}
                continue
            out[f"{name}_spe{spe}"] = {
                "loss": history.history["loss"],
                "iterations": int(model.optimizer.iterations.numpy()),
                "weights": [w.tolist() for w in model.get_weights()],
            }

    # A frozen classifier (learning rate 0): the test recomputes every per-batch log by hand.
    labels = (x[:, :1] + 0.3 * x[:, 1:2] > 0.75).astype("float32")
    with strategy.scope():
        keras.utils.set_random_seed(3)
        clf = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1, activation="sigmoid")])
        clf.compile(keras.optimizers.SGD(0.0), "binary_crossentropy", metrics=[keras.metrics.Precision(thresholds=[0.3, 0.5, 0.7])])

    class Logs(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.batches = []

        def on_train_batch_end(self, batch, logs=None):
            self.batches.append(np.asarray(logs["precision"]).tolist())

    seen = Logs()
    history = clf.fit(x, labels, batch_size=32, epochs=1, verbose=0, shuffle=False, callbacks=[seen])
    out["precision_batches"] = seen.batches
    out["precision_epoch"] = np.asarray(history.history["precision"][0]).tolist()
    out["probabilities"] = clf.predict(x, batch_size=32, verbose=0).ravel().tolist()
    out["labels"] = labels.ravel().tolist()

    one = strategy.run(tf.function(lambda: tf.constant(1.0)))
    try:
        strategy.reduce("SUM", one, axis=1)
        out["scalar_axis1"] = "no error"
    except Exception as exc:  # noqa: BLE001
        out["scalar_axis1"] = _error(exc)
    out["scalar_axis0"] = float(strategy.reduce("SUM", one, axis=0))

    ckpt = os.path.join(args.out, "ckpt")
    os.makedirs(ckpt, exist_ok=True)
    model = regression(lambda: keras.optimizers.SGD(0.05), 1)
    callback = keras_gpu.ModelCheckpoint(os.path.join(ckpt, "e{epoch}.weights.h5"), save_weights_only=True)
    best = keras_gpu.ModelCheckpoint(os.path.join(ckpt, "best.keras"), monitor="loss", save_best_only=True)
    model.fit(x, y, batch_size=32, epochs=2, verbose=0, shuffle=False, callbacks=[callback, best])
    out["ckpt_writes"] = [callback.writes_checkpoints, best.writes_checkpoints]
    out["ckpt_weights"] = [w.tolist() for w in model.get_weights()]


def uneven(out: dict, args, strategy) -> None:
    import keras
    import numpy as np

    rs = np.random.RandomState(0)
    x = rs.rand(64, 8).astype("float32")
    y = (x @ rs.rand(8, 1)).astype("float32")
    with strategy.scope():
        keras.utils.set_random_seed(7)
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4, activation="relu"), keras.layers.Dense(1)])
        model.compile(keras.optimizers.SGD(0.05), "mse")
    out["replicas"] = strategy.num_replicas_in_sync

    def mse(n=None):  # this worker's own forward pass: no collective
        return float(np.mean((model(x[:n]).numpy() - y[:n]) ** 2))

    attempts = [
        ("evaluate_1", lambda: model.evaluate(x[:1], y[:1], batch_size=32, verbose=0), lambda: mse(1)),
        ("evaluate_ok", lambda: model.evaluate(x, y, batch_size=32, verbose=0), lambda: mse()),
        ("fit_last_batch_1", lambda: model.fit(x[:33], y[:33], batch_size=32, epochs=1, verbose=0, shuffle=False).history["loss"], None),
        ("fit_ok", lambda: model.fit(x, y, batch_size=32, epochs=3, verbose=0, shuffle=False).history["loss"], None),
        ("evaluate_after", lambda: model.evaluate(x, y, batch_size=32, verbose=0), lambda: mse()),
        ("predict_3", lambda: model.predict(x[:3], batch_size=32, verbose=0).ravel().tolist(), lambda: model(x[:3]).numpy().ravel().tolist()),
    ]
    for name, call, truth in attempts:
        expected = truth() if truth is not None else None
        try:
            out[name] = {"value": call(), "local": expected}
        except Exception as exc:  # noqa: BLE001
            out[name] = {"error": _error(exc), "local": expected}
    out["weights"] = [w.tolist() for w in model.get_weights()]

    # steps_per_execution=4 with a global batch of 33 (an odd split over 2 workers) and a last batch of 32:
    # every worker must still run the same collectives.
    with strategy.scope():
        keras.utils.set_random_seed(7)
        spe_model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4, activation="relu"), keras.layers.Dense(1)])
        spe_model.compile(keras.optimizers.SGD(0.05), "mse", steps_per_execution=4)
    try:
        out["spe_uneven_fit"] = {"value": spe_model.fit(x[:65], y[:65], batch_size=33, epochs=2, verbose=0, shuffle=False).history["loss"]}
        out["spe_uneven_evaluate"] = {
            "value": spe_model.evaluate(x, y, batch_size=33, verbose=0),
            "local": float(np.mean((spe_model(x).numpy() - y) ** 2)),
        }
    except Exception as exc:  # noqa: BLE001
        out["spe_uneven_fit"] = {"error": _error(exc)}
    out["spe_weights"] = [w.tolist() for w in spe_model.get_weights()]

    # Padded batches whose shapes differ between workers: sequence lengths 1..8, padded per batch of 2.
    import tensorflow as tf

    lengths = [1 + (i * 5) % 8 for i in range(16)]
    seqs = tf.data.Dataset.from_generator(
        lambda: ((np.full((n, 2), n / 8, "float32"), np.array([n / 8], "float32")) for n in lengths),
        output_signature=(tf.TensorSpec((None, 2), tf.float32), tf.TensorSpec((1,), tf.float32)),
    )
    # Each worker pads its own shard, so the padded lengths differ between replicas.
    padded = strategy.distribute_datasets_from_function(
        lambda ctx: seqs.shard(ctx.num_input_pipelines, ctx.input_pipeline_id).padded_batch(2)
    )
    with strategy.scope():
        keras.utils.set_random_seed(5)
        seq_model = keras.Sequential([keras.Input((None, 2)), keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(1)])
        seq_model.compile(keras.optimizers.SGD(0.1), "mse")
    out["padded_shapes"] = [
        int(strategy.experimental_local_results(b[0])[0].shape[1]) for b in padded
    ]  # this worker's padded length per step
    for name, call in (
        ("padded_fit", lambda: seq_model.fit(padded, epochs=2, verbose=0).history["loss"]),
        ("padded_evaluate", lambda: seq_model.evaluate(padded, verbose=0)),
    ):
        try:
            out[name] = {"value": call()}
        except Exception as exc:  # noqa: BLE001
            out[name] = {"error": _error(exc)}
    out["seq_weights"] = [w.tolist() for w in seq_model.get_weights()]
    local = [[strategy.experimental_local_results(t)[0] for t in b] for b in padded]
    out["padded_local_sse"] = float(sum(np.sum((seq_model(bx).numpy() - by.numpy()) ** 2) for bx, by in local))
    out["padded_local_count"] = int(sum(int(by.shape[0]) for _, by in local))
    out["after_padded"] = {"value": model.evaluate(x, y, batch_size=32, verbose=0), "local": mse()}


def _stamp(out_dir: str) -> None:
    """Record when worker 1 got stuck (wall clock, as the test reads it)."""
    import time

    with open(os.path.join(out_dir, "stuck_at"), "w") as f:
        f.write(repr(time.time()))


def stuck(out: dict, args, strategy) -> None:
    import threading

    import keras
    import numpy as np
    import tensorflow as tf

    import keras_gpu

    rank = int(os.environ["KERAS_GPU_WORKER_INDEX"])
    never = threading.Event()

    class Stuck(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if rank == 1 and batch == 3 and args.case == "stuck-python":
                _stamp(args.out)
                never.wait()

    def samples():
        rs = np.random.RandomState(0)
        for i in range(10**7):
            if rank == 1 and i == 32 * 20 and args.case == "stuck-pipeline":
                _stamp(args.out)
                never.wait()
            x = rs.rand(8).astype("float32")
            yield x, x[:1]

    spec = (tf.TensorSpec((8,), tf.float32), tf.TensorSpec((1,), tf.float32))
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    data = tf.data.Dataset.from_generator(samples, output_signature=spec).batch(32).with_options(options)
    with strategy.scope():
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
        model.compile(keras.optimizers.SGD(0.01), "mse")
    model.fit(data, steps_per_epoch=8, epochs=10**4, verbose=0, callbacks=[keras_gpu.Heartbeat(), Stuck()])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--case", required=True, choices=("core", "uneven", "stuck-python", "stuck-pipeline"))
    args = parser.parse_args()
    rank = int(os.environ["KERAS_GPU_WORKER_INDEX"])
    with open(os.path.join(args.out, f"pid_w{rank}"), "w") as f:
        f.write(str(os.getpid()))
    log = logging.getLogger("keras_gpu")
    log.setLevel(logging.INFO)
    log.addHandler(_Keep())

    import keras_gpu

    strategy = keras_gpu.make_strategy("multiworker", startup_timeout=60)
    out: dict = {"rank": rank, "is_chief": keras_gpu.is_chief(strategy)}
    {"core": core, "uneven": uneven, "stuck-python": stuck, "stuck-pipeline": stuck}[args.case](out, args, strategy)
    out["logs"] = records
    with open(os.path.join(args.out, f"w{rank}.json"), "w") as f:
        json.dump(out, f)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
