"""The corpus of real-program shapes (`tests.corpus`) on JAX and PyTorch, without TensorFlow.

The same five checks as `tests/test_corpus.py` (bit-identical losses and
weights with and without `keras_gpu.callbacks()`, exact samples, FLOPs equal
to a hand count, no hint the setup rules out, `fit` not held up after its
last batch), for every program of the corpus that runs on each backend. Off
TensorFlow, advice about tf.data is ruled out too.

A check that fails because of a known defect is a strict xfail naming it;
where the failure depends on the machine's load (`fit` held up on JAX by a
parse whose length the load sets) it is not strict.
"""

from __future__ import annotations

import importlib.util

import pytest

from tests.corpus.checks import CHECKS, cases, run_corpus

pytestmark = [
    pytest.mark.backend,
    pytest.mark.skipif(
        importlib.util.find_spec("tensorflow") is not None, reason="TensorFlow is installed; these tests need it absent"
    ),
]

KNOWN: dict[str, dict[tuple[str, str], str]] = {
    "jax": {},
    "torch": {},
}
BY_LOAD: dict[str, dict[tuple[str, str], str]] = {"jax": {}, "torch": {}}

_RESULTS: dict[str, dict] = {}


def _corpus(backend: str, tmp_path_factory) -> dict:
    if backend not in _RESULTS:
        _RESULTS[backend] = run_corpus(backend, str(tmp_path_factory.mktemp(f"corpus_{backend}")))
    return _RESULTS[backend]


def _params() -> list:
    out = []
    for backend in KNOWN:
        missing = [pytest.mark.skip(reason=f"{backend} is not installed")] if importlib.util.find_spec(backend) is None else []
        for case in cases(backend, KNOWN[backend], BY_LOAD[backend]):
            out.append(pytest.param(backend, *case.values, marks=[*case.marks, *missing], id=f"{backend}-{case.id}"))
    return out


@pytest.mark.slow
@pytest.mark.timeout(1800)  # the first test runs the whole corpus: minutes at load 9
@pytest.mark.parametrize(("backend", "name", "check"), _params())
def test_corpus_program(tmp_path_factory, backend, name, check):
    results = _corpus(backend, tmp_path_factory)
    CHECKS[check](results["plain"][name], results["keras_gpu"][name], backend)
