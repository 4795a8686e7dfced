"""Samples per step counted for every input kind on JAX and PyTorch, with no `batch_size=`, without TensorFlow.

One child process per backend fits a small model on each input kind of
`tests._workers.samples_worker`: NumPy arrays (one input, a list; a dict with
`steps_per_execution=3` on JAX), a generator, a `PyDataset` with worker
threads (and with `steps_per_execution=4` on JAX), and on PyTorch a
`DataLoader` of tuples and one of dicts. Every pass ends with a short batch.

The count logged is checked against the samples the model trained on, which a
metric inside the train step adds up; those are checked against the data.
"""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests._util import check_trained, run_python

pytestmark = [
    pytest.mark.backend,
    pytest.mark.skipif(
        importlib.util.find_spec("tensorflow") is not None, reason="TensorFlow is installed; these tests need it absent"
    ),
]
KINDS = {
    "jax": ["numpy", "numpy_list", "numpy_dict_spe3", "generator", "pydataset_workers", "pydataset_spe4"],
    "torch": ["numpy", "numpy_list", "generator", "pydataset_workers", "dataloader", "dataloader_dict"],
}
CASES = [
    pytest.param(
        backend, kind, marks=pytest.mark.skipif(importlib.util.find_spec(backend) is None, reason=f"no {backend}")
    )
    for backend, kinds in KINDS.items()
    for kind in kinds
]
_RESULTS: dict[str, dict] = {}


def _logged(backend: str, tmp_path_factory) -> dict:
    if backend not in _RESULTS:
        log_dir = str(tmp_path_factory.mktemp(backend))
        code = f"from tests._workers.samples_worker import main; main({log_dir!r})"
        proc = run_python(code, env={"KERAS_BACKEND": backend}, timeout=300)
        _RESULTS[backend] = json.loads(proc.stdout.split("RESULT", 1)[1])
    return _RESULTS[backend]


@pytest.mark.parametrize(("backend", "kind"), CASES)
def test_samples_per_sec_is_logged_and_implies_the_true_sample_count(tmp_path_factory, backend, kind):
    logged = _logged(backend, tmp_path_factory)
    result = logged["results"][kind]
    assert result["points"] >= 2
    assert round(result["implied"]) == result["truth"]
    assert abs(result["implied"] - result["truth"]) < 0.01
    assert result["summary_samples"] == result["truth"]
    assert logged["warnings"] == []


@pytest.mark.parametrize(("backend", "kind"), CASES)
def test_the_model_trained_on_the_samples_the_data_holds(tmp_path_factory, backend, kind):
    check_trained(_logged(backend, tmp_path_factory)["results"][kind], kind)


@pytest.mark.parametrize(
    "backend",
    [pytest.param(b, marks=pytest.mark.skipif(importlib.util.find_spec(b) is None, reason=f"no {b}")) for b in KINDS],
)
def test_the_time_the_windows_imply_matches_a_stopwatch_within_2_percent(tmp_path_factory, backend):
    results = _logged(backend, tmp_path_factory)["results"].values()
    implied = sum(r["implied_sec"] for r in results)
    stopwatch = sum(r["stopwatch_sec"] for r in results)
    assert implied == pytest.approx(stopwatch, rel=0.02)
