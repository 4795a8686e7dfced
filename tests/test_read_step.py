"""`read_step`, keras-gpu's one reader of the optimizer step, against a hand count of the steps `fit` ran."""

from __future__ import annotations

import importlib.util

import pytest

from tests._util import run_python

_CODE = """
import numpy as np, keras
from keras_gpu.hooks._base import read_step
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
before = (read_step(model), read_step(model, None))
model.compile(optimizer="sgd", loss="mse")
model.fit(np.zeros((12, 3), "float32"), np.zeros((12, 1), "float32"), batch_size=4, epochs=2, verbose=0)
print(before, read_step(model), read_step(model, None))
"""


def test_read_step_counts_the_steps_fit_ran_and_falls_back_before():
    pytest.importorskip("tensorflow")
    import keras
    import numpy as np

    from keras_gpu.hooks._base import read_step

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    assert read_step(model) == 0 and read_step(model, None) is None and read_step(model, 7) == 7  # no optimizer
    model.compile(optimizer="sgd", loss="mse")
    x, y = np.zeros((12, 3), "float32"), np.zeros((12, 1), "float32")
    model.fit(x, y, batch_size=4, epochs=2, verbose=0)  # 3 steps per epoch
    assert read_step(model) == 6 and read_step(model, None) == 6


@pytest.mark.parametrize("name", ["jax", "torch"])
def test_read_step_on_the_other_backends(name):
    if importlib.util.find_spec(name) is None:
        pytest.skip(f"{name} is not installed")
    out = run_python(_CODE, env={"KERAS_BACKEND": name}, timeout=300)
    assert out.stdout.strip().splitlines()[-1] == "(0, None) 6 6"


def test_read_step_reads_a_tensor_whose_numpy_refuses():
    """A torch tensor `.numpy()` refuses (one that requires grad here; one on a GPU likewise) is still read."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    code = """
        import types, keras
        from keras_gpu.hooks._base import read_step
        iterations = keras.Variable(5.0, trainable=True)
        try:
            iterations.value.numpy()
            refused = False
        except Exception:
            refused = True
        model = types.SimpleNamespace(optimizer=types.SimpleNamespace(iterations=iterations))
        print(refused, read_step(model, None))
    """
    out = run_python(code, env={"KERAS_BACKEND": "torch"}, timeout=300)
    assert out.stdout.strip().splitlines()[-1] == "True 5"
