"""`keras_gpu.output.reader` and `keras-gpu report` on event files written the way the callbacks write them."""

from __future__ import annotations

import json
import os

import pytest

from keras_gpu.cli import report as report_cli
from keras_gpu.output import writer as _writer
from keras_gpu.output.reader import find_runs, read_report, read_scalars, summarize


def _write(path, series, step0=0):
    writer = _writer.SummaryWriter(path)
    for i, values in enumerate(series):
        assert writer.scalars(values, step=step0 + i)
    writer.close()


@pytest.fixture()
def two_workers(tmp_path):
    log_dir = str(tmp_path / "logs")
    _write(os.path.join(log_dir, "train"), [
        {"throughput/samples_per_sec": 1000.0, "throughput/steps_per_sec": 10.0, "memory/allocator/CPU_0/peak_bytes": 5e6},
        {"throughput/samples_per_sec": 1200.0, "throughput/steps_per_sec": 12.0, "memory/allocator/CPU_0/peak_bytes": 7e6},
        {"throughput/samples_per_sec": 1100.0, "throughput/steps_per_sec": 11.0, "gpu/0/utilization_percent": 30.0},
    ], step0=1)
    _write(os.path.join(log_dir, "worker_1", "train"), [
        {"throughput/samples_per_sec": 600.0, "throughput/steps_per_sec": 6.0},
        {"throughput/samples_per_sec": 800.0, "throughput/steps_per_sec": 8.0, "memory/host/rss_bytes": 3e8},
    ], step0=1)
    with open(os.path.join(log_dir, "train", "placement.json"), "w") as f:
        json.dump({"cpu_fallbacks": [{"op_type": "Unique", "name": "a"}, {"op_type": "Unique", "name": "b"},
                                     {"op_type": "Where", "name": "c"}],
                   "ops_per_device": {"/job:localhost/replica:0/task:0/device:GPU:0": 40}}, f)
    return log_dir


def test_read_scalars_returns_steps_and_values_in_order(two_workers):
    scalars = read_scalars(os.path.join(two_workers, "train"))
    assert scalars["throughput/samples_per_sec"] == [(1, 1000.0), (2, 1200.0), (3, 1100.0)]


def test_summary_per_worker_and_hints(two_workers):
    data = summarize(two_workers)
    assert find_runs(two_workers) == ["train", os.path.join("worker_1", "train")]
    chief, worker = data["runs"]
    assert (chief["label"], chief["worker"], worker["label"], worker["worker"]) == ("chief", 0, "worker 1", 1)
    # One step of 100 samples per window: the time-weighted mean is samples over seconds.
    assert chief["throughput"]["samples_per_sec"]["mean"] == pytest.approx(300 / (1 / 10 + 1 / 12 + 1 / 11))
    assert chief["throughput"]["samples_per_sec"]["seconds"] == pytest.approx(1 / 10 + 1 / 12 + 1 / 11)
    assert chief["throughput"]["samples_per_sec"]["median"] == pytest.approx(1100.0)
    assert worker["throughput"]["samples_per_sec"]["median"] == pytest.approx(700.0)
    assert chief["memory"]["allocator_peak_bytes"] == {"CPU_0": 7e6}
    assert worker["memory"]["host_rss_peak_bytes"] == 3e8
    assert chief["placement"]["cpu_fallback_ops"] == 3
    assert chief["placement"]["top_fallbacks"][0] == ("Unique", 2)
    # Throughput rates never name a slow worker: in synchronous training they cannot.
    assert "slowest_worker" not in data
    hints = " ".join(data["hints"])
    assert "lower throughput" not in hints and "slowest" not in hints
    assert "NVML saw GPU 0 running a kernel only 30% of the time" in hints
    assert ".prefetch" not in hints and ".cache()" not in hints  # advice names only what was measured
    assert "3 op(s) of the training step ran on the CPU" in hints
    json.dumps(data)  # serialisable


def test_cli_json_and_tables(two_workers, capsys):
    from keras_gpu.cli.main import main

    assert main(["report", two_workers, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["label"] for r in data["runs"]] == ["chief", "worker 1"]
    assert main(["report", two_workers]) == 0
    out = capsys.readouterr().out
    for text in ("Throughput", "chief", "worker 1", "1,093.9", "Peak memory", "6.7 MiB", "Unique x2", "Hints"):
        assert text in out, text


def test_cli_missing_directory_is_a_clear_error(tmp_path, capsys):
    from keras_gpu.cli.main import main

    assert main(["report", str(tmp_path / "nope")]) == 2
    assert "No such log directory" in capsys.readouterr().err


def test_empty_log_dir_says_so(tmp_path, capsys):
    report_cli.render(read_report(str(tmp_path)))
    assert "No keras-gpu data" in capsys.readouterr().out


def test_first_execution_share_is_hinted_from_the_time_tags(tmp_path):
    log_dir = str(tmp_path / "logs")
    epoch = {"time/epoch_sec": 12.0, "time/train_sec": 10.0, "time/validation_sec": 1.0, "time/other_sec": 1.0}
    _write(os.path.join(log_dir, "train"), [{**epoch, "time/first_step_sec": 1.0}] * 3, step0=10)
    data = summarize(log_dir)
    assert data["runs"][0]["time"] == {
        "epochs": 3, "epoch_sec": 36.0, "train_sec": 30.0, "first_step_sec": 3.0, "validation_sec": 3.0, "other_sec": 3.0,
        "first_epoch_first_step_sec": 1.0,
    }
    assert not [h for h in data["hints"] if "first execution" in h]  # 10%
    _write(os.path.join(log_dir, "train"), [{**epoch, "time/first_step_sec": 9.0}], step0=40)
    (hint,) = [h for h in summarize(log_dir)["hints"] if "first execution" in h]
    assert "12.0 s in all, 30% of the training time" in hint
    # Later epochs paid it too (11 s over 3 epochs against 1 s in the first): "at every epoch".
    assert "1.0 s in the first epoch and 3.7 s in each later one on average" in hint and "every epoch" in hint


def test_first_execution_paid_once_is_not_called_every_epoch(tmp_path):
    # A compile in the first epoch only (as on JAX): 8 s, then 0.1 s per epoch.
    log_dir = str(tmp_path / "logs")
    epoch = {"time/epoch_sec": 12.0, "time/train_sec": 10.0, "time/validation_sec": 1.0, "time/other_sec": 1.0}
    firsts = [8.0, 0.1, 0.1]
    _write(os.path.join(log_dir, "train"), [{**epoch, "time/first_step_sec": f} for f in firsts], step0=10)
    (hint,) = [h for h in summarize(log_dir)["hints"] if "first execution" in h]
    assert "8.2 s in all, 27% of the training time" in hint and "8.0 s of it in the first epoch" in hint
    assert "every epoch" not in hint and "paid once" in hint


def test_host_rss_has_its_own_column(two_workers, capsys):
    report_cli.render(read_report(two_workers))
    out = capsys.readouterr().out
    lines = out.splitlines()
    (header,) = [line for line in lines if "allocator peak" in line]
    (host,) = [line for line in lines if "worker 1" in line and " host " in line]
    rss = host.index("286.1 MiB")
    # The RSS value sits under "host RSS peak", right of the allocator column.
    assert header.index("allocator peak") + len("allocator peak") <= rss
    assert rss < header.index("host RSS peak") + len("host RSS peak") + 2


def test_step_time_is_weighted_by_traced_steps_and_hinted(tmp_path, capsys):
    log_dir = str(tmp_path / "logs")
    trace = lambda steps, step, inp, comp, r0, r1: {  # noqa: E731
        "step_time/traced_steps": steps, "step_time/step_sec": step, "step_time/input_sec": inp,
        "step_time/compute_sec": comp, "step_time/communication_sec": 0.0, "step_time/other_sec": step - inp - comp,
        "step_time/replica_0_GPU_0/compute_sec": r0, "step_time/replica_0_GPU_0/communication_sec": 0.0,
        "step_time/replica_1_GPU_1/compute_sec": r1, "step_time/replica_1_GPU_1/communication_sec": 0.0,
    }
    _write(os.path.join(log_dir, "train"), [trace(10, 0.01, 0.008, 0.001, 0.001, 0.001), trace(30, 0.01, 0.0, 0.009, 0.003, 0.009)], step0=100)
    st = summarize(log_dir)["runs"][0]["step_time"]
    # 10 steps 80% input, 30 steps 0% input: 20% over the 40 traced steps.
    assert (st["traces"], st["steps"]) == (2, 40)
    assert st["shares"]["input"] == pytest.approx(0.2)
    assert st["input_sec"] + st["compute_sec"] + st["communication_sec"] + st["other_sec"] == pytest.approx(st["step_sec"])
    assert st["replica_labels"] == ["0_GPU_0", "1_GPU_1"]
    assert [r["compute_sec"] for r in st["replicas"]] == pytest.approx([0.0025, 0.007])
    hints = summarize(log_dir)["hints"]
    assert not [h for h in hints if "input-bound" in h]
    (slow,) = [h for h in hints if "slow replica" in h]
    assert slow.startswith("chief: slow replica: replica 1 (GPU:1) computes 2.8x") and "40 traced steps" in slow
    _write(os.path.join(log_dir, "train"), [trace(60, 0.01, 0.008, 0.001, 0.001, 0.001)], step0=200)
    (inp,) = [h for h in summarize(log_dir)["hints"] if "input-bound" in h]
    assert "input-bound: 56% of each step waits for input" in inp
    from keras_gpu.cli.main import main

    assert main(["report", log_dir]) == 0
    out = capsys.readouterr().out
    for text in ("Where the time goes", "56%", "Per replica", "1_GPU_1"):
        assert text in out, text


def test_every_tag_is_charted_and_read_by_the_report(tmp_path):
    import re

    from keras_gpu.output import tags
    from keras_gpu.output.layout import CHARTS

    fields = {"device": "GPU_0", "replica": "1_GPU_1", "gpu": "0"}
    scalar_tags = [t for t in tags.TAGS if not t.text]
    values = {t.name(**{f: fields[f] for f in t.fields}): float(i + 1) for i, t in enumerate(scalar_tags)}
    log_dir = str(tmp_path / "logs")
    _write(os.path.join(log_dir, "train"), [values], step0=5)
    charted = [t for t in scalar_tags if t.chart is not None]
    for name in values:
        matching = [title for _, title, regex in CHARTS if re.match(regex, name)]
        tag = tags.match(name)[0]
        assert len(matching) == (1 if tag in charted else 0), name
    (run,) = summarize(log_dir)["runs"]
    assert run["keras_gpu_tags"] == sorted(values)
    step_parts = ("step_sec", "input_sec", "compute_sec", "communication_sec", "transfer_sec", "other_sec", "host_sec")
    found = (
        {f"throughput/{k}" for k in run["throughput"]}
        | {f"time/{k}" for k in run["time"] if k != "epochs"}
        | {f"step_time/{k}" for k in step_parts}
        | {
            f"step_time/replica_{label}/{k}"
            for label in run["step_time"]["replica_labels"]
            for k in ("compute_sec", "communication_sec")
        }
        | {f"memory/allocator/{d}/current_bytes" for d in run["memory"]["allocator_peak_bytes"]}
        | {f"memory/allocator/{d}/pool_bytes" for d in run["memory"]["pools"]}
        | {f"gpu/{g}/{m}" for g, ms in run["memory"]["gpus"].items() for m in ms}
        | {f"placement/{k}" for k in run["placement_counts"]}
        | {f"cluster/{part}_sec/{stat}" for part in ("busy", "input", "communication") for stat in run["cluster"][part]}
    )
    if run["cluster"]["gathers"]:
        found |= {
            "cluster/slowest_worker", "cluster/imbalance", "cluster/straggler_part", "cluster/part_sec",
            "cluster/part_median_sec", "cluster/excess_sec", "cluster/others_spread_sec", "cluster/slowdown",
            "cluster/slowdown_worker", "cluster/slowdown_median",
        }
    if run["cluster"]["workers_reporting"] is not None:
        found.add("cluster/workers_reporting")
    last = {"threshold": "score_threshold", "workers_out": "workers_out", "slowest_score": "slowest_score",
            "straggler_so_far": "straggler"}
    found |= {f"cluster/{tag}" for key, tag in last.items() if run["cluster"][key] is not None}
    if run["memory"]["host_rss_peak_bytes"] is not None:
        found |= {"memory/host/rss_bytes", "memory/host/peak_rss_bytes"}
    found |= {"step_time/traced_steps", "memory/allocator/GPU_0/peak_bytes", "memory/allocator/GPU_0/run_peak_bytes"}
    # `keras-gpu scale` writes its own run; the report shows its rows from DIR/scale/scale.json
    # (tests/test_cli_scale.py checks that).
    found |= {t.pattern for t in tags.TAGS if t.callback == "keras-gpu scale"}
    # `keras-gpu tune` likewise: its rows from DIR/tune/tune.json (tests/test_cli_tune.py checks that).
    found |= {t.pattern for t in tags.TAGS if t.callback == "keras-gpu tune"}
    assert set(values) <= found, sorted(set(values) - found)


def test_host_peak_prefers_the_peak_rss_tag(tmp_path):
    log_dir = str(tmp_path / "logs")
    _write(os.path.join(log_dir, "train"), [
        {"memory/host/rss_bytes": 100.0, "memory/host/peak_rss_bytes": 150.0},
        {"memory/host/rss_bytes": 90.0, "memory/host/peak_rss_bytes": 150.0},
    ])
    assert summarize(log_dir)["runs"][0]["memory"]["host_rss_peak_bytes"] == 150.0


def test_format_bytes_uses_binary_units():
    from keras_gpu.core.units import format_bytes

    assert [format_bytes(n) for n in (0, 1023, 1536, 7e6, 3 * 2**30, 5 * 2**40)] == [
        "0 B", "1023 B", "1.5 KiB", "6.7 MiB", "3.0 GiB", "5.0 TiB",
    ]


# A run TensorFlow wrote: keras_gpu.callbacks() and Keras' own TensorBoard
# callback on the TensorFlow backend (tests/data/make_tf_run.py writes it).
TF_RUN = os.path.join(os.path.dirname(__file__), "data", "tf_run")

_REPORT_IN_A_FRESH_PROCESS = """
import io, json, sys
from rich.console import Console
from keras_gpu.cli.main import main
from keras_gpu.cli.report import render
from keras_gpu.output.reader import read_report

report = read_report(sys.argv[1])
out = io.StringIO()
render(report, Console(file=out, width=200))
code = main(["report", sys.argv[1], "--json"])
print("RESULT", json.dumps({
    "code": code, "table": out.getvalue(), "runs": len(report.runs),
    "tensorflow": "tensorflow" in sys.modules, "keras": "keras" in sys.modules,
}))
"""


def test_report_reads_a_tensorflow_run_without_importing_tensorflow():
    # TensorFlow is installed here: TensorBoard's own EventFileLoader would import it.
    import subprocess
    import sys

    from tests._util import subprocess_env

    env = subprocess_env()
    env.pop("TF_CPP_MIN_LOG_LEVEL")  # TensorFlow's banner would show on stderr
    proc = subprocess.run(
        [sys.executable, "-c", _REPORT_IN_A_FRESH_PROCESS, TF_RUN], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    result = json.loads(line[len("RESULT "):])
    assert (result["code"], result["runs"], result["tensorflow"], result["keras"]) == (0, 1, False, False)
    assert "Throughput" in result["table"] and "Where the time goes" in result["table"]


def test_a_tensorflow_run_is_read_whole():
    scalars = read_scalars(os.path.join(TF_RUN, "train"))
    assert [s for s, _ in scalars["epoch_loss"]] == [0, 1]  # what tf.summary wrote (Keras' TensorBoard)
    assert [s for s, _ in scalars["throughput/steady_samples_per_sec"]] == [64, 128]  # what keras-gpu wrote
    assert scalars["step_time/traced_steps"] == [(20, 10.0)]


def test_steady_rate_is_the_end_of_fit_figure():
    # ThroughputLogger's end-of-fit line gives what the epochs' steady phases
    # counted over the time they took; the report gives the same figure, from
    # each epoch's steady rate and steady seconds (train_sec - first_step_sec).
    scalars = read_scalars(os.path.join(TF_RUN, "train"))
    rates = dict(scalars["throughput/steady_samples_per_sec"])
    train, first = dict(scalars["time/train_sec"]), dict(scalars["time/first_step_sec"])
    samples = sum(rates[s] * (train[s] - first[s]) for s in rates)
    seconds = sum(train[s] - first[s] for s in rates)
    steady = summarize(TF_RUN)["runs"][0]["throughput"]["steady_samples_per_sec"]
    assert steady["mean"] == pytest.approx(samples / seconds, rel=1e-12)
    assert steady["seconds"] == pytest.approx(seconds, rel=1e-12)
    assert steady["mean"] != pytest.approx(steady["median"], rel=1e-3)  # epochs of different pace: not the median


def test_an_allocator_that_counted_nothing_is_explained_not_shown_as_zero(capsys):
    # The run's model is small: TensorFlow's CPU allocator counted none of its tensors.
    scalars = read_scalars(os.path.join(TF_RUN, "train"))
    assert {v for _, v in scalars["memory/allocator/CPU_0/peak_bytes"]} == {0.0}
    memory = summarize(TF_RUN)["runs"][0]["memory"]
    assert memory["allocator_peak_bytes"] == {}
    assert "small tensors" in memory["allocator_uncounted"]["CPU_0"]
    report_cli.render(read_report(TF_RUN))
    out = capsys.readouterr().out
    assert "not counted" in out and "counted no allocation" in out
    assert " 0 B" not in out


def test_the_slowest_input_stage_is_read_from_the_text_summaries(tmp_path, capsys):
    from keras_gpu.meters import step_time as steptime
    from keras_gpu.output.step_time_text import (
        input_stage_markdown,
        read_input_stage_markdown,
    )

    log_dir = str(tmp_path / "logs")
    run = os.path.join(log_dir, "train")

    def trace(steps, stage_name, stage_path, stage_sec, step_sec=0.01, input_sec=0.008):
        measured = steptime.StepTime(
            steps=steps, step_sec=step_sec, input_sec=input_sec, compute_sec=0.001, communication_sec=0.0,
            other_sec=step_sec - input_sec - 0.001, replicas=(), source="host",
            input_stage=steptime.InputStage(stage_name, stage_path, stage_sec),
        )
        return measured, input_stage_markdown(measured)

    writer = _writer.SummaryWriter(run)
    traces = [
        (100, *trace(10, "ParallelMapV2", "Iterator::Root::Prefetch::ParallelMapV2", 0.004)),
        (200, *trace(30, "ParallelMapV2", "Iterator::Root::Prefetch::ParallelMapV2", 0.006)),
        (300, *trace(20, "TFRecord", "Iterator::Root::Prefetch::ParallelMapV2::TFRecord", 0.009)),
    ]
    for step, measured, markdown in traces:
        writer.scalars({"step_time/traced_steps": measured.steps, "step_time/step_sec": measured.step_sec,
                        "step_time/input_sec": measured.input_sec}, step)
        writer.text("step_time/input_stage", markdown, step)
    writer.close()
    # ParallelMapV2 is named for 40 traced steps, TFRecord for 20: the stage, and its time over its 40 steps.
    st = summarize(log_dir)["runs"][0]["step_time"]
    assert st["input_stage"]["name"] == "ParallelMapV2"
    assert st["input_stage"]["path"] == "Iterator::Root::Prefetch::ParallelMapV2"
    assert st["input_stage"]["sec_per_step"] == pytest.approx((10 * 0.004 + 30 * 0.006) / 40, rel=1e-5)
    (hint,) = [h for h in summarize(log_dir)["hints"] if "input-bound" in h]
    assert "the slowest stage is ParallelMapV2 (5.5 ms per batch): raise num_parallel_calls" in hint
    from keras_gpu.cli.main import main

    assert main(["report", log_dir]) == 0
    out = capsys.readouterr().out
    assert "the slowest input stage is ParallelMapV2 (Iterator::Root::Prefetch::ParallelMapV2), 5.5 ms per batch" in out
    # Markdown that is not a stage table reads as none.
    assert read_input_stage_markdown("| a | b |\n|---|---|\n| 1 | 2 |") is None


def test_the_records_are_the_json_and_the_hints_read_them(two_workers):
    from keras_gpu.output.report_records import (
        MemorySummary,
        PlacementDigest,
        Report,
        RunSummary,
        SeriesStats,
    )

    report = read_report(two_workers)
    assert isinstance(report, Report) and all(isinstance(r, RunSummary) for r in report.runs)
    assert report.as_dict() == summarize(two_workers)
    chief = report.runs[0]
    assert isinstance(chief.throughput.samples_per_sec, SeriesStats) and chief.throughput.mfu is None
    assert chief.throughput.samples_per_sec.mean == pytest.approx(300 / (1 / 10 + 1 / 12 + 1 / 11))
    assert isinstance(chief.memory, MemorySummary) and chief.memory.gpus["0"]["utilization_percent"].mean == 30.0
    assert isinstance(chief.placement, PlacementDigest) and chief.placement.top_fallbacks[0] == ("Unique", 2)
    assert chief.time is None and chief.step_time is None and chief.cluster is None
    # A series never logged is left out of the JSON, not written as null.
    assert set(report.as_dict()["runs"][0]["throughput"]) == {"samples_per_sec", "steps_per_sec"}
    # A run with nothing keras-gpu measured is left out.
    _write(os.path.join(two_workers, "other"), [{"epoch_loss": 1.0}])
    assert [r.run for r in read_report(two_workers).runs] == [r.run for r in report.runs]


def test_what_the_writer_turns_into_tags_reads_back_into_the_same_records(tmp_path):
    # Records -> tags (output.step_time_tags) and tags -> records (output.tag_records) through the same tables.
    from keras_gpu.meters.cluster_view import summarize_rows
    from keras_gpu.meters.step_record import InputStage, ReplicaTime, StepTime
    from keras_gpu.output.step_time_tags import cluster_values, step_time_values
    from keras_gpu.output.step_time_text import input_stage_markdown
    from keras_gpu.output.tag_records import read_cluster, read_step_time

    measured = StepTime(
        steps=12, step_sec=0.5, input_sec=0.25, compute_sec=0.125, communication_sec=0.0625, other_sec=0.0625,
        replicas=(ReplicaTime(0.125, 0.0625), ReplicaTime(0.25, 0.03125)), source="gpu",
        input_stage=InputStage("ParallelMapV2", "Iterator::Root::ParallelMapV2", 0.25),
    )
    nan = float("nan")
    # Rows as ROW_FIELDS: available, step, input, compute, communication, other, busy, traced steps, period.
    rows = [[1.0, 0.5, 0.0, 0.25, 0.25, 0.0, 0.25, 8.0, 8.0], [1.0, 0.5, nan, 0.5, 0.0, 0.0, 0.5, 8.0, 8.0]]
    gather = summarize_rows(rows)
    run = os.path.join(str(tmp_path), "train")
    writer = _writer.SummaryWriter(run)
    writer.scalars({**step_time_values(measured, ["0_GPU_0", "1_GPU_1"]), **cluster_values(gather)}, 7)
    writer.text("step_time/input_stage", input_stage_markdown(measured), 7)
    writer.close()
    from keras_gpu.output.reader import read_texts

    scalars, texts = read_scalars(run), read_texts(run)
    back = read_step_time(scalars, texts)
    assert back.traces == 1 and back.replica_labels == ("0_GPU_0", "1_GPU_1")
    for field in ("steps", "step_sec", "input_sec", "compute_sec", "communication_sec", "other_sec", "replicas"):
        assert getattr(back.step, field) == getattr(measured, field), field  # all exact in float32
    assert back.step.input_stage == measured.input_stage
    cluster = read_cluster(scalars)
    assert (cluster.gathers, cluster.straggler, cluster.imbalance) == (1, 1, 0.5)
    assert cluster.workers_reporting == 2.0
    assert cluster.busy == dict(zip(("min", "median", "max"), gather.busy)) == {"min": 0.25, "median": 0.375, "max": 0.5}
    assert cluster.input == {"min": 0.0, "median": 0.0, "max": 0.0}  # the worker that measured no input wait is left out
    assert cluster.sentence.startswith("worker 1 is the straggler")


def test_runs_are_in_worker_order_in_the_report_its_json_and_the_tables(tmp_path, capsys):
    from keras_gpu.cli.main import main

    log_dir = str(tmp_path / "logs")
    for k in (10, 2, 0, 1, 11, 3):
        _write(os.path.join(log_dir, "worker_0" if k == 0 else f"worker_{k}", "train"),
               [{"throughput/samples_per_sec": 100.0 + k, "throughput/steps_per_sec": 1.0}])
    os.rename(os.path.join(log_dir, "worker_0", "train"), os.path.join(log_dir, "train"))
    os.rmdir(os.path.join(log_dir, "worker_0"))
    order = ["chief", "worker 1", "worker 2", "worker 3", "worker 10", "worker 11"]
    assert [r.label for r in read_report(log_dir).runs] == order
    assert main(["report", log_dir, "--json"]) == 0
    assert [r["label"] for r in json.loads(capsys.readouterr().out)["runs"]] == order
    assert main(["report", log_dir]) == 0
    table = [line.split()[1:3] for line in capsys.readouterr().out.splitlines() if "train" in line]
    assert [" ".join(cells) if cells[0] == "worker" else cells[0] for cells in table] == order


def test_the_cluster_table_gives_each_slowest_worker_as_the_json_does(tmp_path, capsys):
    from benchmarks.studies.straggler_scale import write_log_dir
    from keras_gpu.cli.main import main

    log_dir = str(tmp_path / "logs")
    write_log_dir(log_dir, 12, straggler=7, gathers=4, seed=2)
    assert main(["report", log_dir, "--json"]) == 0
    cluster = json.loads(capsys.readouterr().out)["cluster"]
    assert main(["report", log_dir]) == 0
    out = capsys.readouterr().out
    assert "stood out" in out and "listed" in out
    for s in cluster["slowest_workers"]:
        mark = " (straggler)" if s["worker"] == cluster["straggler"] else ""
        cells = [f"worker {s['worker']}{mark}", f"{s['clear_gathers']} of 4", f"{s['listed_gathers']} of 4",
                 f"{s['score']:.1f}", f"{s['imbalance']:.0%}", s["part"]]
        assert any(all(c in line for c in cells) for line in out.splitlines()), (cells, out)
