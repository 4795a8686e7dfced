"""FLOPs from the traced graph against analytic counts, the peak table, and the per-model cache."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from keras_gpu.meters import flops, model_flops

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")


def _mlp(sizes):
    inp = keras.Input((sizes[0],))
    x = inp
    for i, n in enumerate(sizes[1:]):
        x = keras.layers.Dense(n, activation="relu" if i < len(sizes) - 2 else None)(x)
    return keras.Model(inp, x)


def test_dense_mlp_matches_analytic_count():
    sizes = [32, 64, 48, 10]
    model = _mlp(sizes)
    # A Dense layer costs 2 * in * out FLOPs per sample (multiply-add = 2); biases
    # and activations are not counted.
    expected = sum(2 * a * b for a, b in itertools.pairwise(sizes))
    assert flops.forward_flops(model) == expected
    assert flops.training_flops_per_sample(model) == 3 * expected


def test_sequential_models():
    built = keras.Sequential([keras.Input((6,)), keras.layers.Dense(4), keras.layers.Dense(2)])
    assert flops.forward_flops(built) == 2 * (6 * 4 + 4 * 2)
    lazy = keras.Sequential([keras.layers.Dense(4)])
    lazy(tf.zeros((1, 6)))
    assert flops.forward_flops(lazy, tf.TensorSpec([None, 6])) == 2 * 6 * 4


def test_dense_on_sequences_counts_every_position():
    inp = keras.Input((10, 16))
    model = keras.Model(inp, keras.layers.Dense(32)(inp))
    assert flops.forward_flops(model) == 2 * 10 * 16 * 32


def test_conv_models_match_analytic_count():
    inp = keras.Input((8, 8, 3))
    x = keras.layers.Conv2D(4, 3, padding="same")(inp)  # out 8x8x4, kernel 3x3x3
    x = keras.layers.DepthwiseConv2D(3)(x)  # out 6x6x4, kernel 3x3 per channel
    x = keras.layers.Conv2DTranspose(6, 3, strides=2)(x)  # in 6x6x4 -> out 13x13x6
    x = keras.layers.Flatten()(x)
    out = keras.layers.Dense(5)(x)
    model = keras.Model(inp, out)
    expected = (
        2 * (8 * 8 * 4) * (3 * 3 * 3)
        + 2 * (6 * 6 * 4) * (3 * 3)
        + 2 * (6 * 6 * 4) * (3 * 3 * 6)
        + 2 * (13 * 13 * 6) * 5
    )
    assert flops.forward_flops(model) == expected


def test_attention_einsums_match_analytic_count():
    inp = keras.Input((8, 8))
    out = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4)(inp, inp)
    model = keras.Model(inp, out)
    t, d, heads, k = 8, 8, 2, 4
    projections = 3 * 2 * t * d * heads * k + 2 * t * heads * k * d
    scores = 2 * heads * t * t * k  # QK^T
    mix = 2 * heads * t * t * k  # attention x V
    assert flops.forward_flops(model) == projections + scores + mix


def test_einsum_with_ellipsis_and_batched_matmul():
    class Mix(keras.layers.Layer):
        def call(self, x):
            w = tf.ones((4, 6))
            a = tf.einsum("...ij,jk->...ik", x, w)  # x: (b, 3, 5, 4)
            return tf.matmul(a, a, transpose_b=True)  # (b, 3, 5, 6) @ (b, 3, 6, 5)

        def compute_output_shape(self, shape):
            return (shape[0], 3, 5, 5)

    inp = keras.Input((3, 5, 4))
    model = keras.Model(inp, Mix()(inp))
    assert flops.forward_flops(model) == 2 * (3 * 5 * 6) * 4 + 2 * (3 * 5 * 5) * 6


def test_rnn_loop_counts_body_times_time_steps_and_ignores_dead_ops():
    inp = keras.Input((6, 4))
    model = keras.Model(inp, keras.layers.LSTM(3)(inp))
    # 4 gates: input kernel 4x12 and recurrent kernel 3x12, at each of 6 steps.
    assert flops.forward_flops(model) == 6 * 2 * (4 * 12 + 3 * 12)


class _Branchy(keras.layers.Layer):
    """A layer whose matmul depends on a data-dependent `tf.cond`: no single FLOP count."""

    def call(self, x):
        big = lambda: tf.matmul(x, tf.ones((4, 8)))[:, :2]  # noqa: E731
        small = lambda: tf.matmul(x, tf.ones((4, 2)))  # noqa: E731
        return tf.cond(tf.reduce_sum(x) > 0, big, small)

    def compute_output_shape(self, shape):
        return (shape[0], 2)


def test_uncountable_graph_gives_none_not_a_guess():
    inp = keras.Input((4,))
    model = keras.Model(inp, _Branchy()(inp))
    assert flops.forward_flops(model) is None
    assert flops.training_flops_per_sample(model) is None


def test_subclassed_model_is_counted_from_its_build_shapes_or_an_input_spec():
    class Sub(keras.Model):
        def __init__(self):
            super().__init__()
            self.d = keras.layers.Dense(5)

        def call(self, x):
            return self.d(x)

    model = Sub()
    assert flops.forward_flops(model) is None  # not built: no shapes to count with, and it says so
    assert flops.failure(model) == "it has no symbolic inputs and was not built with an input shape"
    model(tf.zeros((2, 3)))
    assert flops.forward_flops(model) == 2 * 3 * 5  # built: the shapes it was built with
    assert flops.forward_flops(model, tf.TensorSpec([None, 3], tf.float32)) == 2 * 3 * 5
    # An unknown non-batch dimension cannot be counted.
    assert flops.forward_flops(model, tf.TensorSpec([None, None], tf.float32)) is None
    assert "known only from the data" in flops.failure(model)


def test_static_batch_dimension_is_divided_out():
    inp = keras.Input((7,), batch_size=4)
    model = keras.Model(inp, keras.layers.Dense(3)(inp))
    assert flops.forward_flops(model) == 2 * 7 * 3


def test_count_is_cached_per_model_and_signature(monkeypatch):
    calls = []
    real = flops._trace_forward_graph

    def counting(model, signature):
        calls.append(model.name)
        return real(model, signature)

    monkeypatch.setattr(flops, "_trace_forward_graph", counting)
    model = _mlp([5, 7])
    other = _mlp([5, 7])
    assert flops.forward_flops(model) == 70
    assert flops.training_flops_per_sample(model) == 210
    assert flops.forward_flops(model) == 70
    assert len(calls) == 1
    assert flops.forward_flops(other) == 70
    assert len(calls) == 2
    # A different input signature is a different trace.
    assert flops.forward_flops(model, tf.TensorSpec([None, 5], tf.float64)) == 70
    assert len(calls) == 3


@pytest.mark.parametrize(
    ("name", "dtype", "tflops"),
    [
        ("NVIDIA H100 80GB HBM3", "bfloat16", 989.5),
        ("NVIDIA H100 80GB HBM3", "tf32", 494.5),
        ("NVIDIA H100 80GB HBM3", "float32", 67.0),
        ("NVIDIA H100 PCIe", "float16", 756.5),
        ("NVIDIA H100 NVL", "bfloat16", 835.5),
        ("NVIDIA H200", "bfloat16", 989.5),
        ("NVIDIA H200 NVL", "float32", 60.0),
        ("NVIDIA GH200 480GB", "bfloat16", 989.5),
        ("NVIDIA A100-SXM4-40GB", "tf32", 156.0),
        ("NVIDIA A100-SXM4-80GB", "float16", 312.0),
        ("NVIDIA A100 80GB PCIe", "bfloat16", 312.0),
        ("NVIDIA A100-PCIE-40GB", "float32", 19.5),
        ("NVIDIA A10", "bfloat16", 125.0),
        ("NVIDIA A10G", "tf32", 62.5),
        ("NVIDIA A30", "float16", 165.0),
        ("NVIDIA A40", "tf32", 74.8),
        ("NVIDIA RTX A6000", "float16", 154.8),
        ("NVIDIA GeForce RTX 3090", "float16", 71.0),
        ("NVIDIA GeForce RTX 4090", "bfloat16", 165.2),
        ("NVIDIA L4", "float16", 121.0),
        ("NVIDIA L40", "bfloat16", 181.0),
        ("NVIDIA L40S", "bfloat16", 362.0),
        ("Tesla V100-SXM2-16GB", "float16", 125.0),
        ("Tesla V100-SXM2-32GB", "float32", 15.7),
        ("Tesla V100-PCIE-16GB", "float16", 112.0),
        ("Tesla V100S-PCIE-32GB", "float16", 130.0),
        ("Tesla T4", "float16", 65.0),
        ("nvidia h100 80gb hbm3", "bfloat16", 989.5),
        ("NVIDIA_H100_PCIe", "bfloat16", 756.5),
    ],
)
def test_peak_table_lookup(name, dtype, tflops):
    assert flops.peak_flops(name, dtype) == pytest.approx(tflops * 1e12)


def test_peak_table_dtype_rules():
    # Before Ampere there is no TF32: float32 matmuls run at the float32 rate.
    assert flops.peak_flops("Tesla V100-SXM2-16GB", "tf32") == pytest.approx(15.7e12)
    assert flops.peak_flops("Tesla T4", "tf32") == pytest.approx(8.1e12)
    # ...and no fast bfloat16 at all.
    assert flops.peak_flops("Tesla V100-SXM2-16GB", "bfloat16") is None
    assert flops.peak_flops("Tesla T4", "bfloat16") is None


@pytest.mark.parametrize(
    "name",
    [
        "NVIDIA A100-SXM4-40GB MIG 1g.5gb",  # a slice, not the whole GPU
        "NVIDIA GeForce RTX 3090 Ti",
        "NVIDIA GeForce RTX 4090 D",
        "NVIDIA GeForce GTX 1080",
        "AMD Instinct MI300X",
        "",
        "Intel(R) Xeon(R) CPU",
    ],
)
def test_peak_table_unknown_devices(name):
    assert flops.peak_flops(name, "float16") is None


def test_peak_table_bad_arguments():
    with pytest.raises(ValueError, match=r"`dtype` must be one of .*Received: dtype='fp8'"):
        flops.peak_flops("NVIDIA H100 80GB HBM3", "fp8")
    with pytest.raises(TypeError, match=r"Received: device_name=3"):
        flops.peak_flops(3, "float16")
    required = {"V100 SXM2", "T4", "A10", "A10G", "A100", "L4", "L40S", "RTX 3090", "RTX 4090", "RTX A6000"}
    required |= {"H100 SXM", "H100 PCIe", "H200 SXM"}
    assert set(flops.known_gpus()) >= required


def test_compute_dtype_follows_policy_and_tf32():
    mixed = _mlp([3, 2])
    mixed.dtype_policy = keras.DTypePolicy("mixed_float16")
    assert flops.compute_dtype(mixed) == "float16"
    mixed.dtype_policy = keras.DTypePolicy("mixed_bfloat16")
    assert flops.compute_dtype(mixed) == "bfloat16"
    plain = _mlp([3, 2])
    enabled = tf.config.experimental.tensor_float_32_execution_enabled()
    try:
        tf.config.experimental.enable_tensor_float_32_execution(True)
        assert flops.compute_dtype(plain) == "tf32"
        tf.config.experimental.enable_tensor_float_32_execution(False)
        assert flops.compute_dtype(plain) == "float32"
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(enabled)


def test_impossible_counts_name_the_users_layer_or_input():
    inp = keras.Input((4,))
    model = keras.Model(inp, _Branchy(name="my_gate")(inp))
    assert flops.forward_flops(model) is None
    assert "a conditional in layer" in flops.failure(model) and "my_gate" in flops.failure(model)

    steps = keras.Input((None, 5), name="steps")
    rnn = keras.Model(steps, keras.layers.LSTM(3)(steps))
    assert flops.forward_flops(rnn) is None
    assert flops.failure(rnn).startswith("its input 'steps' has shape (None, None, 5): a dimension besides the batch")
    # The data's shape counts it: 7 steps x 2 x (5 inputs + 3 states) x 4 gates x 3 units.
    assert flops.forward_flops(rnn, tf.TensorSpec([None, 7, 5])) == 7 * 2 * (5 + 3) * 4 * 3


class _SparseProduct(keras.layers.Layer):
    """x · W with W as a sparse tensor: a `SparseTensorDenseMatMul` op, whose work the counter cannot size."""

    def build(self, shape):
        self.w = self.add_weight(shape=(shape[-1], 5))

    def call(self, x):
        return tf.sparse.sparse_dense_matmul(x, tf.sparse.from_dense(self.w))


def test_an_op_hiding_matrix_products_makes_the_count_a_lower_bound_with_one_warning(caplog):
    inp = keras.Input((6,))
    model = keras.Model(inp, _SparseProduct(name="sparse_product_lb")(keras.layers.Dense(6)(inp)))
    with caplog.at_level("WARNING", logger="keras_gpu"):
        first = model_flops.training_flops_per_sample(model)
        again = model_flops.training_flops_per_sample(model)  # cached: no second warning
    assert first == again == 3 * 2 * 6 * 6  # the Dense layer only
    ops = model_flops.flops_uncounted_ops(model)
    assert len(ops) == 1 and ops[0].startswith("SparseTensorDenseMatMul in layer ") and "sparse_product_lb" in ops[0]
    warnings = [r for r in caplog.records if r.levelname == "WARNING" and "lower bounds" in r.getMessage()]
    assert len(warnings) == 1
    assert ops[0] in warnings[0].getMessage() and "flops_per_sample=" in warnings[0].getMessage()

    complete = _mlp([6, 4])
    assert model_flops.training_flops_per_sample(complete) == 3 * 2 * 6 * 4
    assert model_flops.flops_uncounted_ops(complete) == ()


def test_only_uncountable_products_give_none_naming_the_op():
    inp = keras.Input((6,))
    model = keras.Model(inp, _SparseProduct(name="sparse_only")(inp))
    assert flops.forward_flops(model) is None
    assert "cannot count (SparseTensorDenseMatMul in layer " in flops.failure(model)
    assert flops.uncounted_ops(model) == ()


def test_throughput_logger_marks_flop_rates_of_an_uncountable_model_as_lower_bounds(tmp_path, caplog):
    from keras_gpu import ThroughputLogger

    inp = keras.Input((6,))
    model = keras.Model(inp, _SparseProduct(name="sparse_product_fit")(keras.layers.Dense(6)(inp)))
    model.compile(optimizer="sgd", loss="mse")
    cb = ThroughputLogger(tmp_path, peak_flops=1e12)
    x, y = np.zeros((64, 6), "float32"), np.zeros((64, 5), "float32")
    with caplog.at_level("INFO", logger="keras_gpu"):
        model.fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[cb])
    (op,) = cb.summary["flops_uncounted_ops"]
    assert op.startswith("SparseTensorDenseMatMul in layer ")
    (line,) = [r.getMessage() for r in caplog.records if "wall-clock training rate" in r.getMessage()]
    assert f"MFU steady >= {100 * cb.summary['steady_mfu']:.2f}%" in line
    assert f"lower bounds: the FLOP count leaves out {op}" in line
    # With the user's own count, nothing is a lower bound.
    exact = ThroughputLogger(tmp_path / "given", peak_flops=1e12, flops_per_sample=1e3)
    model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[exact])
    assert exact.summary["flops_uncounted_ops"] == ()


_HIDDEN_W = np.random.default_rng(0).normal(size=(256, 512)).astype("float32")


class _NumpyProduct(keras.layers.Layer):  # a fixed 256 x 512 product run by NumPy on the host
    def call(self, x):
        import tensorflow as tf

        y = tf.numpy_function(lambda a: a @ _HIDDEN_W, [x], tf.float32)
        y.set_shape((x.shape[0], 512))
        return y


class _PyFunctionProduct(keras.layers.Layer):  # the same product in eager Python
    def call(self, x):
        import tensorflow as tf

        y = tf.py_function(lambda a: a.numpy() @ _HIDDEN_W, [x], tf.float32)
        y.set_shape((x.shape[0], 512))
        return y


@pytest.mark.parametrize(
    "layer, op", [(_NumpyProduct, "PyFunc"), (_PyFunctionProduct, "EagerPyFunc")], ids=["numpy_function", "py_function"]
)
def test_a_python_callback_is_named_and_the_rates_are_lower_bounds(tmp_path, caplog, layer, op):
    from keras_gpu import ThroughputLogger

    # 3 x (2 x 256 x 512 + 2 x 512 x 10) = 817,152 training FLOPs per sample by hand; the Dense layer's are visible.
    inp = keras.Input((256,))
    model = keras.Model(inp, keras.layers.Dense(10)(layer(name=f"hidden_{op.lower()}")(inp)))
    model.compile(optimizer="sgd", loss="mse")
    cb = ThroughputLogger(tmp_path, peak_flops=1e12)
    x, y = np.zeros((64, 256), "float32"), np.zeros((64, 10), "float32")
    with caplog.at_level("INFO", logger="keras_gpu"):
        model.fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[cb])
    assert model_flops.training_flops_per_sample(model) == 3 * 2 * 512 * 10
    (named,) = cb.summary["flops_uncounted_ops"]
    assert named.startswith(f"{op} (a Python callback) in layer ") and f"hidden_{op.lower()}" in named
    (line,) = [r.getMessage() for r in caplog.records if "wall-clock training rate" in r.getMessage()]
    assert f">= {cb.summary['tflops_per_sec']:.4g} TFLOP/s" in line
    assert f"lower bounds: the FLOP count leaves out {named}" in line


def test_a_custom_op_type_is_named_and_op_types_of_tensorflow_are_not():
    assert flops._hidden_work("MyKernelOp") == "MyKernelOp (a custom op)"  # not in tf.raw_ops: loaded at run time
    assert flops._hidden_work("CudnnRNNV3") == "CudnnRNNV3"  # an RNN kernel's products
    assert flops._hidden_work("QuantizedMatMulWithBias") == "QuantizedMatMulWithBias"
    for kind in ("MatMul", "Conv2D", "Relu", "Softmax", "AddV2", "ReadVariableOp", "FusedBatchNormV3", "Cast"):
        assert flops._hidden_work(kind) is None, kind
