"""Resume a training run after a failure with keras_gpu.BackupAndRestore.

    python examples/resume_after_failure.py --backup-dir runs/backup

The first `fit` fails during epoch 3 (a stand-in for a lost worker or a
preempted node); the second, the same call again, resumes from the backup
taken at the end of epoch 2 instead of starting over. In a multi-worker job,
only the chief writes the backup and every worker restores from it.
"""

import argparse

import keras
import numpy as np

import keras_gpu


class FailDuringEpoch(keras.callbacks.Callback):
    """Raise in the middle of one epoch, once."""

    def __init__(self, epoch: int) -> None:
        super().__init__()
        self.epoch = epoch

    def on_epoch_begin(self, epoch, logs=None):
        self.current = epoch

    def on_train_batch_end(self, batch, logs=None):
        if self.current == self.epoch and batch == 3:
            raise RuntimeError(f"simulated failure in epoch {self.epoch + 1}")


class PrintEpochs(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        print(f"finished epoch {epoch + 1}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backup-dir", default="/tmp/keras_gpu_backup")
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    x = rng.normal(size=(512, 8)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    backup = keras_gpu.BackupAndRestore(args.backup_dir)

    try:
        callbacks = [backup, PrintEpochs(), FailDuringEpoch(2)]
        model.fit(x, y, epochs=4, verbose=0, callbacks=callbacks)
    except RuntimeError as error:
        print(f"first run stopped: {error}")
    # The same call again, as a restarted job would make it.
    model.fit(x, y, epochs=4, verbose=0, callbacks=[backup, PrintEpochs()])


if __name__ == "__main__":
    main()
