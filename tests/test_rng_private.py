"""`keras_gpu/core/rng_private.py` against the installed Keras and TensorFlow.

`preserved_random_state` reads and puts back private random state (the eager
context's seed fields, Keras' global SeedGenerator); this checks that every
generator it knows of ends where it started, on the versions installed.
"""

from __future__ import annotations

import pytest

pytest.importorskip("tensorflow")


def test_preserved_random_state_puts_back_every_generator():
    import random

    import keras
    import numpy as np
    import tensorflow as tf

    from keras_gpu.core.rng_private import model_seed_generators, preserved_random_state

    def draws(layer):
        return (
            random.random(),
            float(np.random.random()),
            float(keras.random.uniform(())),  # Keras' global SeedGenerator
            float(tf.random.uniform(())),  # TensorFlow's eager op-seed generator
            float(tf.random.get_global_generator().uniform(())),
            float(layer(tf.ones((1, 1)), training=True)[0, 0]),  # the layer's own SeedGenerator
        )

    layer = keras.layers.GaussianNoise(1.0)
    model = keras.Sequential([keras.Input((1,)), layer])
    assert model_seed_generators(model) == [layer.seed_generator]

    def start():
        keras.utils.set_random_seed(5)
        tf.random.set_global_generator(tf.random.Generator.from_seed(5))
        layer.seed_generator.state.assign(np.array([5, 0], "uint32"))

    start()
    expected = draws(layer)
    start()
    with preserved_random_state(model):
        assert draws(layer) == expected
        keras.utils.set_random_seed(9)  # even a new global SeedGenerator is undone
    assert draws(layer) == expected
