"""Train on every local GPU with a mirrored strategy (or on K logical CPUs without one).

    python examples/mirrored_fit.py                   # all GPUs, or the CPU
    python examples/mirrored_fit.py --cpu-replicas 2  # two replicas without a GPU
    tensorboard --logdir runs

Scale the global batch with the number of replicas, so each replica keeps its
per-replica batch when you add GPUs.
"""

import argparse

import keras_gpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-replicas", type=int, default=None)
    parser.add_argument("--per-replica-batch", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--log-dir", default="runs/mirrored")
    args = parser.parse_args()

    # Device settings first: before any tensor, model or strategy exists.
    keras_gpu.configure_devices(memory_growth=True, cpu_devices=args.cpu_replicas)

    import keras
    import numpy as np

    strategy = keras_gpu.make_strategy("mirrored")
    global_batch = args.per_replica_batch * strategy.num_replicas_in_sync

    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.samples, 28, 28, 1)).astype("float32")
    y = rng.integers(0, 10, size=args.samples)
    x += y[:, None, None, None].astype("float32") / 5.0  # make the labels learnable

    with strategy.scope():
        model = keras.Sequential(
            [
                keras.Input((28, 28, 1)),
                keras.layers.Conv2D(16, 3, activation="relu"),
                keras.layers.GlobalAveragePooling2D(),
                keras.layers.Dense(10),
            ]
        )
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        model.compile("adam", loss)

    history = model.fit(
        x,
        y,
        batch_size=global_batch,
        epochs=args.epochs,
        verbose=2,
        # profile_every_s: trace even this short fit, to measure each replica
        callbacks=keras_gpu.callbacks(args.log_dir, profile_every_s=300),
    )
    print(f"{strategy.num_replicas_in_sync} replicas, global batch {global_batch}, "
          f"loss {history.history['loss'][0]:.4f} -> {history.history['loss'][-1]:.4f}")


if __name__ == "__main__":
    main()
