"""One worker of `benchmarks.studies.profiler_crash_rate`: a multi-worker `fit` that starts and stops TensorFlow's profiler.

Usage: _profiler_worker.py OUT TRACES STEPS   (run under `keras-gpu launch`)

No keras-gpu callback is used: only `tf.profiler.experimental.start`/`stop`
around every STEPS training steps, TRACES times. After each stop the worker
appends one line to OUT/stops-<rank>.txt, so a crash leaves the count of the
stops that returned.
"""

from __future__ import annotations

import os
import sys
import tempfile


def main() -> None:
    out, traces, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    import keras_gpu

    strategy = keras_gpu.make_strategy("multiworker")
    import keras
    import numpy as np
    import tensorflow as tf

    rank = keras_gpu.worker_index(strategy)
    record = os.path.join(out, f"stops-{rank}.txt")

    class Profile(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.step, self.tracing, self.done = 0, False, 0

        def on_train_batch_end(self, batch, logs=None):
            self.step += 1
            if self.done >= traces:
                return
            if not self.tracing and self.step % (2 * steps) == 0:
                tf.profiler.experimental.start(tempfile.mkdtemp(prefix="crash-rate-"))
                self.tracing = True
            elif self.tracing and self.step % (2 * steps) == steps:
                tf.profiler.experimental.stop()
                self.tracing, self.done = False, self.done + 1
                with open(record, "a") as f:
                    f.write("stop\n")

    with strategy.scope():
        model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(128, activation="relu"), keras.layers.Dense(4)])
        model.compile("sgd", "mse")
    rng = np.random.default_rng(0)
    x, y = rng.random((64 * 200, 64), dtype=np.float32), rng.random((64 * 200, 4), dtype=np.float32)
    epochs = max(1, (2 * steps * (traces + 1)) // 200 + 1)
    model.fit(x, y, batch_size=64, epochs=epochs, verbose=0, callbacks=[Profile()])


if __name__ == "__main__":
    main()
