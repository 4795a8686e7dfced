"""The cluster view's in-step probe on a worker with two replicas, against a stopwatch and hand counts.

Multi-worker jobs here have one CPU replica per worker (TensorFlow's
multi-worker strategy takes one CPU device per worker without GPUs), so a
one-process mirrored strategy over two logical CPUs stands for one worker of
two replicas: the probe, its rows' ride on the two-replica gradient
all-reduce and the share schedule, installed and called as `StepTimeLogger`
does in a multi-worker job (`install_probe`, `ClusterSchedule`), with the
rows gathered by this one worker. `tests/test_gpu_cluster_two_replicas.py`
runs the same on a real two-worker job where a GPU is present.

Judged against independent truths: a stopwatch over the same batch ends, the
sleeps the test puts into the input and into one replica's forward pass
(lower bounds), the hand count of steps, and the weights of a fit without
the callbacks.
"""

from __future__ import annotations

import json

import pytest

from tests._util import run_python

SLEEP = 0.03  # the input's sleep per batch, and the slow replica's per forward pass (below)
BATCHES = 16  # 1024 samples in batches of 64: whole calls of 1 and 4 steps

_SCRIPT = """
import json, math, time
import numpy as np
import tensorflow as tf
import keras
import keras_gpu
from keras_gpu.core.log import Once
from keras_gpu.hooks.step_time_cluster import ClusterSchedule, install_probe

SLEEP = %(sleep)r
strategy = keras_gpu.make_strategy("mirrored")
assert strategy.num_replicas_in_sync == 2
rng = np.random.default_rng(0)
x = rng.random((1024, 64), dtype=np.float32)
y = rng.random((1024, 4), dtype=np.float32)


class SlowReplica(keras.layers.Layer):
    '''Sleeps SLEEP in the forward pass of replica 1 only: that replica computes longer.'''

    def call(self, inputs, training=None):
        ctx = tf.distribute.get_replica_context()
        if ctx is None or tf.get_static_value(ctx.replica_id_in_sync_group) != 1:
            return inputs
        def nap(t):
            time.sleep(SLEEP)
            return t
        out = tf.py_function(nap, [inputs], inputs.dtype)
        return tf.ensure_shape(out, inputs.shape)


def build(seed=1, slow_replica=False):
    keras.utils.set_random_seed(seed)
    with strategy.scope():
        layers = [keras.Input((64,)), keras.layers.Dense(256, activation="relu")]
        layers += [SlowReplica()] if slow_replica else []
        model = keras.Sequential([*layers, keras.layers.Dense(4)])
        model.compile("sgd", "mse")
    return model


def nap(a, b):
    def sleep(t):
        time.sleep(SLEEP)
        return t
    return tf.ensure_shape(tf.py_function(sleep, [a], tf.float32), (None, 64)), b


plain = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)
slow_input = plain.map(nap)


class ClusterView(keras.callbacks.Callback):
    '''The cluster view's calls, in StepTimeLogger's order, for a job of this one worker; a stopwatch beside.'''

    def set_model(self, model):
        super().set_model(model)
        self.probe = install_probe(model, 1, 0)  # before fit builds its train function

    def on_train_begin(self, logs=None):
        self.once, self.views, self.rows = Once(), [], []

        def gather(row):  # every worker's row: this worker's alone
            self.rows.append(list(row))
            return [list(row)]

        self.schedule = ClusterSchedule(self.probe, gather, [("replica_0", "a"), ("replica_1", "b")], 0,
                                        ride=self.probe.ride)
        self.stopwatch = []

    def on_epoch_begin(self, epoch, logs=None):
        self.probe.epoch_begin()
        self.first_end = None

    def on_train_batch_begin(self, batch, logs=None):
        self.probe.batch_begin()

    def on_train_batch_end(self, batch, logs=None):
        now = time.perf_counter()
        self.probe.batch_end()
        if self.schedule.batch_end(batch):
            self.views += self.schedule.at_batch_end(None, self.once)
        if self.first_end is None:
            self.first_end = (batch, now)
        self.last_end = (batch, now)

    def on_epoch_end(self, epoch, logs=None):
        self.views += self.schedule.at_epoch_end(None, self.once)
        self.schedule.epoch_end()
        self.stopwatch.append({"from": self.first_end, "to": self.last_end})

    def on_train_end(self, logs=None):
        self.views += self.schedule.at_fit_end(self.once)


def weights(model):
    return [w.tolist() for w in model.get_weights()]


out = {}
for name, spe, data, slow_replica in (
    ("input_spe1", 1, slow_input, False),
    ("input_spe4", 4, slow_input, False),
    ("replica_spe1", 1, plain, True),
):
    model = build(slow_replica=slow_replica)
    model.compile("sgd", "mse", steps_per_execution=spe)
    view = ClusterView()
    model.fit(data, epochs=2, verbose=0, shuffle=False, callbacks=[view])
    bare = build(slow_replica=slow_replica)
    bare.compile("sgd", "mse", steps_per_execution=spe)
    bare.fit(data, epochs=2, verbose=0, shuffle=False)
    out[name] = {
        "rode": bool(view.probe.ride is not None and view.probe.ride.rode),
        "views": [[step, None if s is None else {k: float(v) for k, v in s.rows[0].items()}] for step, s in view.views],
        "gathered": len(view.rows),
        "stopwatch": view.stopwatch,
        "identical": weights(model) == weights(bare),
    }
print("RESULT " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def measured():
    proc = run_python(_SCRIPT % {"sleep": SLEEP}, timeout=600, logical_cpus=2)
    line = next(text for text in proc.stdout.splitlines() if text.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def _window(run, index):
    """The view of epoch `index` and the stopwatch over its steps."""
    (_, row), watch = run["views"][index], run["stopwatch"][index]
    return row, watch


@pytest.mark.parametrize("name, spe", [("input_spe1", 1), ("input_spe4", 4)])
def test_the_input_wait_is_input_never_host_or_compute_with_two_replicas(measured, name, spe):
    run = measured[name]
    assert run["rode"]  # the rows rode on the two-replica gradient all-reduce
    # Two windows: epoch 0's end (published, carried by epoch 1's first step), and the fit's end (gathered).
    assert [step for step, _ in run["views"]] == [BATCHES, 2 * BATCHES]
    assert run["gathered"] == 1
    row, watch = _window(run, 0)
    (first, t_first), (last, t_last) = watch["from"], watch["to"]
    # A hand count: every step after the first call (warm-up) to the epoch's last batch end.
    assert first == spe - 1 and last == BATCHES - 1
    assert row["traced_steps"] == BATCHES - spe
    # The probe's steps add up to the stopwatch over the same batch ends.
    assert row["step_sec"] * row["traced_steps"] == pytest.approx(t_last - t_first, rel=0.1)
    for _, row in run["views"]:
        # The pipeline sleeps SLEEP per batch, and each step waits for its batch: most of it is input.
        assert row["input_sec"] >= SLEEP / 2, (spe, row)
        # Busy time is compute, host and the worker's own input wait; the host and compute parts hold no input.
        assert row["other_sec"] + row["compute_sec"] < SLEEP / 2, (spe, row)
        assert row["busy_sec"] == pytest.approx(row["compute_sec"] + row["other_sec"] + row["input_sec"])


def test_a_replica_slower_in_compute_is_the_worker_compute_and_not_also_communication(measured):
    run = measured["replica_spe1"]
    row, watch = _window(run, 0)
    (_, t_first), (_, t_last) = watch["from"], watch["to"]
    assert row["traced_steps"] == BATCHES - 1
    # Replica 1 sleeps SLEEP in each forward pass: the worker's compute is the slower replica's.
    assert row["compute_sec"] >= SLEEP
    # Replica 0 waits for replica 1 in the all-reduce: that wait is counted once (as the slower replica's
    # compute), so the parts add up to the stopwatch rather than to it plus half the difference.
    assert row["step_sec"] * row["traced_steps"] == pytest.approx(t_last - t_first, rel=0.1)
    assert row["communication_sec"] < SLEEP / 2


@pytest.mark.parametrize("name", ["input_spe1", "input_spe4", "replica_spe1"])
def test_final_weights_are_bit_identical_with_and_without_the_cluster_view(measured, name):
    assert measured[name]["identical"]
