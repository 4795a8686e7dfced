"""Train a small regression model on every worker of a multi-worker job.

Run two workers on this machine:

    keras-gpu launch -n 2 examples/multiworker_fit.py \
        --out /tmp/multiworker_fit --log-dir runs/multiworker

`keras_gpu.make_strategy()` reads the TF_CONFIG that `keras-gpu launch` gives
each worker and returns a multi-worker strategy; the same script also runs as
a single process (`python examples/multiworker_fit.py --out DIR`). Each worker
writes `DIR/worker<rank>.json` with its loss history and final weights, which
must be identical on every worker. With `--log-dir`, every worker also logs
keras-gpu's callbacks: the chief to `LOG_DIR/train`, worker k to
`LOG_DIR/worker_k/train`; `tensorboard --logdir LOG_DIR` shows them all.
"""

from __future__ import annotations

import argparse
import json
import os


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="directory for worker<rank>.json")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32, help="global batch size")
    parser.add_argument("--samples", type=int, default=512)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log-dir", default=None, help="TensorBoard logs of keras-gpu")
    args = parser.parse_args()

    import keras
    import numpy as np
    import tensorflow as tf

    import keras_gpu

    strategy = keras_gpu.make_strategy()
    rank = keras_gpu.worker_index(strategy)

    # Every worker builds the same synthetic data set; the strategy shards it.
    rng = np.random.default_rng(args.seed)
    x = rng.normal(size=(args.samples, 8)).astype("float32")
    true_w = rng.normal(size=(8, 1)).astype("float32")
    y = (x @ true_w + 0.1 * rng.normal(size=(args.samples, 1))).astype("float32")
    options = tf.data.Options()
    shard = tf.data.experimental.AutoShardPolicy.DATA
    options.experimental_distribute.auto_shard_policy = shard
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(args.batch_size)
    dataset = dataset.with_options(options)

    keras.utils.set_random_seed(args.seed)
    with strategy.scope():
        model = keras.Sequential(
            [
                keras.Input(shape=(8,)),
                keras.layers.Dense(16, activation="relu"),
                keras.layers.Dense(1),
            ]
        )
        model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.05), loss="mse")
    callbacks = []
    if args.log_dir:
        callbacks = keras_gpu.callbacks(args.log_dir, batch_size=args.batch_size)
    history = model.fit(
        dataset,
        epochs=args.epochs,
        shuffle=False,
        verbose=2 if rank == 0 else 0,
        callbacks=callbacks,
    )

    os.makedirs(args.out, exist_ok=True)
    result = {
        "worker_index": rank,
        "num_replicas_in_sync": strategy.num_replicas_in_sync,
        "strategy": type(strategy).__name__,
        "loss": [float(v) for v in history.history["loss"]],
        "weights": [w.tolist() for w in model.get_weights()],
    }
    with open(os.path.join(args.out, f"worker{rank}.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
