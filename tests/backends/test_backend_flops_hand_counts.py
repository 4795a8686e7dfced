"""Training FLOPs per sample found by `ThroughputLogger` on JAX and PyTorch equal a hand count, layer by layer.

The cases and hand counts are in `tests/_flops_models.py`; TensorFlow is held
to the same numbers by `tests/test_flops_hand_counts.py`. One fresh
interpreter per backend trains every case for one epoch.
"""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests._flops_models import HAND
from tests._util import run_python

BACKENDS = [
    pytest.param(name, marks=pytest.mark.skipif(importlib.util.find_spec(name) is None, reason=f"{name} is not installed"))
    for name in ("jax", "torch")
]
pytestmark = [
    pytest.mark.backend,
    pytest.mark.skipif(
        importlib.util.find_spec("tensorflow") is not None, reason="TensorFlow is installed; these tests need it absent"
    ),
]

SCRIPT = """
import json, tempfile
from tests._flops_models import HAND, train_flops

print("RESULT", json.dumps({name: train_flops(name, tempfile.mkdtemp()) for name in HAND}))
"""


@pytest.fixture(scope="module")
def results():
    out = {}
    for name in ("jax", "torch"):
        if importlib.util.find_spec(name) is not None:
            proc = run_python(SCRIPT, env={"KERAS_BACKEND": name}, timeout=600)
            out[name] = json.loads(proc.stdout.split("RESULT", 1)[1])
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(HAND))
def test_training_flops_equal_three_times_the_hand_counted_forward_pass(results, backend, name):
    assert results[backend][name] == 3 * HAND[name]
