"""`keras-gpu scale`: rows against a stopwatch in the script, the arithmetic, the cause, outputs and bad input.

The end-to-end tests run `tests/_scale/mlp.py` (a small MLP under
`keras_gpu.make_strategy()`) through the real command on logical CPUs and
loopback workers; they are bounded by step counts, never by wall time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from keras_gpu.meters.scale_table import ROW_KEYS, AllReduce, RunResult, build_rows, bus_bandwidth

REPO = Path(__file__).resolve().parent.parent
MLP = str(REPO / "benchmarks" / "scale_mlp.py")
WARMUP, STEPS = 10, 40


def E2E(test):
    """The real command: a TensorFlow process per configuration."""
    return pytest.mark.slow(pytest.mark.timeout(900)(test))



def _scale(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "keras_gpu.cli", "scale", *args],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=timeout,
    )


def _rows(proc: subprocess.CompletedProcess) -> list[dict]:
    assert proc.stdout.strip(), proc.stderr[-3000:]
    return json.loads(proc.stdout)["rows"]


# ------------------------------------------------------------------------------- arithmetic


def _result(workers, replicas, samples_per_step, step_sec, parts=None, grad_bytes=4000, allreduce=None):
    steps = 50
    return RunResult(workers, replicas, steps, step_sec * steps, samples_per_step * steps, parts, grad_bytes, allreduce)


def test_speedup_and_efficiency_follow_from_the_rates():
    rows = build_rows([_result(1, 1, 64, 0.010), _result(1, 2, 128, 0.0125), _result(2, 2, 256, 0.04)])
    rates = [64 / 0.010, 128 / 0.0125, 256 / 0.04]  # hand count: samples per step over seconds per step
    assert [r.samples_per_sec for r in rows] == pytest.approx(rates)
    assert [r.speedup for r in rows] == pytest.approx([1.0, 1.6, 1.0])
    assert [r.efficiency for r in rows] == pytest.approx([1.0, 0.8, 0.25])
    d = rows[1].as_dict()
    assert tuple(d) == ROW_KEYS
    assert (d["global_batch"], d["per_replica_batch"], d["step_sec"]) == (128, 64, pytest.approx(0.0125))


def test_bus_bandwidth_is_nccl_tests_definition():
    # nccl-tests: busbw = algbw * 2 (n - 1) / n for all-reduce; 1 GB in 0.5 s over 4 ranks.
    ar = AllReduce(nbytes=10**9, seconds=0.5, ranks=4)
    assert ar.algbw == pytest.approx(2e9)
    assert ar.busbw == pytest.approx(3e9)
    assert bus_bandwidth(1.0, 1) == 0.0
    row = build_rows([_result(1, 1, 64, 0.01), _result(1, 4, 256, 0.01, allreduce=ar)])[1].as_dict()
    assert row["allreduce_bus_gbps"] == pytest.approx(3.0)


def test_cause_is_the_part_that_grew_most_against_linear():
    base = {"input": 0.001, "compute": 0.008, "communication": 0.0, "other": 0.001}
    # Same global batch over 2 replicas: every part should halve; communication appeared instead.
    comm = {"input": 0.0005, "compute": 0.004, "communication": 0.006, "other": 0.0005}
    inp = {"input": 0.006, "compute": 0.008, "communication": 0.001, "other": 0.001}
    rows = build_rows([
        _result(1, 1, 64, 0.010, base),
        _result(1, 2, 64, 0.011, comm, grad_bytes=35_232_153),
        _result(1, 2, 128, 0.016, inp),
    ])
    assert rows[0].cause == "baseline (run-to-run spread not measured)"
    assert rows[1].cause.startswith(
        "communication: the all-reduce of 33.6 MiB of gradients with the update takes 6 ms per step")
    assert rows[2].cause.startswith("input: the host pipeline's time per step grows with the global batch")


def test_a_cause_is_named_only_beyond_the_run_to_run_spread():
    from keras_gpu.meters.run_spread import measured_spread
    from keras_gpu.meters.scale_cause import explain_shortfall

    base_parts = {"input": 0.001, "compute": 0.008, "communication": 0.0005, "other": 0.0005}
    base = _result(1, 1, 64, 0.010, base_parts)
    # Two replicas, batch grown with them: linear is the same 10 ms step; compute grew by 1 ms (10%).
    row = _result(1, 2, 128, 0.011, dict(base_parts, compute=0.009))
    assert explain_shortfall(base, row, 0.05).startswith("compute: the forward and backward pass takes 9 ms")
    assert explain_shortfall(base, row, 0.2) == (
        "within run-to-run spread (20.0%): the step did not grow by more than 20.0% of the step at linear scaling in "
        "both halves of the window, or no part of it did")
    assert explain_shortfall(base, row, None).startswith("compute:")  # no spread measured: the 5% floor
    # The one rule's floor: a spread measured below 5% still needs a growth of 5% of the step.
    assert explain_shortfall(base, _result(1, 2, 128, 0.0104, dict(base_parts, compute=0.0084)), 0.01) == (
        "within run-to-run spread (1.0%): the step did not grow by more than 5.0% of the step at linear scaling in "
        "both halves of the window, or no part of it did")
    # A part beyond, in a step whose second half ran at linear speed: a burst of other work, not a cause.
    burst = RunResult(1, 2, 50, 0.0125 * 50, 128 * 50, dict(base_parts, compute=0.0105), halves=(0.015, 0.010))
    assert explain_shortfall(base, burst, 0.05).startswith("within run-to-run spread (5.0%)")
    first, second = build_rows([base, row], 0.2)
    assert first.cause == "baseline (run-to-run spread 20.0%)" and second.cause.startswith("within run-to-run")
    with pytest.raises(ValueError, match=r"spread=-0\.1"):
        explain_shortfall(base, row, -0.1)
    # Spread: the slowest step over the fastest, less one, over both runs' halves (9, 11, 10, 10 ms).
    runs = [RunResult(1, 1, 10, 0.1, 640, None, halves=(0.009, 0.011)),
            RunResult(1, 1, 10, 0.1, 640, None, halves=(0.010, 0.010))]
    assert measured_spread(runs) == pytest.approx(2 / 9)
    assert measured_spread([RunResult(1, 1, 10, 0.1, 640, None)]) is None  # one number has no spread
    assert measured_spread([RunResult(1, 1, 10, 0.1, 640, None), RunResult(1, 1, 10, 0.12, 640, None)]) == (
        pytest.approx(0.2))  # 10 and 12 ms


def test_replicas_waiting_on_shared_cores_are_named_contention_not_the_interconnect():
    from keras_gpu.meters.scale_cause import explain_shortfall

    base = _result(1, 1, 64, 0.002, {"input": 0.0002, "compute": 0.001, "communication": 0.0003, "other": 0.0005})
    alone = AllReduce(nbytes=139_264, seconds=0.000171, ranks=2)
    parts = {"input": 0.0002, "compute": 0.001, "communication": 0.00843, "other": 0.0005}
    shared = RunResult(1, 2, 50, 0.0101 * 50, 128 * 50, parts, 139_264, alone, shares="2 replicas in 1 process of 2 logical CPUs on 2 CPU cores")
    assert explain_shortfall(base, shared, 0.1) == (
        "contention: the replicas wait for each other on shared hardware (2 replicas in 1 process of 2 logical CPUs on 2 CPU cores): the "
        "all-reduce in the step (with the update) takes 8.43 ms per step, the same all-reduce of 136.0 KiB alone "
        "0.171 ms; more cores or devices per replica is the fix, not the interconnect")
    own = RunResult(1, 2, 50, 0.0101 * 50, 128 * 50, parts, 139_264, alone)  # a GPU each: the interconnect
    assert explain_shortfall(base, own, 0.1).startswith("communication: the all-reduce of 136.0 KiB of gradients")
    assert "(alone: 0.171 ms, bus bandwidth" in explain_shortfall(base, own, 0.1)


def test_one_replicas_span_after_the_gradients_is_the_update_not_communication():
    from keras_gpu.meters.scale_cause import explain_shortfall

    parts = {"input": 0.001, "compute": 0.004, "communication": 0.002, "other": 0.001}
    base = _result(1, 1, 64, 0.008, parts)
    d = build_rows([base])[0].as_dict()
    assert d["update_sec"] == 0.002 and d["communication_sec"] is None and d["device_sec"] is None
    assert d["device"] == "CPU"
    assert sum(d[f"{p}_sec"] or 0 for p in ("input", "compute", "communication", "update", "device", "other")) == (
        pytest.approx(d["step_sec"]))
    slower = _result(1, 1, 64, 0.011, dict(parts, communication=0.005))
    assert explain_shortfall(base, slower, 0.0).startswith(
        "update: the optimizer update (gradients ready to step done, no all-reduce on one replica) takes 5 ms")


def test_the_cpu_row_of_a_gpu_machine_is_gpu_vs_cpu_with_its_parts():
    gpu = RunResult(1, 1, 50, 0.000714 * 50, 64 * 50, {"input": 0.0001, "compute": 0.0004, "communication": 0.0001,
                                                        "other": 0.000114}, device="NVIDIA H200")
    cpu = RunResult(1, 1, 50, 0.00181 * 50, 64 * 50, {"input": 0.0002, "compute": 0.0013, "communication": 0.0002,
                                                       "other": 0.00011}, label="CPU (GPUs hidden)", versus_gpu=True)
    rows = build_rows([gpu, cpu], 0.05)
    assert rows[1].cause == (
        "GPU vs CPU: 2.54x (the NVIDIA H200 baseline's samples/s over the CPU's; CPU step 1.81 ms: input 0.2 ms, "
        "compute 1.3 ms, update 0.2 ms, other 0.11 ms)")
    assert rows[0].as_dict()["device"] == "NVIDIA H200" and rows[1].as_dict()["device"] == "CPU"


def _table_rows():
    base = {"input": 0.00046, "compute": 0.000119, "communication": 0.0000101, "other": 0.000615}
    two = {"input": 0.00111, "compute": 0.000113, "communication": 0.075, "other": 0.000684}
    results = [
        RunResult(1, 1, 40, 0.00121 * 40, 64 * 40, base, 10_000, label="1 CPU"),
        RunResult(1, 2, 40, 0.0771 * 40, 128 * 40, two, 10_000, AllReduce(10_000, 0.00272, 2), label="2 CPU",
                  shares="2 replicas in 1 process of 2 logical CPUs on 2 CPU cores"),
        RunResult(2, 1, 40, 0.00653 * 40, 128 * 40, {"input": 0.0001, "device": 0.0061, "other": 0.00033},
                  10_000, label="1 CPU"),
    ]
    return [dict(r.as_dict(), devices=r.result.label) for r in build_rows(results, 0.12)]


@pytest.mark.parametrize("width", [80, 120])
def test_the_terminal_table_is_whole_at_80_and_120_columns(width):
    from rich.console import Console

    from keras_gpu.cli.scale import render
    from keras_gpu.output.scale_output import format_cell

    rows = _table_rows()
    rows[2]["devices"] = "CPU (GPUs hidden)"
    console = Console(width=width, record=True, color_system=None)
    render(rows, console=console)
    text = console.export_text()
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= width
    table_lines = [line.rstrip() for line in text.splitlines() if line[:1] in "┏┃┡│└"]
    assert len(table_lines) >= 14 and all(line[-1] in "┓┃┩│┘" for line in table_lines)  # no table cut at the edge
    for row in rows:  # every number of the rates and parts tables is printed whole
        for key in ("samples_per_sec", "speedup", "efficiency", "step_sec", "input_sec", "communication_sec",
                    "update_sec", "device_sec", "allreduce_bus_gbps"):
            if row[key] is not None:
                assert format_cell(key, row[key]) in text, (key, text)
    assert "3. " in text and "contention: the replicas wait" in text.replace("\n", " ")


def test_report_on_the_studys_own_folder_prints_its_table(tmp_path, capsys):
    from keras_gpu.cli.main import main
    from keras_gpu.output.scale_output import write_log_dir

    rows = build_rows([_result(1, 1, 64, 0.01, {"input": 0.001, "compute": 0.008, "communication": 0.0005,
                                                  "other": 0.0005}), _result(1, 2, 128, 0.0125)], 0.1)
    run = write_log_dir(tmp_path, rows, ["1 CPU", "2 CPU"], 0.1)
    for folder in (tmp_path, Path(run)):
        assert main(["report", str(folder)]) == 0
        out = capsys.readouterr().out
        assert "scaling study" in out and "baseline (run-to-run spread 10.0%)" in out, out


def test_a_failing_scripts_traceback_starts_at_the_scripts_frame(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("def build():\n    raise ValueError('no such layer')\n\nbuild()\n")
    proc = subprocess.run([sys.executable, "-m", "keras_gpu.cli._worker", "--", str(script)], capture_output=True,
                          text=True, env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=REPO, timeout=120)
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    start = lines.index("Traceback (most recent call last):")
    assert lines[start + 1] == f'  File "{script}", line 4, in <module>', proc.stderr
    assert "runpy" not in proc.stderr and "_worker.py" not in proc.stderr
    assert lines[-1] == "ValueError: no such layer"


def test_each_worker_gets_its_own_gpus_and_the_cpu_row_hides_them(tmp_path):
    from keras_gpu.cli._study_run import Config, _envs

    gpus = ["0", "1", "2", "3"]
    envs = _envs(Config(2, 2, 2), gpus)
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0,1", "2,3"]
    assert [json.loads(e["TF_CONFIG"])["task"]["index"] for e in envs] == [0, 1]
    (cpu,) = _envs(Config(1, 1, 0, hide_gpus=True), gpus)
    assert cpu["CUDA_VISIBLE_DEVICES"] == "" and "TF_CONFIG" not in cpu


def test_replicas_on_logical_cpus_share_the_cores_and_gpus_do_not():
    from keras_gpu.cli._study_run import Config, _shares

    assert _shares(Config(2, 1, 0), 2) == "2 replicas in 2 processes of 1 logical CPU on 2 CPU cores"
    assert _shares(Config(1, 4, 0), 1) == "4 replicas in 1 process of 4 logical CPUs on 1 CPU core"
    assert _shares(Config(1, 1, 0), 2) == ""  # one replica shares with nobody
    assert _shares(Config(2, 2, 2), 2) == "" and _shares(Config(1, 1, 0, hide_gpus=True), 2) == ""


def test_a_gpu_that_nvml_cannot_name_is_called_gpu():
    from keras_gpu.cli.scale import gpu_name

    assert gpu_name(["GPU-6f2a"]) == "GPU"  # a UUID in CUDA_VISIBLE_DEVICES: no NVML index to ask
    assert gpu_name([]) == "GPU"


def test_configurations_that_do_not_fit_the_machine_are_left_out_or_refused():
    from keras_gpu.cli._study_run import ScaleError, check_devices

    assert check_devices([1, 2], [1, 2], gpus=0, cpus=2) == [(1, 1), (1, 2), (2, 1)]
    assert check_devices([1], [1, 2, 4, 8], gpus=8, cpus=2) == [(1, 1), (1, 2), (1, 4), (1, 8)]
    with pytest.raises(ScaleError, match=r"--replicas 4 needs at least 4 devices, and this machine has 2 GPU"):
        check_devices([1], [1, 4], gpus=2, cpus=64)


# ------------------------------------------------------------------------------- end to end


def _stopwatch_rate(path: Path, global_batch: int, warmup: int = WARMUP, steps: int = STEPS) -> float:
    """The script's own rate over the window: batch ends `warmup` to `warmup + steps`, epoch gaps left out."""
    times = json.loads(path.read_text())
    ends, epochs = times["ends"], times["epochs"]
    start, stop = ends[warmup - 1], ends[warmup + steps - 1]
    # Between an epoch's last batch end and the next epoch's start: validation and epoch-end work.
    gaps = sum(begin - max(e for e in ends if e < begin) for begin in epochs[1:] if start < begin < stop)
    return global_batch * steps / (stop - start - gaps)


@E2E
def test_rows_match_the_scripts_stopwatch_and_log_dir_and_report(tmp_path):
    sw = tmp_path / "sw"
    proc = _scale("--replicas", "1,2", "--cpu", "--warmup", str(WARMUP), "--steps", str(STEPS), "--json",
                  "--log-dir", str(tmp_path / "logs"), MLP, "--steps", "80", "--stopwatch", str(sw))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    rows = out["rows"]
    # No GPU here: --cpu adds no second CPU baseline, it says so.
    assert "--cpu adds no row: this machine has no GPU to hide" in proc.stderr
    assert "measuring 1 worker(s) x 1 replica(s) (1 CPU) again, for the run-to-run spread" in proc.stderr
    assert out["baseline_spread"] >= 0
    assert [(r["workers"], r["replicas"], r["device"], r["global_batch"], r["per_replica_batch"]) for r in rows] == [
        (1, 1, "CPU", 64, 64), (1, 2, "CPU", 128, 64)]
    for row in rows:
        assert tuple(row) == ROW_KEYS
        truth = _stopwatch_rate(Path(f"{sw}.{row['replicas']}"), row["global_batch"])
        assert row["samples_per_sec"] == pytest.approx(truth, rel=0.10)
        _assert_parts_add_up(row)
    # The spread covers at least the two baseline runs' difference (halves range wider than whole windows).
    again = _stopwatch_rate(Path(f"{sw}.1.again"), rows[0]["global_batch"])
    first = _stopwatch_rate(Path(f"{sw}.1"), rows[0]["global_batch"])
    assert out["baseline_spread"] >= 0.8 * abs(1 / first - 1 / again) / ((1 / first + 1 / again) / 2) - 0.02
    # One replica: gradients ready to step done is the update; two: the all-reduce with it.
    assert rows[0]["communication_sec"] is None and rows[0]["update_sec"] is not None
    assert rows[1]["communication_sec"] is not None and rows[1]["update_sec"] is None
    assert rows[0]["allreduce_bus_gbps"] is None and rows[1]["allreduce_bus_gbps"] > 0
    assert rows[1]["speedup"] == pytest.approx(rows[1]["samples_per_sec"] / rows[0]["samples_per_sec"])

    from keras_gpu.output.scale_output import read_rows

    saved = read_rows(tmp_path / "logs")
    assert [r["samples_per_sec"] for r in saved] == [r["samples_per_sec"] for r in rows]
    report = subprocess.run([sys.executable, "-m", "keras_gpu.cli", "report", str(tmp_path / "logs")],
                            capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=REPO)
    assert report.returncode == 0, report.stderr
    assert "scaling study" in report.stdout and "baseline" in report.stdout
    as_json = subprocess.run([sys.executable, "-m", "keras_gpu.cli", "report", "--json", str(tmp_path / "logs")],
                             capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=REPO)
    assert [r["speedup"] for r in json.loads(as_json.stdout)["scale"]] == [r["speedup"] for r in rows]
    _check_events(tmp_path / "logs" / "scale", rows)


def _assert_parts_add_up(row: dict) -> None:
    """Every part in a column, and together they are the step."""
    parts = [row[f"{p}_sec"] for p in ("input", "compute", "communication", "update", "device", "other")]
    assert sum(p for p in parts if p is not None) == pytest.approx(row["step_sec"], rel=0.02), row


def _check_events(run: Path, rows: list[dict]) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util.tensor_util import make_ndarray

    acc = EventAccumulator(str(run / "workers_1"), size_guidance={"tensors": 0})
    acc.Reload()
    speedup = {e.step: float(make_ndarray(e.tensor_proto)) for e in acc.Tensors("scale/speedup")}
    ideal = {e.step: float(make_ndarray(e.tensor_proto)) for e in acc.Tensors("scale/ideal_speedup")}
    assert speedup == pytest.approx({1: 1.0, 2: rows[1]["speedup"]}, rel=1e-6)
    assert ideal == {1: 1.0, 2: 2.0}
    main = EventAccumulator(str(run), size_guidance={"tensors": 0})
    main.Reload()
    assert "scale/table" in main.Tags()["tensors"]


@E2E
def test_the_window_spans_epochs_and_leaves_validation_out(tmp_path):
    sw = tmp_path / "sw"
    # 3 epochs of 20 steps, each followed by validation that sleeps 1 s; the window is steps 10 to 50.
    proc = _scale("--warmup", "10", "--steps", "40", "--json", MLP, "--steps", "60", "--epochs", "3",
                  "--val-sleep", "1", "--stopwatch", str(sw))
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = _rows(proc)
    truth = _stopwatch_rate(Path(f"{sw}.1"), row["global_batch"], 10, 40)
    assert row["samples_per_sec"] == pytest.approx(truth, rel=0.10)
    ends = json.loads(Path(f"{sw}.1").read_text())["ends"]
    assert len(ends) == 50  # stopped at the window's end, in the third epoch


@E2E
def test_a_jit_compiled_tensorflow_script_gets_its_table(tmp_path):
    # Under XLA the step probe cannot take timestamps; the window still counts the samples of its steps.
    sw = tmp_path / "sw"
    proc = _scale("--warmup", str(WARMUP), "--steps", str(STEPS), "--json", MLP, "--steps", "60", "--jit",
                  "--stopwatch", str(sw))
    assert proc.returncode == 0, proc.stderr[-3000:]
    (row,) = _rows(proc)
    assert (row["global_batch"], row["speedup"]) == (64, 1.0)
    assert row["samples_per_sec"] == pytest.approx(_stopwatch_rate(Path(f"{sw}.1"), 64), rel=0.10)
    assert row["input_sec"] is None and row["compute_sec"] is None  # XLA: no split of the step, and no guess


@E2E
def test_a_host_pipeline_that_grows_with_the_batch_is_named_input():
    # 80 ms more per step at twice the batch: beyond the run-to-run spread even on a loaded machine (which
    # measured up to ±28% of a 70 ms step here).
    proc = _scale("--replicas", "1,2", "--warmup", "5", "--steps", "20", "--json",
                  MLP, "--steps", "30", "--input-ms", "80")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = _rows(proc)
    assert rows[1]["global_batch"] == 2 * rows[0]["global_batch"]
    assert rows[1]["cause"].startswith("input:"), rows


@E2E
def test_a_wide_model_with_a_tiny_batch_on_two_workers_is_named_communication():
    proc = _scale("--workers", "1,2", "--warmup", "5", "--steps", "20", "--json",
                  MLP, "--steps", "30", "--batch", "2", "--width", "16384")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = _rows(proc)
    assert [r["workers"] for r in rows] == [1, 2]
    # Two processes on 2 shared cores: the all-reduce, or the replicas waiting for each other in it.
    assert rows[1]["cause"].startswith(("communication: the all-reduce of", "contention: the replicas wait")), rows
    assert rows[1]["allreduce_bus_gbps"] > 0


# ------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--replicas", "0,1"], "--replicas: must be a comma-separated list of distinct positive integers"),
        (["--workers", "1,x"], "Received: --workers 1,x"),
        (["--steps", "0"], "must be an integer >= 1. Received: --steps 0"),
        (["--hang-timeout", "-1"], "must be a finite number >= 0. Received: --hang-timeout -1"),
        (["--replicas", "4096"], "--replicas 4096 needs at least 4096 devices"),
        (["--bogus"], "keras-gpu scale: error: unrecognized arguments: --bogus"),
    ],
)
def test_bad_arguments_get_a_message_and_exit_2(args, message):
    proc = _scale(*args, MLP, timeout=120)
    assert proc.returncode == 2
    assert message in proc.stderr


@E2E
@pytest.mark.parametrize(
    ("script_args", "message"),
    [
        (["--fail"], "the script failed with 1 worker(s) x 1 replica(s): a worker exited with status 3"),
        (["--no-fit"], "the script never called fit"),
        (["--steps", "12"], "the script trained 12 step(s) with 1 worker(s) x 1 replica(s), fewer than --warmup 10"),
    ],
)
def test_a_script_that_cannot_be_measured_is_named(script_args, message):
    proc = _scale("--warmup", "10", "--steps", "10", "--json", MLP, *script_args)
    assert proc.returncode == 1
    assert message in proc.stderr
    assert json.loads(proc.stdout)["rows"] == []


@E2E
def test_a_script_that_does_not_train_on_the_configurations_replicas_is_named():
    proc = _scale("--replicas", "2", "--warmup", "5", "--steps", "10", MLP, "--steps", "20", "--plain")
    assert proc.returncode == 1
    assert ("the run with 1 worker(s) x 2 replica(s) gave the script 2 replica(s) in all, but its model trained on "
            "1 replica(s)") in proc.stderr
    assert "keras_gpu.make_strategy()" in proc.stderr


@E2E
def test_a_run_that_stops_making_progress_is_stopped_and_named():
    proc = _scale("--hang-timeout", "10", "--warmup", "5", "--steps", "10", MLP, "--steps", "20", "--hang-at", "8")
    assert proc.returncode == 1
    assert "with 1 worker(s) x 1 replica(s) was stopped: no progress for 10s (--hang-timeout) on worker(s) 0" in (
        proc.stderr)


@E2E
def test_rows_measured_before_a_failure_are_still_printed():
    proc = _scale("--replicas", "1,2", "--warmup", "5", "--steps", "10", MLP, "--steps", "20", "--fail-replicas", "2")
    assert proc.returncode == 1
    assert "baseline" in proc.stdout  # the first row's table
    assert "with 1 worker(s) x 2 replica(s): a worker exited with status 3" in proc.stderr
