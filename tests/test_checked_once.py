"""Where values are checked: `keras_gpu.callbacks()` checks every value before it builds any callback, and a
callback built directly checks each of its own arguments once.

The factory forwards plain values (a path, a bool), so each callback checks them again; the checks are the
same functions, and a checked value passes them unchanged."""

from __future__ import annotations

import collections

import pytest

import keras_gpu
from keras_gpu.hooks import (
    _base,
    factory,
    memory_logger,
    step_time_logger,
    throughput_logger,
)


@pytest.fixture
def checks(monkeypatch):
    """Counts of the checks run, by the argument they check."""
    counts: collections.Counter[str] = collections.Counter()

    def counting(module, name, argument):
        original = getattr(module, name)

        def check(*args, **kwargs):
            counts[argument(args)] += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(module, name, check)

    counting(_base, "check_log_dir", lambda args: "log_dir")
    counting(step_time_logger, "check_profile_every_s", lambda args: "profile_every_s")
    counting(factory, "check_profile_every_s", lambda args: "profile_every_s")
    for module in (_base, factory, throughput_logger, memory_logger):
        for name in ("check_bool", "check_positive"):
            if hasattr(module, name):
                counting(module, name, lambda args: args[0])
    return counts


SHARED = ("log_dir", "per_worker_runs", "every_s", "profile_every_s")


def test_the_factory_checks_every_value_before_it_builds_a_callback(tmp_path, checks, monkeypatch):
    cbs = keras_gpu.callbacks(tmp_path, every_s=2.0, profile_every_s=60, per_worker_runs=True)
    assert len(cbs) == 4
    assert all(checks[name] >= 1 for name in SHARED)
    assert all((cb.log_dir, cb.per_worker_runs) == (str(tmp_path), True) for cb in cbs)
    assert (cbs[0].every_s, cbs[1].every_s, cbs[3].profile_every_s) == (2.0, 2.0, 60.0)

    built = []
    for cls in (throughput_logger.ThroughputLogger, memory_logger.MemoryLogger, step_time_logger.StepTimeLogger):
        original = cls.__init__

        def init(self, *args, _original=original, **kwargs):
            built.append(type(self).__name__)
            _original(self, *args, **kwargs)

        monkeypatch.setattr(cls, "__init__", init)
    for bad, match in (
        ({"every_s": -1}, r"Received: every_s=-1"),
        ({"profile_every_s": -0.5}, r"Received: profile_every_s=-0\.5"),
        ({"per_worker_runs": "yes"}, r"Received: per_worker_runs='yes'"),
    ):
        with pytest.raises((ValueError, TypeError), match=match):
            keras_gpu.callbacks(tmp_path, **bad)
    assert built == []  # every bad value was refused before any callback was built


@pytest.mark.parametrize(
    "build, checked",
    [
        (lambda d: keras_gpu.ThroughputLogger(d, every_s=2.0, per_worker_runs=False), SHARED[:3]),
        (lambda d: keras_gpu.MemoryLogger(d, every_s=2.0), SHARED[:3]),
        (lambda d: keras_gpu.StepTimeLogger(d, profile_every_s=0), ("log_dir", "per_worker_runs", "profile_every_s")),
    ],
)
def test_a_callback_built_directly_checks_its_own_arguments_once(tmp_path, checks, build, checked):
    build(tmp_path)
    assert {name: checks[name] for name in checked} == dict.fromkeys(checked, 1)


def test_a_callback_built_directly_still_rejects_what_the_factory_would(tmp_path):
    with pytest.raises(ValueError, match=r"Received: every_s=-1"):
        keras_gpu.ThroughputLogger(tmp_path, every_s=-1)
    with pytest.raises(ValueError, match=r"Received: every_s=0"):
        keras_gpu.MemoryLogger(tmp_path, every_s=0)
    with pytest.raises(ValueError, match=r"or 0 to turn tracing off\. Received: profile_every_s=-0\.5"):
        keras_gpu.StepTimeLogger(tmp_path, profile_every_s=-0.5)
    with pytest.raises(TypeError, match=r"Received: log_dir=3"):
        keras_gpu.StepTimeLogger(3)
    assert keras_gpu.StepTimeLogger(tmp_path, profile_every_s=-0.0).profile_every_s == 0.0
