"""Training FLOPs per sample found by `ThroughputLogger` on JAX and PyTorch equal a hand count, layer by layer.

The cases and hand counts are in `tests/_flops_models.py`; TensorFlow is held
to the same numbers by `tests/test_flops_hand_counts.py`. One fresh
interpreter per backend trains every case for one epoch.
"""

from __future__ import annotations

import pytest

from tests._flops_models import HAND
from tests.backends._common import BACKENDS, WITHOUT_TENSORFLOW, results_per_backend

pytestmark = WITHOUT_TENSORFLOW

SCRIPT = """
import json, tempfile
import keras
from keras_gpu.meters import model_flops
from tests._flops_models import HAND, train_flops

out = {name: train_flops(name, tempfile.mkdtemp()) for name in HAND}


class Repeat(keras.layers.Layer):  # a loop whose trip count depends on the data
    def build(self, shape):
        self.w = self.add_weight(shape=(shape[-1], shape[-1]))

    def call(self, x):
        n = keras.ops.cast(keras.ops.sum(keras.ops.abs(x)) > 1.0, "int32") + 1
        return keras.ops.while_loop(lambda i, h: i < n, lambda i, h: (i + 1, keras.ops.matmul(h, self.w)), (0, x))[1]


inp = keras.Input((3,))
looped = keras.Model(inp, Repeat(name="my_repeat")(inp))
looped.build((None, 3))
out["looped"] = [model_flops.training_flops_per_sample(looped), model_flops.flops_failure(looped)]
print("RESULT", json.dumps(out))
"""


@pytest.fixture(scope="module")
def results():
    return results_per_backend(SCRIPT)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(HAND))
def test_training_flops_equal_three_times_the_hand_counted_forward_pass(results, backend, name):
    assert results[backend][name] == 3 * HAND[name]


def test_a_loop_jax_cannot_count_is_named_by_the_users_layer(results):
    if "jax" not in results:
        pytest.skip("jax is not installed")
    flops, reason = results["jax"]["looped"]
    assert flops is None
    assert reason == "a loop in layer 'my_repeat' has no constant number of iterations"
