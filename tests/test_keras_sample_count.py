"""Samples read from Keras' own count on TensorFlow, and where the counting step probe takes over.

Keras' default TensorFlow `train_step` adds each replica's batch size to its
loss tracker's `count`; `ThroughputLogger` reads it at window ends and at the
epoch's last batch end, before validation or a callback's `evaluate` resets
it. One child process (`tests._workers.keras_count_worker`, two logical
CPUs) fits each case with no `batch_size=`; the rest runs here.
"""

from __future__ import annotations

import json

import pytest

from tests._util import run_python

EXACT = {
    # case: where the samples come from
    "validation_known_length": "keras",
    "evaluate_callback_known_length": "keras",
    "validation_unknown_length": "probe",
    "own_train_step": "probe",
    "mirrored_dynamic": "keras",
    "mirrored_unknown_length": "probe",
}


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    log_dir = str(tmp_path_factory.mktemp("keras_count"))
    proc = run_python(f"from tests._workers.keras_count_worker import main; main({log_dir!r})", timeout=300)
    return json.loads(proc.stdout.split("RESULT", 1)[1])["results"]


@pytest.mark.parametrize("case", list(EXACT))
def test_the_count_is_exact_from_the_source_each_case_needs(fitted, case):
    result = fitted[case]
    assert result["source"] == EXACT[case]
    assert result["summary_samples"] == result["truth"] == 2006
    assert result["summary_steps"] == 202
    assert round(result["implied"]) == result["truth"]
    assert result["points"] == 8  # windows of 30 steps and each epoch's last
    assert result["warnings"] == []


def test_a_count_reset_within_the_epoch_stops_samples_with_one_warning_never_a_wrong_number(fitted):
    result = fitted["reset_mid_epoch"]
    assert result["source"] == "keras"
    assert result["summary_samples"] is None
    assert result["summary_steps"] == 202
    assert len(result["warnings"]) == 1
    assert "was reset during the epoch" in result["warnings"][0]
    assert "batch_size=" in result["warnings"][0]
    again = fitted["reset_mid_epoch_next_fit"]  # the same model fitted again: counted in the step, exactly
    assert again["source"] == "probe" and again["summary_samples"] == again["truth"] and again["warnings"] == []


# -- the Keras internals read, in this process ------------------------------------------------


@pytest.fixture
def tf_keras():
    tf = pytest.importorskip("tensorflow")
    import keras

    if keras.backend.backend() != "tensorflow":
        pytest.skip("the TensorFlow backend reads Keras' count")
    return tf, keras


def _model(keras, cls=None):
    cls = cls or keras.Sequential
    model = cls([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    return model


def test_keras_default_step_still_counts_each_batch_in_the_loss_tracker(tf_keras):
    """Fails if Keras renames the tracker or its variable, or stops counting samples there."""
    tf, keras = tf_keras
    import numpy as np

    from keras_gpu.setup.keras_compat import keras_sample_count

    model = _model(keras)
    count = keras_sample_count(model)
    assert count is not None and count.exact_below == 2.0**24
    ds = tf.data.Dataset.from_tensor_slices((np.ones((23, 3), "float32"), np.ones((23, 1), "float32"))).batch(5)
    seen = []

    class Read(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            seen.append(sum(count.read()))

    model.fit(ds, epochs=1, verbose=0, callbacks=[Read()])
    assert seen == [5.0, 10.0, 15.0, 20.0, 23.0]
    model.evaluate(ds.take(2), verbose=0)  # resets it: why the logger reads at the last batch end
    assert sum(count.read()) == 10.0


def test_only_keras_default_step_with_a_float_count_is_read(tf_keras):
    _, keras = tf_keras
    from keras_gpu.hooks import step_probe
    from keras_gpu.setup.keras_compat import keras_sample_count

    class OwnStep(keras.Sequential):
        def train_step(self, data):
            return super().train_step(data)

    assert keras_sample_count(_model(keras, OwnStep)) is None
    patched = _model(keras)
    patched.train_step = lambda data: {}
    assert keras_sample_count(patched) is None
    probed = _model(keras)
    step_probe.install(probed, 1, timing=False)  # a probe around Keras' own step: the step still counts
    assert keras_sample_count(probed) is not None
    untracked = _model(keras)
    untracked._loss_tracker = None
    assert keras_sample_count(untracked) is None


def test_the_running_count_spans_epochs_and_gives_up_where_the_float_stops_being_exact():
    from keras_gpu.hooks.throughput_setup import KerasCount

    class Source:
        exact_below = 100.0
        resets = 0

        def __init__(self):
            self.values = [0.0, 0.0]

        def read(self):
            return list(self.values)

    source = Source()
    source.values = [7.0, 7.0]  # the previous fit's count: not this fit's
    count = KerasCount(source, workers=2, num_batches=4)
    assert count() == (None, 0) and count.last_index == 3
    source.values = [0.0, 0.0]
    count.epoch_begin()
    source.values = [10.0, 9.0]
    assert count() == (None, 38)  # two workers
    source.values = [20.0, 19.0]
    count.epoch_end()
    source.values = [3.0, 3.0]  # validation's count after the last batch end: ignored
    assert count() == (None, 78)
    source.values = [0.0, 0.0]
    count.epoch_begin()
    source.values = [60.0, 40.0]
    assert count() == (None, 78 + 200)
    source.values = [100.0, 80.0]  # a replica's count reached 2**24 (here 100): no longer exact
    assert count() == (None, None)
    assert "counts exactly only to 100" in count.lost_reason
    source.values, source.resets = [0.0, 0.0], 1
    count = KerasCount(source, workers=1, num_batches=4)
    count.epoch_begin()
    source.values = [4.0, 4.0]
    assert count() == (None, 8)
    source.resets = 2  # reset within the epoch, even where the count grew again past the last read
    source.values = [9.0, 9.0]
    assert count() == (None, None) and "was reset during the epoch" in count.lost_reason
