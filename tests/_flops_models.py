"""Models whose forward FLOPs per sample are counted by hand, for every backend.

Used by `tests/test_flops_hand_counts.py` (TensorFlow, in process) and
`tests/backends/test_backend_flops_hand_counts.py` (JAX and PyTorch). Each
case is trained for one epoch with a `ThroughputLogger`, whose training FLOPs
per sample (3 x forward) must equal 3 x the hand count below.

Convention (that of `keras_gpu.meters.flops`): matmul-like work only, a
multiply-add is 2 FLOPs, biases and activations are not counted. A
convolution costs 2 x output elements x kernel taps x input channels per
group; a transposed convolution 2 x input elements x kernel taps x output
channels (each input element meets every tap once; the zeros a dilated-input
implementation inserts are not work).
"""

from __future__ import annotations

import numpy as np

__all__ = ["HAND", "build", "data", "train_flops"]

HAND: dict[str, int] = {
    # Dense 32 -> 64 -> 10
    "dense": 2 * (32 * 64 + 64 * 10),
    # Conv1D(8, 3) on 20 x 4: output 18 x 8, taps 3 x 4 input channels
    "conv1d": 2 * (18 * 8) * (3 * 4),
    # Conv2D(6, 3) on 10 x 10 x 3: output 8 x 8 x 6, taps 3 x 3 x 3
    "conv2d": 2 * (8 * 8 * 6) * (3 * 3 * 3),
    # Conv3D(4, 3) on 6 x 6 x 6 x 2: output 4 x 4 x 4 x 4, taps 3 x 3 x 3 x 2
    "conv3d": 2 * (4 * 4 * 4 * 4) * (3 * 3 * 3 * 2),
    # Conv1DTranspose(6, 3, strides=2) on 10 x 4: 10 x 4 input elements, each x 3 taps x 6 outputs
    "conv1d_transpose": 2 * (10 * 4) * (3 * 6),
    # Conv2DTranspose(4, 3, strides=2) on 8 x 8 x 4: 8 x 8 x 4 input elements x 3 x 3 taps x 4 outputs
    "conv2d_transpose": 2 * (8 * 8 * 4) * (3 * 3 * 4),
    # Conv3DTranspose(2, 3, strides=2) on 4 x 4 x 4 x 3: 192 input elements x 27 taps x 2 outputs
    "conv3d_transpose": 2 * (4 * 4 * 4 * 3) * (3 * 3 * 3 * 2),
    # the same with padding="same" (output 16 x 16 x 4): still every input element x every tap
    "conv2d_transpose_same": 2 * (8 * 8 * 4) * (3 * 3 * 4),
    # DepthwiseConv2D(3) on 8 x 8 x 4: output 6 x 6 x 4, 3 x 3 taps of one channel each
    "depthwise_conv2d": 2 * (6 * 6 * 4) * (3 * 3),
    # SeparableConv2D(5, 3) on 8 x 8 x 4: depthwise 6 x 6 x 4 x 9 taps, then pointwise 6 x 6 x 5 x 4 channels
    "separable_conv2d": 2 * (6 * 6 * 4) * 9 + 2 * (6 * 6 * 5) * 4,
    # LSTM(8) on Input((None, 5)) fed 7 steps: per step 4 gates x 8 units from 5 inputs and 8 states
    "lstm_none_time": 7 * 2 * (5 * 32 + 8 * 32),
    # GRU(6) on Input((None, 5)) fed 7 steps: per step 3 gates x 6 units from 5 inputs and 6 states
    "gru_none_time": 7 * 2 * (5 * 18 + 6 * 18),
    # MultiHeadAttention(2 heads, key_dim 4) on 6 x 8 self-attention:
    # query/key/value projections 3 x (6 positions x 8 -> 2 x 4), scores 2 heads x 6 x 6 x 4,
    # weighted values 2 heads x 6 x 6 x 4, output projection 6 x (2 x 4) -> 8
    "multi_head_attention": 3 * 2 * 6 * 8 * 8 + 2 * 2 * 6 * 6 * 4 + 2 * 2 * 6 * 6 * 4 + 2 * 6 * 8 * 8,
    # the same with a causal mask: the full 6 x 6 scores are counted (a mask removes no product)
    "multi_head_attention_causal": 3 * 2 * 6 * 8 * 8 + 2 * 2 * 6 * 6 * 4 + 2 * 2 * 6 * 6 * 4 + 2 * 6 * 8 * 8,
    # keras.ops.dot_product_attention on 6 positions x 4 heads of 4 (a Dense 16 -> 16 makes them):
    # scores Q·Kᵀ 4 heads x 6 x 6 x 4, weighted values P·V 4 heads x 6 x 6 x 4
    "dot_product_attention": 2 * 6 * 16 * 16 + 2 * 4 * 6 * 6 * (4 + 4),
    # the same, is_causal=True: still the full products
    "dot_product_attention_causal": 2 * 6 * 16 * 16 + 2 * 4 * 6 * 6 * (4 + 4),
    # grouped-query: 4 query heads (Dense 16 -> 16), 2 key/value heads (Dense 16 -> 8); every query head
    # meets all 6 keys: 4 heads x 6 x 6 x (4 + 4)
    "dot_product_attention_gqa": 2 * 6 * 16 * 16 + 2 * 6 * 16 * 8 + 2 * 4 * 6 * 6 * (4 + 4),
    # subclassed: einsum 6 -> 5, tensordot 5 -> 4, matmul 4 -> 3
    "subclassed_ops": 2 * (6 * 5 + 5 * 4 + 4 * 3),
    # subclassed: matmul of 6 features with a vector of 6 weights (a matrix-vector product)
    "subclassed_vector": 2 * 6,
}


def _input_shape(name: str) -> tuple[int, ...]:
    return {
        "dense": (32,),
        "conv1d": (20, 4),
        "conv2d": (10, 10, 3),
        "conv3d": (6, 6, 6, 2),
        "conv1d_transpose": (10, 4),
        "conv2d_transpose": (8, 8, 4),
        "conv2d_transpose_same": (8, 8, 4),
        "conv3d_transpose": (4, 4, 4, 3),
        "depthwise_conv2d": (8, 8, 4),
        "separable_conv2d": (8, 8, 4),
        "lstm_none_time": (7, 5),
        "gru_none_time": (7, 5),
        "multi_head_attention": (6, 8),
        "multi_head_attention_causal": (6, 8),
        "dot_product_attention": (6, 16),
        "dot_product_attention_causal": (6, 16),
        "dot_product_attention_gqa": (6, 16),
        "subclassed_ops": (6,),
        "subclassed_vector": (6,),
    }[name]


def build(name: str):
    """The model of case `name` (functional, except `subclassed_ops`)."""
    import keras

    L = keras.layers
    if name in ("subclassed_ops", "subclassed_vector"):
        return _subclassed(name)
    shape = _input_shape(name)
    if name in ("lstm_none_time", "gru_none_time"):
        x = keras.Input((None, shape[1]))  # a time dimension known only from the data
        rnn = L.LSTM(8) if name == "lstm_none_time" else L.GRU(6)
        return keras.Model(x, rnn(x), name=name)
    x = keras.Input(shape)
    layer = {
        "dense": lambda: keras.Sequential([L.Dense(64), L.Dense(10)]),
        "conv1d": lambda: L.Conv1D(8, 3),
        "conv2d": lambda: L.Conv2D(6, 3),
        "conv3d": lambda: L.Conv3D(4, 3),
        "conv1d_transpose": lambda: L.Conv1DTranspose(6, 3, strides=2),
        "conv2d_transpose": lambda: L.Conv2DTranspose(4, 3, strides=2),
        "conv2d_transpose_same": lambda: L.Conv2DTranspose(4, 3, strides=2, padding="same"),
        "conv3d_transpose": lambda: L.Conv3DTranspose(2, 3, strides=2),
        "depthwise_conv2d": lambda: L.DepthwiseConv2D(3),
        "separable_conv2d": lambda: L.SeparableConv2D(5, 3),
    }.get(name)
    if layer is not None:
        return keras.Model(x, layer()(x), name=name)
    if name in ("multi_head_attention", "multi_head_attention_causal"):
        causal = name.endswith("causal")
        return keras.Model(x, L.MultiHeadAttention(num_heads=2, key_dim=4)(x, x, use_causal_mask=causal), name=name)
    if name.startswith("dot_product_attention"):
        query = L.Reshape((6, 4, 4))(L.Dense(16, use_bias=False)(x))
        key = query
        if name.endswith("gqa"):
            key = L.Reshape((6, 2, 4))(L.Dense(8, use_bias=False)(x))
        out = keras.ops.dot_product_attention(query, key, key, is_causal=name.endswith("causal"))
        return keras.Model(x, L.Reshape((6, 16))(out), name=name)
    raise ValueError(f"unknown case {name!r}")


def _subclassed(name: str):
    import keras

    class Ops(keras.Model):
        def __init__(self):
            super().__init__(name=name)
            self.w1 = self.add_weight(shape=(6, 5), name="w1")
            self.w2 = self.add_weight(shape=(5, 4), name="w2")
            self.w3 = self.add_weight(shape=(4, 3), name="w3")
            self.v = self.add_weight(shape=(6,), name="v")

        def call(self, x):
            if name == "subclassed_vector":
                return keras.ops.matmul(x, self.v)
            h = keras.ops.einsum("bi,ij->bj", x, self.w1)
            h = keras.ops.tensordot(keras.ops.relu(h), self.w2, axes=1)
            return keras.ops.matmul(keras.ops.relu(h), self.w3)

    return Ops()


def data(name: str, model, samples: int = 32):
    """Inputs and targets for one epoch of case `name`."""
    import keras

    rng = np.random.default_rng(0)
    x = rng.random((samples, *_input_shape(name)), dtype=np.float32)
    out = keras.ops.convert_to_numpy(model(x[:1]))  # the target's shape (a subclassed model gets built here)
    return x, rng.random((samples, *out.shape[1:]), dtype=np.float32)


def train_flops(name: str, log_dir: str) -> float | None:
    """The training FLOPs per sample a `ThroughputLogger` counts for case `name` in one epoch of `fit`."""
    import keras

    import keras_gpu

    keras.utils.set_random_seed(0)
    model = build(name)
    x, y = data(name, model)
    model.compile("sgd", "mse")
    logger = keras_gpu.ThroughputLogger(log_dir)
    model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[logger])
    return logger.summary["flops_per_sample"]
