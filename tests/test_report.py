"""`keras_gpu.report` and `keras-gpu report` on event files written the way the callbacks write them."""

from __future__ import annotations

import json
import os

import pytest

from keras_gpu.loggers import _writer
from keras_gpu.cli import report as report_cli
from keras_gpu.report import find_runs, read_scalars, summarize


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
    ])
    _write(os.path.join(log_dir, "worker_1", "train"), [
        {"throughput/samples_per_sec": 600.0, "throughput/steps_per_sec": 6.0},
        {"throughput/samples_per_sec": 800.0, "throughput/steps_per_sec": 8.0, "memory/host/rss_bytes": 3e8},
    ])
    with open(os.path.join(log_dir, "train", "placement.json"), "w") as f:
        json.dump({"cpu_fallbacks": [{"op_type": "Unique", "name": "a"}, {"op_type": "Unique", "name": "b"},
                                     {"op_type": "Where", "name": "c"}],
                   "ops_per_device": {"/job:localhost/replica:0/task:0/device:GPU:0": 40}}, f)
    return log_dir


def test_read_scalars_returns_steps_and_values_in_order(two_workers):
    scalars = read_scalars(os.path.join(two_workers, "train"))
    assert scalars["throughput/samples_per_sec"] == [(0, 1000.0), (1, 1200.0), (2, 1100.0)]


def test_summary_per_worker_slowest_and_hints(two_workers):
    data = summarize(two_workers)
    assert find_runs(two_workers) == ["train", os.path.join("worker_1", "train")]
    chief, worker = data["runs"]
    assert (chief["label"], chief["worker"], worker["label"], worker["worker"]) == ("chief", 0, "worker 1", 1)
    assert chief["throughput"]["samples_per_sec"]["mean"] == pytest.approx(1100.0)
    assert chief["throughput"]["samples_per_sec"]["median"] == pytest.approx(1100.0)
    assert worker["throughput"]["samples_per_sec"]["median"] == pytest.approx(700.0)
    assert chief["memory"]["allocator_peak_bytes"] == {"CPU_0": 7e6}
    assert worker["memory"]["host_rss_peak_bytes"] == 3e8
    assert chief["placement"]["cpu_fallback_ops"] == 3
    assert chief["placement"]["top_fallbacks"][0] == ("Unique", 2)
    assert data["slowest_worker"] == {"label": "worker 1", "samples_per_sec_median": 700.0}
    hints = " ".join(data["hints"])
    assert "worker 1 reports 36% lower throughput than chief" in hints
    assert "GPU 0 was busy only 30%" in hints
    assert "3 op(s) of the training step ran on the CPU" in hints
    json.dumps(data)  # serialisable


def test_cli_json_and_tables(two_workers, capsys):
    from keras_gpu.cli.main import main

    assert main(["report", two_workers, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["label"] for r in data["runs"]] == ["chief", "worker 1"]
    assert main(["report", two_workers]) == 0
    out = capsys.readouterr().out
    for text in ("Throughput", "chief", "worker 1  (slowest)", "1,100.0", "Peak memory", "6.7 MiB", "Unique x2", "Hints"):
        assert text in out, text


def test_cli_missing_directory_is_a_clear_error(tmp_path, capsys):
    from keras_gpu.cli.main import main

    assert main(["report", str(tmp_path / "nope")]) == 2
    assert "No such log directory" in capsys.readouterr().err


def test_empty_log_dir_says_so(tmp_path, capsys):
    report_cli.render(summarize(str(tmp_path)))
    assert "No keras-gpu data" in capsys.readouterr().out


def test_slow_epoch_restarts_are_hinted_but_the_first_trace_is_not(tmp_path):
    log_dir = str(tmp_path / "logs")
    # 10 steps/s: 100 steady steps take 10 s. The first epoch's 40 s (tracing) is ignored.
    _write(os.path.join(log_dir, "train"), [
        {"throughput/first_step_sec": 40.0, "throughput/steps_per_sec": 10.0},
        {"throughput/first_step_sec": 2.0, "throughput/steps_per_sec": 10.0},
    ])
    assert not [h for h in summarize(log_dir)["hints"] if "first step" in h]
    _write(os.path.join(log_dir, "train"), [{"throughput/first_step_sec": 12.0}], step0=2)
    hints = [h for h in summarize(log_dir)["hints"] if "first step" in h]
    assert len(hints) == 1 and "took 12.0 s" in hints[0] and ".cache()" in hints[0]


def test_host_peak_prefers_the_peak_rss_tag(tmp_path):
    log_dir = str(tmp_path / "logs")
    _write(os.path.join(log_dir, "train"), [
        {"memory/host/rss_bytes": 100.0, "memory/host/peak_rss_bytes": 150.0},
        {"memory/host/rss_bytes": 90.0, "memory/host/peak_rss_bytes": 150.0},
    ])
    assert summarize(log_dir)["runs"][0]["memory"]["host_rss_peak_bytes"] == 150.0


def test_format_bytes_uses_binary_units():
    from keras_gpu._units import format_bytes

    assert [format_bytes(n) for n in (0, 1023, 1536, 7e6, 3 * 2**30, 5 * 2**40)] == [
        "0 B", "1023 B", "1.5 KiB", "6.7 MiB", "3.0 GiB", "5.0 TiB",
    ]
