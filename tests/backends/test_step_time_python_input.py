"""`StepTimeLogger` on JAX with a `PyDataset`: traces that end at an epoch's end hold steps only, and the
`PyDataset`'s `__getitem__` is named as the input stage when it is the bottleneck."""

from __future__ import annotations

import json
import textwrap

from tests._util import run_python
from tests.backends._common import JAX_ONLY

pytestmark = JAX_ONLY

FIT = """
import json, logging, time
import numpy as np, keras
from keras_gpu.hooks.step_time_logger import StepTimeLogger

records = []
handler = logging.Handler()
handler.emit = lambda r: records.append(r.getMessage())
logging.getLogger("keras_gpu").addHandler(handler)
logging.getLogger("keras_gpu").setLevel(logging.INFO)


class Batches(keras.utils.PyDataset):
    def __init__(self, sleep, **kwargs):
        super().__init__(**kwargs)
        self.sleep = sleep
        rng = np.random.default_rng(0)
        self.x = rng.random((128 * 16, 256), dtype=np.float32)
        self.y = rng.random((128 * 16, 10), dtype=np.float32)

    def __len__(self):
        return 16

    def __getitem__(self, i):
        time.sleep(self.sleep)
        return self.x[128 * i : 128 * (i + 1)], self.y[128 * i : 128 * (i + 1)]


class SlowEpochEnd(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        time.sleep(0.2)


class StopsSettled(keras.callbacks.Callback):  # the epoch's end outlasts the profiler's stop (tests/_callbacks.py)
    def on_epoch_end(self, epoch, logs=None):
        from keras_gpu.hooks import step_time_trace

        deadline = time.monotonic() + 120
        while step_time_trace._STOPS.busy() and time.monotonic() < deadline:
            time.sleep(0.01)


model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(1024, activation="relu"), keras.layers.Dense(10)])
model.compile("sgd", "mse")
out = {}
for name, sleep, workers in (("fast", 0.0, 2), ("slow", 0.02, 1)):
    records.clear()
    # Longer traces than an epoch: each ends at its epoch's end, where the workers stop.
    cb = StepTimeLogger(LOG_DIR + "/" + name, profile_steps=20, profile_every_s=0.001)
    model.fit(Batches(sleep, workers=workers), epochs=3, verbose=0, callbacks=[SlowEpochEnd(), cb, StopsSettled()])
    out[name] = dict(traces=[t.as_dict() for t in cb.traces], lines=[m for m in records if "StepTimeLogger:" in m])
print("RESULT", json.dumps(out))
"""


def test_pydataset_traces_hold_steps_only_and_name_the_python_input(tmp_path):
    proc = run_python(textwrap.dedent(FIT.replace("LOG_DIR", repr(str(tmp_path)))), env={"KERAS_BACKEND": "jax"}, timeout=300)
    result = json.loads(proc.stdout.split("RESULT", 1)[1])
    fast, slow = result["fast"], result["slow"]
    # Two workers keep up with the step: the epoch's end (stopping the workers, a slow callback) is not input time.
    # Keras dispatches asynchronously (verbose=0): traces start and end at batch begins, so each holds its
    # epoch's steps but the first (warm-up) and the last (no batch begin follows it).
    assert [t["steps"] for t in fast["traces"]] == [14, 14]
    assert all(t["step_source"] == "host markers" for t in fast["traces"])
    assert all(t["input_sec"] < 0.3 * t["step_sec"] for t in fast["traces"]), fast["traces"]
    (line,) = fast["lines"]
    assert "input-bound" not in line
    # One worker (no read-ahead) whose __getitem__ sleeps 20 ms per batch: input-bound, and the stage named is
    # that __getitem__, at least 20 ms per batch, with advice for a PyDataset (no generator, no tf.data).
    (line,) = slow["lines"]
    assert "input-bound" in line and "the slowest stage is PyDataset __getitem__ (" in line, line
    assert "set `workers` above 1" in line and "generator" not in line and "tf.data" not in line
    stage = slow["traces"][-1]["input_stage"]
    assert stage["name"] == "PyDataset __getitem__" and stage["path"].endswith(" __getitem__")
    assert stage["sec_per_step"] >= 0.02
