"""Samples per step counted for every input kind on TensorFlow, with no `batch_size=`.

One child process (two logical CPUs) fits a small model on each input kind of
`tests._workers.samples_worker`: NumPy arrays (one input, a list, a dict with
`steps_per_execution=3`), a generator, a `PyDataset` with worker threads and
with `steps_per_execution=4`, `tf.data` with a static batch, with a dynamic
batch (alone, with `steps_per_execution=4`, after a `filter` of unknown
length, with dict inputs, compiled with XLA) and under a `MirroredStrategy`
on the two CPUs (the short batch of 3 splits 2 + 1). Every pass ends with a
short batch.

The count logged is checked against the samples the model trained on, which a
metric inside the train step adds up; those are checked against the data.
"""

from __future__ import annotations

import json

import pytest

from tests._util import check_trained, run_python

KINDS = [
    "numpy", "numpy_list", "numpy_dict_spe3", "generator", "pydataset_workers", "pydataset_spe4", "tf_data_static",
    "tf_data_dynamic", "tf_data_dynamic_spe4", "tf_data_filtered_spe4", "tf_data_dict", "tf_data_dynamic_xla",
    "tf_data_dynamic_mirrored",
]


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    log_dir = str(tmp_path_factory.mktemp("samples"))
    proc = run_python(f"from tests._workers.samples_worker import main; main({log_dir!r})", timeout=300)
    return json.loads(proc.stdout.split("RESULT", 1)[1])


@pytest.mark.parametrize("kind", KINDS)
def test_samples_per_sec_is_logged_and_implies_the_true_sample_count(logged, kind):
    result = logged["results"][kind]
    assert result["points"] >= 2  # windows every 0.1 s, and each epoch's last
    assert round(result["implied"]) == result["truth"]
    assert abs(result["implied"] - result["truth"]) < 0.01
    assert result["summary_samples"] == result["truth"]


@pytest.mark.parametrize("kind", KINDS)
def test_the_model_trained_on_the_samples_the_data_holds(logged, kind):
    check_trained(logged["results"][kind], kind)


def test_no_kind_warns_that_it_cannot_count(logged):
    assert logged["warnings"] == []


def test_the_time_the_windows_imply_matches_a_stopwatch_within_2_percent(logged):
    results = logged["results"].values()
    implied = sum(r["implied_sec"] for r in results)
    stopwatch = sum(r["stopwatch_sec"] for r in results)
    assert implied == pytest.approx(stopwatch, rel=0.02)
