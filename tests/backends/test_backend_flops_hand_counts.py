"""Training FLOPs per sample found by `ThroughputLogger` on JAX and PyTorch equal a hand count, layer by layer.

The cases and hand counts are in `tests/_flops_models.py`; TensorFlow is held
to the same numbers by `tests/test_flops_hand_counts.py`. One fresh
interpreter per backend trains every case for one epoch.

Attention kernels that a CPU cannot run are counted from what they are
traced or dispatched as: on JAX, a Keras layer binds the cuDNN fused
attention (the `custom_vjp` that `jax.nn.dot_product_attention(...,
implementation="cudnn")` calls on a GPU; tracing it needs no GPU), and the
forward pass is counted as on a GPU; on PyTorch, the counter's formulas for
the CUDA attention kernels are fed shapes. Ops that hide matrix products
(a foreign call, a Pallas kernel) make the count a lower bound.
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

if keras.backend.backend() == "jax":
    import logging

    import jax
    import jax.numpy as jnp
    from jax._src.cudnn import fused_attention_stablehlo as cudnn
    from jax.experimental import pallas as pl

    class CudnnAttention(keras.layers.Layer):  # what jax.nn.dot_product_attention(implementation="cudnn") binds
        def __init__(self, layout, mask, **kwargs):
            super().__init__(**kwargs)
            self.layout, self.mask = layout, mask

        def call(self, q, k, v):
            q, k, v = (keras.ops.cast(t, "bfloat16") for t in (q, k, v))
            if self.layout == cudnn.AttentionLayout.BNTH.value:
                q, k, v = (jnp.transpose(t, (0, 2, 1, 3)) for t in (q, k, v))
            none = jnp.zeros((0,), q.dtype)
            out = cudnn._dot_product_attention(q, k, v, none, none, none, none, none, none, none, 0.5, 0, 0.0,
                                               (False, False), self.mask, self.layout, None, 90000, False)
            if self.layout == cudnn.AttentionLayout.BNTH.value:
                out = jnp.transpose(out, (0, 2, 1, 3))
            return keras.ops.cast(out, "float32")

    def cudnn_model(layout, mask):
        x = keras.Input((6, 16))
        q = keras.layers.Reshape((6, 4, 8))(keras.layers.Dense(32, use_bias=False)(x))  # cuDNN: depth 8k
        kv = keras.layers.Reshape((6, 2, 8))(keras.layers.Dense(16, use_bias=False)(x))  # 2 key/value heads
        out = CudnnAttention(layout, mask, name="cudnn_attention")(q, kv, kv)
        return keras.Model(x, keras.layers.Reshape((6, 32))(out))

    for layout in cudnn.AttentionLayout:
        for mask in (cudnn.MaskType.NO_MASK, cudnn.MaskType.CAUSAL):
            model = cudnn_model(layout.value, mask)
            jaxpr = str(jax.make_jaxpr(lambda x: model(x))(jnp.zeros((1, 6, 16))))
            out[f"cudnn_{layout.name}_{mask.name}"] = [
                model_flops.training_flops_per_sample(model), list(model_flops.flops_uncounted_ops(model)),
                "dot_product_attention_fwd_wrapper" in jaxpr, "dot_general" in jaxpr.split("custom_vjp_call")[1],
            ]

    class ForeignKernel(keras.layers.Layer):  # a custom kernel behind jax.ffi: its work is unknown
        def call(self, x):
            return jax.ffi.ffi_call("custom_matmul", jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

    def kernel(x_ref, w_ref, o_ref):
        o_ref[...] = jnp.dot(x_ref[...], w_ref[...])

    class PallasKernel(keras.layers.Layer):  # a Pallas kernel whose body holds a dot
        def call(self, x):
            w = jnp.ones((6, 6), x.dtype)
            shape = jax.ShapeDtypeStruct(x.shape, x.dtype)
            return pl.pallas_call(kernel, out_shape=shape, interpret=True)(x, w)

        def compute_output_shape(self, shape):  # Pallas traces no unknown batch size
            return shape

    records = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    logging.getLogger("keras_gpu").addHandler(handler)
    inp = keras.Input((6,))
    foreign = keras.Model(inp, ForeignKernel(name="custom_kernel")(keras.layers.Dense(6)(inp)))
    first = model_flops.training_flops_per_sample(foreign)
    again = model_flops.training_flops_per_sample(foreign)
    out["foreign"] = [first, again, list(model_flops.flops_uncounted_ops(foreign)),
                      [r.getMessage() for r in records if "lower bounds" in r.getMessage()]]
    pallas = keras.Model(inp, PallasKernel(name="pallas_kernel")(keras.layers.Dense(6)(inp)))
    out["pallas"] = [model_flops.training_flops_per_sample(pallas), list(model_flops.flops_uncounted_ops(pallas))]
    alone = keras.Model(inp, ForeignKernel(name="only_kernel")(inp))
    out["foreign_alone"] = [model_flops.training_flops_per_sample(alone), model_flops.flops_failure(alone)]

if keras.backend.backend() == "torch":
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    aten = torch.ops.aten
    registry = FlopCounterMode(display=False).flop_registry
    query = torch.empty((2, 4, 6, 8), device="meta")  # batch 2, 4 query heads, 6 positions, depth 8
    key = torch.empty((2, 2, 9, 8), device="meta")  # 2 key/value heads, 9 positions
    out["torch_cuda_attention"] = {
        name: registry[getattr(aten, name)](query, key, key, out_val=None)
        for name in ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                     "_scaled_dot_product_cudnn_attention")
    }
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


# Dense 16 -> 32 (queries), Dense 16 -> 16 (keys and values), then Q·Kᵀ and P·V of 4 heads of depth 8 over 6 x 6
_CUDNN_ATTENTION = 2 * 6 * 16 * 32 + 2 * 6 * 16 * 16 + 2 * 4 * 6 * 6 * (8 + 8)


@pytest.mark.parametrize("layout", ["BTNH", "BNTH"])
@pytest.mark.parametrize("mask", ["NO_MASK", "CAUSAL"])
def test_jax_cudnn_fused_attention_counts_its_two_products(results, layout, mask):
    if "jax" not in results:
        pytest.skip("jax is not installed")
    flops, left_out, has_cudnn_primitive, plain_products_inside = results["jax"][f"cudnn_{layout}_{mask}"]
    assert has_cudnn_primitive and not plain_products_inside  # the jaxpr a GPU traces: no dot_general to count
    assert flops == 3 * _CUDNN_ATTENTION
    assert left_out == []


def test_jax_foreign_call_makes_the_count_a_lower_bound_with_one_warning(results):
    if "jax" not in results:
        pytest.skip("jax is not installed")
    first, again, left_out, warnings = results["jax"]["foreign"]
    assert first == again == 3 * 2 * 6 * 6  # the Dense layer only
    assert left_out == ["ffi_call 'custom_matmul' in layer 'custom_kernel'"]
    assert len(warnings) == 1
    assert left_out[0] in warnings[0] and "MFU are lower bounds" in warnings[0]


def test_jax_pallas_kernel_is_left_out_not_counted_once_per_call(results):
    if "jax" not in results:
        pytest.skip("jax is not installed")
    flops, left_out = results["jax"]["pallas"]
    assert flops == 3 * 2 * 6 * 6
    assert left_out == ["pallas_call in layer 'pallas_kernel'"]


def test_jax_model_of_uncountable_products_only_is_not_counted(results):
    if "jax" not in results:
        pytest.skip("jax is not installed")
    flops, reason = results["jax"]["foreign_alone"]
    assert flops is None
    assert reason == ("the matrix products of its forward pass are in ops keras-gpu cannot count "
                      "(ffi_call 'custom_matmul' in layer 'only_kernel')")


def test_torch_counts_its_cuda_attention_kernels_like_the_hand_count(results):
    if "torch" not in results:
        pytest.skip("torch is not installed")
    expected = 2 * 2 * 4 * 6 * 9 * (8 + 8)  # batch 2, 4 query heads (2 key/value heads), 6 x 9 scores, depths 8 + 8
    assert results["torch"]["torch_cuda_attention"] == {
        "_scaled_dot_product_flash_attention": expected,
        "_scaled_dot_product_efficient_attention": expected,
        "_scaled_dot_product_cudnn_attention": expected,
    }
