"""The cluster view's rows riding on the gradient all-reduce, and the schedule that publishes, reads and gathers them.

The real two-process jobs are in `tests/test_cluster_view.py` (there the
rows ride, TensorFlow traces no more all-reduces than without keras-gpu, and
only the fit's last row is all-gathered). Here: the ride on two logical CPUs
(exact rows, unchanged training), and the schedule's protocol with stand-ins.
"""

from __future__ import annotations

import itertools
import json
import math

import pytest

from keras_gpu.core.log import Once
from keras_gpu.hooks.step_probe import ProbeWindow
from keras_gpu.hooks.step_time_cluster import ClusterSchedule
from keras_gpu.meters.cluster_view import ROW_FIELDS
from tests._util import run_python

_RIDE = """
import json, math
import numpy as np, keras, tensorflow as tf
import keras_gpu
from keras_gpu.core import backend
from keras_gpu.hooks.row_ride import install_ride

strategy = keras_gpu.make_strategy("mirrored")
assert strategy.num_replicas_in_sync == 2

def build(step=None, loss_scale=False):
    keras.utils.set_random_seed(1)
    with strategy.scope():
        cls = keras.Sequential
        if step is not None:
            cls = type("Custom", (keras.Sequential,), {"train_step": step})
        model = cls([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(1)])
        optimizer = keras.optimizers.SGD(0.1)
        if loss_scale:
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        model.compile(optimizer, "mse")
    return model

rng = np.random.default_rng(0)
x, y = rng.random((64, 4), dtype=np.float32), rng.random((64, 1), dtype=np.float32)
plain = build()
plain.fit(x, y, batch_size=8, epochs=2, verbose=0, shuffle=False)

model = build()
devices = list(backend.replica_devices(model))
# Two replicas of one process stand for two workers of one replica each: both fill their slot.
ride = install_ride(model, 2, 0, 3, 1, devices[0])
assert install_ride(model, 2, 0, 3, 1, devices[0]) is ride  # reused: same model, optimizer, layout
row = [1 / 3, 1e6 + 1 / 7, math.nan]
ride.publish(row)
model.fit(x, y, batch_size=8, epochs=2, verbose=0, shuffle=False)
same = all(np.array_equal(a, b) for a, b in zip(plain.get_weights(), model.get_weights()))

def no_optimizer_step(self, data):  # trains nothing: no gradient all-reduce to ride on
    x, y = data
    return {"loss": tf.reduce_mean(self(x))}

bare = build(no_optimizer_step)
bare_ride = install_ride(bare, 2, 0, 3, 1, devices[0])
bare.fit(x, y, batch_size=8, epochs=1, verbose=0)
# A LossScaleOptimizer applies through its inner optimizer; the probe's stamp gates the ride there too.
from keras_gpu.hooks import step_probe
scaled = build(loss_scale=True)
probe = step_probe.install(scaled, 2)
scaled_ride = probe.ride = install_ride(scaled, 2, 0, 3, 1, devices[0])
scaled_ride.publish(row)
scaled.fit(x, y, batch_size=8, epochs=1, verbose=0)
try:
    ride.publish([1.0])
    error = None
except ValueError as exc:
    error = str(exc)
print("RESULT " + json.dumps({
    "rode": ride.rode, "table": ride.read(), "same_weights": same, "bare_rode": bare_ride.rode, "error": error,
    "scaled_table": scaled_ride.read(), "scaled_steps": probe.counts()[0],
}))
"""


@pytest.fixture(scope="module")
def ride_run():
    out = run_python(_RIDE, logical_cpus=2, timeout=300).stdout
    (line,) = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    return json.loads(line[len("RESULT "):].replace("NaN", "null"))


def test_every_slot_comes_back_exactly_through_the_gradient_all_reduce(ride_run):
    assert ride_run["rode"] is True
    for got in ride_run["table"]:
        assert got[0] == pytest.approx(1 / 3, rel=1e-14)  # float32 halves, float64 whole
        assert got[1] == pytest.approx(1e6 + 1 / 7, rel=1e-14)
        assert got[2] is None  # a NaN (an unmeasured field) stays in its slot


def test_the_rows_ride_through_a_loss_scale_optimizer_with_the_probe_gating_them(ride_run):
    assert ride_run["scaled_steps"] == 8  # 64 samples in batches of 8: every step probed
    for got in ride_run["scaled_table"]:
        assert got[:2] == pytest.approx([1 / 3, 1e6 + 1 / 7], rel=1e-14) and got[2] is None


def test_the_ride_leaves_training_unchanged(ride_run):
    assert ride_run["same_weights"] is True


def test_a_step_without_an_optimizer_update_carries_nothing(ride_run):
    assert ride_run["bare_rode"] is False


def test_a_row_of_the_wrong_width_is_refused(ride_run):
    assert ride_run["error"] == "`row` must hold 3 numbers. Received: 1 numbers"


# -- the schedule's protocol, with stand-ins for the probe, the gather and the ride ----------------------------


class _Probe:
    def __init__(self, worker_sec):
        self.worker_sec = worker_sec
        self.reads = 0

    def reset(self):
        pass

    def read(self):
        self.reads += 1
        s = self.worker_sec
        return ProbeWindow(
            steps=5, compute_sec=s, communication_sec=0.001, input_sec=0.0, host_sec=0.0, samples=40.0,
            replica_compute_sec=(s,),
        )


class _Ride:
    """Two workers: this one (worker 0) and a peer whose rows are given; a step copies the published rows."""

    worker = 0

    def __init__(self, rode=True):
        self.rode = rode
        self.published = None
        self.table = [[math.nan] * (len(ROW_FIELDS) + 1)] * 2
        self.peer = None

    def publish(self, row):
        self.published = list(row)

    def step(self, carried=True):
        """What a training step's all-reduce does: every worker's published row lands in the table (unless skipped)."""
        if carried and self.published is not None:
            self.table = [self.published, self.peer if self.peer is not None else self.published]

    def read(self):
        return self.table


class _Gather:
    def __init__(self):
        self.calls = []

    def __call__(self, row):
        self.calls.append(list(row))
        return [list(row), list(row)]


def _schedule(ride):
    gather = _Gather()
    return ClusterSchedule(_Probe(0.004), gather, [("0_CPU_0", "CPU:0")], first_step=100, ride=ride), gather


def _epoch(schedule, ride, steps, write=None, once=None, clock=None):
    """One epoch of `steps` batches: a step (the ride's all-reduce) before each batch end (and `clock`'s step time)."""
    views = []
    for batch in range(steps):
        if clock is not None:
            clock.now += clock.step_sec
        if ride is not None:
            ride.step()
        if schedule.batch_end(batch):
            views += schedule.at_batch_end(write, once)
    views += schedule.at_epoch_end(write, once)
    schedule.epoch_end()
    return views


def test_rows_published_at_an_epoch_end_are_read_after_the_next_step_and_the_last_is_gathered():
    ride, once = _Ride(), Once()
    schedule, gather = _schedule(ride)
    assert _epoch(schedule, ride, 10, once=once) == []  # published at the epoch's end, nothing carried yet
    assert schedule.pending == 10 and ride.published[-1] == 1.0
    views = _epoch(schedule, ride, 10, once=once)  # the first step carries epoch 1's rows
    assert [(step, v.reporting) for step, v in views] == [(110, 2)]  # logged at the step its window ended
    assert schedule.pending == 20 and gather.calls == []
    (last,) = schedule.at_fit_end(once)  # no step follows the last publish: one all-gather
    assert last[0] == 120 and len(gather.calls) == 1 and gather.calls[0] == ride.published[:-1]
    assert schedule.pending is None and not schedule.failed


def test_a_stale_row_is_a_worker_not_reporting():
    ride, once = _Ride(), Once()
    schedule, _ = _schedule(ride)
    ride.peer = [1.0] * len(ROW_FIELDS) + [0.0]  # the peer's row is from no publish of this fit
    _epoch(schedule, ride, 10, once=once)
    ((_, view),) = _epoch(schedule, ride, 10, once=once)
    assert view.reporting == 1 and view.workers == 2


def test_a_step_that_carries_nothing_falls_back_to_the_gather_at_every_share(monkeypatch):
    clock = _clock(monkeypatch, step_sec=1.0)  # epochs of 10 s: each epoch's end is due
    ride, once = _Ride(rode=False), Once()
    schedule, gather = _schedule(ride)
    views = _epoch(schedule, ride, 10, once=once, clock=clock) + _epoch(schedule, ride, 10, once=once, clock=clock)
    assert [step for step, _ in views] == [110, 120] and len(gather.calls) == 2
    assert schedule.at_fit_end(once) == [] and len(gather.calls) == 2  # nothing left since the last share


class _Clock:
    """`time.perf_counter` of the schedule, moved on by `step_sec` at each batch end."""

    def __init__(self, step_sec):
        self.now, self.step_sec = 0.0, step_sec

    def perf_counter(self):
        return self.now


def _clock(monkeypatch, step_sec):
    from keras_gpu.hooks import step_time_cluster

    clock = _Clock(step_sec)
    monkeypatch.setattr(step_time_cluster, "time", clock)
    return clock


def _gathered_schedule(monkeypatch, step_sec, epochs, steps=10):
    """A gathered (ride-less) schedule through `epochs` epochs of `steps` batches; the views and the gather."""
    clock = _clock(monkeypatch, step_sec)
    schedule, gather = _schedule(None)
    once, views = Once(), []
    for _ in range(epochs):
        views += _epoch(schedule, None, steps, once=once, clock=clock)
    return schedule, gather, views, once


def test_short_epochs_gather_once_the_epoch_share_seconds_went_by(monkeypatch):
    from keras_gpu.hooks.step_time_cluster import CLUSTER_EVERY_S, EPOCH_SHARE_S

    # Epochs of 10 steps of 0.05 s (0.5 s): the first epoch's end shares (it brings the chief's period,
    # CLUSTER_EVERY_S of steps); later epoch ends only once EPOCH_SHARE_S of steps went by since the last share.
    step_sec = 0.05
    schedule, gather, views, once = _gathered_schedule(monkeypatch, step_sec, epochs=25)
    every = round(EPOCH_SHARE_S / step_sec)  # steps between epoch-end gathers: a hand count of this clock
    assert schedule.period is not None and schedule.period * step_sec == pytest.approx(CLUSTER_EVERY_S, rel=0.1)
    expected = [10 * k for k in range(1, 26) if k == 1 or (10 * k - 10) % every == 0]
    assert [step - 100 for step, _ in views] == expected and len(gather.calls) == len(expected)
    # The fit's end gathers what is left (at least MIN_GATHER_STEPS), so no measured step goes unshared.
    (last,) = schedule.at_fit_end(once)
    assert last[0] - 100 == 250 and len(gather.calls) == len(expected) + 1
    assert schedule.at_fit_end(once) == []  # nothing left: no second gather


def test_long_epochs_gather_at_every_epoch_end_and_within_at_the_period(monkeypatch):
    from keras_gpu.hooks.step_time_cluster import CLUSTER_EVERY_S

    # Epochs of 100 steps of 0.5 s (50 s): every epoch's end shares, and the chief's period (30 s of steps)
    # shares within each epoch too.
    schedule, gather, views, once = _gathered_schedule(monkeypatch, 0.5, epochs=3, steps=100)
    steps = [step - 100 for step, _ in views]
    assert {100, 200, 300} <= set(steps)
    assert any(s % 100 for s in steps)  # a share within an epoch
    assert all(b - a <= CLUSTER_EVERY_S / 0.5 + 1 for a, b in itertools.pairwise(steps))
    assert schedule.at_fit_end(once) == [] and len(gather.calls) == len(steps)


def test_where_the_rows_ride_every_epoch_end_shares_whatever_its_length(monkeypatch):
    clock = _clock(monkeypatch, step_sec=0.001)  # epochs of 10 ms: the ride costs no collective, so each one shares
    ride, once = _Ride(), Once()
    schedule, gather = _schedule(ride)
    views = []
    for _ in range(4):
        views += _epoch(schedule, ride, 10, once=once, clock=clock)
    assert [step for step, _ in views] == [110, 120, 130] and gather.calls == []
    assert [step for step, _ in schedule.at_fit_end(once)] == [140] and len(gather.calls) == 1


def test_a_step_that_carried_nothing_leaves_the_row_pending_for_the_next():
    ride, once = _Ride(), Once()
    schedule, gather = _schedule(ride)
    _epoch(schedule, ride, 10, once=once)
    schedule.batch_end(0)  # a step that skipped the update (a LossScaleOptimizer step with non-finite gradients)
    assert schedule.at_batch_end(None, once) == [] and schedule.pending == 10
    ride.step()
    assert schedule.batch_end(1)
    assert [step for step, _ in schedule.at_batch_end(None, once)] == [110]
    assert gather.calls == []


def test_where_the_rows_ride_every_worker_gathers_once_at_the_fit_end_even_with_nothing_pending():
    ride, once = _Ride(), Once()
    schedule, gather = _schedule(ride)
    _epoch(schedule, ride, 10, once=once)
    _epoch(schedule, ride, 3, once=once)  # too short to share: nothing pending at the end
    assert schedule.pending is None
    assert schedule.at_fit_end(once) == []
    assert len(gather.calls) == 1 and all(math.isnan(v) for v in gather.calls[0])


def test_a_worker_that_cannot_publish_is_left_out_and_still_joins_the_fit_end_gather(caplog):
    ride, once = _Ride(), Once()
    schedule, gather = _schedule(ride)

    def broken(row):
        raise RuntimeError("device lost")

    ride.publish = broken
    assert _epoch(schedule, ride, 10, once=once) == []
    assert not schedule.failed and schedule.pending == 10
    assert "could not share this worker's measurements (RuntimeError: device lost)" in caplog.text
    assert [step for step, _ in schedule.at_fit_end(once)] == [110] and len(gather.calls) == 1


def test_a_failed_gather_turns_the_cluster_view_off(caplog):
    once = Once()
    schedule, _ = _schedule(None)

    def broken(row):
        raise RuntimeError("peer gone")

    schedule.gather = broken
    assert _epoch(schedule, None, 10, once=once) == []
    assert schedule.failed
    assert "could not gather the workers' measurements (RuntimeError: peer gone)" in caplog.text


def test_a_short_last_call_counts_the_steps_it_ran():
    # 10 steps per epoch in calls of 4: Keras numbers the batch ends 3, 7 and 11 (the short last call as if whole).
    ride, once = _Ride(), Once()
    gather = _Gather()
    schedule = ClusterSchedule(_Probe(0.004), gather, [("0_CPU_0", "CPU:0")], first_step=100, ride=ride, epoch_steps=10)
    for _ in range(2):
        for batch in (3, 7, 11):
            ride.step()
            if schedule.batch_end(batch):
                schedule.at_batch_end(None, once)
        schedule.at_epoch_end(None, once)
        schedule.epoch_end()
    assert schedule.base == 20  # the optimizer's count, not 24
    (last,) = schedule.at_fit_end(once)
    assert last[0] == 120
