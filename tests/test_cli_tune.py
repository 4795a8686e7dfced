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

from keras_gpu.meters.run_spread import beyond_spread, spread
from keras_gpu.meters.scale_table import RunResult
from keras_gpu.meters.tune_candidates import by_name, combine, line_for, skip_reason
from keras_gpu.meters.tune_table import ROW_KEYS, TuneRun, build_rows, compare_losses, verdict
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


def _run(name: str, samples_per_step: float, step_sec: float, losses=None, change=None, parts=None) -> TuneRun:
    result = RunResult(1, 1, 50, step_sec * 50, samples_per_step * 50, parts)
    record = {"losses": losses or [[1, 2.0], [2, 1.5]], "change": change or {}, "peak_memory_bytes": 2**20}
    return TuneRun(name, "" if name.startswith("baseline") else f"line {name}", result=result, record=record)


def test_spread_rule_counts_only_what_lies_beyond_the_baselines_range():
    assert spread([100.0, 110.0]) == pytest.approx(10 / 105)
    assert beyond_spread(121.0, [100.0, 110.0]) == 1  # above 110 + 10
    assert beyond_spread(119.0, [100.0, 110.0]) == 0
    assert beyond_spread(89.0, [100.0, 110.0]) == -1
    assert beyond_spread(105.5, [100.0, 100.0]) == 1 and beyond_spread(104.0, [100.0, 100.0]) == 0  # 5% floor
    with pytest.raises(ValueError, match="at least two positive rates"):
        spread([100.0])


def test_rows_compare_rates_losses_and_parts_with_the_baseline():
    base_parts = {"input": 0.001, "compute": 0.002, "communication": 0.0, "other": 0.007}
    fast_parts = {"input": 0.001, "compute": 0.002, "communication": 0.0, "other": 0.001}
    baselines = [_run("baseline", 64, 0.010, parts=base_parts), _run("baseline (again)", 64, 0.011, parts=base_parts)]
    runs = [
        _run("spe16", 64, 0.004, losses=[[2, 1.5]], parts=fast_parts),
        _run("bf16", 64, 0.010, losses=[[1, 2.01], [2, 1.5]]),
        _run("batch2", 128, 0.012, losses=[[1, 1.4]], change={"batch_factor": 2}),
        TuneRun("batch4", "x", error="the script's fit raised RuntimeError: out of memory"),
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
    cells = [[format_cell(k, r[k], r) for k in ("samples_per_sec", "speedup", "moved", "losses")] for r in rows[2:]]
    assert cells == [["16,000", "2.62x +", "other 7→1", "same"], ["6,400", "1.05x", "not measured", "Δ 0.005"],
                     ["10,667", "1.75x +", "not measured", "end -6.7%"], ["failed", "-", "-", "-"]]
    text = verdict(rows, [b.rate for b in baselines])
    assert text.startswith("Winner: spe16: `line spe16`: 2.62x samples/s, losses same (1 step)")


def test_a_combination_wins_only_beyond_the_spread_of_the_best_single_change():
    baselines = [_run("baseline", 64, 0.010), _run("baseline (again)", 64, 0.0101)]
    rates = [b.rate for b in baselines]
    close = build_rows(baselines, [_run("map", 64, 0.005), _run("spe64 + map", 64, 0.0049)])
    assert verdict(close, rates).startswith("Winner: map: `line map`: 2.01x")
    far = build_rows(baselines, [_run("map", 64, 0.005), _run("spe64 + map", 64, 0.004)])
    assert verdict(far, rates).startswith("Winner: spe64 + map: `line spe64 + map`: 2.51x")


def test_nothing_beyond_the_spread_is_said_in_words():
    baselines = [_run("baseline", 64, 0.010), _run("baseline (again)", 64, 0.0105)]
    rows = build_rows(baselines, [_run("spe16", 64, 0.0099)])
    assert verdict(rows, [b.rate for b in baselines]).startswith(
        "Nothing helps beyond the run-to-run spread (the baseline's two runs differ by 4.9%); the fastest, spe16"
    )


def test_losses_of_two_runs_are_compared_at_the_steps_both_logged():
    assert compare_losses({"losses": [[1, 2.0], [2, 1.0], [3, 0.5]]}, {"losses": [[3, 0.5]]}) == ("same (1 step)", 0.0)
    assert compare_losses({"losses": []}, {"losses": [[1, 1.0]]})[0] == "not compared: a run logged no loss"
    assert compare_losses({"losses": [[1, 2.0]]}, {"losses": [[4, 1.0]]})[0] == "not compared: no step logged by both runs"


def test_each_candidate_says_why_it_does_not_apply():
    arrays = {"backend": "tensorflow", "steps_per_execution": 1, "jit_compile": False, "policy": "float32",
              "facts": {"fit_input": "arrays", "batch_size": 64, "script_sequential_maps": 0}, "bf16_gpu": None}
    assert skip_reason(by_name("spe16"), arrays) is None
    assert skip_reason(by_name("spe16"), dict(arrays, steps_per_execution=32)) == "the script has steps_per_execution=32 already"
    assert skip_reason(by_name("jit"), dict(arrays, jit_compile=True)) == "the script runs with jit_compile on already"
    assert "PyTorch" in skip_reason(by_name("spe4"), dict(arrays, backend="torch"))
    assert skip_reason(by_name("prefetch"), arrays) == "fit is given arrays, not a tf.data.Dataset"
    assert skip_reason(by_name("map"), arrays) == "the script calls no tf.data map without num_parallel_calls"
    assert skip_reason(by_name("workers"), arrays) == "fit is given arrays, not a PyDataset"
    assert skip_reason(by_name("fp16"), arrays).startswith("mixed_bfloat16 is tried instead")
    assert skip_reason(by_name("bf16"), dict(arrays, bf16_gpu=False)).startswith("the GPU computes no bfloat16")
    assert skip_reason(by_name("fp16"), dict(arrays, bf16_gpu=False)) is None
    assert skip_reason(by_name("bf16"), dict(arrays, policy="mixed_float16")).endswith("policy already")
    data = dict(arrays, facts={"fit_input": "tf.data", "script_sequential_maps": 2, "script_prefetches": 1,
                               "tf_data_autotune": True, "tf_data_map_parallelization": False})
    assert skip_reason(by_name("map"), data) is None and skip_reason(by_name("autotune"), data) is None
    assert skip_reason(by_name("prefetch"), data) == "the script prefetches already"
    assert skip_reason(by_name("batch2"), data) == "fit is given tf.data, not arrays with batch_size"
    assert line_for(by_name("batch4"), arrays) == "model.fit(..., batch_size=256)"
    both = combine([by_name("spe16"), by_name("batch2")])
    assert both.change == {"steps_per_execution": 16, "batch_factor": 2} and not both.keeps_arithmetic
    assert line_for(both, arrays) == "model.compile(..., steps_per_execution=16); model.fit(..., batch_size=128)"
    three = combine([by_name("bf16"), by_name("map"), by_name("spe4")])
    assert three.line == ('keras.mixed_precision.set_global_policy("mixed_bfloat16"); '
                          "dataset.map(f, num_parallel_calls=tf.data.AUTOTUNE); model.compile(..., steps_per_execution=4)")


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
    assert out["skipped"] == ["map: the script calls no tf.data map without num_parallel_calls"]
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
    assert out["verdict"].startswith(("Winner: ", "Nothing helps beyond the run-to-run spread"))
    report = subprocess.run([sys.executable, "-m", "keras_gpu.cli", "report", str(tmp_path / "logs"), "--json"],
                            capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=REPO)
    assert report.returncode == 0, report.stderr[-2000:]
    assert [r["change"] for r in json.loads(report.stdout)["tune"]["rows"]] == list(rows)


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
