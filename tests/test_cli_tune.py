"""`keras-gpu tune`: rows against the script's stopwatch, losses compared, skipped and failing candidates, bad input.

The end-to-end tests run `benchmarks/tune_cases.py` (small seeded models
with a stopwatch) unchanged through the real command; they are bounded by
step counts, never by wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from keras_gpu.meters.run_spread import MIN_MARGIN, beyond_spread, measured_spread, spread
from keras_gpu.meters.scale_table import RunResult
from keras_gpu.meters.tune_candidates import by_name, change_for, combine, for_script, line_for, skip_reason
from keras_gpu.meters.tune_table import ROW_KEYS, TuneRun, baseline_spread, build_rows, compare_losses, verdict
from keras_gpu.output.tune_output import format_cell

REPO = Path(__file__).resolve().parent.parent
CASES = str(REPO / "benchmarks" / "tune_cases.py")
WARMUP, STEPS = 10, 40


def E2E(test):
    """The real command: a TensorFlow process per run."""
    return pytest.mark.slow(pytest.mark.timeout(900)(test))


def _tune(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2", KERAS_BACKEND="tensorflow")
    return subprocess.run([sys.executable, "-m", "keras_gpu.cli", "tune", *args],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=timeout)


# ------------------------------------------------------------------------------- arithmetic and rules


def _run(name: str, samples_per_step: float, step_sec: float, losses=None, change=None, parts=None,
         keeps=True, not_applied=None) -> TuneRun:
    result = RunResult(1, 1, 50, step_sec * 50, samples_per_step * 50, parts, halves=(step_sec, step_sec))
    record = {"losses": losses or [[1, 2.0], [2, 1.5]], "change": change or {}, "peak_memory_bytes": 2**20,
              "not_applied": not_applied or {}}
    caveat = "" if keeps else "the learning rate may need scaling with the batch"
    return TuneRun(name, "" if name.startswith("baseline") else f"line {name}", keeps, result, record,
                   caveat=caveat)


def test_the_one_rule_counts_only_what_lies_beyond_the_spread_and_its_floor():
    assert spread([100.0, 110.0]) == pytest.approx(0.1)  # the slowest over the fastest, less one
    assert beyond_spread(121.0, 105.0, 0.1) == 1  # 1.15 times
    assert beyond_spread(115.0, 105.0, 0.1) == 0  # 1.095 times
    assert beyond_spread(94.0, 105.0, 0.1) == -1  # 1/1.117 times: a ratio, as far as 1.117 times faster
    assert beyond_spread(105.5, 100.0, 0.0) == 1 and beyond_spread(104.0, 100.0, 0.0) == 0  # the 5% floor
    assert beyond_spread(104.0, 100.0, None) == 0 and MIN_MARGIN == 0.05  # not measured: the floor
    assert beyond_spread(1.6, 1.0, 0.05, size=10.0) == 1 and beyond_spread(1.4, 1.0, 0.05, size=10.0) == 0
    with pytest.raises(ValueError, match="at least two positive values"):
        spread([100.0])
    with pytest.raises(ValueError, match=r"spread=-0\.1"):
        beyond_spread(1.0, 1.0, -0.1)
    # The spread is the baseline runs' window halves: 9, 11, 10, 10 ms -> 11 / 9 - 1.
    runs = [RunResult(1, 1, 10, 0.1, 640, None, halves=(0.009, 0.011)),
            RunResult(1, 1, 10, 0.1, 640, None, halves=(0.010, 0.010))]
    assert measured_spread(runs) == pytest.approx(2 / 9)
    assert baseline_spread([TuneRun("baseline", result=r) for r in runs]) == pytest.approx(2 / 9)


def test_rows_compare_rates_losses_and_parts_with_the_baseline():
    base_parts = {"input": 0.001, "compute": 0.002, "communication": 0.0, "other": 0.007}
    fast_parts = {"input": 0.001, "compute": 0.002, "communication": 0.0, "other": 0.001}
    baselines = [_run("baseline", 64, 0.010, parts=base_parts), _run("baseline (again)", 64, 0.011, parts=base_parts)]
    runs = [
        _run("spe16", 64, 0.004, losses=[[2, 1.5]], parts=fast_parts),
        _run("bf16", 64, 0.010, losses=[[1, 2.01], [2, 1.5]], keeps=False),
        _run("batch2", 128, 0.012, losses=[[1, 1.4]], change={"batch_factor": 2}, keeps=False),
        TuneRun("batch4", "x", error="the script's fit raised RuntimeError: out of memory"),
        _run("workers", 64, 0.002, not_applied={"workers": "fit is given arrays, not a PyDataset"}),
    ]
    rows = build_rows(baselines, runs)
    assert all(tuple(r) == ROW_KEYS for r in rows)
    mean = (6400 + 64 / 0.011) / 2
    assert rows[2]["samples_per_sec"] == pytest.approx(16000) and rows[2]["speedup"] == pytest.approx(16000 / mean)
    assert rows[2]["helps"] == 1 and rows[3]["helps"] == 0
    assert rows[2]["losses"] == "same (1 step)" and rows[2]["moved"] == "other 7 -> 1 ms"
    assert rows[3]["losses"] == "differ by up to 0.005 (2 steps)"
    assert rows[4]["losses"] == "loss 1.4 at step 1 (baseline 1.5 at step 2)"
    assert rows[5]["status"] == "failed" and rows[5]["samples_per_sec"] is None
    # A change that did not apply has no rate, though its run ran: that would be the script as written.
    assert rows[6]["status"] == "not applied" and rows[6]["samples_per_sec"] is None and rows[6]["helps"] is None
    assert rows[6]["not_applied"] == "workers: fit is given arrays, not a PyDataset"
    cells = [[format_cell(k, r[k], r) for k in ("samples_per_sec", "speedup", "moved", "losses")] for r in rows[2:]]
    assert cells == [["16,000", "2.62x +", "other 7→1", "same"], ["6,400", "1.05x", "not measured", "Δ 0.005"],
                     ["10,667", "1.75x +", "not measured", "end -6.7%"], ["failed", "-", "-", "-"],
                     ["not applied", "-", "-", "-"]]
    text = verdict(rows, baseline_spread(baselines))
    assert text.startswith("Keeps the results: spe16: `line spe16`: 2.62x samples/s, losses same (1 step)")
    assert "Changes the training: batch2: `line batch2`: 1.75x samples/s, loss 1.4 at step 1" in text
    assert "; the learning rate may need scaling with the batch." in text


def test_a_change_helps_only_where_both_halves_of_its_window_lie_beyond_the_spread():
    baselines = [_run("baseline", 64, 0.010), _run("baseline (again)", 64, 0.0101)]
    burst = TuneRun("spe4", "line spe4", result=RunResult(1, 1, 50, 0.0069 * 50, 64 * 50, None, halves=(0.004, 0.0098)),
                    record={"losses": [[1, 2.0]]})
    row = build_rows(baselines, [burst])[2]
    assert row["speedup"] > 1.4 and row["halves_samples_per_sec"] == pytest.approx([16000, 64 / 0.0098])
    assert row["helps"] == 0  # its second half ran as fast as the baseline: not a change


def test_the_verdict_names_the_change_that_keeps_the_results_first():
    # A bigger batch is faster, and changes the training; steps_per_execution keeps it: it is named first.
    baselines = [_run("baseline", 64, 0.010), _run("baseline (again)", 64, 0.0101)]
    rows = build_rows(baselines, [_run("spe64", 64, 0.0043), _run("batch4", 256, 0.0071, keeps=False)])
    text = verdict(rows, baseline_spread(baselines))
    assert text.startswith("Keeps the results: spe64: `line spe64`: 2.34x")
    assert "Changes the training: batch4: `line batch4`: 5.66x" in text
    only_batch = build_rows(baselines, [_run("spe4", 64, 0.0099), _run("batch4", 256, 0.0071, keeps=False)])
    assert verdict(only_batch, baseline_spread(baselines)).startswith(
        "Keeps the results: nothing helps beyond the run-to-run spread. Changes the training: batch4")


def test_a_combination_wins_only_beyond_the_spread_of_the_best_single_change():
    baselines = [_run("baseline", 64, 0.010), _run("baseline (again)", 64, 0.0101)]
    spread_ = baseline_spread(baselines)
    close = build_rows(baselines, [_run("map", 64, 0.005), _run("spe64 + map", 64, 0.0049)])
    assert verdict(close, spread_).startswith("Keeps the results: map: `line map`: 2.01x")
    far = build_rows(baselines, [_run("map", 64, 0.005), _run("spe64 + map", 64, 0.004)])
    assert verdict(far, spread_).startswith("Keeps the results: spe64 + map: `line spe64 + map`: 2.51x")


def test_nothing_beyond_the_spread_is_said_in_words():
    baselines = [_run("baseline", 64, 0.010), _run("baseline (again)", 64, 0.0105)]
    rows = build_rows(baselines, [_run("spe16", 64, 0.0099)])
    assert verdict(rows, baseline_spread(baselines)).startswith(
        "Nothing helps beyond the run-to-run spread (the baseline's two runs vary by 5.0%; a change counts beyond "
        "5.0%); the fastest, spe16"
    )


def test_losses_of_two_runs_are_compared_at_the_steps_both_logged():
    assert compare_losses({"losses": [[1, 2.0], [2, 1.0], [3, 0.5]]}, {"losses": [[3, 0.5]]}) == ("same (1 step)", 0.0)
    assert compare_losses({"losses": []}, {"losses": [[1, 1.0]]})[0] == "not compared: a run logged no loss"
    assert compare_losses({"losses": [[1, 2.0]]}, {"losses": [[4, 1.0]]})[0] == "not compared: no step logged by both runs"


def test_each_candidate_says_why_it_does_not_apply():
    arrays = {"backend": "tensorflow", "steps_per_execution": 1, "jit_compile": False, "policy": "float32",
              "facts": {"fit_input": "arrays", "batch_size": 64}, "bf16_gpu": None}
    assert skip_reason(by_name("spe16"), arrays) is None
    assert skip_reason(by_name("spe16"), dict(arrays, steps_per_execution=32)) == "the script has steps_per_execution=32 already"
    assert skip_reason(by_name("jit"), dict(arrays, jit_compile=True)) == "the script runs with jit_compile on already"
    assert "PyTorch" in skip_reason(by_name("spe4"), dict(arrays, backend="torch"))
    assert skip_reason(by_name("prefetch"), arrays) == "fit is given arrays, not a tf.data.Dataset"
    assert skip_reason(by_name("map"), arrays) == "fit is given arrays, not a tf.data.Dataset"
    assert skip_reason(by_name("workers"), arrays) == "fit is given arrays, not a PyDataset"
    assert skip_reason(by_name("fp16"), arrays).startswith("mixed_bfloat16 is tried instead")
    assert skip_reason(by_name("bf16"), dict(arrays, bf16_gpu=False)).startswith("the GPU computes no bfloat16")
    assert skip_reason(by_name("fp16"), dict(arrays, bf16_gpu=False)) is None
    assert skip_reason(by_name("bf16"), dict(arrays, policy="mixed_float16")).endswith("policy already")
    sites = [["/x/train.py", 12, 1], ["/x/train.py", 12, 2], ["/x/train.py", 13, 1]]
    data = dict(arrays, facts={"fit_input": "tf.data", "sequential_maps": 3, "map_sites": sites, "prefetches": 1,
                               "tf_data_autotune": True, "tf_data_map_parallelization": False})
    assert skip_reason(by_name("map"), data) is None and skip_reason(by_name("autotune"), data) is None
    assert skip_reason(by_name("map"), dict(data, facts=dict(data["facts"], sequential_maps=0))) == (
        "the dataset given to fit has no map without num_parallel_calls")
    assert skip_reason(by_name("prefetch"), data) == "the dataset given to fit prefetches already"
    assert skip_reason(by_name("batch2"), data) == "fit is given tf.data, not arrays with batch_size"
    # The map calls that built fit's dataset in the baseline, and no other, are what the run makes parallel.
    assert change_for(by_name("map"), data) == {"parallel_map": sites}
    assert line_for(by_name("map"), data).endswith("deterministic=True)  # train.py:12, train.py:13")
    assert line_for(by_name("batch4"), arrays) == "model.fit(..., batch_size=256)"
    both = combine([by_name("spe16"), by_name("batch2")])
    assert both.change == {"steps_per_execution": 16, "batch_factor": 2} and not both.keeps_results
    assert both.caveat == "the learning rate may need scaling with the batch"
    assert line_for(both, arrays) == "model.compile(..., steps_per_execution=16); model.fit(..., batch_size=128)"
    three = combine([by_name("bf16"), by_name("map"), by_name("spe4")])
    assert three.line == ('keras.mixed_precision.set_global_policy("mixed_bfloat16"); '
                          "dataset.map(f, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True); "
                          "model.compile(..., steps_per_execution=4)")
    assert [c.name for c in (by_name("spe4"), by_name("prefetch"), by_name("map"), by_name("autotune"),
                             by_name("workers")) if c.keeps_results] == ["spe4", "prefetch", "map", "autotune", "workers"]
    assert not any(by_name(n).keeps_results for n in ("jit", "bf16", "fp16", "batch2", "batch4"))


def test_pydataset_workers_keep_the_results_only_where_fit_keeps_the_batches_order():
    kept = for_script(by_name("workers"), {"facts": {"fit_input": "PyDataset", "shuffle": False}})
    assert kept.keeps_results and kept.caveat == ""
    shuffled = for_script(by_name("workers"), {"facts": {"fit_input": "PyDataset", "shuffle": True}})
    assert not shuffled.keeps_results and shuffled.caveat.startswith("fit shuffles the PyDataset's batches")
    both = for_script(combine([by_name("spe4"), by_name("workers")]), {"facts": {"shuffle": True}})
    assert not both.keeps_results and "another order" in both.caveat


def test_try_names_are_checked():
    from keras_gpu.cli.tune import parse_try

    assert parse_try("spe16,batch2") == ["spe16", "batch2"]
    with pytest.raises(argparse.ArgumentTypeError, match=r"no candidate 'spe8': use one of .* Received: --try spe8"):
        parse_try("spe16,spe8")
    with pytest.raises(argparse.ArgumentTypeError, match="Received: --try map,map"):
        parse_try("map,map")


def test_the_log_dir_holds_the_rows_for_the_report(tmp_path):
    from keras_gpu.output.tune_output import read_study, write_log_dir

    baselines = [_run("baseline", 64, 0.010), _run("baseline (again)", 64, 0.0105)]
    rows = build_rows(baselines, [_run("spe16", 64, 0.004)])
    write_log_dir(tmp_path, rows, "Winner: spe16", ["map: no map"])
    study = read_study(tmp_path)
    assert [r["change"] for r in study["rows"]] == ["baseline", "baseline (again)", "spe16"]
    assert study["verdict"] == "Winner: spe16" and study["skipped"] == ["map: no map"]
    events = list((tmp_path / "tune").glob("events.out.tfevents.*"))
    assert events, "no TensorBoard event file"


# ------------------------------------------------------------------------------- end to end


def _stopwatch_rate(line: dict, batch: int) -> float:
    """The script's own rate over the window the command measures (`benchmarks.tune_stopwatch`)."""
    from benchmarks.tune_stopwatch import stopwatch_rate

    return stopwatch_rate(line, batch, WARMUP, STEPS)


@E2E
def test_tune_measures_each_candidate_against_the_scripts_stopwatch(tmp_path):
    watch = tmp_path / "stopwatch.jsonl"
    proc = _tune("--try", "spe16,batch2,batch4,map", "--warmup", str(WARMUP), "--steps", str(STEPS), "--json",
                 "--log-dir", str(tmp_path / "logs"), CASES, "--case", "mlp", "--steps", "80",
                 "--max-batch", "128", "--stopwatch", str(watch))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    rows = {r["change"]: r for r in out["rows"]}
    singles = ["baseline", "baseline (again)", "spe16", "batch2", "batch4"]
    assert list(rows)[:5] == singles
    # The changes that helped beyond the spread (on a loaded machine, one or both) are tried together last.
    helped = [n for n in ("spe16", "batch2") if rows[n]["helps"] == 1]
    assert list(rows)[5:] == ([" + ".join(helped)] if len(helped) > 1 else [])
    assert out["skipped"] == ["map: fit is given arrays, not a tf.data.Dataset"]
    # One stopwatch line per run that finished its window, in the order of the runs (batch4 raised before
    # training); the baseline runs first and again after the candidates.
    assert [rows[n]["run"] for n in singles] == [1, 5, 2, 3, 4]
    lines = [json.loads(t) for t in watch.read_text().splitlines()]
    assert len(lines) == 4 + len(rows) - 5
    for name, line, batch in zip(["baseline", "spe16", "batch2", "baseline (again)"], lines, [64, 64, 128, 64]):
        assert rows[name]["samples_per_sec"] == pytest.approx(_stopwatch_rate(line, batch), rel=0.10), name
    assert rows["spe16"]["losses"].startswith("same (")  # the arithmetic is the baseline's
    assert rows["spe16"]["line"] == "model.compile(..., steps_per_execution=16)"
    assert rows["batch2"]["losses"].startswith("loss ") and rows["batch2"]["line"] == "model.fit(..., batch_size=128)"
    assert rows["batch4"]["status"] == "failed"
    assert "RuntimeError: out of memory: a batch of 256 does not fit" in rows["batch4"]["error"]
    assert out["verdict"].startswith(("Keeps the results: ", "Nothing helps beyond the run-to-run spread"))
    report = subprocess.run([sys.executable, "-m", "keras_gpu.cli", "report", str(tmp_path / "logs"), "--json"],
                            capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=REPO)
    assert report.returncode == 0, report.stderr[-2000:]
    assert [r["change"] for r in json.loads(report.stdout)["tune"]["rows"]] == list(rows)


def _tune_json(*args: str) -> dict:
    proc = _tune("--json", "--warmup", str(WARMUP), "--steps", str(STEPS), *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


@E2E
def test_map_makes_the_training_pipeline_parallel_and_leaves_the_validation_pipelines_map_as_written(tmp_path):
    # Both pipelines come from one function (the same map lines); validation runs after each 20-step epoch.
    calls = tmp_path / "calls.jsonl"
    out = _tune_json("--try", "map", CASES, "--case", "pipeline", "--steps", "20", "--epochs", "3", "--val",
                     "--map-ms", "5", "--calls", str(calls))
    rows = {r["change"]: r for r in out["rows"]}
    assert rows["map"]["status"] == "measured" and rows["map"]["losses"].startswith("same (")
    maps = [n for n, text in enumerate(Path(CASES).read_text().splitlines(), 1) if "ds = ds.map(" in text]
    assert rows["map"]["line"].endswith("deterministic=True)  # " + ", ".join(f"tune_cases.py:{n}" for n in maps))
    baseline, parallel, again = (json.loads(line) for line in calls.read_text().splitlines())
    for run in (baseline, again):  # as written: one call at a time, in order, in both pipelines
        assert [run[p]["most_in_flight"] for p in ("train", "val")] == [1, 1] and run["train"]["in_order"]
    # The map run: the training pipeline's calls overlap; the validation pipeline's, from the same lines, do not.
    assert parallel["train"]["most_in_flight"] >= 2
    assert parallel["val"]["most_in_flight"] == 1 and parallel["val"]["in_order"] and parallel["val"]["calls"] >= 8


@E2E
@pytest.mark.parametrize(
    ("tries", "script_args", "reason"),
    [
        ("spe4,batch2", ["--case", "mlp", "--override-fit"],
         "batch_factor: OwnFit.fit overrides Keras' fit, so the batch size Keras' fit gets is the one it passes on"),
        ("map", ["--case", "pipeline", "--map-ms", "2", "--bypass-tf-hook"],
         "parallel_map: `tensorflow` was imported past keras-gpu's import hook (loaded by SourceFileLoader, found by "
         "a finder ahead of the hook in sys.meta_path)"),
    ],
    ids=["model-class-overrides-fit", "finder-ahead-of-the-hook"],
)
def test_a_change_that_cannot_apply_is_a_row_that_says_so(tries, script_args, reason):
    out = _tune_json("--try", tries, CASES, *script_args, "--steps", "60")
    row = next(r for r in out["rows"] if r["change"] == tries.split(",")[-1])
    assert row["status"] == "not applied" and row["not_applied"].startswith(reason)
    assert row["samples_per_sec"] is None and row["helps"] is None  # never the unchanged script's rate
    assert row["change"] not in out["verdict"]


@E2E
def test_scale_and_tune_measure_the_same_window_and_keep_its_record(tmp_path):
    # A step set by a 20 ms sleep in the input: its rate barely moves with the machine's load.
    script = [CASES, "--case", "pipeline", "--map-ms", "20", "--steps", "40"]
    watch = tmp_path / "stopwatch.jsonl"
    scale = subprocess.run([sys.executable, "-m", "keras_gpu.cli", "scale", "--json", "--warmup", "5", "--steps", "20",
                            *script, "--stopwatch", str(watch)], capture_output=True, text=True, cwd=REPO,
                           env=dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2"), timeout=900)
    assert scale.returncode == 0, scale.stderr[-3000:]
    scaled = json.loads(scale.stdout)
    proc = _tune("--json", "--warmup", "5", "--steps", "20", "--try", "prefetch", *script, "--stopwatch", str(watch))
    assert proc.returncode == 0, proc.stderr[-3000:]
    tuned = json.loads(proc.stdout)
    rows = {r["change"]: r for r in tuned["rows"]}
    # Every run stopped at the window's end (25 batch ends), and its record, written before the exit, has the losses.
    lines = [json.loads(t) for t in watch.read_text().splitlines()]
    assert [line["ends"][-1][0] for line in lines] == [25] * 5
    assert rows["baseline (again)"]["losses"] == "same (25 steps)" and rows["prefetch"]["losses"] == "same (25 steps)"
    assert all(r["peak_memory_bytes"] > 0 for r in rows.values())
    # One window, one count: the rate of scale's baseline and of tune's agree as the one rule judges a change.
    spread = max(scaled["baseline_spread"], measured_spread([
        RunResult(1, 1, 20, 20 * r["step_sec"], 20 * 64, None) for r in (rows["baseline"], rows["baseline (again)"])]))
    tune_mean = (rows["baseline"]["samples_per_sec"] + rows["baseline (again)"]["samples_per_sec"]) / 2
    assert beyond_spread(scaled["rows"][0]["samples_per_sec"], tune_mean, spread) == 0, (scaled, tune_mean, spread)
    for rate, line in zip([scaled["rows"][0]["samples_per_sec"], rows["baseline"]["samples_per_sec"]],
                          [lines[0], lines[2]]):
        assert rate == pytest.approx(_stopwatch_rate_at(line, 64, 5, 20), rel=0.10)


def _stopwatch_rate_at(line: dict, batch: int, warmup: int, steps: int) -> float:
    from benchmarks.tune_stopwatch import stopwatch_rate

    return stopwatch_rate(line, batch, warmup, steps)


@E2E
@pytest.mark.parametrize(
    ("script_args", "message"),
    [
        (["--no-fit"], "keras-gpu tune: error: the script never called fit (baseline): `keras-gpu tune` measures"),
        (["--fail"], "keras-gpu tune: error: the script failed (baseline): a worker exited with status 1"),
        (["--steps", "5"], "keras-gpu tune: error: the script trained 5 step(s) (baseline), fewer than --warmup 10"),
    ],
)
def test_a_script_that_cannot_be_measured_gets_one_line_and_exit_1(script_args, message):
    proc = _tune("--warmup", "10", "--steps", "20", CASES, *script_args)
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if line.startswith("keras-gpu tune: error")]
    assert len(errors) == 1 and errors[0].startswith(message), proc.stderr[-2000:]
    assert proc.stdout == ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--try", "spe8", "x.py"], "keras-gpu tune: error: argument --try: no candidate 'spe8': use one of spe4,"),
        ([], "keras-gpu tune: error: no script given: use `keras-gpu tune [options] script.py [args...]`"),
        (["--steps", "0", "x.py"], "keras-gpu tune: error: argument --steps: must be an integer >= 1. Received: --steps 0"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(args, message):
    proc = _tune(*args, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith(message), proc.stderr
