"""keras_gpu.hooks.tune_private against the installed Keras and TensorFlow: each patch does what `keras-gpu tune` relies on.

The patches replace methods of Keras and tf.data classes for the whole
process, so each check runs in a fresh interpreter.
"""

from __future__ import annotations

import json

import pytest

from keras_gpu.hooks import tune_private
from tests._util import run_python

pytest.importorskip("tensorflow")


def test_the_change_is_read_from_the_environment_and_bad_values_are_refused():
    assert tune_private.change_from_env({}) is None
    assert tune_private.change_from_env({tune_private.ENV_TUNE_CHANGE: '{"steps_per_execution": 16}'}) == {
        "steps_per_execution": 16
    }
    with pytest.raises(ValueError, match=r"KERAS_GPU_TUNE_CHANGE must be a JSON object .* Received: '\{\"lr\": 2\}'"):
        tune_private.change_from_env({tune_private.ENV_TUNE_CHANGE: '{"lr": 2}'})


def test_compile_and_fit_arguments_take_the_change():
    args = tune_private.compile_arguments({"optimizer": "sgd", "steps_per_execution": 1}, {"steps_per_execution": 4})
    assert args == {"optimizer": "sgd", "steps_per_execution": 4}
    fit = tune_private.fit_arguments({"x": [[1.0]], "batch_size": None, "epochs": 3}, {"batch_factor": 2})
    assert (fit["batch_size"], fit["epochs"]) == (64, 6)  # Keras' default batch of 32, doubled; epochs to match
    assert tune_private.FACTS["fit_input"] == "arrays" and tune_private.FACTS["batch_size"] == 32


_SCRIPT = """
import json, os, sys
from keras_gpu.hooks import tune_private
tune_private.install(json.loads(sys.argv[1]), sys.argv[2])
import numpy as np
import keras
import tensorflow as tf
keras.utils.set_random_seed(0)
x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
y = np.zeros((64, 1), "float32")
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(8).map(lambda a, b: (a * 2.0, b))
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
model.fit(ds, epochs=1, verbose=0)
record = json.load(open(os.path.join(sys.argv[2], "tune.json")))


class Batches(keras.utils.PyDataset):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)

    def __len__(self):
        return 1

    def __getitem__(self, i):
        return x[:8], y[:8]


print(json.dumps({"record": record, "policy": keras.mixed_precision.global_policy().name,
                  "workers": [Batches().workers, Batches(workers=8).workers]}))
"""


def _run(change: dict, folder) -> dict:
    proc = run_python(f"import sys; sys.argv = ['x', {json.dumps(change)!r}, {str(folder)!r}]\n" + _SCRIPT,
                      env={"KERAS_BACKEND": "tensorflow"})
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_the_patches_apply_on_import_and_record_what_the_script_did(tmp_path):
    base = _run({}, tmp_path)
    record = base["record"]
    assert record["steps_per_execution"] == 1 and record["policy"] == "float32"
    assert record["facts"]["fit_input"] == "tf.data"
    assert record["facts"]["script_sequential_maps"] == 1 and record["facts"]["script_prefetches"] == 0
    assert [s for s, _ in record["losses"]] == list(range(1, 9))
    assert base["workers"] == [1, 8]
    changed = _run({"steps_per_execution": 4, "policy": "mixed_bfloat16", "parallel_map": True, "prefetch": True,
                    "workers": 4}, tmp_path)
    record = changed["record"]
    assert record["steps_per_execution"] == 4 and record["policy"] == "mixed_bfloat16"
    assert changed["policy"] == "mixed_bfloat16"
    assert changed["workers"] == [4, 8]  # raised to 4 where fewer, left where more
    assert [s for s, _ in record["losses"]] == [4, 8]  # batch hooks once per execution of 4 steps
