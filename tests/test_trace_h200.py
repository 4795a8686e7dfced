"""keras-gpu's reading of three traces it recorded on an NVIDIA H200 (JAX, CUDA 13): see tests/data/h200_jax.NOTICE.md.

The expected numbers are the hand numbers of the traces' notice, with
tolerances of their last printed digit.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import threading

import pytest

from keras_gpu.cli.main import main
from keras_gpu.meters import kernels, xspace
from keras_gpu.meters import step_time as steptime

DATA = os.path.join(os.path.dirname(__file__), "data")
TRANSFORMER = os.path.join(DATA, "h200_jax_transformer_bf16.xplane.pb")
SMALL_MLP = os.path.join(DATA, "h200_jax_small_mlp.xplane.pb")
CUPTI_FAILED = os.path.join(DATA, "h200_jax_mlp_cupti_failed.xplane.pb")
MULTI_WORKER = os.path.join(DATA, "gpu_multi_worker.xplane.pb")
MS = 1e-3


@pytest.fixture(scope="module")
def read():
    cache = {}

    def analyze(path):
        if path not in cache:
            cache[path] = steptime.analyze(xspace.load(path))
        return cache[path]

    return analyze


# -- 1. what a trace cannot show ---------------------------------------------------------


def test_a_gpu_jobs_trace_without_device_plane_measures_no_device_part(read):
    st = read(CUPTI_FAILED)
    assert (st.steps, st.step_source) == (20, "host markers")
    assert st.step_sec == pytest.approx(1.12 * MS, abs=0.005 * MS)
    assert st.unmeasured.startswith("no GPU activity in this trace: the GPU profiler did not start")
    assert "cuda 13000" in st.unmeasured  # the trace's metadata names the GPU
    for part in ("compute", "communication", "transfer", "other", "host"):
        assert math.isnan(getattr(st, f"{part}_sec")), part
    assert st.devices == () and st.kernels == () and st.input_sec > 0  # the host's input wait is measured
    assert steptime.verdict(st)[0] == st.unmeasured
    data = st.as_dict()
    assert data["compute_sec"] is None and data["other_sec"] is None and data["unmeasured"] == st.unmeasured


def test_a_host_only_trace_of_a_cpu_job_is_not_called_unmeasured():
    from tests._xspace import space

    host_only = space({"/host:CPU": {"python": [("PjitFunction(train_step)", 0, 100)]}})
    assert steptime.analyze(host_only).unmeasured == ""
    # The caller knows the job ran on GPUs: the same trace says so.
    st = steptime.analyze(host_only, expect_device="GPU")
    assert st.unmeasured.startswith("no GPU activity in this trace") and math.isnan(st.compute_sec)


def test_cli_on_the_failed_trace_says_so_and_prints_no_compute_share(capsys):
    assert main(["trace", CUPTI_FAILED]) == 0
    out = capsys.readouterr().out
    assert "no GPU activity in this trace: the GPU profiler did not start" in out
    assert out.count("no GPU activity") == 1
    lines = [line.split() for line in out.splitlines()]
    assert not any(words and words[0] in ("compute", "communication", "transfer", "other") for words in lines)
    assert "nan" not in out.lower().replace("nanos", "")
    assert main(["trace", CUPTI_FAILED, "--json"]) == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert row["compute_sec"] is None and row["unmeasured"].startswith("no GPU activity")


# -- 2. the host-bound verdict -----------------------------------------------------------


def test_small_mlp_is_host_bound_with_the_hosts_numbers(read):
    st = read(SMALL_MLP)
    assert (st.steps, st.source) == (19, "gpu")
    assert st.step_sec == pytest.approx(1.92 * MS, abs=0.005 * MS)
    assert st.compute_sec == pytest.approx(0.028 * MS, abs=0.0005 * MS)
    assert st.host_sec == pytest.approx(1.50 * MS, abs=0.005 * MS)
    work = {w.name.split(" (")[0]: w for w in st.host_work}
    assert work["dispatch of the compiled step"].sec_per_step == pytest.approx(0.42 * MS, abs=0.005 * MS)
    assert work["Keras' log conversion"].sec_per_step == pytest.approx(0.48 * MS, abs=0.005 * MS)
    assert work["`Layer.__setattr__`"].sec_per_step == pytest.approx(0.30 * MS, abs=0.005 * MS)
    assert "`PjitFunction(train_step)`" in work["dispatch of the compiled step"].name
    (hint,) = steptime.verdict(st)
    assert hint.startswith("host-bound: the GPU computes 0.028 ms of a 1.92 ms step (1.4%)")
    assert "the host spends 1.50 ms per step outside the compiled step" in hint
    for fragment in ("PjitFunction(train_step)`) 0.42 ms", "(`pythonify_logs`) 0.48 ms", "`Layer.__setattr__` 0.30 ms",
                     "steps_per_execution=N", "a bigger batch", "`jit_compile=True`"):
        assert fragment in hint


def test_transformer_is_not_host_bound_and_its_idle_share_is_explained(read):
    st = read(TRANSFORMER)
    assert (st.steps, st.source) == (20, "gpu")
    assert st.step_sec == pytest.approx(8.47 * MS, abs=0.005 * MS)
    assert 5.15 * MS <= st.compute_sec <= 5.20 * MS
    idle = st.step_sec - st.device_busy_sec
    assert idle == pytest.approx(3 * MS, abs=0.5 * MS)  # "about 3 ms idle between" steps
    (hint,) = steptime.verdict(st)
    assert not hint.startswith("host-bound")
    assert hint.startswith(f"the GPU is idle {1e3 * idle:.2f} ms of each 8.47 ms step")
    assert "waiting for the step's result" in hint and "waits for each step's result" in hint


def test_host_bound_needs_a_mostly_idle_device_and_the_host_to_explain_it(read):
    import dataclasses

    st = read(SMALL_MLP)
    # The same step with the host's part outside the compiled step small: the idle time is not the host's.
    assert steptime.verdict(dataclasses.replace(st, host_sec=0.1 * st.other_sec))[0].startswith("the GPU is idle")
    # A CPU-only breakdown gets no device verdict; its host share (the largest part) is host-bound on the host.
    (hint,) = steptime.verdict(dataclasses.replace(st, source="host"))
    assert "GPU" not in hint and hint.startswith(f"host-bound: {st.share('host'):.0%} of each step is host time")


def test_cli_shows_the_host_part_and_the_host_bound_verdict(capsys):
    assert main(["trace", SMALL_MLP]) == 0
    out = capsys.readouterr().out
    assert "    host             1.500 ms   78%  outside the compiled step" in out
    assert "0.421 ms  dispatch of the compiled step (`PjitFunction(train_step)`)" in out
    assert "hint: host-bound: the GPU computes 0.028 ms of a 1.92 ms step" in out


# -- 3. the kernel view -----------------------------------------------------------------


def test_transformer_kernel_view_finds_flash_attention(read):
    st = read(TRANSFORMER)
    classes = {k.name: k for k in st.kernel_classes}
    assert classes["attention"].sec_per_step == pytest.approx(1.02 * MS, abs=0.005 * MS)
    assert classes["attention"].share == pytest.approx(0.20, abs=0.01)
    kernel_ms = sum(k.sec_per_step for k in st.kernel_classes if k.name != "copy") / MS
    assert 5.15 <= kernel_ms <= 5.20  # kernels 5.15-5.20 ms per step (xprof: 5.19)
    assert sum(k.share for k in st.kernel_classes) == pytest.approx(1.0)
    assert set(classes) <= {"attention", "matmul", "elementwise", "copy"}
    top = st.kernels[0]
    assert (top.kind, top.name.startswith("cudnn_generated_fort_native_sdpa_sm90_flash_bprop")) == ("attention", True)
    assert all(k.kind == "matmul" for k in st.kernels if k.name.startswith(("nvjet", "gemm_fusion")))


@pytest.mark.parametrize(
    "name, kind",
    [
        ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7", "attention"),
        ("void cudnn::fusion::compute_dot_do_o_specialized<true, 64>(void const*)", "attention"),
        ("void cudnn::fusion::convert_dq_to_16bits<true>(void const*, void*)", "attention"),
        ("nvjet_sm90_tst_128x160_64x5_2x1_v_bz_NNT", "matmul"),
        ("gemm_fusion_dot_general_5", "matmul"),
        ("cutlass_80_tensorop_s1688gemm_128x128", "matmul"),
        ("sm90_xmma_fprop_implicit_gemm_bf16", "convolution"),
        ("cudnn::detail::dgrad2d_alg1_1", "convolution"),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "collective"),
        ("MemcpyH2D", "copy"),
        ("memcpy32_post", "copy"),
        ("loop_convert_fusion", "elementwise"),
        ("void Eigen::internal::EigenMetaKernel<Eigen::TensorConversionOp<Eigen::half>>(int)", "elementwise"),
    ],
)
def test_kernel_classes_by_name(name, kind):
    assert kernels.kernel_class(kernels.short_name(name)) == kind


def test_cli_lists_the_kernel_classes_and_top_kernels(capsys):
    assert main(["trace", TRANSFORMER]) == 0
    out = capsys.readouterr().out
    (line,) = [line for line in out.splitlines() if line.strip().startswith("kernels ")]
    assert "attention 1.023 ms (20%)" in line
    assert "attention    cudnn_generated_fort_native_sdpa_sm90_flash_bprop" in out


# -- 4. copies are transfers ---------------------------------------------------------------


@pytest.mark.parametrize("path", [SMALL_MLP, TRANSFORMER])
def test_single_gpu_copies_are_transfers_not_communication(read, path):
    st = read(path)
    assert st.communication_sec == 0.0 and st.transfer_sec > 0
    (gpu,) = st.devices
    assert gpu.communication_sec == 0.0 and gpu.transfer_sec > 0
    assert not any("communication-bound" in h for h in steptime.verdict(st))


def test_multi_gpu_copies_are_transfers_and_no_collective_ran():
    st = steptime.analyze(xspace.load(MULTI_WORKER), num_replicas=2, gpu_replicas={4: 0, 6: 1})
    # The notice: GPU:4 and GPU:6 hold kernels and host-device copies (0.15-0.20 ms H2D, 0.04 ms D2H), no NCCL.
    assert st.communication_sec == 0.0 and 0 < st.transfer_sec < 0.24 * MS
    for device in st.devices:
        assert device.communication_sec == 0.0 and 0 < device.transfer_sec < 0.24 * MS
    assert st.input_sec + st.compute_sec + st.transfer_sec + st.other_sec == pytest.approx(st.step_sec)


# -- the callback's side: stop tracing, the text summaries, the report ------------------------


class _FakeProfiler:
    def __init__(self):
        self.starts = 0

    def start(self, logdir):
        self.starts += 1

    def stop(self):
        pass

    def mark(self, step):
        import contextlib

        return contextlib.nullcontext()


def test_one_trace_without_gpu_activity_stops_tracing_in_the_process(tmp_path, monkeypatch, caplog):
    from keras_gpu.core import log as _log
    from keras_gpu.hooks import device_profiler
    from keras_gpu.hooks import step_time_trace as trace

    monkeypatch.setattr(device_profiler, "_FAILED", threading.Event())
    monkeypatch.setattr(_log, "_process", _log.Once())
    staging = tmp_path / "staging"
    staging.mkdir()
    shutil.copy(CUPTI_FAILED, staging / "host.xplane.pb")
    job = trace.TraceJob(
        profile_dir=str(tmp_path / "profile"), staging=str(staging), keep=False, steps=20, wall_sec=0.0224, step=40,
        steps_per_mark=1, num_replicas=1, labels=("0_GPU_0",), gpu_replicas={}, expect_device="GPU",
    )
    written = []
    with caplog.at_level(logging.WARNING, logger="keras_gpu"):
        trace.read_trace(job, _log.Once(), 5, lambda result, labels, step: written.append(result))
        trace.read_trace(job, _log.Once(), 5, lambda result, labels, step: written.append(result))  # staging is gone
    (result,) = written
    assert result.unmeasured.startswith("no GPU activity") and device_profiler.failed()
    warnings = [r for r in caplog.records if "no GPU activity" in r.getMessage()]
    assert len(warnings) == 1 and "starts no more traces in this process" in warnings[0].getMessage()
    # A later fit's schedule in the same process never starts the profiler.
    profiler = _FakeProfiler()
    schedule = trace.TraceSchedule(profiler, [("0_CPU_0", "/device:CPU:0")], warmup_steps=1, profile_steps=2)
    schedule.epoch_begin(0)
    for batch in range(6):
        assert schedule.batch_end(batch) is None
    assert profiler.starts == 0 and not schedule.tracing and schedule.next_batch == math.inf


def test_a_schedule_starts_the_profiler_while_no_trace_failed(monkeypatch):
    from keras_gpu.hooks import device_profiler
    from keras_gpu.hooks import step_time_trace as trace

    monkeypatch.setattr(device_profiler, "_FAILED", threading.Event())
    profiler = _FakeProfiler()
    schedule = trace.TraceSchedule(profiler, [("0_CPU_0", "/device:CPU:0")], warmup_steps=1, profile_steps=2)
    schedule.epoch_begin(0)
    schedule.batch_end(0)
    assert profiler.starts == 1 and schedule.tracing
    shutil.rmtree(schedule.staging, ignore_errors=True)
    assert device_profiler.expected_device(["/device:CPU:0", "/job:worker/replica:0/task:0/device:GPU:1"]) == "GPU"
    assert device_profiler.expected_device(["/device:CPU:0"]) is None


def _log_traces(run_dir, results):
    """Write breakdowns the way StepTimeLogger does (its fit output), at steps 100, 200, ..."""
    from keras_gpu.hooks.step_time_logger import _FitOutput
    from keras_gpu.output import writer as _writer

    writer = _writer.SummaryWriter(run_dir)
    out = _FitOutput(writer)
    for i, result in enumerate(results):
        out.write(result, ("0_GPU_0",), 100 * (i + 1))
    return writer


def test_report_of_a_failed_trace_says_so_and_shows_no_compute(read, tmp_path, capsys):
    from keras_gpu.output.reader import summarize

    log_dir = str(tmp_path / "logs")
    _log_traces(os.path.join(log_dir, "train"), [read(CUPTI_FAILED)]).close()
    (run,) = summarize(log_dir)["runs"]
    st = run["step_time"]
    assert st["compute_sec"] is None and st["shares"]["compute"] is None
    assert st["step_sec"] == pytest.approx(1.12 * MS, abs=0.005 * MS)
    assert st["unmeasured"].startswith("no GPU activity in this trace: the GPU profiler did not start")
    assert main(["report", log_dir]) == 0
    out = capsys.readouterr().out
    flat = " ".join(out.split())  # rich wraps long lines
    assert "no GPU activity in this trace: the GPU profiler did not start" in flat
    assert "compute, communication, transfer, other and host are not measured" in flat
    assert "%" not in out.split("Where the time goes")[1].split("chief:")[0].replace("7%", "")  # input 7% only


def test_report_shows_the_kernel_view_the_host_verdict_and_the_steady_mfu(read, tmp_path, capsys):
    from keras_gpu.output.reader import summarize

    log_dir = str(tmp_path / "logs")
    writer = _log_traces(os.path.join(log_dir, "train"), [read(SMALL_MLP), read(TRANSFORMER)])
    writer.scalars({"throughput/mfu": 0.08, "throughput/steady_mfu": 0.12}, 200)
    writer.close()
    (run,) = summarize(log_dir)["runs"]
    st = run["step_time"]
    assert st["transfer_sec"] > 0 and st["communication_sec"] == 0.0
    assert st["kernel_classes"]["attention"]["sec_per_step"] == pytest.approx(1.02 * MS, abs=0.005 * MS)
    assert run["throughput"]["steady_mfu"]["mean"] == pytest.approx(0.12)
    assert main(["report", log_dir]) == 0
    out = capsys.readouterr().out
    flat = " ".join(out.split())  # rich wraps long lines
    assert "steady 12.0% (wall-clock 8.0%)" in flat
    assert "kernel time per step by class: elementwise" in flat and "attention 1.02 ms (20%)" in flat
    assert "cudnn_generated_fort_native_sdpa_sm90_flash_bprop" in flat
    # The two traces' mean: 19 steps of 1.92 ms and 20 of 8.47 ms, the GPU busy 41%: the idle share is explained.
    assert "the GPU is idle" in flat and "Keras' log conversion" in flat


def test_the_end_of_fit_line_of_a_failed_trace_says_so_without_device_shares(read, tmp_path, caplog):
    from keras_gpu.hooks.step_time_logger import StepTimeLogger

    logger = StepTimeLogger(str(tmp_path))
    with caplog.at_level(logging.INFO, logger="keras_gpu"):
        logger._log_breakdown(read(CUPTI_FAILED), ["replica 0 (GPU:0)"])
        logger._log_breakdown(read(SMALL_MLP), ["replica 0 (GPU:0)"])
    failed, host_bound = (r.getMessage() for r in caplog.records)
    assert "1.12 ms per step over 20 traced steps: input 7%; no GPU activity in this trace" in failed
    assert "compute" not in failed and "nan" not in failed
    assert "compute 1%, communication 0%, transfer 0%, other 94% (host 78%)" in host_bound
    assert "Hint: host-bound: the GPU computes 0.028 ms" in host_bound


def test_report_mfu_column_without_a_steady_mfu_says_wall_clock(tmp_path, capsys):
    from keras_gpu.output import writer as _writer

    log_dir = str(tmp_path / "logs")
    writer = _writer.SummaryWriter(os.path.join(log_dir, "train"))
    writer.scalars({"throughput/mfu": 0.08, "throughput/steps_per_sec": 10.0}, 10)
    writer.close()
    assert main(["report", log_dir]) == 0
    out = capsys.readouterr().out
    assert "wall-clock 8.0%" in out and "(wall-clock" not in out  # no steady MFU logged: none shown
