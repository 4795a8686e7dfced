"""Real TensorFlow traces read right: compiled (XLA) steps count as compute; the slow tf.data stage is named."""

from __future__ import annotations

import logging
import time

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from keras_gpu.hooks.step_time_logger import StepTimeLogger

BATCH = 16


def _data(n, features=8):
    rng = np.random.default_rng(0)
    return rng.random((n, features), dtype=np.float32), rng.random((n, 1), dtype=np.float32)


def _small_model():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    return model


def _sequential(ds):
    """The tf.data guide's pipeline as written: no parallel map or injected prefetch from tf.data's optimiser."""
    options = tf.data.Options()
    options.experimental_optimization.map_parallelization = False
    options.experimental_optimization.inject_prefetch = False
    return ds.with_options(options)


def _sleepy(seconds):
    def sleep(a):
        time.sleep(seconds)
        return a

    return lambda a, b: (tf.ensure_shape(tf.numpy_function(sleep, [a], tf.float32), (8,)), b)


def _fit(model, ds, tmp_path, caplog):
    cb = StepTimeLogger(tmp_path, profile_steps=3, profile_every_s=300)
    caplog.set_level(logging.INFO, logger="keras_gpu")
    model.fit(ds, epochs=2, verbose=0, callbacks=[cb])
    assert cb.last is not None
    hints = [r.getMessage() for r in caplog.records if "StepTimeLogger:" in r.getMessage()]
    return cb.last, hints


def test_compiled_steps_count_as_compute(tmp_path, caplog):
    model = keras.Sequential(
        [keras.Input((256,)), keras.layers.Dense(1024, activation="relu"), keras.layers.Dense(1024), keras.layers.Dense(10)]
    )
    model.compile("sgd", "mse", jit_compile=True)
    rng = np.random.default_rng(0)
    x, y = rng.random((256 * 6, 256), dtype=np.float32), rng.random((256 * 6, 10), dtype=np.float32)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(256).cache().prefetch(tf.data.AUTOTUNE)
    last, _ = _fit(model, ds, tmp_path, caplog)
    assert last.share("compute") >= 0.5
    assert last.replicas[0].compute_sec == pytest.approx(last.compute_sec, rel=0.05)


def test_a_sequential_slow_map_is_named(tmp_path, caplog):
    x, y = _data(BATCH * 5)
    ds = _sequential(tf.data.Dataset.from_tensor_slices((x, y)).map(_sleepy(0.002)).batch(BATCH))
    last, (line,) = _fit(_small_model(), ds, tmp_path, caplog)
    assert "Map" in last.input_stage.name  # `Map`, or `MapAndBatch` where tf.data fuses it with the batch
    assert last.input_stage.sec_per_step >= 0.5 * BATCH * 0.002
    assert f"the slowest stage is {last.input_stage.name} (" in line and "num_parallel_calls" in line


def test_a_slow_source_with_a_fast_map_names_the_source(tmp_path, caplog):
    x, y = _data(BATCH * 5)

    def read():
        for a, b in zip(x, y):
            time.sleep(0.002)
            yield a, b

    spec = (tf.TensorSpec((8,), tf.float32), tf.TensorSpec((1,), tf.float32))
    ds = _sequential(tf.data.Dataset.from_generator(read, output_signature=spec).map(lambda a, b: (2 * a, b)).batch(BATCH))
    last, (line,) = _fit(_small_model(), ds, tmp_path, caplog)
    assert last.input_stage.name == "Generator"
    assert "input-bound" in line and "the slowest stage is Generator (" in line


def test_a_cached_prefetched_slow_map_gives_no_input_hint(tmp_path, caplog):
    x, y = _data(BATCH * 5)
    ds = _sequential(tf.data.Dataset.from_tensor_slices((x, y)).map(_sleepy(0.002)).batch(BATCH))
    last, (line,) = _fit(_small_model(), ds.cache().prefetch(tf.data.AUTOTUNE), tmp_path, caplog)
    assert last.share("input") < 0.3  # the second epoch reads the cache
    assert "input-bound" not in line
