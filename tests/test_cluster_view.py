"""The cluster view: every worker's breakdown gathered at the chief, and the straggler named.

Arithmetic on hand-made rows first; then real `keras-gpu launch` jobs on
loopback, where one worker is made slow in the model or on the host.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import subprocess
import sys

import pytest

from keras_gpu.meters.cluster_view import (
    PRIOR_NOISE,
    PRIOR_WORKERS,
    ROW_FIELDS,
    STRAGGLER_IMBALANCE,
    GatherFacts,
    Verdict,
    summarize_rows,
    verdict_over,
)
from keras_gpu.output.step_time_tags import cluster_values
from tests._util import subprocess_env

# Each launched job is bounded by its own subprocess timeout (420 s); a test runs up to two of them.
pytestmark = pytest.mark.timeout(900)

WORKER = os.path.join(os.path.dirname(__file__), "_workers", "cluster_worker.py")
NAN = float("nan")
ROW_NAMES = ("communication_sec", "other_sec")


def _row(step, inp, comm, period=1000.0):
    """A probe row: busy time is what is neither input nor communication (compute 0, host the rest)."""
    busy = step - inp - comm
    return [1.0, step, inp, 0.0, comm, busy, busy, 10.0, period]


def test_row_fields_and_summary_arithmetic():
    assert len(ROW_FIELDS) == len(_row(1, 0, 0))
    rows = [_row(0.02, 0.001, 0.014), _row(0.02, 0.0, 0.003), _row(0.02, 0.002, 0.012)]
    s = summarize_rows(rows)
    # Busy: 5, 17 and 6 ms; worker 1 is the one the others wait for: 17 ms against the others' median of
    # 5.5 ms, 11.5 ms of a 20 ms step.
    assert (s.workers, s.reporting, s.slowest_worker) == (3, 3, 1)
    assert s.imbalance == pytest.approx((0.017 - 0.0055) / 0.02)
    assert s.busy == pytest.approx((0.005, 0.006, 0.017))
    assert s.input == pytest.approx((0.0, 0.001, 0.002))
    assert s.communication == pytest.approx((0.003, 0.012, 0.014))
    values = cluster_values(s)
    assert values["cluster/slowest_worker"] == 1.0 and values["cluster/busy_sec/max"] == pytest.approx(0.017)


def test_workers_not_available_are_left_out():
    rows = [_row(0.02, 0.0, 0.01), [NAN] * 8 + [0.0], _row(0.02, 0.0, 0.012)]
    s = summarize_rows(rows)
    assert (s.workers, s.reporting, sorted(s.rows)) == (3, 2, [0, 2])
    assert summarize_rows([[NAN] * 8 + [0.0]] * 2) is None


def test_an_input_not_measured_is_left_out_of_the_input_spread_only():
    rows = [_row(0.02, 0.0, 0.01), _row(0.02, 0.0, 0.012)]
    rows[0][2] = NAN  # several steps per call: no input figure
    s = summarize_rows(rows)
    assert s.reporting == 2 and s.input == pytest.approx((0.0, 0.0, 0.0))
    rows[1][2] = NAN
    s = summarize_rows(rows)
    assert all(math.isnan(v) for v in s.input)
    assert not [k for k in cluster_values(s) if k.startswith("cluster/input_sec/")]
    assert cluster_values(s)["cluster/busy_sec/max"] == pytest.approx(0.01)


def _facts(worker, imbalance, part="compute", excess=0.01, spread=0.0, slowdown=math.nan, slowdown_worker=-1):
    return GatherFacts(worker, imbalance, part, 0.012, 0.002, excess, spread, slowdown, slowdown_worker)


def test_a_straggler_needs_a_clear_imbalance_in_most_gathers():
    assert verdict_over([]) == Verdict()
    v = verdict_over([_facts(1, 0.3), _facts(1, 0.25), _facts(0, 0.02)])
    assert (v.straggler, v.imbalance, v.part) == (1, pytest.approx(0.275), "compute")
    # One noisy gather of a balanced job names nobody; the median of all gathers is reported.
    v = verdict_over([_facts(0, 0.14), _facts(1, 0.02), _facts(0, 0.03)])
    assert (v.straggler, v.imbalance) == (None, pytest.approx(0.03))
    # Clear gathers that name different workers: the excess does not hold across gathers.
    assert verdict_over([_facts(0, 0.2), _facts(1, 0.2)]).straggler is None


def test_a_straggler_must_stand_clear_of_the_other_workers_spread():
    # 5 ms of excess while the others differ among themselves by 4 ms: not clear (needs twice the spread).
    assert verdict_over([_facts(2, 0.3, excess=0.005, spread=0.004)] * 3).straggler is None
    assert verdict_over([_facts(2, 0.3, excess=0.009, spread=0.004)] * 3).straggler == 2


def test_the_part_and_the_slowdown_come_from_the_rows():
    # Worker 2's input wait is 8 ms against the others' 0.4 and 0.6 ms; compute and host are alike.
    rows = [_row(0.02, 0.0004, 0.01), _row(0.02, 0.0006, 0.01), _row(0.02, 0.008, 0.005)]
    for row in rows:
        row[3], row[5] = 0.002, 0.003  # compute, host
        row[6] = row[2] + row[3] + row[5]  # busy: input, compute, host
    best = {}
    s = summarize_rows(rows, best)
    assert (s.slowest_worker, s.part) == (2, "input")
    assert s.part_sec == pytest.approx(0.008) and s.part_median_sec == pytest.approx(0.0005)
    # Its spread: the others' (1.4826 x their median absolute deviation, 0.1 ms) pooled with the prior
    # (PRIOR_NOISE of their median, worth PRIOR_WORKERS workers against their one degree of freedom).
    spread = math.sqrt(((1.482602218505602 * 0.0001) ** 2 + PRIOR_WORKERS * (PRIOR_NOISE * 0.0055) ** 2) / (1 + PRIOR_WORKERS))
    assert s.excess_sec == pytest.approx(0.0075) and s.spread_sec == pytest.approx(spread)
    assert s.threshold == pytest.approx(2.7131, abs=1e-4) and s.clear  # 15 spreads
    assert [(w.worker, w.out) for w in s.slowest] == [(2, True), (1, False), (0, False)]
    assert s.slowdown == 1.0 and best == pytest.approx({0: 0.0054, 1: 0.0056, 2: 0.013})
    # Worker 0 then computes 6 ms more per step: 2.1x its own best, named as slowed.
    rows[0][3] += 0.006
    rows[0][6] += 0.006
    s2 = summarize_rows(rows, best)
    assert (s2.slowdown_worker, s2.slowdown) == (0, pytest.approx(0.0114 / 0.0054))
    values = cluster_values(s2)
    assert values["cluster/slowdown"] == pytest.approx(0.0114 / 0.0054) and values["cluster/slowdown_worker"] == 0.0
    assert s2.slowdown_median == 1.0  # workers 1 and 2 are at their best
    # One gather slowed names nobody (a hiccup); worker 0 slowed in two does.
    assert verdict_over([s, s, s2]).slowed_worker is None
    # Worker 2 is clear in 3 of 5 gathers (in the others, worker 0's 6 ms widen the others' spread).
    v = verdict_over([s, s, s, s2, s2])
    assert not s2.clear and not s2.outliers
    assert v.sentence == (
        "worker 2 is the straggler: its input wait is 8.0 ms per step against a median of 0.5 ms (the others wait "
        "for it 38% of each step); worker 0 slowed 2.1x against its own best window"
    )


def test_straggler_sentence_needs_a_clear_imbalance():
    assert Verdict(1, 0.27).sentence == "worker 1 is the straggler: the other workers wait for it 27% of each step"
    assert Verdict(1, 0.27, "host", 0.0151, 0.0002).sentence == (
        "worker 1 is the straggler: its host time between steps is 15.1 ms per step against a median of 0.2 ms "
        "(the others wait for it 27% of each step)"
    )
    assert Verdict(None, 0.05).sentence == "no straggler (imbalance 5%)"
    assert Verdict().sentence == "no straggler"
    assert Verdict(3, 0.2, more_stragglers=(7,)).sentence.endswith("of each step; worker 7 also stands out")
    assert Verdict(3, 0.2, more_stragglers=(7, 9, 12)).sentence.endswith("; workers 7, 9 and 12 also stand out")
    assert STRAGGLER_IMBALANCE == 0.05


def _launch(tmp_path, mode, workers=2):
    """One `keras-gpu launch` job of `cluster_worker.py` with the default callbacks; it must exit 0 (never re-run)."""
    log_dir, out = tmp_path / "logs", tmp_path / "out"
    out.mkdir()
    cmd = [sys.executable, "-m", "keras_gpu.cli", "launch", "-n", str(workers), WORKER, str(log_dir), mode, str(out)]
    proc = subprocess.run(cmd, env=subprocess_env(), capture_output=True, text=True, timeout=420)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-6000:]
    records = {}
    for k in range(workers):
        with open(out / f"w{k}.json") as f:
            records[k] = json.load(f)
    from keras_gpu.output.reader import summarize

    return records, summarize(str(log_dir)), str(log_dir), text


def _gathered(records):
    """The chief's view at each gather; every worker received the same."""
    views = [r["cluster"] for r in records.values()]
    assert all(v == views[0] for v in views)
    return views[0]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["compute", "host", "custom"])
def test_a_slow_worker_is_named_the_straggler_without_the_profiler(tmp_path, mode):
    records, report, log_dir, text = _launch(tmp_path, mode)
    views = _gathered(records)
    assert len(views) == 3  # one view of each epoch
    for view in views:
        assert view["slowest_worker"] == 1 and view["reporting"] == 2
        assert view["imbalance"] > STRAGGLER_IMBALANCE
    # The chief waits for worker 1: in the gradient all-reduce, or before its step starts (the distributed
    # iterator checks with every worker that each has a batch).
    waits = [records[k]["last"]["communication_sec"] + records[k]["last"]["input_sec"] for k in (0, 1)]
    assert waits[0] > waits[1]
    assert records[0]["last"]["source"] == "probe"
    # No worker ran TensorFlow's profiler: no trace anywhere in the run.
    assert not list(pathlib.Path(log_dir).rglob("*.xplane.pb"))
    assert report["cluster"]["straggler"] == 1
    phrase = {"compute": "compute", "custom": "compute", "host": "host time between steps"}[mode]
    assert report["cluster"]["sentence"].startswith(f"worker 1 is the straggler: its {phrase} is ")
    assert "[worker 0] keras-gpu: cluster view (2 of 2 workers" in text and "worker 1 is the straggler" in text
    out = subprocess.run(
        [sys.executable, "-m", "keras_gpu.cli", "report", log_dir], env=subprocess_env(), capture_output=True,
        text=True, timeout=120,
    ).stdout
    assert "worker 1 is the straggler" in out


@pytest.mark.slow
def test_a_balanced_job_names_nobody(tmp_path):
    records, report, log_dir, text = _launch(tmp_path, "balanced")
    # In-memory data: the distributed iterator's check that every worker has a batch is a wait for the
    # other workers, timed apart from the input (communication), so no worker is called input-bound.
    assert "input-bound" not in text
    for record in records.values():
        assert record["last"]["communication_sec"] > record["last"]["input_sec"]
    views = _gathered(records)
    assert [v["reporting"] for v in views] == [2, 2, 2]
    for record in records.values():
        # The rows rode on the steps' gradient all-reduce: TensorFlow traced as many all-reduces as for the
        # same model without keras-gpu's callbacks, and the only all-gather was the fit's last row (no step
        # followed to carry it).
        assert record["rode"] is True
        assert record["traced_all_reduce_v2"] == record["plain_collectives"] > 0
        assert record["gathers"] == 1
    # One view of each epoch, logged on ThroughputLogger's step axis (the epochs' ends under time/).
    from keras_gpu.output.reader import read_scalars

    chief = read_scalars(os.path.join(log_dir, "train"))
    epoch_ends = [s for s, _ in chief["time/train_sec"]]
    assert [s for s, _ in chief["cluster/slowest_worker"]] == [s for s, _ in chief["step_time/step_sec"]] == epoch_ends
    # Balanced loopback workers measured 0.1-14.5% per gather over 80 gathers (median 3.4%), the chief up to 19%
    # busier than its peer in one window: judged again from the rows, at most one gather has a worker standing
    # out (none did in 18 gathers of 3 such jobs), and the report names nobody.
    tables = [[[v["rows"][str(k)][f] for f in ROW_FIELDS] for k in range(2)] for v in views]
    assert sum(bool(summarize_rows(t).outliers) for t in tables) <= 1
    assert report["cluster"]["straggler"] is None
    assert report["cluster"]["sentence"].startswith("no straggler")


@pytest.mark.slow
def test_four_workers_each_slowed_in_turn_are_named_under_their_own_index(tmp_path):
    records, _, log_dir, _ = _launch(tmp_path, "rotate", workers=4)
    views = _gathered(records)
    assert [v["slowest_worker"] for v in views] == [0, 1, 2, 3]  # epoch e slows worker e
    assert all(v["reporting"] == 4 and v["imbalance"] > STRAGGLER_IMBALANCE for v in views)
    for k in range(4):  # the row the chief got from worker k is worker k's own last window
        own, row = records[k]["last"], views[-1]["rows"][str(k)]
        for field in ("step_sec", "compute_sec", "communication_sec", "other_sec"):
            assert row[field] == pytest.approx(own[field], rel=1e-12), (k, field)
    from keras_gpu.output.reader import read_scalars

    chief = read_scalars(os.path.join(log_dir, "train"))
    assert [v for _, v in chief["cluster/slowest_worker"]] == [0.0, 1.0, 2.0, 3.0]
    assert [v for _, v in chief["cluster/workers_reporting"]] == [4.0] * 4


#: Jobs in a row for the no-crash test: TensorFlow's profiler killed a non-chief worker in about 5% of trace
#: stops, so 20 jobs with the old default (two traces each) would fail about once in a run.
_SOAK_JOBS = 20
#: Seconds one soak job may take: a two-worker job takes well under a minute on 2 idle cores and several at
#: load 9; each job is a test of its own, so the per-test timeout bounds one job, never the twenty.
_SOAK_JOB_S = 540


@pytest.mark.slow
@pytest.mark.timeout(_SOAK_JOB_S + 60)
@pytest.mark.parametrize("job", range(_SOAK_JOBS))
def test_twenty_jobs_in_a_row_with_the_default_callbacks_all_end_well(tmp_path, job):
    log_dir, out = tmp_path / "logs", tmp_path / "out"
    out.mkdir()
    cmd = [sys.executable, "-m", "keras_gpu.cli", "launch", "-n", "2", WORKER, str(log_dir), "soak", str(out)]
    proc = subprocess.run(cmd, env=subprocess_env(), capture_output=True, text=True, timeout=_SOAK_JOB_S)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "[worker 0] keras-gpu: cluster view (2 of 2 workers" in proc.stdout + proc.stderr
    with open(out / "w0.json") as f:
        imbalances = [v["imbalance"] for v in json.load(f)["cluster"]]
    print(f"job {job}: imbalances of balanced workers: {sorted(round(i, 3) for i in imbalances)}")


@pytest.mark.slow
@pytest.mark.parametrize("workers", [2, 3, 4])
def test_final_weights_are_bit_identical_with_and_without_the_callbacks(tmp_path, workers):
    records, _, _, _ = _launch(tmp_path, "identical", workers=workers)
    for k, record in records.items():
        for spe in (1, 4):
            got = record[f"spe{spe}"]
            assert got["plain"] == got["kg"], (k, spe, got["max_diff"])
            # Two replicas in all: the rows ride on the gradient all-reduce (one addition per element, exact);
            # more: they are all-gathered between steps.
            assert record[f"rode_spe{spe}"] is (workers == 2)
    # Every worker ends with the same weights.
    assert len({r["spe1"]["kg"] for r in records.values()}) == 1


@pytest.mark.slow
@pytest.mark.parametrize("spe", [1, 4])
@pytest.mark.parametrize("kind", ["compute", "input", "host"])
def test_each_kind_of_straggler_on_each_worker_is_named_with_its_part(tmp_path, kind, spe):
    # Three workers; in epoch e worker e is slowed in one part (work that depends on the batch, or a sleep).
    records, _, _, _ = _launch(tmp_path, f"rotate-{kind}-{spe}", workers=3)
    views = _gathered(records)
    assert len(views) == 3  # one view of each epoch
    # On a loaded machine a gather can miss a worker's row, or the load can starve another worker in that
    # window: such a view is not clear, and names nobody. A clear view of all three workers is never wrong,
    # and most views are clear, as the fit's verdict needs (`verdict_over`).
    right = []
    for epoch, v in enumerate(views):
        if v["clear"] and v["reporting"] == 3:
            assert (v["slowest_worker"], v["part"]) == (epoch, kind), views
            assert v["part_sec"] > v["part_median_sec"], views
            right.append(epoch)
    assert len(right) * 2 > len(views), views


@pytest.mark.slow
def test_an_input_straggler_is_named_with_its_input_wait_in_the_report_and_the_end_of_fit_line(tmp_path):
    records, report, log_dir, text = _launch(tmp_path, "input", workers=3)
    views = _gathered(records)
    assert [(v["slowest_worker"], v["part"]) for v in views] == [(1, "input")] * 3
    sentence = report["cluster"]["sentence"]
    assert sentence.startswith("worker 1 is the straggler: its input wait is ") and report["cluster"]["part"] == "input"
    assert "[worker 0] keras-gpu: cluster view (3 of 3 workers" in text and sentence in text
    from keras_gpu.output.reader import read_texts

    (verdict,) = [t for _, t in read_texts(os.path.join(log_dir, "train"))["cluster/verdict"]]
    assert verdict == sentence


@pytest.mark.slow
def test_a_cluster_that_turns_slow_raises_the_slowdown(tmp_path):
    # Every worker sleeps 20 ms per step from epoch 1 on: no worker is slower than the others, each is slower
    # than its own first window.
    records, report, _, text = _launch(tmp_path, "slowdown", workers=2)
    views = _gathered(records)
    assert views[0]["slowdown"] == 1.0
    assert all(v["slowdown"] > 1.5 for v in views[1:])
    assert all(v["slowdown_median"] > 1.5 for v in views[1:])  # both workers slowed alike
    assert report["cluster"]["cluster_slowdown"] > 1.5
    assert "the workers slowed" in report["cluster"]["sentence"] and "against their own best windows" in text


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["custom", "lso"])
def test_with_four_steps_per_call_a_host_straggler_is_named_in_a_custom_step_and_a_loss_scale_optimizer(
    tmp_path, variant
):
    # Worker 1 sleeps 80 ms after each call of 4 steps: 20 ms of host time per step. Worker 0 waits for it in
    # the iterator's check and the all-reduce: communication, never its own busy time.
    records, report, _, _ = _launch(tmp_path, f"host4-{variant}", workers=2)
    views = _gathered(records)
    assert len(views) == 3  # one view of each epoch
    # The fit's verdict (a straggler clear in most gathers) names worker 1's host time. A single gather can
    # see worker 0 starved by a loaded machine; a clear view never names anyone else.
    verdict = report["cluster"]
    assert (verdict["straggler"], verdict["part"]) == (1, "host"), (verdict, views)
    # The sleep, 20 ms per step, is host time between calls: 11 gaps between an epoch's 12 calls of 4 steps
    # (the epoch's first call follows no gap of it), over its 48 steps.
    least = 0.02 * 4 * 11 / 48
    assert verdict["part_sec"] >= least
    for v in views:
        if v["clear"]:
            assert (v["slowest_worker"], v["part"]) == (1, "host"), views
            assert v["part_sec"] >= least, views
    # Over the fit's windows, worker 0 waits for worker 1 and worker 1 spends the host time.
    fast, slow = ({f: sum(v["rows"][k][f] for v in views) for f in ROW_NAMES} for k in ("0", "1"))
    assert fast["communication_sec"] > slow["communication_sec"]
    assert fast["other_sec"] < slow["other_sec"]
