"""The step probe (`keras_gpu.hooks.step_probe`): timestamps inside the compiled step, against a stopwatch and hand counts.

One subprocess (two logical CPUs, a mirrored strategy) runs every scenario and
prints what it measured; the tests below each judge one part of it.
"""

from __future__ import annotations

import json

import pytest

from keras_gpu.hooks import step_probe
from tests._util import run_python

_SCRIPT = """
import json, time
import numpy as np
import tensorflow as tf
import keras
import keras_gpu
from keras_gpu.hooks import step_probe

strategy = keras_gpu.make_strategy("mirrored")  # its cross-device ops run steps_per_execution > 1 (keras#19246)
assert strategy.num_replicas_in_sync == 2
rng = np.random.default_rng(0)
x = rng.random((1000, 64), dtype=np.float32)
y = rng.random((1000, 4), dtype=np.float32)
out = {}

def build(cls=keras.Sequential, jit=False, seed=1):
    keras.utils.set_random_seed(seed)
    with strategy.scope():
        model = cls([keras.Input((64,)), keras.layers.Dense(256, activation="relu"), keras.layers.Dense(4)])
        model.compile("sgd", "mse", jit_compile=jit)
    return model

class Window(keras.callbacks.Callback):
    '''Probes the fit; in epoch 1, a window from batch end 0 to the last batch end, timed by a stopwatch.

    The time after the last batch end (Keras finding the data's end, the epoch's end) is in no step.
    '''
    def __init__(self, sleep=0.0):
        super().__init__()
        self.sleep, self.windows = sleep, []
    def set_model(self, model):
        super().set_model(model)
        self.probe = step_probe.install(model, 2)  # before fit builds its train function
    def on_train_batch_begin(self, batch, logs=None):
        self.probe.batch_begin()
    def on_epoch_begin(self, epoch, logs=None):
        self.probe.epoch_begin()
        self.probe.reset()
        self.epoch, self.t = epoch, None
    def on_train_batch_end(self, batch, logs=None):
        self.probe.batch_end()
        if self.sleep:
            time.sleep(self.sleep)
        if self.epoch == 1 and batch == 0:
            self.probe.reset()
            self.t = time.perf_counter()
        self.last, self.t_last = batch, time.perf_counter()
    def on_epoch_end(self, epoch, logs=None):
        w = self.probe.read()
        wall = self.t_last - self.t if self.t is not None else None
        self.windows.append(dict(w.__dict__, busy=w.busy_sec, step=w.step_sec, wall=wall, batches=self.last + 1))

# 1. A mirrored fit, a callback sleeping 4 ms per step: the probe against a stopwatch.
model = build()
cb = Window(sleep=0.004)
model.fit(x, y, batch_size=50, epochs=2, verbose=0, callbacks=[cb])
out["stopwatch"] = cb.windows

# 2. The probe does not change training: the same weights as a fit without it.
bare = build(seed=2)
bare.fit(x, y, batch_size=50, epochs=1, verbose=0, shuffle=False)
probed = build(seed=2)
probed.fit(x, y, batch_size=50, epochs=1, verbose=0, shuffle=False, callbacks=[Window()])
out["max_weight_difference"] = max(
    float(np.max(np.abs(a - b))) for a, b in zip(bare.get_weights(), probed.get_weights())
)

# 3. tf.data of unknown batch size with a short last batch, inside the strategy's scope.
ds = tf.data.Dataset.from_tensor_slices((x, y)).filter(lambda a, b: True).batch(96)
model = build()
cb = Window()
with strategy.scope():
    model.fit(ds, epochs=1, verbose=0, callbacks=[cb])
out["dynamic"] = cb.windows[0]
out["variables"] = [type(v).__name__ for v in (cb.probe._sums, cb.probe._prev)]

# 4. steps_per_execution=4: samples still counted; a callback's 4 ms sleep per call is host time, a
# pipeline's 10 ms sleep per batch is input (the sleeps depend on the batch: nothing is folded away).
model = build()
model.compile("sgd", "mse", steps_per_execution=4)
cb = Window(sleep=0.004)
model.fit(x, y, batch_size=40, epochs=1, verbose=0, callbacks=[cb])
out["spe4"] = cb.windows[0]

def slow(a, b):
    def nap(t):
        time.sleep(0.01)
        return t
    return tf.py_function(nap, [a], tf.float32), b

slow_ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(40).map(slow)
slow_ds = slow_ds.map(lambda a, b: (tf.ensure_shape(a, (None, 64)), b))
for spe in (1, 4):
    model = build()
    model.compile("sgd", "mse", steps_per_execution=spe)
    cb = Window()
    model.fit(slow_ds, epochs=1, verbose=0, callbacks=[cb])
    out[f"slow_input_spe{spe}"] = cb.windows[0]

# 5. A class that writes its own train_step, with two optimizer updates per step.
class Custom(keras.Sequential):
    def train_step(self, data):
        a, b = data
        with tf.GradientTape() as tape:
            loss = self.compute_loss(x=a, y=b, y_pred=self(a, training=True))
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        return {"loss": loss}

model = build(cls=Custom)
cb = Window()
model.fit(x, y, batch_size=50, epochs=1, verbose=0, callbacks=[cb])
out["custom"] = cb.windows[0]
out["custom_iterations"] = int(model.optimizer.iterations.numpy())

# 6. A later fit reuses the probe and the traced function; XLA is refused with its reason.
first = step_probe.install(model, 2)
function = model.train_function
again = step_probe.install(model, 2)
out["reused"] = [first is again, model.train_function is function]
xla = build(jit=True)
out["xla"] = [step_probe.install(xla, 2) is None, step_probe.unavailable_reason(xla)]
print("RESULT " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def measured():
    proc = run_python(_SCRIPT, timeout=400, logical_cpus=2)
    line = next(text for text in proc.stdout.splitlines() if text.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def test_probed_steps_add_up_to_a_stopwatch_over_the_same_steps(measured):
    w = measured["stopwatch"][1]  # epoch 1: batch end 0 to the last batch end
    assert w["steps"] == w["batches"] - 1 == 19
    # Every second between the two batch ends is in some probed step.
    assert w["step"] * w["steps"] == pytest.approx(w["wall"], rel=0.05)
    # The callback's 4 ms sleep is host time between steps, never compute.
    assert w["host_sec"] >= 0.004
    assert w["compute_sec"] > 0 and w["communication_sec"] > 0 and w["input_sec"] >= 0
    assert w["busy"] == pytest.approx(w["compute_sec"] + w["host_sec"] + w["input_sec"])
    assert len(w["replica_compute_sec"]) == 2 and all(c > 0 for c in w["replica_compute_sec"])


def test_the_probe_leaves_training_unchanged(measured):
    assert measured["max_weight_difference"] == 0.0


def test_samples_are_counted_from_each_batch(measured):
    assert measured["stopwatch"][0]["samples"] == 1000 and measured["stopwatch"][0]["steps"] == 20
    # A batch size unknown to the graph, and a short last batch (10 of 96 x 11 = 1056): the true count.
    assert measured["dynamic"]["samples"] == 1000 and measured["dynamic"]["steps"] == 11
    # Data of unknown length: the call that finds its end runs no step, and leaves the input measured.
    assert measured["dynamic"]["input_sec"] >= 0
    assert measured["spe4"]["samples"] == 1000 and measured["spe4"]["steps"] == 25


def test_the_probe_variables_stay_plain_inside_a_strategy_scope(measured):
    assert measured["variables"] == ["ResourceVariable", "ResourceVariable"]


def test_several_steps_per_call_tell_host_time_from_input(measured):
    w = measured["spe4"]
    # 25 steps in 7 calls: 24 gaps between steps, 6 of them starting a call after a 4 ms sleep.
    assert w["steps"] == 25
    assert w["host_sec"] * 24 >= 6 * 0.004, w
    assert w["input_sec"] >= 0
    assert w["step"] == pytest.approx(w["compute_sec"] + w["communication_sec"] + w["host_sec"] + w["input_sec"])
    for spe in (1, 4):
        slow = measured[f"slow_input_spe{spe}"]
        # The pipeline sleeps 10 ms per batch: that is input, whatever the steps per call; the callbacks do
        # little, so the host time is the smaller part.
        assert slow["input_sec"] >= 0.005, (spe, slow)
        assert slow["input_sec"] > slow["host_sec"], (spe, slow)


def test_a_custom_train_step_is_probed_from_its_first_update(measured):
    w = measured["custom"]
    assert measured["custom_iterations"] == 2 * 20  # both updates ran, every step
    assert w["steps"] == 20 and w["samples"] == 1000
    assert w["compute_sec"] > 0 and w["communication_sec"] > 0


def test_a_later_fit_reuses_the_probe_and_xla_is_refused(measured):
    assert measured["reused"] == [True, True]
    refused, reason = measured["xla"]
    assert refused and "jit_compile" in reason


def test_window_arithmetic_by_hand():
    fields = step_probe.FIELDS
    # Two replicas, 10 steps each; 8 steps with a previous step in the epoch, whose calls Python timed.
    # Calls of 2 steps: 4 of the 8 gaps start a call, whose previous step ended at 99.98 in all; the
    # iterator's cross-worker check took 0.016 s of the gaps.
    row0 = dict(steps=10, compute=0.02, wait=0.03, gap=0.08, gap_steps=8, call_prev=99.98, calls=4, check=0.016,
                samples=320)
    row1 = dict(row0, compute=0.04, wait=0.01)
    w = step_probe.window([[r[f] for f in fields] for r in (row0, row1)], calls=4, call_time=100.0)
    assert w.steps == 10 and w.samples == 640
    assert w.compute_sec == pytest.approx(0.004)  # the slower replica
    assert w.replica_compute_sec == pytest.approx((0.002, 0.004))
    # Replica 0's span (0.02 + 0.03) / 10 less the slower replica's compute, and the check over 10 steps.
    assert w.communication_sec == pytest.approx(0.001 + 0.0016)
    assert w.host_sec == pytest.approx(0.0025)  # (100.0 - 99.98) / 8
    assert w.input_sec == pytest.approx(0.01 - 0.002 - 0.0025)  # the gap less the check and the host
    assert w.busy_sec == pytest.approx(0.004 + 0.0025 + 0.0055)
    assert w.step_sec == pytest.approx(w.busy_sec + w.communication_sec)
    # Replica 1 computes 3 ms longer and replica 0 waits those 3 ms in the all-reduce: counted once, as compute.
    even = dict(row0, compute=0.01, wait=0.04, check=0.0)
    slow = dict(even, compute=0.04, wait=0.01)
    w = step_probe.window([[r[f] for f in fields] for r in (even, slow)], calls=4, call_time=100.0)
    assert (w.compute_sec, w.communication_sec) == pytest.approx((0.004, 0.001))
    assert w.step_sec - w.host_sec - w.input_sec == pytest.approx(0.005)  # replica 0's span per step
    # Without an optimizer update no replica waits: the span is the compute, never a negative wait.
    w = step_probe.window([[r[f] for f in fields] for r in (dict(even, wait=0.0), dict(slow, wait=0.0))], 4, 100.0)
    assert w.communication_sec == 0.0
    # A call Python did not time: the input is not told from the host time.
    w = step_probe.window([[r[f] for f in fields] for r in (row0, row1)], calls=3, call_time=75.0)
    assert w.input_sec != w.input_sec and w.host_sec == pytest.approx(0.008)
    assert step_probe.window([[0.0] * len(fields)], calls=0, call_time=0) is None
