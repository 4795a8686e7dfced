"""keras_gpu.core.jax_private, and keras_private's Keras-on-JAX functions, against the installed JAX and Keras.

Each check runs in a fresh interpreter on Keras' JAX backend (the changes
they make are process-wide). Skips where JAX is not installed.
"""

from __future__ import annotations

import importlib.util

import pytest

from tests._util import run_python

pytestmark = [
    pytest.mark.backend,
    pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed"),
]
JAX = {"KERAS_BACKEND": "jax", "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}


def _last_line(code: str) -> str:
    return run_python(code, env=JAX, timeout=300).stdout.strip().splitlines()[-1]


def test_backends_initialized_is_false_until_jax_makes_an_array():
    code = """
        import jax
        from keras_gpu.core import jax_private
        before = jax_private.backends_initialized()
        jax.numpy.zeros(1)
        print(before, jax_private.backends_initialized())
    """
    assert _last_line(code) == "False True"


def test_jax_initialize_rng_sets_kerass_one_seed():
    code = """
        from keras.src.utils import rng_utils
        from keras_gpu.core import keras_private
        before = rng_utils.get_random_seed()
        keras_private.jax_initialize_rng()
        print(before, isinstance(rng_utils.get_random_seed(), int))
    """
    assert _last_line(code) == "None True"


def test_wrapped_data_input_sees_every_batch_of_a_distributed_fit_once():
    code = """
        import functools
        import jax, keras, numpy as np
        from keras_gpu.core import keras_private
        calls = []
        def spy(original, batch, layout, batch_dim_name):
            calls.append(tuple(batch.shape))
            return original(batch, layout, batch_dim_name)
        def wrap(original):
            return functools.partial(spy, original)
        keras_private.wrap_jax_data_input(wrap)
        keras_private.wrap_jax_data_input(wrap)  # again: still one wrap
        keras.distribution.set_distribution(keras.distribution.DataParallel(devices=jax.devices()))
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        x, y = np.zeros((12, 3), "float32"), np.zeros((12, 1), "float32")
        model.fit(x, y, batch_size=4, epochs=1, verbose=0)
        first = len(calls)
        model.fit(x, y, batch_size=4, epochs=2, verbose=0)
        print(sorted(set(calls)), first, len(calls) - first)
    """
    # x and y of each step, once: 3 steps, plus the first batch Keras distributes to build the model;
    # then 6 steps of a built model (a second wrap would double every count)
    assert _last_line(code) == "[(4, 1), (4, 3)] 8 12"


def test_wrapped_predict_function_is_what_predict_calls():
    code = """
        import keras, numpy as np
        from keras_gpu.core import keras_private
        steps = []
        def transform(function):
            def counted(*args, **kwargs):
                steps.append(1)
                return function(*args, **kwargs)
            return counted
        keras_private.wrap_jax_predict_function(transform)
        keras_private.wrap_jax_predict_function(transform)  # again: still one wrap
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, kernel_initializer="ones")])
        out = model.predict(np.ones((8, 3), "float32"), batch_size=4, verbose=0)
        print(len(steps), float(out.sum()))
    """
    assert _last_line(code) == "2 24.0"
