"""The straggler rule from 2 to 1,024 workers, on generated rows (seeded), and the report of a 1,024-worker job.

`benchmarks/studies/straggler_scale.py` measures the rule's false alarms and
detections over many fits and sizes; these tests pin its behaviour on a few.
"""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

from keras_gpu.meters import cluster_view
from keras_gpu.meters.cluster_view import (
    NOISE_FLOOR,
    OUT_KEPT_SHARE,
    SLOWEST_KEPT,
    score_threshold,
    summarize_rows,
    verdict_over,
)

BUSY = 0.010  # seconds per step: compute 7 ms, input 1 ms, host 2 ms
SHARES = {"compute": 0.7, "input": 0.1, "host": 0.2}
COLUMN = {"input": 2, "compute": 3, "host": 5}


def _fit(workers, gathers=8, noise=0.03, hiccups=0.01, slow=None, seed=0):
    """Each gather's rows: busy 10 ms with `noise` (relative, normal), a hiccup (+50-100% of busy on the host)
    on each worker with chance `hiccups` per gather, and `slow = (worker, extra share, part)` in every gather."""
    rng = np.random.default_rng(seed)
    fit = []
    for _ in range(gathers):
        scale = 1.0 + noise * rng.standard_normal(workers)
        rows = np.zeros((workers, len(cluster_view.ROW_FIELDS)))
        for part, share in SHARES.items():
            rows[:, COLUMN[part]] = BUSY * share * scale
        hit = rng.random(workers) < hiccups
        rows[hit, COLUMN["host"]] += BUSY * rng.uniform(0.5, 1.0, hit.sum())
        if slow is not None:
            worker, extra, part = slow
            rows[worker, COLUMN[part]] += extra * BUSY
        busy = rows[:, 2] + rows[:, 3] + rows[:, 5]
        step = busy.max() + 0.0025  # everyone waits for the slowest, then 2.5 ms of all-reduce
        rows[:, 0], rows[:, 1], rows[:, 4], rows[:, 6], rows[:, 7], rows[:, 8] = 1.0, step, step - busy, busy, 100, 1e3
        fit.append(rows.tolist())  # as the all-gather hands them over
    return fit


def _judge(fit):
    best = {}
    gathers = [summarize_rows(rows, best) for rows in fit]
    return gathers, verdict_over(gathers)


@pytest.mark.parametrize("workers", [8, 64, 1024])
def test_balanced_workers_with_hiccups_name_nobody(workers):
    for seed in range(3):
        gathers, verdict = _judge(_fit(workers, seed=seed))
        assert verdict.straggler is None and verdict.sentence.startswith("no straggler"), (seed, verdict)
        assert verdict.slowed_worker is None and verdict.cluster_slowdown is None  # hiccups are no slowdown
    if workers == 1024:  # about 10 hiccups per gather, each standing out in its own gather only
        assert all(g.outliers for g in gathers)
        assert len({w.worker for g in gathers for w in g.outliers}) > 8 * 5


@pytest.mark.parametrize("workers", [8, 64, 1024])
@pytest.mark.parametrize("part", ["compute", "input", "host"])
def test_a_straggler_of_20_percent_is_named_with_its_part(workers, part):
    worker = workers // 2 + 1
    verdict = _judge(_fit(workers, slow=(worker, 0.2, part), seed=workers))[1]
    assert (verdict.straggler, verdict.part) == (worker, part)
    assert verdict.clear_gathers > 4 and not verdict.more_stragglers  # more than half of the 8 gathers
    assert verdict.part_sec - verdict.part_median_sec == pytest.approx(0.2 * BUSY, rel=0.25)
    assert verdict.sentence.startswith(f"worker {worker} is the straggler: its ")


def test_the_old_range_rule_missed_that_straggler_at_64_workers():
    # The rule before this one: the slowest worker, clear of twice the others' range (max - min), which
    # grows with the number of workers and with every hiccup.
    misses = 0
    for rows in _fit(64, slow=(33, 0.2, "compute"), seed=64):
        busy = np.array(rows)[:, 6]
        others = np.delete(busy, 33)
        misses += busy[33] - np.median(others) <= 2 * np.ptp(others)
    assert misses >= 5


def test_one_hiccup_names_nobody_and_a_persistent_straggler_crowded_by_hiccups_is_kept():
    fit = _fit(16, gathers=3, hiccups=0.0, seed=1)
    fit[1][5][5] += 3 * BUSY  # worker 5 spends 30 ms more on the host in the second window only
    fit[1][5][6] += 3 * BUSY
    gathers, verdict = _judge(fit)
    assert [w.worker for w in gathers[1].outliers] == [5] and not gathers[0].outliers
    assert verdict.straggler is None and verdict.slowed_worker is None
    # At 1,024 workers with a hiccup on 3% of the workers in every gather, more workers stand out than a
    # gather keeps by score alone; every one of them is kept, the straggler among them.
    gathers, verdict = _judge(_fit(1024, hiccups=0.03, slow=(700, 0.2, "compute"), seed=3))
    assert all(len(g.outliers) > SLOWEST_KEPT for g in gathers)
    assert all(len(g.slowest) <= max(SLOWEST_KEPT, 1024 // OUT_KEPT_SHARE) for g in gathers)
    assert (verdict.straggler, verdict.part) == (700, "compute")


def test_a_cluster_that_slows_as_a_whole_and_a_worker_that_turns_slow():
    fit = _fit(64, gathers=4, hiccups=0.0, seed=2)
    for g in (2, 3):
        for row in fit[g]:
            row[3] += BUSY  # every worker computes 10 ms more per step from the third window on
            row[6] += BUSY
    verdict = _judge(fit)[1]
    assert verdict.straggler is None and verdict.cluster_slowdown == pytest.approx(2.0, rel=0.1)
    assert verdict.sentence.endswith("; the workers slowed 2.0x against their own best windows (median)")
    fit = _fit(64, gathers=4, hiccups=0.0, seed=2, slow=(9, 1.0, "input"))
    verdict = _judge(fit)[1]
    assert (verdict.straggler, verdict.part, verdict.cluster_slowdown) == (9, "input", None)


def test_a_perfectly_quiet_cluster_does_not_call_half_a_percent_a_straggler():
    for workers in (2, 64, 1024):
        quiet = _fit(workers, gathers=3, noise=0.0, hiccups=0.0, slow=(1, 0.005, "compute"))
        gathers, verdict = _judge(quiet)
        assert verdict.straggler is None, workers
        # The spread is never below NOISE_FLOOR of the others' median, however alike they are.
        assert gathers[0].spread_sec >= NOISE_FLOOR * BUSY
    gathers, verdict = _judge(_fit(1024, gathers=3, noise=0.0, hiccups=0.0, slow=(1, 0.1, "compute")))
    assert verdict.straggler == 1 and gathers[0].spread_sec == pytest.approx(NOISE_FLOOR * BUSY)


def test_with_two_workers_the_prior_spread_decides():
    # One other worker shows no spread: the excess is held against PRIOR_NOISE of its busy time, 2.58 of
    # them for two workers: a worker 15% slower is not named, one 50% slower is.
    assert verdict_over(_judge(_fit(2, slow=(1, 0.15, "compute"), noise=0.0, hiccups=0.0))[0]).straggler is None
    gathers, verdict = _judge(_fit(2, slow=(1, 0.5, "compute"), noise=0.0, hiccups=0.0))
    assert verdict.straggler == 1
    assert gathers[0].spread_sec == pytest.approx(cluster_view.PRIOR_NOISE * BUSY)
    assert gathers[0].threshold == pytest.approx(2.5758, abs=1e-4)


def test_the_threshold_grows_as_the_largest_of_n_normal_deviates():
    thresholds = [score_threshold(n) for n in (2, 8, 64, 1024, 4096)]
    assert thresholds == sorted(thresholds)
    for n, t in zip((2, 8, 64, 1024, 4096), thresholds):
        # Phi^-1(1 - 0.01 / n): n times the tail is the false alarm chance per gather.
        assert n * 0.5 * math.erfc(t / math.sqrt(2)) == pytest.approx(cluster_view.FALSE_ALARM, rel=1e-6)
        assert t < math.sqrt(2 * math.log(n / cluster_view.FALSE_ALARM))


def test_the_others_median_and_spread_are_exact_for_every_worker():
    rng = np.random.default_rng(5)
    for n in [*range(1, 12), 31, 64]:
        for ties in (False, True):
            values = rng.integers(0, 4, n).astype(float) if ties else rng.standard_normal(n)
            medians = cluster_view._median_of_others(values)
            spreads = cluster_view._spread_of_others(values, medians)
            for k in range(n):
                others = np.delete(values, k) if n > 1 else values
                assert medians[k] == np.median(others), (n, k)
                expected = 1.482602218505602 * np.median(np.abs(others - np.median(others))) if n > 2 else 0.0
                assert spreads[k] == pytest.approx(expected, abs=1e-12), (n, k)


def test_rows_of_another_length_and_workers_not_reporting_are_left_out():
    fit = _fit(10, gathers=1, hiccups=0.0, slow=(4, 0.5, "host"))[0]
    fit[2] = fit[2][:5]  # a row of another length
    fit[7] = [math.nan] * len(fit[7])  # nothing measured
    g = summarize_rows(fit)
    assert (g.workers, g.reporting, g.slowest_worker, g.part) == (10, 8, 4, "host")
    assert sorted(g.rows) == [0, 1, 3, 4, 5, 6, 8, 9]
    # Above ROWS_KEPT workers, the summary keeps the rows of the workers it lists only.
    big = summarize_rows(_fit(1024, gathers=1, hiccups=0.0)[0])
    assert sorted(big.rows) == sorted({w.worker for w in big.slowest} | {big.slowest_worker})


@pytest.mark.slow
def test_report_of_a_1024_worker_log_dir_names_the_straggler_and_shows_a_few_rows(tmp_path, capsys):
    from benchmarks.studies.straggler_scale import write_log_dir
    from keras_gpu.cli.main import main
    from keras_gpu.output import writer as _writer
    from keras_gpu.output.reader import read_texts

    log_dir = str(tmp_path / "logs")
    write_log_dir(log_dir, 1024, straggler=513, seed=1)  # the chief's run, as StepTimeLogger writes it
    for k in range(1, 1024):  # and every worker's own run (per_worker_runs=True)
        w = _writer.SummaryWriter(os.path.join(log_dir, f"worker_{k}", "train"))
        w.scalars({"throughput/samples_per_sec": 6400.0, "throughput/steps_per_sec": 50.0}, 800)
        w.close()
    assert main(["report", log_dir]) == 0
    out = capsys.readouterr().out
    assert "worker 513 is the straggler: its compute is " in out
    assert "1,018 more workers' runs are not shown" in out or "more workers' runs are not shown" in out
    assert len(out.splitlines()) < 60
    assert main(["report", "--json", log_dir]) == 0
    report = json.loads(capsys.readouterr().out)
    cluster = report["cluster"]
    assert len(report["runs"]) == 1024  # the JSON keeps every run
    assert (cluster["straggler"], cluster["part"], cluster["gathers"]) == (513, "compute", 8)
    assert cluster["slowest_workers"][0]["worker"] == 513 and cluster["slowest_workers"][0]["clear_gathers"] == 8
    assert cluster["threshold"] == pytest.approx(score_threshold(1024)) and cluster["straggler_so_far"] == 513
    # The report's verdict, read back from the tables of the slowest workers, is the chief's own.
    (verdict,) = [t for _, t in read_texts(os.path.join(log_dir, "train"))["cluster/verdict"]]
    assert cluster["sentence"] == verdict


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_slowed_worker_of_four_is_named_in_a_real_tensorflow_job(tmp_path):
    from tests._straggler_jobs import check_straggler_job, launch_straggler_job

    records, text = launch_straggler_job(tmp_path, 4)
    assert records[0]["backend"] == "tensorflow"
    check_straggler_job(records, text, 4)


def test_a_report_of_more_runs_than_it_shows_lists_the_chief_and_the_named_workers(tmp_path, monkeypatch):
    from benchmarks.studies.straggler_scale import write_log_dir
    from keras_gpu.cli import report as report_cli
    from keras_gpu.output.reader import read_report

    log_dir = str(tmp_path / "logs")
    write_log_dir(log_dir, 12, straggler=7, gathers=4, worker_runs=True, seed=2)
    report = read_report(log_dir)
    assert len(report.runs) == 12
    assert report_cli.shown_runs(report) == (report.runs, 0)  # up to RUNS_SHOWN, every run
    monkeypatch.setattr(report_cli, "RUNS_SHOWN", 4)
    monkeypatch.setattr(report_cli, "SLOWEST_SHOWN", 2)
    shown, hidden = report_cli.shown_runs(report)
    ranked = [s.worker for s in report.cluster.slowest_workers[:2]]
    assert ranked[0] == 7 and report.cluster.straggler == 7
    assert [r.worker for r in shown] == sorted({0, *ranked}) and hidden == 12 - len(shown)


def test_gathered_rows_come_back_in_worker_order_past_ten_workers():
    from keras_gpu.hooks.gather import in_worker_order

    # TensorFlow's collective orders its members by device name, as strings: task:10 before task:2. With 16
    # workers of two replicas each, worker 15's row came back 8th; each row carries its worker's index.
    tasks = sorted(range(16), key=lambda k: f"/job:worker/replica:0/task:{k}")
    assert tasks.index(15) == 7
    gathered = [[float(k), 1e-3 * k, 0.5] for k in tasks for _ in range(2)]
    rows = in_worker_order(gathered, 16)
    assert [r[0] for r in rows] == [1e-3 * k for k in range(16)]
    assert all(math.isnan(v) for v in in_worker_order(gathered[:4], 16)[5])  # a missing worker: not available
