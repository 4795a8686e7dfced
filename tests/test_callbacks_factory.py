"""`keras_gpu.callbacks(...)`: the recommended set, its switches and its argument checks."""

from __future__ import annotations

import pytest

import keras_gpu
from keras_gpu.hooks.factory import MemoryLogger, PlacementLogger, StepTimeLogger, ThroughputLogger


def test_default_set_is_one_of_each(tmp_path):
    cbs = keras_gpu.callbacks(tmp_path)
    assert [type(cb) for cb in cbs] == [ThroughputLogger, MemoryLogger, PlacementLogger, StepTimeLogger]
    assert cbs[-1].profile_every_s == StepTimeLogger.DEFAULT_PROFILE_EVERY_S
    assert all(cb.log_dir == str(tmp_path) for cb in cbs)


def test_each_callback_gets_the_path_and_per_worker_runs_as_its_own_arguments(tmp_path):
    cbs = keras_gpu.callbacks(tmp_path, per_worker_runs=False, profile_every_s=5)
    assert [(cb.log_dir, cb.per_worker_runs) for cb in cbs] == [(str(tmp_path), False)] * 4
    assert cbs[-1].profile_every_s == 5.0
    from keras_gpu.hooks._base import RunOptions

    with pytest.raises(TypeError, match="log_dir"):  # a record is not a path
        ThroughputLogger(RunOptions(str(tmp_path)))


def test_switches_and_shared_options(tmp_path):
    (tp,) = keras_gpu.callbacks(
        tmp_path, memory=False, placement=False, step_time=False, batch_size=128, peak_flops=1e12, every_s=2.0
    )
    assert (type(tp), tp.batch_size, tp.peak_flops, tp.every_s) == (ThroughputLogger, 128, 1e12, 2.0)


def test_short_window_keeps_a_sample_per_window(tmp_path):
    _, memory, *_ = keras_gpu.callbacks(tmp_path, every_s=0.2)
    assert (memory.every_s, memory.sample_interval_s) == (0.2, 0.2)
    _, memory, *_ = keras_gpu.callbacks(tmp_path, every_s=30.0)
    assert (memory.every_s, memory.sample_interval_s) == (30.0, MemoryLogger.DEFAULT_SAMPLE_INTERVAL_S)


def test_bad_input_is_named(tmp_path):
    with pytest.raises(TypeError, match=r"`memory` must be True or False. Received: memory='no'"):
        keras_gpu.callbacks(tmp_path, memory="no")
    with pytest.raises(ValueError, match="at least one of throughput, memory, placement or step_time"):
        keras_gpu.callbacks(tmp_path, throughput=False, memory=False, placement=False, step_time=False)
    with pytest.raises(ValueError, match=r"`profile_every_s` must be .* or 0 .*Received: profile_every_s=-5"):
        keras_gpu.callbacks(tmp_path, profile_every_s=-5)
    with pytest.raises(TypeError, match=r"Received: profile_every_s=True"):
        keras_gpu.callbacks(tmp_path, profile_every_s=True)
    with pytest.raises(TypeError, match=r"`step_time` must be True or False"):
        keras_gpu.callbacks(tmp_path, step_time=1)
    with pytest.raises(ValueError, match=r"every_s"):
        keras_gpu.callbacks(tmp_path, every_s=0)
    with pytest.raises(TypeError, match=r"Received: every_s=\[\]"):
        keras_gpu.callbacks(tmp_path, every_s=[])
    with pytest.raises(TypeError, match="log_dir"):
        keras_gpu.callbacks(None)


def test_step_time_switch_and_period(tmp_path):
    cbs = keras_gpu.callbacks(tmp_path, profile_every_s=60)
    assert cbs[-1].profile_every_s == 60.0
    assert not any(isinstance(cb, StepTimeLogger) for cb in keras_gpu.callbacks(tmp_path, profile_every_s=0))
    assert not any(isinstance(cb, StepTimeLogger) for cb in keras_gpu.callbacks(tmp_path, step_time=False))


def test_the_factory_stays_callable_whatever_was_imported_first():
    from keras_gpu import MemoryLogger as _  # noqa: F401 - imports the callbacks package first

    assert callable(keras_gpu.callbacks)
