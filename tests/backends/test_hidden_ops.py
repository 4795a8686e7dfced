"""An op that hides a matrix product is named on JAX and PyTorch, and the FLOP rates are marked as lower bounds.

Each case puts a fixed 256 x 512 product inside an op the counter cannot
see into (a host callback, a custom op, a sparse product), between the
input and a `Dense(10)`: the hand count is 3 x (2 x 256 x 512 + 2 x 512 x
10) = 817,152 training FLOPs per sample, of which the counter can see the
Dense layer's 30,720. TensorFlow's cases are in `tests/test_flops.py`.
"""

from __future__ import annotations

import pytest

from tests.backends._common import BACKENDS, WITHOUT_TENSORFLOW, results_per_backend

pytestmark = WITHOUT_TENSORFLOW

SCRIPT = """
import json, logging, tempfile
import numpy as np
import keras
import keras_gpu
from keras_gpu.meters import model_flops

W = np.random.default_rng(0).normal(size=(256, 512)).astype("float32")
cases = {}

if keras.backend.backend() == "jax":
    import jax

    class Callback(keras.layers.Layer):
        def call(self, x):
            shape = jax.ShapeDtypeStruct((x.shape[0], 512), x.dtype)
            return jax.pure_callback(lambda a: np.asarray(a) @ W, shape, x)

        def compute_output_shape(self, shape):
            return (shape[0], 512)

    cases["pure_callback"] = Callback
else:
    import torch

    weight = torch.from_numpy(W)
    sparse = weight.t().to_sparse()

    @torch.library.custom_op("keras_gpu_test::hidden_mm", mutates_args=())
    def hidden_mm(x: torch.Tensor) -> torch.Tensor:
        return x @ weight

    @hidden_mm.register_fake
    def _(x):
        return x.new_empty(x.shape[0], 512)

    class CustomOp(keras.layers.Layer):
        def call(self, x):
            return hidden_mm(x)

        def compute_output_shape(self, shape):
            return (shape[0], 512)

    class Sparse(keras.layers.Layer):
        def call(self, x):
            return torch.sparse.mm(sparse, x.t()).t()

        def compute_output_shape(self, shape):
            return (shape[0], 512)

    cases["custom_op"], cases["sparse_mm"] = CustomOp, Sparse

records = []
handler = logging.Handler(logging.INFO)
handler.emit = records.append
logging.getLogger("keras_gpu").addHandler(handler)
logging.getLogger("keras_gpu").setLevel(logging.INFO)
x = np.random.default_rng(1).normal(size=(64, 256)).astype("float32")
y = np.zeros((64, 10), "float32")
out = {}
for name, layer in cases.items():
    inp = keras.Input((256,))
    model = keras.Model(inp, keras.layers.Dense(10)(layer(name=f"hidden_{name}")(inp)))
    model.compile(optimizer="sgd", loss="mse")
    del records[:]
    logger = keras_gpu.ThroughputLogger(tempfile.mkdtemp(), peak_flops=1e12)
    model.fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[logger])
    lines = [r.getMessage() for r in records]
    out[name] = {
        "flops": model_flops.training_flops_per_sample(model),
        "uncounted": list(model_flops.flops_uncounted_ops(model)),
        "summary": list(logger.summary["flops_uncounted_ops"]),
        "end_line": [line for line in lines if "wall-clock training rate" in line],
        "warnings": [line for line in lines if "lower bounds" in line and "FLOP count of model" in line],
    }
print("RESULT", json.dumps(out))
"""

COUNTED = 3 * 2 * 512 * 10  # the Dense layer: what the counter sees
EXPECTED = {
    "jax": {"pure_callback": "pure_callback (a host callback) in layer 'hidden_pure_callback'"},
    "torch": {
        "custom_op": "keras_gpu_test.hidden_mm (a custom op) in its forward pass",
        "sparse_mm": "aten._sparse_addmm (a sparse product) in its forward pass",
    },
}


@pytest.fixture(scope="module")
def results():
    return results_per_backend(SCRIPT)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_hidden_product_is_named_and_the_rates_are_lower_bounds(results, backend):
    assert set(results[backend]) == set(EXPECTED[backend])
    for case, named in EXPECTED[backend].items():
        got = results[backend][case]
        assert got["flops"] == COUNTED < 3 * (2 * 256 * 512 + 2 * 512 * 10)  # a lower bound, never the truth
        assert got["uncounted"] == got["summary"] == [named], case
        (line,) = got["end_line"]
        assert ">= " in line and f"lower bounds: the FLOP count leaves out {named}" in line, line
        (warning,) = got["warnings"]
        assert named in warning
