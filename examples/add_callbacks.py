"""Add keras-gpu's callbacks to an existing `model.fit` call.

    python examples/add_callbacks.py --log-dir runs/add_callbacks
    tensorboard --logdir runs

Only the lines marked `# keras-gpu` differ from a plain Keras script.
"""

import argparse

import keras
import numpy as np

import keras_gpu  # keras-gpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log-dir", default="runs/add_callbacks")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=4096)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.samples, 32)).astype("float32")
    y = (x @ rng.normal(size=(32, 1)) > 0).astype("float32")

    model = keras.Sequential(
        [
            keras.Input((32,)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(1, activation="sigmoid"),
        ]
    )
    model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
    history = model.fit(
        x,
        y,
        batch_size=64,
        epochs=args.epochs,
        validation_split=0.1,
        callbacks=keras_gpu.callbacks(args.log_dir, profile_every_s=300),  # keras-gpu
        verbose=2,
    )
    print(f"final loss {history.history['loss'][-1]:.4f}")


if __name__ == "__main__":
    main()
