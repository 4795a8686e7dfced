"""Corpus programs that differ by the model: custom steps, noise, transposed convolutions, RNNs, several inputs and outputs.

Every builder makes its data with a generator of its own (`rng()`), so the
data never reads NumPy's global state; the model's own random streams are
what the corpus compares. Hand counts: a multiply-add is 2 FLOPs; only
matmul-like ops count (Dense, convolutions, the RNN kernels, einsum and
tensordot); biases, activations, pooling and gathers count nothing.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import layers, ops

from tests.corpus._common import Built, CustomStep, Program, TrainedSamples, rng, uniform

__all__ = ["PROGRAMS"]


# --------------------------------------------------------------------------- a custom train_step with Dropout


class _DropoutRegressor(CustomStep):
    def __init__(self):
        super().__init__(name="custom_step_mlp")
        self.hidden = layers.Dense(16, activation="relu")
        self.drop = layers.Dropout(0.25)
        self.out = layers.Dense(1)

    def call(self, x, training=False):
        return self.out(self.drop(self.hidden(x), training=training))


def custom_step_mlp() -> Built:
    """Subclassed regressor with its own `train_step` and Dropout; 203 samples in batches of 16 (last 11)."""
    gen = rng()
    x, y = uniform(gen, 203, 8), uniform(gen, 203, 1)
    model = _DropoutRegressor()
    model.compile(optimizer="adam")
    return Built(model, {"x": x, "y": y, "batch_size": 16}, 2 * 203, "arrays")


# Dense 8->16: 2*8*16 = 256; Dense 16->1: 2*16*1 = 32.
CUSTOM_STEP_FLOPS = 2 * 8 * 16 + 2 * 16 * 1  # 288


# --------------------------------------------------------------------------- VAE noise without a seed


class _NoisyVAE(keras.Model):
    """A VAE whose noise is `keras.random.normal` with no seed: Keras' global seed generator draws it."""

    def __init__(self):
        super().__init__(name="vae_unseeded")
        self.encoder = layers.Dense(12, activation="relu")
        self.mean = layers.Dense(3)
        self.log_var = layers.Dense(3)
        self.decoder = layers.Dense(10)

    def call(self, x, training=False):
        h = self.encoder(x)
        mean, log_var = self.mean(h), self.log_var(h)
        z = mean + ops.exp(0.5 * log_var) * keras.random.normal(ops.shape(mean))
        self.add_loss(-0.5 * ops.mean(1 + log_var - ops.square(mean) - ops.exp(log_var)))
        return self.decoder(z)


def vae_unseeded() -> Built:
    """A subclassed VAE with an `add_loss` KL term; 200 samples in batches of 16 (last 8)."""
    x = uniform(rng(), 200, 10)
    model = _NoisyVAE()
    model.compile("adam", "mse", metrics=[TrainedSamples()])
    return Built(model, {"x": x, "y": x, "batch_size": 16}, 2 * 200, "arrays")


# encoder 10->12: 2*10*12 = 240; mean and log_var 12->3 each: 2*2*12*3 = 144; decoder 3->10: 2*3*10 = 60.
VAE_UNSEEDED_FLOPS = 2 * 10 * 12 + 2 * 2 * 12 * 3 + 2 * 3 * 10  # 444


# --------------------------------------------------------------------------- VAE noise seeded from NumPy's global state


class _NumpySeededSampling(layers.Layer):
    """Draws its seed from NumPy's global generator each time it is called (traced, on compiled backends).

    The shape of the legacy `backend.random_normal(shape)` that keras-io's VAE
    used: whatever else calls the layer moves the seed the training step gets.
    """

    def call(self, inputs):
        mean, log_var = inputs
        seed = int(np.random.randint(0, 2**31 - 1))
        return mean + ops.exp(0.5 * log_var) * keras.random.normal(ops.shape(mean), seed=seed)


class _NumpySeededVAE(CustomStep):
    def __init__(self):
        super().__init__(name="vae_numpy_seed")
        self.encoder = layers.Dense(16, activation="relu")
        self.mean = layers.Dense(2)
        self.log_var = layers.Dense(2)
        self.sample = _NumpySeededSampling(name="sampling")
        self.decoder = layers.Dense(12)

    def call(self, x, training=False):
        h = self.encoder(x)
        return self.decoder(self.sample([self.mean(h), self.log_var(h)]))


def vae_numpy_seed() -> Built:
    """The keras-io VAE's shape: a custom `train_step` and NumPy-seeded noise; 180 samples in batches of 32 (last 20)."""
    x = uniform(rng(), 180, 12)
    model = _NumpySeededVAE()
    model.compile(optimizer="adam")
    return Built(model, {"x": x, "y": x, "batch_size": 32}, 2 * 180, "arrays")


# encoder 12->16: 2*12*16 = 384; mean and log_var 16->2 each: 2*2*16*2 = 128; decoder 2->12: 2*2*12 = 48.
VAE_NUMPY_FLOPS = 2 * 12 * 16 + 2 * 2 * 16 * 2 + 2 * 2 * 12  # 560


# --------------------------------------------------------------------------- transposed convolution


def conv2d_transpose() -> Built:
    """An upsampling decoder: `Conv2DTranspose(4, 3, strides=2)` on 8x8x4; 100 samples in batches of 16 (last 4)."""
    gen = rng()
    x, y = uniform(gen, 100, 8, 8, 4), uniform(gen, 100, 1)
    model = keras.Sequential(
        [
            keras.Input((8, 8, 4)),
            layers.Conv2DTranspose(4, 3, strides=2, activation="relu"),  # valid: 17x17x4
            layers.Conv2D(2, 3, strides=2),  # valid: 8x8x2
            layers.Flatten(),
            layers.Dense(1),
        ],
        name="conv2d_transpose",
    )
    model.compile("adam", "mse", metrics=[TrainedSamples()])
    return Built(model, {"x": x, "y": y, "batch_size": 16}, 2 * 100, "arrays")


# A transposed convolution multiplies every input element by every kernel tap and output channel
# (with padding "valid" every product lands in the output): 2 * (8*8*4) * (3*3*4) = 18,432.
# Conv2D on 17x17x4, stride 2, valid: 8x8x2 outputs, each 3*3*4 MACs: 2 * 128 * 36 = 9,216.
# Dense 128->1: 2*128 = 256.
CONV2D_TRANSPOSE_FLOPS = 2 * (8 * 8 * 4) * (3 * 3 * 4) + 2 * (8 * 8 * 2) * (3 * 3 * 4) + 2 * 128  # 27,904


# --------------------------------------------------------------------------- an RNN with a None time dimension


def lstm_none_time() -> Built:
    """`Input(shape=(None, 6))` into an LSTM, fed arrays of 10 steps; 120 samples in batches of 16 (last 8)."""
    gen = rng()
    x, y = uniform(gen, 120, 10, 6), uniform(gen, 120, 1)
    model = keras.Sequential([keras.Input((None, 6)), layers.LSTM(8), layers.Dense(1)], name="lstm_none_time")
    model.compile("adam", "mse", metrics=[TrainedSamples()])
    return Built(model, {"x": x, "y": y, "batch_size": 16}, 2 * 120, "arrays")


# Per step the LSTM multiplies its input by a 6x32 kernel and its state by an 8x32 kernel (4 gates of 8):
# 2*(6*32 + 8*32) = 896, times 10 steps = 8,960; Dense 8->1: 16.
LSTM_NONE_TIME_FLOPS = 10 * 2 * (6 * 32 + 8 * 32) + 2 * 8  # 8,976


# --------------------------------------------------------------------------- several inputs and outputs


def multi_io() -> Built:
    """Two named inputs, two outputs with their own losses and weights; 150 samples in batches of 16 (last 6)."""
    gen = rng()
    a_in, b_in = keras.Input((8,), name="a"), keras.Input((6,), name="b")
    h = layers.Dense(16, activation="relu")(layers.Concatenate()([a_in, b_in]))
    score = layers.Dense(1, name="score")(h)
    label = layers.Dense(3, activation="softmax", name="label")(layers.Dense(8, activation="relu")(b_in))
    model = keras.Model({"a": a_in, "b": b_in}, {"score": score, "label": label}, name="multi_io")
    model.compile(
        "adam",
        loss={"score": "mse", "label": "sparse_categorical_crossentropy"},
        loss_weights={"score": 1.0, "label": 0.5},
        metrics={"score": [TrainedSamples()]},
    )
    x = {"a": uniform(gen, 150, 8), "b": uniform(gen, 150, 6)}
    y = {"score": uniform(gen, 150, 1), "label": gen.integers(0, 3, (150, 1))}
    return Built(model, {"x": x, "y": y, "batch_size": 16}, 2 * 150, "arrays")


# Dense 14->16: 448; score 16->1: 32; Dense 6->8: 96; label 8->3: 48.
MULTI_IO_FLOPS = 2 * 14 * 16 + 2 * 16 * 1 + 2 * 6 * 8 + 2 * 8 * 3  # 624


# --------------------------------------------------------------------------- tensordot and einsum in a subclassed model


class _Bilinear(keras.Model):
    def __init__(self):
        super().__init__(name="tensordot_subclassed")

    def build(self, input_shape):
        self.w = self.add_weight((input_shape[-1], 12), initializer="glorot_uniform", name="w")
        self.v = self.add_weight((12, 2), initializer="glorot_uniform", name="v")

    def call(self, x):
        h = ops.relu(ops.tensordot(x, self.w, axes=1))
        return ops.einsum("bi,ij->bj", h, self.v)


def tensordot_subclassed() -> Built:
    """`keras.ops.tensordot` and `einsum` on weights of its own; 160 samples in batches of 16 (all full)."""
    gen = rng()
    x, y = uniform(gen, 160, 8), uniform(gen, 160, 2)
    model = _Bilinear()
    model.compile("adam", "mse", metrics=[TrainedSamples()])
    return Built(model, {"x": x, "y": y, "batch_size": 16}, 2 * 160, "arrays")


# tensordot 8x12: 2*8*12 = 192; einsum 12x2: 2*12*2 = 48.
TENSORDOT_FLOPS = 2 * 8 * 12 + 2 * 12 * 2  # 240


# --------------------------------------------------------------------------- mixed precision


def mixed_precision() -> Built:
    """An MLP under the `mixed_float16` policy (a loss-scaling optimizer); 130 samples in batches of 16 (last 2)."""
    gen = rng()
    x, y = uniform(gen, 130, 16), uniform(gen, 130, 1)
    model = keras.Sequential(
        [keras.Input((16,)), layers.Dense(32, activation="relu"), layers.Dense(1, dtype="float32")],
        name="mixed_precision",
    )
    model.compile("adam", "mse", metrics=[TrainedSamples()])
    return Built(model, {"x": x, "y": y, "batch_size": 16}, 2 * 130, "arrays")


# Dense 16->32: 1,024; Dense 32->1: 64.
MIXED_PRECISION_FLOPS = 2 * 16 * 32 + 2 * 32 * 1  # 1,088


# --------------------------------------------------------------------------- jit_compile


def jit_compile_cnn() -> Built:
    """A small CNN compiled with `jit_compile=True` (XLA); 90 samples in batches of 16 (last 10)."""
    gen = rng()
    x, y = uniform(gen, 90, 10, 10, 2), uniform(gen, 90, 1)
    model = keras.Sequential(
        [keras.Input((10, 10, 2)), layers.Conv2D(4, 3, activation="relu"), layers.Flatten(), layers.Dense(1)],
        name="jit_compile_cnn",
    )
    model.compile("adam", "mse", metrics=[TrainedSamples()], jit_compile=True)
    return Built(model, {"x": x, "y": y, "batch_size": 16}, 2 * 90, "arrays")


# Conv2D 3x3, 2->4 channels, valid on 10x10: 8x8x4 = 256 outputs of 3*3*2 MACs: 2*256*18 = 9,216; Dense 256->1: 512.
JIT_CNN_FLOPS = 2 * (8 * 8 * 4) * (3 * 3 * 2) + 2 * 256  # 9,728


PROGRAMS = [
    Program("custom_step_mlp", custom_step_mlp, CUSTOM_STEP_FLOPS),
    Program("vae_unseeded", vae_unseeded, VAE_UNSEEDED_FLOPS),
    Program("vae_numpy_seed", vae_numpy_seed, VAE_NUMPY_FLOPS),
    Program("conv2d_transpose", conv2d_transpose, CONV2D_TRANSPOSE_FLOPS),
    Program("lstm_none_time", lstm_none_time, LSTM_NONE_TIME_FLOPS),
    Program("multi_io", multi_io, MULTI_IO_FLOPS),
    Program("tensordot_subclassed", tensordot_subclassed, TENSORDOT_FLOPS),
    Program("mixed_precision", mixed_precision, MIXED_PRECISION_FLOPS, policy="mixed_float16"),
    Program("jit_compile_cnn", jit_compile_cnn, JIT_CNN_FLOPS),
]
