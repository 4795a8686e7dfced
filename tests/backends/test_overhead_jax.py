"""`mlp-2w-jax`: the overhead benchmark's two-process Keras-on-JAX job, in an environment without TensorFlow.

The job runs with `jax.distributed` on 127.0.0.1 and `keras_gpu.callbacks()`
at its defaults (the cluster view on); each process's hooks are timed in
that process. Counts, never timed thresholds: the hook calls against a hand
count of the steps and epochs.
"""

from __future__ import annotations

import importlib.util

import pytest

from tests._util import run_overhead
from tests.backends._common import WITHOUT_TENSORFLOW

pytestmark = [
    *WITHOUT_TENSORFLOW,
    pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed"),
]


def test_two_process_jax_scenario_times_each_process_hooks(tmp_path):
    data, _ = run_overhead(
        tmp_path / "two_processes.json",
        "--configs", "mlp-2w-jax", "--variants", "kg-default,kg-step-probe", "--rounds", "1", "--scale", "0.1",
        "--epochs", "2,2", "--leak-steps", "0", "--import-repeats", "0", "--label", "two-jax-processes", "--no-table",
        "--async-ab", "none",
        env={"KERAS_BACKEND": "jax"},
        timeout=900,
    )  # fmt: skip
    assert set(data["configs"]) == {"mlp-2w-jax", "mlp-2w-jax/worker1"}
    raw = data["configs"]["mlp-2w-jax"]["raw"]
    for name in ("mlp-2w-jax", "mlp-2w-jax/worker1"):
        summary = data["configs"][name]["summary"]
        assert set(summary["variants"]) == {"kg-default", "kg-step-probe"}
        assert summary["variants"]["kg-default"]["direct_steady"]["median"] is not None
    for rank, worker_raw in enumerate((raw, raw["other_workers"][0])):
        assert worker_raw["jax_clock_s_per_call"] is not None  # the clock's own cost, calibrated in the process
        pair = next(p for p in worker_raw["pairs"] if p["variant"] == "kg-default")
        assert pair["run"]["callbacks"] == ["ThroughputLogger", "MemoryLogger", "StepTimeLogger"]
        calls = [f["hooks"]["StepTimeLogger.on_train_batch_end"]["calls"] for f in pair["run"]["fits"]]
        assert calls == [2 * 20, 2 * 20], rank  # two fits of two epochs of 20 steps, on each process
        ends = [f["hooks"]["StepTimeLogger.on_epoch_end"]["calls"] for f in pair["run"]["fits"]]
        assert ends == [2, 2]


def test_dispatch_ab_times_whole_fits_and_records_each_arms_dispatch(tmp_path):
    # Counts and Keras' own dispatch flags, never a timed threshold.
    data, stdout = run_overhead(
        tmp_path / "ab.json",
        "--configs", "none", "--async-ab", "jax", "--ab-pairs", "2", "--ab-steps", "20", "--leak-steps", "0",
        "--import-repeats", "0", "--label", "ab",
        env={"KERAS_BACKEND": "jax"},
        timeout=600,
    )  # fmt: skip
    assert data["configs"] == {} and set(data["async_ab"]) == {"jax"}
    ab = data["async_ab"]["jax"]
    assert ab["backend"] == "jax" and ab["steps"] == 20 and ab["fresh"] is False
    assert len(ab["a_s"]) == len(ab["b_s"]) == len(ab["ratios"]) == 2 and ab["slowdown"]["n"] == 2
    assert all(t > 0 for t in ab["a_s"] + ab["b_s"])
    assert ab["async_dispatch"]["bare"] is True  # no callback: Keras' asynchronous dispatch on JAX
    assert isinstance(ab["async_dispatch"]["callbacks"], bool)
    assert "Dispatch A/B, jax (whole fits of 20 steps, verbose=0, 2 interleaved pairs" in stdout
