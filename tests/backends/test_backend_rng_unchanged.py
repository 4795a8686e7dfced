"""Training with `keras_gpu.callbacks()` is bit-identical to training without, on JAX and PyTorch.

The same models as `tests/test_rng_unchanged.py` (see `tests/_rng_models.py`),
one fresh interpreter per backend. Counting FLOPs traces the model (JAX) or
calls it (PyTorch); every random state that advances must be put back. Two
plain runs are compared first, so that a difference can only come from the
callbacks.
"""

from __future__ import annotations

import pytest

from tests.backends._common import BACKENDS, WITHOUT_TENSORFLOW, results_per_backend

pytestmark = WITHOUT_TENSORFLOW

SCRIPT = """
import json, keras
from tests._rng_models import CASES, compare

# An unseeded keras.random draw cannot be traced by JAX (Keras refuses it), so JAX leaves that case out.
cases = [c for c in CASES if not (keras.config.backend() == "jax" and c == "global_seed")]
out = {kind: compare(kind) for kind in cases}
out["np_seeded/second-fit-only"] = compare("np_seeded", fits=2, last_only=True)
print("RESULT", json.dumps(out))
"""


@pytest.fixture(scope="module")
def results():
    return results_per_backend(SCRIPT)


@pytest.mark.parametrize("backend", BACKENDS)
def test_losses_and_weights_are_bit_identical_with_the_callbacks(results, backend):
    runs = results[backend]
    assert "np_seeded" in runs and "dropout_noise" in runs and "augment" in runs
    for kind, run in runs.items():
        assert run["plain"] == run["again"], f"{kind}: two plain runs differ, the test cannot tell anything"
        assert run["callbacks"]["losses"] == run["plain"]["losses"], kind
        assert run["callbacks"]["weights"] == run["plain"]["weights"], kind
        assert run["callbacks"]["after"] == run["plain"]["after"], kind
