"""The package version and its one-line description, each kept in one place.

`pyproject.toml` reads the version from here; its `description`, the README's
first paragraph, `keras-gpu --help` and the docs' index page say
`SUMMARY` word for word (`tests/test_docs_facts.py` checks that they agree).
"""

__all__ = ["SUMMARY", "__version__"]

__version__ = "0.1.0.dev0"

SUMMARY = (
    "keras-gpu measures Keras 3 training on every backend (TensorFlow, JAX, PyTorch): throughput, MFU and memory "
    "in TensorBoard and in Keras' own logs, at almost no cost to the step; on TensorFlow and JAX it also sets up "
    "one GPU, several, or a cluster."
)
"""What keras-gpu is, in one sentence true for every backend."""
