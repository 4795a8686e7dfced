"""Corpus programs that differ by the input: text, preprocessing layers, time series, PyDataset, generators, DataLoader.

Hand counts as in :mod:`tests.corpus.models`: a multiply-add is 2 FLOPs, only
matmul-like ops count (an Embedding is a gather: 0).
"""

from __future__ import annotations

import math

import keras
import numpy as np
from keras import layers

from tests.corpus._common import Built, Program, TrainedSamples, rng, uniform

__all__ = ["PROGRAMS"]


# --------------------------------------------------------------------------- TextVectorization in a tf.data pipeline


def text_vectorization() -> Built:
    """Sentences vectorized by an adapted `TextVectorization` in `tf.data`'s `map`; 170 in batches of 16 (last 10)."""
    import tensorflow as tf

    gen = rng()
    words = np.array([f"w{i}" for i in range(40)])
    texts = [" ".join(gen.choice(words, size=gen.integers(3, 15))) for _ in range(170)]
    y = uniform(gen, 170, 1)
    vectorize = layers.TextVectorization(max_tokens=50, output_sequence_length=12)
    vectorize.adapt(texts)
    ds = tf.data.Dataset.from_tensor_slices((texts, y)).map(lambda t, label: (vectorize(t), label)).batch(16)
    model = keras.Sequential(
        [
            keras.Input((12,), dtype="int64"),
            layers.Embedding(50, 8),
            layers.GlobalAveragePooling1D(),
            layers.Dense(8, activation="relu"),
            layers.Dense(1),
        ],
        name="text_vectorization",
    )
    model.compile("adam", "mse", metrics=[TrainedSamples()])
    return Built(model, {"x": ds}, 2 * 170, "tf.data")


# Embedding: a gather, 0; Dense 8->8: 128; Dense 8->1: 16.
TEXT_FLOPS = 2 * 8 * 8 + 2 * 8 * 1  # 144


# --------------------------------------------------------------------------- preprocessing and augmentation layers


def preprocessing_augment() -> Built:
    """Rescaling, RandomFlip and GaussianNoise in the model (their own seed generators); 100 in batches of 16."""
    gen = rng()
    x = (255 * uniform(gen, 100, 12, 12, 3)).round()
    y = uniform(gen, 100, 2)
    model = keras.Sequential(
        [
            keras.Input((12, 12, 3)),
            layers.Rescaling(1 / 255),
            layers.RandomFlip("horizontal"),
            layers.GaussianNoise(0.05),
            layers.Conv2D(4, 3, activation="relu"),  # valid: 10x10x4
            layers.GlobalAveragePooling2D(),
            layers.Dense(2),
        ],
        name="preprocessing_augment",
    )
    model.compile("adam", "mse", metrics=[TrainedSamples()])
    return Built(model, {"x": x, "y": y, "batch_size": 16}, 2 * 100, "arrays")


# Conv2D 3x3, 3->4 channels, valid on 12x12: 10x10x4 = 400 outputs of 27 MACs: 21,600; Dense 4->2: 16.
AUGMENT_FLOPS = 2 * (10 * 10 * 4) * (3 * 3 * 3) + 2 * 4 * 2  # 21,616


# --------------------------------------------------------------------------- timeseries_dataset_from_array


def timeseries_lstm() -> Built:
    """Windows of 320 steps of a 3-feature series, each with feature 0 ten rows after its start as target; an LSTM.

    `timeseries_dataset_from_array(series[:-10], series[10:, 0], 320, batch_size=32)`:
    690 rows give 690 - 320 + 1 = 371 windows a pass, in batches of 32 (last 19).
    The LSTM's 320 steps make a profiler trace of several megabytes on
    TensorFlow, whose stop and parse `fit` never waits for.
    """
    gen = rng()
    series = np.cumsum(gen.normal(size=(700, 3)), axis=0).astype("float32")
    ds = keras.utils.timeseries_dataset_from_array(series[:-10], series[10:, 0], sequence_length=320, batch_size=32)
    model = keras.Sequential([keras.Input((320, 3)), layers.LSTM(8), layers.Dense(1)], name="timeseries_lstm")
    model.compile("adam", "mse", metrics=[TrainedSamples()])
    return Built(model, {"x": ds}, 2 * 371, "tf.data")


# Per step: input 3x32 and state 8x32 kernels: 2*(96 + 256) = 704, times 320 steps = 225,280; Dense 8->1: 16.
TIMESERIES_FLOPS = 320 * 2 * (3 * 32 + 8 * 32) + 2 * 8  # 225,296


# --------------------------------------------------------------------------- PyDataset


class _Slices(keras.utils.PyDataset):
    """Batches sliced from arrays in memory (one thread: the order, and so the result, is fixed)."""

    def __init__(self, x, y, batch):
        super().__init__()
        self.x, self.y, self.batch = x, y, batch

    def __len__(self):
        return math.ceil(len(self.x) / self.batch)

    def __getitem__(self, index):
        window = slice(index * self.batch, (index + 1) * self.batch)
        return self.x[window], self.y[window]


def pydataset_conv1d() -> Built:
    """A Conv1D fed by a `PyDataset` of batch slices; 150 samples in batches of 16 (last 6)."""
    gen = rng()
    x, y = uniform(gen, 150, 20, 2), uniform(gen, 150, 1)
    model = keras.Sequential(
        [keras.Input((20, 2)), layers.Conv1D(4, 3, activation="relu"), layers.Flatten(), layers.Dense(1)],
        name="pydataset_conv1d",
    )
    model.compile("adam", "mse", metrics=[TrainedSamples()])
    return Built(model, {"x": _Slices(x, y, 16)}, 2 * 150, "pydataset")


# Conv1D width 3, 2->4 channels, valid on 20 steps: 18x4 = 72 outputs of 6 MACs: 864; Dense 72->1: 144.
PYDATASET_FLOPS = 2 * (18 * 4) * (3 * 2) + 2 * 72  # 1,008


# --------------------------------------------------------------------------- a Python generator


def generator_gru() -> Built:
    """A GRU fed by an endless generator with `steps_per_epoch=12`, batches of 16."""
    gen = rng()
    x, y = uniform(gen, 192, 8, 4), uniform(gen, 192, 1)

    def batches():
        while True:
            for i in range(0, 192, 16):
                yield x[i : i + 16], y[i : i + 16]

    model = keras.Sequential([keras.Input((8, 4)), layers.GRU(6), layers.Dense(1)], name="generator_gru")
    model.compile("adam", "mse", metrics=[TrainedSamples()])
    return Built(model, {"x": batches(), "steps_per_epoch": 12}, 2 * 12 * 16, "generator")


# Per step: input 4x18 and state 6x18 kernels (3 gates of 6): 2*(72 + 108) = 360, times 8 steps = 2,880; Dense 6->1: 12.
GENERATOR_FLOPS = 8 * 2 * (4 * 18 + 6 * 18) + 2 * 6  # 2,892


# --------------------------------------------------------------------------- a torch DataLoader


def dataloader_mlp() -> Built:
    """A classifier fed by a `torch.utils.data.DataLoader` (no shuffling); 200 samples in batches of 16 (last 8)."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    gen = rng()
    x, y = uniform(gen, 200, 10), gen.integers(0, 3, (200, 1))
    loader = DataLoader(TensorDataset(torch.from_numpy(x), torch.from_numpy(y)), batch_size=16)
    model = keras.Sequential(
        [keras.Input((10,)), layers.Dense(12, activation="relu"), layers.Dense(3)], name="dataloader_mlp"
    )
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=[TrainedSamples()])
    return Built(model, {"x": loader}, 2 * 200, "dataloader")


# Dense 10->12: 240; Dense 12->3: 72.
DATALOADER_FLOPS = 2 * 10 * 12 + 2 * 12 * 3  # 312


# --------------------------------------------------------------------------- steps_per_execution


def steps_per_execution() -> Built:
    """Conv1D down, Conv1DTranspose up, 4 steps per execution; 203 samples in batches of 10: 21 (last 3)."""
    gen = rng()
    x, y = uniform(gen, 203, 12, 2), uniform(gen, 203, 1)
    model = keras.Sequential(
        [
            keras.Input((12, 2)),
            layers.Conv1D(4, 3, activation="relu"),  # valid: 10x4
            layers.Conv1DTranspose(2, 3, strides=2),  # valid: 21x2
            layers.Flatten(),
            layers.Dense(1),
        ],
        name="steps_per_execution",
    )
    model.compile("adam", "mse", metrics=[TrainedSamples()], steps_per_execution=4)
    return Built(model, {"x": x, "y": y, "batch_size": 10}, 2 * 203, "arrays")


# Conv1D: 10x4 outputs of 3*2 MACs: 480. Conv1DTranspose: each of the 10x4 input elements times
# 3 taps x 2 output channels (valid: all land in the output): 480. Dense 42->1: 84.
SPE_FLOPS = 2 * (10 * 4) * (3 * 2) + 2 * (10 * 4) * (3 * 2) + 2 * 42  # 1,044


PROGRAMS = [
    Program("text_vectorization", text_vectorization, TEXT_FLOPS),
    Program("preprocessing_augment", preprocessing_augment, AUGMENT_FLOPS),
    Program("timeseries_lstm", timeseries_lstm, TIMESERIES_FLOPS),
    Program("pydataset_conv1d", pydataset_conv1d, PYDATASET_FLOPS),
    Program("generator_gru", generator_gru, GENERATOR_FLOPS),
    Program("dataloader_mlp", dataloader_mlp, DATALOADER_FLOPS),
    Program("steps_per_execution", steps_per_execution, SPE_FLOPS),
]
