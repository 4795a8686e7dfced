"""The outputs the JAX and PyTorch pages show still match a fresh run (`tools/docs_outputs.py`).

The pages' commands run here, in the environment of the backend tests (JAX
and PyTorch, no TensorFlow), with this interpreter; each shown output is
compared with the fresh one by the shape of its lines
(`tests/test_docs_outputs.py` checks the TensorFlow pages).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import docs_outputs
from docs_scenarios import SCENARIOS

pytestmark = [pytest.mark.backend, pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.mark.parametrize(
    "scenario",
    [
        pytest.param(
            s,
            id=s.name,
            marks=pytest.mark.skipif(importlib.util.find_spec(s.backend) is None, reason=f"{s.backend} is not installed"),
        )
        for s in SCENARIOS
        if s.checked and s.backend in ("jax", "torch")
    ],
)
def test_shown_outputs_match_a_fresh_run(scenario):
    if reason := docs_outputs.unlike_here(scenario):
        pytest.skip(reason)
    problems = docs_outputs.check(scenario, docs_outputs.run(scenario))
    assert not problems, "\n\n".join(problems) + "\n(if the change is intended: python tools/docs_outputs.py --write)"
