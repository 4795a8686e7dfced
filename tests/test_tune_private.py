"""keras_gpu.hooks.tune_private against the installed Keras and TensorFlow: each change applies to fit's own objects.

The map hook patches `tf.data.Dataset.map` when the script imports
TensorFlow, so each check runs in a fresh interpreter.
"""

from __future__ import annotations

import json

import pytest

from tests._util import run_python

pytest.importorskip("tensorflow")

_SCRIPT = """
import json, sys
from keras_gpu.hooks import tune_private
from keras_gpu.hooks.study_env import settings_from_env
from keras_gpu.core import keras_private

change = json.loads(sys.argv[1])
tune_private.install(change)
applied = []
def wrap(original):
    def fit(self, *args, **kwargs):
        import inspect
        bound = inspect.signature(original).bind(self, *args, **kwargs)
        bound.apply_defaults()
        done = tune_private.apply(self, dict(bound.arguments), change)
        applied.append(done)
        try:
            return original(**done.arguments)
        finally:
            for undo in done.undo:
                undo()
    return fit
keras_private.wrap_fit(wrap)

import numpy as np
import keras
import tensorflow as tf
keras.utils.set_random_seed(0)
x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
y = np.zeros((64, 1), "float32")

def pipeline():
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(8).map(lambda a, b: (a * 2.0, b))

model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
train, val = pipeline(), pipeline()  # one map line, two calls
model.fit(train, validation_data=val, epochs=1, verbose=0)


class Batches(keras.utils.PyDataset):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)

    def __len__(self):
        return 2

    def __getitem__(self, i):
        return x[:8], y[:8]


batches = Batches()
model.fit(batches, epochs=1, verbose=0)


class Own(keras.Model):
    def fit(self, x, y, batch_size=None, **kwargs):
        return super().fit(x, y, batch_size=16, **kwargs)


inputs = keras.Input((4,))
own = Own(inputs, keras.layers.Dense(1)(inputs))
own.compile(optimizer="sgd", loss="mse")
own.fit(x, y, batch_size=4, epochs=1, verbose=0)
out = [{"facts": a.facts, "applied": a.applied, "not_applied": a.not_applied,
        "batch_size": a.arguments.get("batch_size")} for a in applied]
print("RESULT" + json.dumps({"fits": out, "workers_after": batches.workers, "spe": model.steps_per_execution,
                            "policy": model.dtype_policy.name}))
"""


def _run(change: dict) -> dict:
    proc = run_python(f"import sys; sys.argv = ['x', {json.dumps(change)!r}]\n" + _SCRIPT,
                      env={"KERAS_BACKEND": "tensorflow"}, timeout=300)
    return json.loads(proc.stdout.split("RESULT", 1)[1])


@pytest.mark.slow
def test_the_script_as_written_is_described_fit_by_fit():
    data, pydataset, own = _run({})["fits"]
    assert data["facts"]["fit_input"] == "tf.data" and data["facts"]["sequential_maps"] == 1
    # The training pipeline's map, by its line and its first call there.
    line = next(n for n, text in enumerate(("sys.argv\n" + _SCRIPT).splitlines(), 1) if ".map(lambda" in text)
    assert data["facts"]["map_sites"] == [["<string>", line, 1]] and data["facts"]["prefetches"] == 0
    assert pydataset["facts"] == {"fit_input": "PyDataset", "fit_override": None, "pydataset_workers": 1,
                                  "shuffle": True}
    assert own["facts"] == {"fit_input": "arrays", "fit_override": "Own.fit", "batch_size": 16}
    assert data["applied"] == data["not_applied"] == {}


@pytest.mark.slow
def test_each_change_applies_to_fits_objects_or_says_why_not():
    sites = _run({})["fits"][0]["facts"]["map_sites"]
    out = _run({"steps_per_execution": 4, "policy": "mixed_bfloat16", "parallel_map": sites, "prefetch": True,
                "workers": 4, "batch_factor": 2})
    data, pydataset, own = out["fits"]
    assert data["applied"]["steps_per_execution"] == "model.steps_per_execution = 4" and out["spe"] == 4
    assert data["applied"]["policy"] == "the model computes in mixed_bfloat16"
    assert data["applied"]["parallel_map"].startswith("map calls made parallel: ")
    assert data["applied"]["prefetch"] == "the dataset given to fit ends with prefetch(tf.data.AUTOTUNE)"
    assert data["not_applied"] == {"workers": "fit is given tf.data, not a PyDataset",
                                   "batch_factor": "fit is given tf.data, not arrays with batch_size"}
    # The PyDataset given to fit ran 4 workers, and has its own 1 again after fit.
    assert pydataset["applied"]["workers"] == "the PyDataset given to fit runs 4 workers" and out["workers_after"] == 1
    # A model whose class overrides fit passes Keras' fit a batch size of its own: no batch line can be named.
    assert own["batch_size"] == 16 and own["not_applied"]["batch_factor"].startswith(
        "Own.fit overrides Keras' fit, so the batch size Keras' fit gets is the one it passes on")
