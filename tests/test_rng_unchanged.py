"""Training with `keras_gpu.callbacks()` is bit-identical to training without, for models with unseeded noise (TensorFlow).

The callbacks trace the model to count its FLOPs and retrace the step to see
its placement; every such trace must leave Python's, NumPy's, Keras' and
TensorFlow's random state as it found it. Two plain runs are compared first,
so that a difference can only come from the callbacks.
"""

from __future__ import annotations

import pytest

from tests._rng_models import CASES, compare

pytest.importorskip("tensorflow")


@pytest.mark.parametrize("kind", CASES)
def test_losses_and_weights_are_bit_identical_with_the_callbacks(kind):
    runs = compare(kind)
    assert runs["plain"] == runs["again"], "two plain runs differ: the test cannot tell anything"
    assert runs["callbacks"]["losses"] == runs["plain"]["losses"]
    assert runs["callbacks"]["weights"] == runs["plain"]["weights"]
    assert runs["callbacks"]["after"] == runs["plain"]["after"]  # the global generators end where they would


@pytest.mark.parametrize("last_only", [False, True], ids=["both-fits", "second-fit-only"])
@pytest.mark.parametrize("kind", ["np_seeded", "global_seed"])
def test_a_second_fit_on_the_same_model_is_bit_identical_too(kind, last_only):
    # second-fit-only: the step was traced by a plain fit before the callbacks came.
    runs = compare(kind, fits=2, last_only=last_only)
    assert runs["plain"] == runs["again"]
    assert runs["callbacks"] == runs["plain"]


def test_placement_does_not_retrace_a_compiled_step_that_holds_random_ops(tmp_path):
    import keras
    import numpy as np

    from keras_gpu import PlacementLogger
    from keras_gpu.meters import flops

    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dropout(0.5), keras.layers.Dense(2)])
    model.compile("sgd", "mse")
    x, y = np.ones((32, 6), "float32"), np.ones((32, 2), "float32")
    model.fit(x, y, batch_size=8, verbose=0)  # the step is traced without the callback
    state = np.random.get_state()[1].copy()
    assert "StatelessRandomUniformV2" in flops.random_ops(model)  # Dropout's mask
    assert (np.random.get_state()[1] == state).all()  # listing them traced the model and put NumPy back
    traced = model.train_function
    callback = PlacementLogger(str(tmp_path))
    model.fit(x, y, batch_size=8, verbose=0, callbacks=[callback])
    assert model.train_function is traced  # not retraced
    assert callback.report.ops is None
    reason = callback.report.ops_unavailable_reason
    assert "StatelessRandomUniformV2" in reason and "attach the callbacks to the model's first `fit`" in reason
