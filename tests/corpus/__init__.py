"""A corpus of small programs of real shapes, each an importable builder: model, data, fit arguments, hand FLOP count.

The programs (:mod:`tests.corpus.models`, :mod:`tests.corpus.inputs`) cover
custom `train_step`s, noise without a seed and noise seeded from NumPy's
global generator, transposed convolutions, RNNs with a `None` time dimension,
several inputs and outputs, `TextVectorization`, preprocessing and
augmentation layers, `timeseries_dataset_from_array`, `PyDataset`,
generators, a torch `DataLoader`, mixed precision, `jit_compile` and
`steps_per_execution`. :mod:`tests.corpus.runner` fits them with and
without keras-gpu; `tests/test_corpus.py` (TensorFlow) and
`tests/backends/test_corpus_backends.py` (JAX, PyTorch) check the results.

This module imports no backend (the test files read it while collecting,
before any backend is chosen).
"""

from __future__ import annotations

__all__ = ["BACKENDS", "CATALOG", "names_for"]

BACKENDS = ("tensorflow", "jax", "torch")
_ALL = BACKENDS

#: name -> (module under tests.corpus, backends it runs on, why not on the others)
CATALOG: dict[str, tuple[str, tuple[str, ...], str]] = {
    "custom_step_mlp": ("models", _ALL, ""),
    "vae_unseeded": (
        "models", ("tensorflow", "torch"), "JAX refuses random ops without a seed inside a traced function"
    ),
    "vae_numpy_seed": ("models", _ALL, ""),
    "conv2d_transpose": ("models", _ALL, ""),
    "lstm_none_time": ("models", _ALL, ""),
    "multi_io": ("models", _ALL, ""),
    "tensordot_subclassed": ("models", _ALL, ""),
    "mixed_precision": ("models", _ALL, ""),
    "jit_compile_cnn": (
        "models",
        ("tensorflow", "jax"),
        "on PyTorch jit_compile=True is torch.compile, which builds C++ kernels for minutes on a CPU",
    ),
    "text_vectorization": ("inputs", ("tensorflow",), "TextVectorization in a tf.data pipeline needs TensorFlow"),
    "preprocessing_augment": ("inputs", _ALL, ""),
    "timeseries_lstm": ("inputs", ("tensorflow",), "timeseries_dataset_from_array returns a tf.data dataset"),
    "pydataset_conv1d": ("inputs", _ALL, ""),
    "generator_gru": ("inputs", _ALL, ""),
    "dataloader_mlp": ("inputs", ("jax", "torch"), "the TensorFlow environment has no torch"),
    "steps_per_execution": ("inputs", ("tensorflow", "jax"), "PyTorch requires steps_per_execution=1"),
}


def names_for(backend: str) -> list[str]:
    """The programs that run on `backend`, in corpus order."""
    return [name for name, (_, backends, _why) in CATALOG.items() if backend in backends]
