"""Log keras-gpu's measured numbers with Keras' CSVLogger (or W&B's, MLflow's callback).

    python examples/log_to_csv.py --csv runs/log_to_csv.csv

`keras_gpu.callbacks(...)` adds each epoch's throughput and peak memory to
Keras' epoch `logs`; a logger placed after them in the list records them.
"""

import argparse
import csv

import keras
import numpy as np

import keras_gpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", default="runs/log_to_csv.csv")
    parser.add_argument("--log-dir", default="runs/log_to_csv")
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    x = rng.normal(size=(2048, 32)).astype("float32")
    y = (x @ rng.normal(size=(32, 1)) > 0).astype("float32")
    layers = [keras.Input((32,)), keras.layers.Dense(1, activation="sigmoid")]
    model = keras.Sequential(layers)
    model.compile(optimizer="adam", loss="binary_crossentropy")

    # keras-gpu's callbacks first, the logger after them: it sees their numbers.
    # wandb.integration.keras.WandbMetricsLogger() or mlflow.keras.MlflowCallback()
    # go in the same place.
    csv_logger = keras.callbacks.CSVLogger(args.csv)
    callbacks = [*keras_gpu.callbacks(args.log_dir), csv_logger]
    model.fit(x, y, batch_size=64, epochs=args.epochs, callbacks=callbacks, verbose=0)

    with open(args.csv, newline="") as f:
        rows = list(csv.DictReader(f))
    for name in sorted(rows[0]):
        print(f"{name:42} {rows[-1][name]}")


if __name__ == "__main__":
    main()
