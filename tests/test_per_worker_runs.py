"""Per-worker runs at scale: every worker writes its own run up to 16 workers; above, only the chief."""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest

keras = pytest.importorskip("keras")
pytest.importorskip("tensorflow")

import keras_gpu
from keras_gpu.core.cluster import ClusterInfo
from keras_gpu.hooks import _base


def _as_worker(monkeypatch, workers: int, index: int) -> None:
    """Make the callbacks see this process as worker `index` of `workers`."""
    info = ClusterInfo(
        source="tf_config",
        cluster={"worker": tuple(f"host{i}:2222" for i in range(workers))},
        task_type="worker",
        task_index=index,
    )
    monkeypatch.setattr(_base.backend, "task_info", lambda model: info)


def _fit(log_dir, **kwargs):
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
    model.compile("sgd", "mse")
    x, y = np.ones((64, 8), np.float32), np.ones((64, 4), np.float32)
    cbs = keras_gpu.callbacks(log_dir, profile_every_s=0, **kwargs)
    model.fit(x, y, batch_size=8, epochs=2, verbose=0, callbacks=cbs)
    return cbs


def _runs(log_dir):
    return sorted(os.path.relpath(root, log_dir) for root, _, files in os.walk(log_dir) if any(".tfevents." in f for f in files))


@pytest.mark.parametrize(
    ("workers", "index", "per_worker_runs", "expected"),
    [
        (16, 5, None, ["worker_5/train"]),  # up to 16 workers: every worker writes its run
        (17, 5, None, []),  # above: only the chief
        (17, 0, None, ["train"]),
        (256, 200, True, ["worker_200/train"]),  # asked for
        (2, 1, False, []),  # turned off
    ],
)
def test_who_writes_a_run(tmp_path, monkeypatch, caplog, workers, index, per_worker_runs, expected):
    _as_worker(monkeypatch, workers, index)
    caplog.set_level(logging.INFO, logger="keras_gpu")
    cbs = _fit(tmp_path, per_worker_runs=per_worker_runs)
    assert _runs(tmp_path) == expected
    throughput = next(cb for cb in cbs if isinstance(cb, keras_gpu.ThroughputLogger))
    assert throughput.summary["steps"] == 16  # measured either way; only the writing is left out
    said = [r.getMessage() for r in caplog.records if "only the chief writes a run" in r.getMessage()]
    assert len(said) == (1 if (workers > 16 and index != 0 and per_worker_runs is None) else 0)


def test_bad_per_worker_runs(tmp_path):
    with pytest.raises(TypeError, match=r"Received: per_worker_runs='yes'"):
        keras_gpu.callbacks(tmp_path, per_worker_runs="yes")
    with pytest.raises(TypeError, match=r"per_worker_runs"):
        keras_gpu.ThroughputLogger(tmp_path, per_worker_runs=1)
