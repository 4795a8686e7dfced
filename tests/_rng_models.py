"""Models with unseeded noise, trained with and without `keras_gpu.callbacks()`, on any backend.

Used by `tests/test_rng_unchanged.py` (TensorFlow, in process) and
`tests/backends/test_backend_rng_unchanged.py` (JAX and PyTorch, in a fresh
interpreter each). Every run starts from `keras.utils.set_random_seed`, so two
plain runs are bit-identical; a run with the callbacks must be too.

The noise is drawn the ways real programs draw it:

* `np_seeded`: a VAE whose sampling layer takes its seed from NumPy's global
  generator each time it is traced or called (what
  `tf.keras.backend.random_normal(shape)` does; on TensorFlow that very call
  is used);
* `global_seed`: `keras.random.normal` without a seed, from Keras' global
  `SeedGenerator` (not on JAX, where an unseeded draw cannot be traced);
* `python_seeded`: a seed from Python's `random` module;
* `dropout_noise`: `GaussianNoise` and `Dropout` layers;
* `augment`: `RandomFlip` and `RandomTranslation` before a convolution.
"""

from __future__ import annotations

import random
import tempfile

import numpy as np

__all__ = ["CASES", "compare", "train"]

CASES = ("np_seeded", "global_seed", "python_seeded", "dropout_noise", "augment")


def _sampling_layer(kind: str):
    import keras

    class Sampling(keras.layers.Layer):
        def call(self, inputs):
            mean, log_var = inputs
            shape = keras.ops.shape(mean)
            if kind == "np_seeded" and keras.config.backend() == "tensorflow":
                import tensorflow as tf

                noise = tf.keras.backend.random_normal(shape)  # seed = np.random.randint(10e6)
            elif kind == "np_seeded":
                noise = keras.random.normal(shape, seed=int(np.random.randint(10**6)))
            elif kind == "python_seeded":
                noise = keras.random.normal(shape, seed=random.randint(0, 10**6))
            else:
                noise = keras.random.normal(shape)  # Keras' global SeedGenerator
            return mean + keras.ops.exp(0.5 * log_var) * noise

    return Sampling()


def _model(kind: str):
    import keras

    if kind in ("np_seeded", "global_seed", "python_seeded"):
        x = keras.Input((12,))
        h = keras.layers.Dense(16, activation="relu")(x)
        mean, log_var = keras.layers.Dense(4)(h), keras.layers.Dense(4)(h)
        z = _sampling_layer(kind)([mean, log_var])
        return keras.Model(x, keras.layers.Dense(12, activation="sigmoid")(z), name=kind)
    if kind == "dropout_noise":
        return keras.Sequential(
            [
                keras.Input((12,)),
                keras.layers.GaussianNoise(0.2),
                keras.layers.Dense(16, activation="relu"),
                keras.layers.Dropout(0.3),
                keras.layers.Dense(12, activation="sigmoid"),
            ],
            name=kind,
        )
    if kind == "augment":
        return keras.Sequential(
            [
                keras.Input((8, 8, 3)),
                keras.layers.RandomFlip("horizontal"),
                keras.layers.RandomTranslation(0.2, 0.2),
                keras.layers.Conv2D(4, 3, activation="relu"),
                keras.layers.Flatten(),
                keras.layers.Dense(12, activation="sigmoid"),
            ],
            name=kind,
        )
    raise ValueError(f"unknown case {kind!r}")


def train(kind: str, with_callbacks: bool, fits: int = 1, last_only: bool = False) -> dict:
    """Build and train case `kind` from seed 3; its per-epoch losses and final weights.

    `fits` > 1 trains the same model in that many `fit` calls (a later `fit`
    reuses the traced step); `last_only`: the callbacks join the last one only.
    """
    import keras

    import keras_gpu

    keras.utils.set_random_seed(3)
    model = _model(kind)
    model.compile(keras.optimizers.SGD(0.1), "binary_crossentropy")
    data = np.random.default_rng(0)
    shape = (64, 8, 8, 3) if kind == "augment" else (64, 12)
    x = data.random(shape, dtype=np.float32)
    y = data.random((64, 12), dtype=np.float32)
    losses = []
    with tempfile.TemporaryDirectory() as log_dir:
        for i in range(fits):
            on = with_callbacks and (i == fits - 1 or not last_only)
            # profile_every_s: the profiler traces even these short fits, so its trace is in what is compared.
            callbacks = keras_gpu.callbacks(f"{log_dir}/{i}", profile_every_s=300) if on else []
            history = model.fit(x, y, batch_size=16, epochs=2, shuffle=True, verbose=0, callbacks=callbacks)
            for callback in callbacks:  # a trace still being parsed writes into log_dir after fit returns
                if hasattr(callback, "wait"):
                    callback.wait()
            losses += [float(v) for v in history.history["loss"]]
    return {
        "losses": losses,
        "weights": [np.asarray(keras.ops.convert_to_numpy(w)).tobytes().hex() for w in model.get_weights()],
        "after": [random.random(), float(np.random.random())],
    }


def compare(kind: str, fits: int = 1, last_only: bool = False) -> dict:
    """Two plain runs and one with the callbacks, for :func:`train`."""
    return {
        "plain": train(kind, False, fits),
        "again": train(kind, False, fits),
        "callbacks": train(kind, True, fits, last_only),
    }
