"""The package version, kept in one place for `pyproject.toml` and `keras_gpu.__version__`."""

__version__ = "0.1.0.dev0"
