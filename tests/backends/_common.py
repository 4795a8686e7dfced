"""What the backend tests share: the JAX and PyTorch parameters, and the mark for an environment without TensorFlow."""

from __future__ import annotations

import importlib.util
import json
from typing import Any

import pytest

from tests._util import run_python

__all__ = ["BACKENDS", "JAX_ONLY", "WITHOUT_TENSORFLOW", "results_per_backend"]

#: `jax` and `torch`, each skipped with a reason where it is not installed.
BACKENDS = [
    pytest.param(name, marks=pytest.mark.skipif(importlib.util.find_spec(name) is None, reason=f"{name} is not installed"))
    for name in ("jax", "torch")
]

#: The module marks of a JAX-only backend test: CI's second environment, skipped with a reason without JAX.
JAX_ONLY = [
    pytest.mark.backend,
    pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed"),
]

#: The backend tests' module marks: CI's second environment, which has no TensorFlow.
WITHOUT_TENSORFLOW = [
    pytest.mark.backend,
    pytest.mark.skipif(
        importlib.util.find_spec("tensorflow") is not None, reason="TensorFlow is installed; these tests need it absent"
    ),
]


def results_per_backend(script: str, timeout: float = 600) -> dict[str, Any]:
    """`script` run in a child per installed backend: `{backend: the JSON it prints after "RESULT"}`."""
    out = {}
    for name in ("jax", "torch"):
        if importlib.util.find_spec(name) is not None:
            proc = run_python(script, env={"KERAS_BACKEND": name}, timeout=timeout)
            out[name] = json.loads(proc.stdout.split("RESULT", 1)[1])
    return out
