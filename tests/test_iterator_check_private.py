"""The distributed iterator's cross-worker check clock (`keras_gpu.setup.iterator_check_private`).

Where it runs in a real job (the wait for the other workers timed apart from the input) is tested by the
launched jobs of `tests/test_cluster_view.py`; here, its pieces against TensorFlow and a stopwatch.
"""

from __future__ import annotations

import inspect
import sys
import time

import pytest

tf = pytest.importorskip("tensorflow")

from keras_gpu.setup import iterator_check_private as check


def test_tensorflow_still_counts_the_replicas_with_a_batch_where_the_clock_looks():
    from tensorflow.python.distribute import input_lib

    function = getattr(input_lib, check._CHECK)
    assert function.__module__ == check._INPUT_LIB
    assert "strategy.reduce(" in inspect.getsource(function)
    assert not check.is_iterator_check(sys._getframe())


def test_the_clock_sums_the_time_inside_the_timed_reduce():
    clock = check.IteratorCheckClock()

    def slow_reduce(value):
        def nap(v):
            time.sleep(0.02)
            return v

        return tf.py_function(nap, [value], value.dtype)

    @tf.function
    def fetch(x):
        return clock.around(x * 2, slow_reduce)

    started = time.perf_counter()
    for i in range(3):
        assert int(fetch(tf.constant(i, tf.int64))) == 2 * i
    wall = time.perf_counter() - started
    seconds, checks = clock.read()
    assert checks == 3
    assert 3 * 0.02 <= seconds <= wall


def test_a_strategy_without_a_clock_reduces_untimed():
    class Strategy:
        pass

    strategy = Strategy()
    assert check.attached_clock(strategy) is None
    assert check.timed_check(strategy, 3, lambda v: v + 1) == 4
    clock = check.attach_clock(strategy)
    assert check.attach_clock(strategy) is clock and check.attached_clock(strategy) is clock
