"""The cluster view on Keras with JAX: each process's host clock, gathered, and the straggler named.

One launched job of two loopback processes (`tests/_workers/jax_cluster_worker.py`)
runs three fits of two epochs: a balanced one, one where a callback sleeps
on process 1 only (a host straggler), and one where a `PyDataset` sleeps on
process 1 only (an input straggler). Counts and parts, never timed
thresholds: the sleeps stand for an independent stopwatch only as lower
bounds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from keras_gpu.hooks.step_time_cluster import MIN_GATHER_STEPS
from keras_gpu.output import tags
from keras_gpu.output.reader import read_scalars, read_texts
from tests._util import REPO, run_python, subprocess_env
from tests.backends._common import JAX_ONLY

pytestmark = JAX_ONLY

WORKER = str(REPO / "tests" / "_workers" / "jax_cluster_worker.py")
STEPS, EPOCHS, SLEEP = 16, 2, 0.05  # the worker's


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    root = tmp_path_factory.mktemp("jax_cluster")
    env = subprocess_env({"KERAS_BACKEND": "jax"})
    command = [sys.executable, "-m", "keras_gpu.cli", "launch", "-n", "2", "--cpu-replicas", "1", WORKER, str(root)]
    launched = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert launched.returncode == 0, launched.stderr[-6000:]
    results = [json.loads((root / f"result_{rank}.json").read_text()) for rank in (0, 1)]
    return root, launched, results


def test_every_process_gathers_the_same_rows_after_the_first_epoch_and_at_the_fit_end(job):
    _, _, results = job
    assert results[0] == results[1]  # one all-gather: every process holds every row
    for fit in ("balanced", "host", "input"):
        gathers = results[0][fit]["gathers"]
        assert len(gathers) == EPOCHS, fit
        # Sub-second epochs: the first epoch's end gathers (it brings the chief's period); the second,
        # less than EPOCH_SHARE_S of steps later, does not, and the fit's end gathers its window.
        assert results[0][fit]["calls"] == ["at_epoch_end", "at_fit_end"], fit
        for gather in gathers:
            assert gather["reporting"] == 2
            # Every call of the epoch but its first (after the time between epochs): a hand count.
            assert gather["steps"] == [STEPS - 1, STEPS - 1]


def test_gathers_within_an_epoch_cover_every_step_once_and_name_the_straggler(job):
    _, _, results = job
    result = results[0]["host_within"]  # the same on both processes: the same batch ends gathered
    gathers = result["gathers"]
    assert len(gathers) > EPOCHS  # shares at batch ends between the epoch ends
    steps = [g["steps"][0] for g in gathers]
    assert all(g["steps"][0] == g["steps"][1] for g in gathers)
    # Every measured step in at most one window; the fit's last steps go unshared where fewer than
    # MIN_GATHER_STEPS followed the last share (the fit's end then shares nothing).
    assert EPOCHS * (STEPS - 1) - MIN_GATHER_STEPS < sum(steps) <= EPOCHS * (STEPS - 1)
    assert "at_batch_end" in result["calls"]
    assert (result["straggler"], result["part"]) == (1, "host")
    assert sum(g["slowest"] == 1 and g["part"] == "host" and g["clear"] for g in gathers) * 2 > len(gathers)


def test_a_balanced_job_names_nobody(job):
    _, launched, results = job
    assert results[0]["balanced"]["straggler"] is None
    assert "no straggler" in results[0]["balanced"]["sentence"]
    assert "2 gathers): no straggler" in launched.stderr + launched.stdout  # the chief's end-of-fit line


@pytest.mark.parametrize("fit, field", [("host", "host"), ("input", "input")])
def test_a_straggler_on_process_1_is_named_with_its_part(job, fit, field):
    root, launched, results = job
    result = results[0][fit]
    assert (result["straggler"], result["part"]) == (1, fit)
    assert all(g["clear"] and g["slowest"] == 1 and g["part"] == fit for g in result["gathers"])
    for gather in result["gathers"]:
        if fit == "host":  # the sleeping callback overrides a batch end: Keras' synchronous dispatch
            assert gather[field][1] >= SLEEP  # the sleep, a lower bound by construction
        else:
            # Asynchronous dispatch: the wait for the next batch starts while the step just dispatched still runs,
            # so the sleep bounds the input wait and the device work it overlapped, together.
            device = gather["step"][1] - gather["input"][1] - gather["host"][1]
            assert gather["input"][1] + device >= SLEEP
        assert gather["busy"][1] >= gather[field][1]
    assert f"worker 1 is the straggler: its {'host time between steps' if fit == 'host' else 'input wait'}" in (
        launched.stderr + launched.stdout
    )
    chief = read_scalars(os.path.join(root, fit, "train"))
    assert [v for _, v in chief[tags.CLUSTER_SLOWEST_WORKER.name()]] == [1.0] * EPOCHS
    assert [v for _, v in chief[tags.CLUSTER_PART.name()]] == [("compute", "input", "host").index(fit)] * EPOCHS
    assert "worker 1 is the straggler" in read_texts(os.path.join(root, fit, "train"))[tags.CLUSTER_VERDICT.name()][0][1]
    # The device part is not told into compute and communication on JAX: no spread of either is logged.
    assert tags.CLUSTER_COMMUNICATION_MAX.name() not in chief
    assert not (root / fit / "worker_1" / "train").exists() or tags.CLUSTER_SLOWEST_WORKER.name() not in read_scalars(
        os.path.join(root, fit, "worker_1", "train")
    )


def test_the_clock_splits_a_call_into_host_input_and_device_and_restores_the_train_function():
    """One process, a real fit: the clock's parts against sleeps placed in each (lower bounds), and Keras' own
    conversion of the logs to floats at the batch end (what makes the clock's wait for the logs free)."""
    out = run_python(
        """
        import json, time
        import keras, numpy as np
        from keras_gpu.hooks.step_time_cluster_jax import JaxRowGather, install_clock, remove_clock

        x, y = np.zeros((64, 4), "float32"), np.zeros((64, 1), "float32")
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")

        class Data(keras.utils.PyDataset):
            def __len__(self):
                return 8
            def __getitem__(self, i):
                time.sleep(0.02)
                return x[:8], y[:8]

        class Probe(keras.callbacks.Callback):
            def on_train_begin(self, logs=None):
                self.original = self.model.train_function
                self.clock = install_clock(self.model)
            def on_epoch_begin(self, epoch, logs=None):
                self.clock.epoch_begin()  # as StepTimeLogger does
            def on_train_batch_end(self, batch, logs=None):
                self.types = sorted({type(v).__name__ for v in logs.values()})
                time.sleep(0.01)
            def on_train_end(self, logs=None):
                self.window = self.clock.read()
                remove_clock(self.model)
                self.restored = self.model.train_function is self.original

        probe = Probe()
        model.fit(Data(), epochs=2, verbose=0, callbacks=[probe])
        w = probe.window
        print(json.dumps({"steps": w.steps, "host": w.host_sec, "input": w.input_sec, "device": w.device_sec,
                          "step": w.step_sec, "busy": w.busy_sec, "types": probe.types, "restored": probe.restored,
                          "rows": JaxRowGather(3)([0.1, float("nan"), 1e-300])}))
        """,
        env={"KERAS_BACKEND": "jax"},
        timeout=300,
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["types"] == ["float"]  # Keras waited for the logs at the batch end itself
    assert got["restored"]
    assert got["steps"] == 2 * (8 - 1)  # both epochs, less each epoch's first call
    assert got["host"] >= 0.01 and got["input"] >= 0.02 and got["device"] > 0
    assert got["step"] == pytest.approx(got["host"] + got["input"] + got["device"])
    assert got["busy"] == pytest.approx(got["host"] + got["input"])
    assert got["rows"][0][0] == 0.1 and got["rows"][0][2] == 1e-300 and got["rows"][0][1] != got["rows"][0][1]
    assert len(got["rows"]) == 1  # one process: its own row, bit-exact as float64


def test_the_clock_waits_for_nothing_under_asynchronous_dispatch():
    """One process, a real `verbose=0` fit whose callbacks are all `async_safe`: the clock stops waiting for each
    call's outputs once a batch end ran on Keras' pool, and its parts hold the sleeps placed in each."""
    out = run_python(
        """
        import json, threading, time
        import jax, keras, numpy as np
        from keras_gpu.hooks import step_time_cluster_jax as sc

        waits = []
        real = jax.block_until_ready
        def counted(x):
            waits.append(1)
            return real(x)
        jax.block_until_ready = counted

        x, y = np.zeros((64, 4), "float32"), np.zeros((64, 1), "float32")
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")

        class Data(keras.utils.PyDataset):
            def __len__(self):
                return 8
            def __getitem__(self, i):
                time.sleep(0.02)
                return x[:8], y[:8]

        class Probe(keras.callbacks.Callback):
            async_safe = True  # as StepTimeLogger: Keras keeps running batch ends on its pool
            def on_train_begin(self, logs=None):
                self.clock, self.main, self.off = sc.install_clock(self.model), threading.get_ident(), set()
                self.calls = 0
            def on_epoch_begin(self, epoch, logs=None):
                self.clock.epoch_begin()
            def on_train_batch_begin(self, batch, logs=None):
                self.calls += 1
                self.clock.batch_begin(batch)
                time.sleep(0.01)  # host time on the training thread, between calls
            def on_train_batch_end(self, batch, logs=None):
                off = threading.get_ident() != self.main
                self.off.add(off)
                self.clock.ended(batch, time.perf_counter(), off)
            def on_train_end(self, logs=None):
                self.window = self.clock.read()
                sc.remove_clock(self.model)

        probe = Probe()
        model.fit(Data(), epochs=2, verbose=0, callbacks=[probe])
        w = probe.window
        print(json.dumps({"steps": w.steps, "host": w.host_sec, "input": w.input_sec, "device": w.device_sec,
                          "step": w.step_sec, "off": sorted(probe.off), "waits": len(waits), "calls": probe.calls,
                          "blocking": probe.clock.blocking}))
        """,
        env={"KERAS_BACKEND": "jax"},
        timeout=300,
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["off"] == [True]  # every batch end ran on Keras' pool
    assert not got["blocking"] and got["waits"] < got["calls"]  # it waited only before the first batch end ran
    assert got["steps"] == 2 * (8 - 1)  # both epochs, less each epoch's first call
    assert got["host"] >= 0.01 and got["input"] >= 0.02 and got["device"] >= 0
    assert got["step"] == pytest.approx(got["host"] + got["input"] + got["device"])


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_slowed_process_of_four_is_named_in_a_real_jax_job(tmp_path):
    from tests._straggler_jobs import check_straggler_job, launch_straggler_job

    records, text = launch_straggler_job(tmp_path, 4, {"KERAS_BACKEND": "jax"})
    assert records[0]["backend"] == "jax"
    check_straggler_job(records, text, 4)
