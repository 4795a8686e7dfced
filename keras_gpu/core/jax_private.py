"""Every private JAX API keras-gpu uses, behind small named functions.

JAX's private modules (`jax._src...`) are touched here and nowhere else in
keras-gpu (`tests/test_private_fence.py` keeps it so);
`tests/backends/test_jax_private.py` checks every function here against the
installed JAX. Each function imports JAX lazily: importing this module
imports nothing. Keras' own private state on the JAX backend lives in
`keras_gpu/core/keras_private.py`.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "CUDNN_ATTENTION_FORWARD",
    "UNCOUNTABLE_PRIMITIVES",
    "backends_initialized",
    "cudnn_attention_sizes",
]

CUDNN_ATTENTION_FORWARD = frozenset({
    "dot_product_attention_fwd",
    "dot_product_attention_fwd_wrapper",
    "dot_product_attention_fp8_fwd",
    "dot_product_attention_fp8_fwd_wrapper",
})
"""JAX's cuDNN fused attention primitives of a forward pass (`jax.nn.dot_product_attention(...,
implementation="cudnn")`, and Keras' `dot_product_attention` on a GPU): one equation computes
softmax(Q·Kᵀ)·V. Registered in JAX 0.10 by `jax._src.cudnn.fused_attention_stablehlo` (the `_wrapper`
one is what a jaxpr holds, inside a `custom_vjp_call`)."""

UNCOUNTABLE_PRIMITIVES = frozenset({
    "pallas_call",  # a Pallas kernel (Keras' splash/flash attention on TPU, user kernels)
    "mosaic_gpu_p",  # a Mosaic GPU kernel
    "tpu_custom_call",  # a Mosaic TPU kernel
    "ffi_call",  # a foreign function (custom CUDA kernel)
    "call_tf",  # a TensorFlow function called from JAX
    "call_exported",  # a serialized `jax.export` module
    "custom_fusion",  # an XLA custom fusion
    "scaled_matmul",  # cuDNN block-scaled matmul
    "scaled_matmul_wrapper",
    "scaled_dot",  # block-scaled dot
    "bcoo_dot_general",  # sparse products (jax.experimental.sparse)
    "bcoo_dot_general_sampled",
    "bcoo_spdot_general",
    "bcsr_dot_general",
    "dot_product_attention_bwd",  # cuDNN attention's backward pass, inside a forward one
    "dot_product_attention_bwd_wrapper",
    "dot_product_attention_fp8_bwd",
    "dot_product_attention_fp8_bwd_wrapper",
})
"""JAX primitives that hide matrix products whose amount keras-gpu cannot read from their operands
(kernels, foreign calls, sparse products): a count that meets one is a lower bound."""



def backends_initialized() -> bool:
    """Whether JAX has started its backends in this process, without starting them.

    After that, the device settings JAX reads at start (platforms, memory
    fraction, host device count) are fixed. JAX has no public call that
    answers without starting the backends (`jax.devices()` starts them).
    Checked on JAX 0.10: `jax._src.xla_bridge.backends_are_initialized()`.
    """
    from jax._src import xla_bridge

    return bool(xla_bridge.backends_are_initialized())


def cudnn_attention_sizes(eqn: Any) -> tuple[int, int, int, int, int, int]:
    """`(batch, query_heads, query_length, key_length, key_depth, value_depth)` of a cuDNN attention equation.

    Args:
        eqn: A jaxpr equation whose primitive is one of `CUDNN_ATTENTION_FORWARD`.

    Returns:
        The sizes, read from the query, key and value operands (the first
        three) in the equation's `layout`: BTNH (batch, length, heads, depth;
        JAX's default) or BNTH. Grouped-query attention has fewer key/value
        heads; the query's heads are returned.

    Raises:
        ValueError: The equation's layout or operands are not what JAX 0.10
            binds (a JAX that changed them).

    Checked on JAX 0.10: `AttentionLayout` of `jax._src.cudnn.fused_attention_stablehlo`.
    """
    from jax._src.cudnn.fused_attention_stablehlo import AttentionLayout

    query, key, value = (v.aval.shape for v in eqn.invars[:3])
    layout = eqn.params.get("layout")
    if len(query) != 4 or len(key) != 4 or len(value) != 4:
        raise ValueError(f"cuDNN attention operands of rank 4 expected, got shapes {query}, {key}, {value}")
    if layout == AttentionLayout.BNTH.value:
        batch, heads, length_q, depth = query
        length_k = key[2]
    elif layout == AttentionLayout.BTNH.value:
        batch, length_q, heads, depth = query
        length_k = key[1]
    else:
        raise ValueError(f"unknown cuDNN attention layout {layout!r}")
    return int(batch), int(heads), int(length_q), int(length_k), int(depth), int(value[3])
