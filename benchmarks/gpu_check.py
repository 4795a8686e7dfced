"""Every real-GPU check of keras-gpu in one call, on the JAX and PyTorch backends of Keras.

Run it on a machine with an NVIDIA GPU, in an environment with Keras, JAX
and/or PyTorch (CUDA builds), `nvidia-ml-py` and `tensorboard`; TensorFlow is
not needed::

    python benchmarks/gpu_check.py                      # every installed backend
    python benchmarks/gpu_check.py --backends jax --json gpu_check.json

Each backend runs in its own process (`KERAS_BACKEND` is fixed per process)
on the first visible GPU. Every figure is checked against an independent
truth taken at the same moment, never against a fixed range (a backend's own
speed is not a keras-gpu defect):

1. **NVML against the driver.** `keras_gpu.core.nvml` read between two
   `nvidia-smi` readings (smi, NVML, smi, back to back): total, used and
   this process's memory, utilization, power, temperature and SM clock must
   each lie within the two `nvidia-smi` readings' range plus a tolerance
   (the driver's rounding, the drift of a few milliseconds); the sampler over
   a busy second.
2. **A Keras fit with the callbacks** (a large, matmul-bound MLP in
   `mixed_bfloat16`):
   - `throughput/samples_per_sec` against a stopwatch in the same process
     (within 2 %);
   - model FLOPs per sample against a hand count, the peak FLOP/s from the
     GPU's entry in the peak table, and the logged MFU against the
     stopwatch's rate x the hand count / the table peak (within 3 %);
   - `memory/allocator/GPU_0/current_bytes` at the end of `fit` against the
     backend's own reading (JAX `Device.memory_stats()`, PyTorch
     `torch.cuda.memory_allocated`), the run peak against the backend's peak,
     and the backend's peak counter not lowered by the `fit` (the user's
     counter is left as found).
3. **A transformer's FLOPs**: a two-block text transformer
   (`keras.layers.MultiHeadAttention`, sequence 200, width 256, 4 heads of 64,
   feed-forward 1024; `mixed_bfloat16`, which on JAX runs cuDNN flash
   attention) against :func:`hand_transformer_flops_per_sample`.
4. **A traced fit**: `StepTimeLogger`'s `compute_sec` against the sum of the
   kernel durations on the device plane of the same trace file, inside the
   trace's marked steps (read here with `keras_gpu.meters.xspace`; within 5 %).
5. **Cost on a short GPU step**, every fit timed whole with
   `time.perf_counter()` outside `fit`, `verbose=0`, interleaved with a bare
   arm that has no callback at all (a timing callback overriding a batch-end
   hook would make Keras' batch dispatch synchronous in that arm too):
   - the dispatch: Keras' `CallbackList` must be asynchronous in both arms
     (JAX and PyTorch dispatch batch-end hooks on a thread pool unless a
     callback is not `async_safe`);
   - the steady wall-clock slowdown of `keras_gpu.callbacks()` (the same
     instances fit after fit), median of the pairs, at most 0.5 %, with
     its quartiles and range;
   - the time spent inside the callbacks' hooks as a fraction of `fit`
     time (a separate timed fit), at most 0.5 %;
   - the one-off cost per fit: short fits with a fresh default set against
     bare ones, the difference of the medians, at most 2 s.
   - the weights after a dropout MLP's fit with the default set and
     per-epoch `ModelCheckpoint` and `BackupAndRestore` equal two bare fits'
     bit for bit (skipped, saying so, where the two bare fits differ).
6. **The scaling study** (`keras-gpu scale`, on JAX and on TensorFlow where
   installed): `benchmarks/scale_mlp.py` at 1, 2, 4, ... GPUs (as many as
   the machine has), 1 and 2 workers, and the CPU row (`--cpu`), printed as
   the study's table with its causes and the all-reduce's bus bandwidth; it
   passes when the study runs to the end (`--no-scale` leaves it out).

It prints a Markdown table of the figures with the hardware named, and writes
them as JSON with `--json`. A check that cannot run says why in its row
(`skip`), never with a made-up figure. Exit status: 0 when every check passes
or is skipped with a reason, 1 when one fails, 2 when it cannot run here (no
NVIDIA GPU or NVML, `nvidia-smi` missing, neither JAX nor PyTorch installed),
with one line saying why. `--smoke` runs the worker's checks at tiny sizes on
a CPU (it tests the script): the checks that need a GPU are skipped there.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

if __package__ in (None, ""):  # run as `python benchmarks/gpu_check.py`: the repository's packages
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import _ab, _cli
from benchmarks._stats import describe, median

# Thresholds of the checks.
SAMPLES_REL_TOL = 0.02
MFU_REL_TOL = 0.03
ALLOCATOR_REL_TOL, ALLOCATOR_ABS_TOL = 0.05, 64 * 2**20
KERNEL_REL_TOL, KERNEL_ABS_TOL_S = 0.05, 1e-5
OVERHEAD_MAX = 0.005
ONE_OFF_MAX_S = 2.0
SMI_FIELDS = ("uuid", "name", "memory.total", "memory.used", "utilization.gpu", "power.draw", "temperature.gpu", "clocks.sm")

# Model and run sizes. "fit": Dense widths of a large, matmul-bound MLP (bfloat16);
# "short": short GPU steps for the cost checks; "transformer": (sequence, width,
# heads, key_dim, feed-forward, vocabulary, classes). `--smoke` uses tiny sizes, to
# test the script itself on a CPU.
SIZES: dict[str, dict[str, Any]] = {
    "gpu": {"widths": (1024, 8192, 8192, 8192, 1024), "batch": 2048, "steps": 40, "epochs": 3, "window": 4,
            "short_widths": (512, 1024, 1024, 512), "short_batch": 256, "short_steps": 2000, "one_off_steps": 40,
            "busy": 8192, "transformer": (200, 256, 4, 64, 1024, 8000, 2), "transformer_batch": 512,
            "transformer_steps": 100, "smoke": False},
    "smoke": {"widths": (16, 64, 8), "batch": 32, "steps": 8, "epochs": 2, "window": 2,
              "short_widths": (8, 16, 8), "short_batch": 16, "short_steps": 20, "one_off_steps": 5, "busy": 64,
              "transformer": (8, 16, 2, 8, 32, 50, 2), "transformer_batch": 8, "transformer_steps": 8, "smoke": True},
}

BACKEND_MODULES = {"jax": "jax", "torch": "torch"}


def hand_flops_per_sample(widths: Sequence[int]) -> int:
    """Training FLOPs per sample of an MLP: 3 x (2 x in x out) per Dense layer."""
    return 3 * sum(2 * a * b for a, b in itertools.pairwise(widths))


def hand_transformer_flops_per_sample(
    seq: int, width: int, heads: int, key_dim: int, ff: int, classes: int, blocks: int = 2
) -> int:
    """Training FLOPs per sample of :func:`transformer`: 3 x its forward matmuls.

    Forward, per block: the query, key, value and output projections,
    4 x 2·L·d·(h·k); the attention products Q·Kᵀ and softmax·V, 2 x 2·L²·(h·k)
    = 4·L²·(h·k); the feed-forward, 2 x 2·L·d·f. Then the classifier,
    2·d·classes. The embedding lookup, normalisations, softmax and pooling
    are not matmuls and are not counted. Training is 3 x forward (the
    backward pass computes two products per forward one).
    """
    hk = heads * key_dim
    block = 8 * seq * width * hk + 4 * seq * seq * hk + 4 * seq * width * ff
    return 3 * (blocks * block + 2 * width * classes)


# --------------------------------------------------------------------------- results


def check(name: str, measured: Any, expected: str, ok: bool, note: str = "") -> dict[str, Any]:
    """One row of the result table."""
    return {"check": name, "measured": measured, "expected": expected, "pass": bool(ok), "note": note}


def skipped(name: str, expected: str, reason: str, measured: Any = None) -> dict[str, Any]:
    """A row for a check that could not run here: `pass` is None and `note` says why (no figure is made up)."""
    return {"check": name, "measured": measured, "expected": expected, "pass": None, "note": reason}


def bracketed(value: float, first: float, second: float, tol: float) -> bool:
    """Whether `value` lies within [min(first, second) - tol, max(first, second) + tol]."""
    return min(first, second) - tol <= value <= max(first, second) + tol


def within(value: float, reference: float, rel: float, abs_tol: float = 0.0) -> bool:
    """|value - reference| <= max(rel * |reference|, abs_tol)."""
    return abs(value - reference) <= max(rel * abs(reference), abs_tol)


def markdown(report: dict[str, Any]) -> str:
    """The report as Markdown: the hardware, then one table row per check."""
    hw = report.get("hardware", {})
    lines = [
        f"GPU: {hw.get('gpu', '?')} (driver {hw.get('driver', '?')}, {hw.get('memory_total_gib', '?')} GiB); "
        f"host: {hw.get('host', '?')}; Python {hw.get('python', '?')}; Keras {hw.get('keras', '?')}",
        "",
        "| backend | check | measured | expected | result |",
        "|---|---|---|---|---|",
    ]
    for backend, result in report.get("backends", {}).items():
        if "error" in result:
            lines.append(f"| {backend} | (run) | {result['error']} | runs | FAIL |")
            continue
        versions = result.get("versions", {})
        label = backend + (f" {versions.get(backend)}" if versions.get(backend) else "")
        for row in result["checks"]:
            note = f" ({row['note']})" if row.get("note") else ""
            verdict = "skip" if row["pass"] is None else "pass" if row["pass"] else "FAIL"
            lines.append(f"| {label} | {row['check']} | {_fmt(row['measured'])}{note} | {row['expected']} | {verdict} |")
    return "\n".join(lines)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


# --------------------------------------------------------------------------- can it run here?


def preflight() -> str | None:
    """Why this machine cannot run the GPU checks, or None when it can."""
    import logging

    if importlib.util.find_spec("pynvml") is None:
        return "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
    from keras_gpu.core import nvml

    logging.getLogger("keras_gpu").setLevel(logging.WARNING)  # the reason below is the one line
    if not nvml.available():
        return f"no NVIDIA GPU: NVML is not available ({nvml.unavailable_reason() or 'unknown reason'})"
    if nvml.device_count() < 1:
        return "no NVIDIA GPU: NVML lists no device"
    if shutil.which("nvidia-smi") is None:
        return "nvidia-smi is not on PATH (the driver's own reading to compare NVML with)"
    return None


def installed_backends(requested: Sequence[str]) -> list[str]:
    return [b for b in requested if importlib.util.find_spec(BACKEND_MODULES[b]) is not None]


# --------------------------------------------------------------------------- nvidia-smi


def parse_smi_gpu(text: str) -> dict[str, dict[str, Any]]:
    """`nvidia-smi --query-gpu=<SMI_FIELDS> --format=csv,noheader,nounits` output, by GPU UUID.

    Numbers become floats; `[N/A]` and `[Not Supported]` become None.
    """
    out: dict[str, dict[str, Any]] = {}
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(SMI_FIELDS):
            continue
        row: dict[str, Any] = {}
        for field, raw in zip(SMI_FIELDS, parts):
            if field in ("uuid", "name"):
                row[field] = raw
                continue
            try:
                row[field] = float(raw)
            except ValueError:
                row[field] = None
        out[row["uuid"]] = row
    return out


def parse_smi_apps(text: str) -> dict[int, float]:
    """`nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits`: MiB by pid."""
    out: dict[int, float] = {}
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit():
            try:
                out[int(parts[0])] = out.get(int(parts[0]), 0.0) + float(parts[1])
            except ValueError:
                pass
    return out


def _smi(*args: str) -> str:
    return subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, check=True, timeout=30).stdout


# --------------------------------------------------------------------------- the worker (one backend)


def _busy(size: int, seconds: float) -> None:
    """Keep the GPU busy with `size` x `size` matmuls for about `seconds`."""
    import keras

    a = keras.random.normal((size, size), dtype="bfloat16")
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(10):
            a = keras.ops.tanh(keras.ops.matmul(a, a) * 1e-4)
        keras.ops.convert_to_numpy(keras.ops.cast(a[0, 0], "float32"))  # wait for the GPU


def _smi_reading(uuid: str) -> tuple[dict[str, Any] | None, dict[int, float]]:
    """nvidia-smi's row for the GPU `uuid` and its compute apps' memory (MiB by pid), read now."""
    gpu = parse_smi_gpu(_smi(f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits")).get(uuid)
    return gpu, parse_smi_apps(_smi("--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"))


# (row name, GpuSample attribute, nvidia-smi field, NVML value -> smi unit, tolerance from the readings' max, range)
_BRACKETED: tuple[tuple[str, str, str, float, Callable[[float], float], tuple[float, float]], ...] = (
    ("memory used (MiB)", "memory_used_bytes", "memory.used", 2.0**-20, lambda top: 16.0, (0.0, float("inf"))),
    ("utilization (%)", "utilization_percent", "utilization.gpu", 1.0, lambda top: 10.0, (0.0, 100.0)),
    ("power (W)", "power_watts", "power.draw", 1.0, lambda top: max(0.10 * top, 20.0), (1.0, 1500.0)),
    ("temperature (C)", "temperature_c", "temperature.gpu", 1.0, lambda top: 2.0, (5.0, 110.0)),
    ("SM clock (MHz)", "sm_clock_mhz", "clocks.sm", 1.0, lambda top: max(0.05 * top, 30.0), (100.0, 4000.0)),
)
PROCESS_TOL_MIB = 16.0


def nvml_checks(size: dict[str, Any]) -> list[dict[str, Any]]:
    """keras_gpu.core.nvml read between two nvidia-smi readings on CUDA device 0, while this process holds GPU memory."""
    from keras_gpu.core import nvml

    expected = "within two nvidia-smi readings around it"
    if not nvml.available():
        return [skipped("NVML against nvidia-smi", expected,
                        f"NVML is not available here ({nvml.unavailable_reason() or 'unknown reason'})")]
    if shutil.which("nvidia-smi") is None:
        return [skipped("NVML against nvidia-smi", expected, "nvidia-smi is not on PATH")]
    info = next((g for g in nvml.static_info() if g.index == nvml.tf_to_nvml_index(0)), None)
    if info is None or not info.uuid:
        return [check("NVML static reading of GPU 0", None, "its name and UUID", False)]
    before, apps_before = _smi_reading(info.uuid)
    mine = nvml.sample(0)  # smi, NVML, smi: back to back
    after, apps_after = _smi_reading(info.uuid)
    if mine is None or before is None or after is None:
        return [check("NVML reading of GPU 0", None, "a reading and its nvidia-smi rows", False)]
    mib = 2**20
    rows = []
    total = mine.memory_total_bytes
    rows.append(check("NVML memory total (GiB)", (total or 0) / 2**30, f"nvidia-smi {before['memory.total'] / 1024:.4g} GiB, ±1%",
                      total is not None and within(total, before["memory.total"] * mib, 0.01)))
    for name, attr, key, unit, tolerance, (low, high) in _BRACKETED:
        value = getattr(mine, attr)
        value = None if value is None else value * unit
        first, second = before.get(key), after.get(key)
        in_range = value is not None and low <= value <= high
        if first is None or second is None:
            rows.append(check(f"NVML {name}", value, f"{low:g}..{high:g}", in_range, "nvidia-smi does not report it"))
            continue
        tol = tolerance(max(first, second))
        rows.append(check(f"NVML {name}", value, f"nvidia-smi {first:g} then {second:g}, ±{tol:.3g}",
                          in_range and bracketed(value, first, second, tol)))
    proc = mine.process_memory_bytes
    pid = os.getpid()
    if pid in apps_before and pid in apps_after:
        rows.append(check("NVML this process's memory (MiB)", None if proc is None else proc / mib,
                          f"nvidia-smi {apps_before[pid]:g} then {apps_after[pid]:g}, ±{PROCESS_TOL_MIB:g}",
                          proc is not None and bracketed(proc / mib, apps_before[pid], apps_after[pid], PROCESS_TOL_MIB)))
    else:
        rows.append(check("NVML this process's memory (MiB)", None if proc is None else proc / mib,
                          "nvidia-smi lists this pid", proc is None,
                          "nvidia-smi does not list this pid (another PID namespace): NVML must say not available too"))
    # The sampler over a busy second: windows hold samples, the mean is at most the max.
    from keras_gpu.core.nvml_sampler import GpuSampler

    sampler = GpuSampler([0], 0.05, max_idle_s=None).start()
    try:
        _busy(size["busy"], 1.5)
    finally:
        sampler.stop(timeout=5, final_sample=True)
    window = sampler.drain().get(0, {})
    util = window.get("utilization_percent")
    rows.append(check("sampler: busy GPU utilization max (%)", None if util is None else util.max, "> 50, <= 100",
                      util is not None and 50.0 < util.max <= 100.0 and util.mean <= util.max,
                      "" if util is None else f"{util.count} samples, mean {util.mean:.3g}"))
    return rows


def stopwatch() -> Any:
    """A Keras callback timing the training phase of each epoch (`.train`, seconds): its start to its last batch end.

    It overrides `on_train_batch_end`, so a fit carrying it dispatches batch
    hooks synchronously: it serves the accuracy checks, never a cost A/B.
    """
    import keras

    class Stopwatch(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.train: list[float] = []

        def on_epoch_begin(self, epoch, logs=None):
            self.t0 = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            self.last = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.train.append(self.last - self.t0)

    return Stopwatch()


def _allocator_reading(backend: str) -> tuple[int, int] | None:
    """(bytes in use, peak bytes) on GPU 0, from the backend itself; None without a GPU."""
    if backend == "jax":
        import jax

        stats = jax.devices()[0].memory_stats()
        if not stats or "bytes_in_use" not in stats:
            return None
        return int(stats["bytes_in_use"]), int(stats["peak_bytes_in_use"])
    import torch

    if not torch.cuda.is_available():
        return None
    return int(torch.cuda.memory_allocated(0)), int(torch.cuda.max_memory_allocated(0))


def _gpu_name() -> str:
    from keras_gpu.core import nvml

    if not nvml.available():
        return ""
    return next((g.name for g in nvml.static_info() if g.index == nvml.tf_to_nvml_index(0)), "") or ""


def fit_checks(backend: str, log_dir: str, size: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A large matmul-bound fit with keras_gpu.callbacks(): throughput, FLOPs, MFU and allocator memory."""
    widths, batch, steps, epochs, window = (size[k] for k in ("widths", "batch", "steps", "epochs", "window"))
    import keras

    import keras_gpu
    from keras_gpu.meters import flops
    from keras_gpu.output.reader import read_scalars

    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        model = _ab.mlp(widths)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    x, y = _ab.mlp_data(widths, batch * steps, seed=0)
    watch = stopwatch()
    callbacks = keras_gpu.callbacks(log_dir, every_s=1.0, step_time=False)
    throughput = keras_gpu.ThroughputLogger(log_dir, every_n_steps=window)
    callbacks = [throughput if isinstance(c, keras_gpu.ThroughputLogger) else c for c in callbacks]
    before = _allocator_reading(backend)
    model.fit(x, y, batch_size=batch, epochs=epochs, verbose=0, callbacks=[watch, *callbacks])
    reading = _allocator_reading(backend)
    summary = throughput.summary or {}
    scalars = read_scalars(os.path.join(log_dir, "train"))
    rows = []

    # samples/s against the stopwatch: the last epoch's windows imply its training time.
    first_step = (epochs - 1) * steps
    points = [(s, v) for s, v in scalars.get("throughput/samples_per_sec", []) if s > first_step]
    implied = sum(window * batch / v for _, v in points)
    watch_rate = batch * steps / watch.train[-1]
    rows.append(check("samples/s vs stopwatch (last epoch, s)", implied, f"stopwatch {watch.train[-1]:.4g} s ±2%",
                      bool(points) and within(implied, watch.train[-1], SAMPLES_REL_TOL),
                      f"{watch_rate:.4g} samples/s by the stopwatch"))

    hand = hand_flops_per_sample(widths)
    counted = summary.get("flops_per_sample")
    rows.append(check("model FLOPs per sample", counted, f"hand count {hand:.4g} .. +1%",
                      counted is not None and hand <= counted <= 1.01 * hand))

    gpu_name = _gpu_name()
    table_peak = flops.peak_flops(gpu_name, "bfloat16") if gpu_name else None
    mfu = scalars.get("throughput/mfu", [])
    last_mfu = median(v for s, v in mfu if s > first_step)
    if not gpu_name:
        why = "no NVIDIA GPU here: no peak FLOP/s"
        rows.append(skipped("peak FLOP/s from the peak table (bfloat16)", "the GPU's table entry", why, summary.get("peak_flops")))
        rows.append(skipped("MFU (median, last epoch)", "stopwatch rate x hand count / table peak ±3%", why, last_mfu))
    else:
        rows.append(check("peak FLOP/s from the peak table (bfloat16)", summary.get("peak_flops"),
                          f"table entry for {gpu_name!r}: {table_peak}",
                          table_peak is not None and summary.get("peak_flops") == table_peak))
        if table_peak is None:
            rows.append(skipped("MFU (median, last epoch)", "stopwatch rate x hand count / table peak ±3%",
                                f"{gpu_name!r} has no entry in the peak table", last_mfu))
        else:
            truth = watch_rate * hand / table_peak
            rows.append(check("MFU (median, last epoch)", last_mfu, f"stopwatch {truth:.4g} ±3%",
                              last_mfu is not None and within(last_mfu, truth, MFU_REL_TOL),
                              f"{watch_rate:.4g} samples/s x {hand:.4g} FLOPs / {table_peak:.4g} FLOP/s"))

    current = scalars.get("memory/allocator/GPU_0/current_bytes", [])
    run_peak = scalars.get("memory/allocator/GPU_0/run_peak_bytes", [])
    logged_now = current[-1][1] if current else None
    logged_peak = max((v for _, v in run_peak), default=None)
    if reading is None or before is None:
        why = f"{backend} reports no GPU allocator statistics here"
        for name in ("allocator in use at fit end (GiB)", "allocator run peak (GiB)", "backend peak counter left as found (GiB)"):
            rows.append(skipped(name, f"a {backend} GPU allocator reading", why))
    else:
        backend_now, backend_peak = reading
        rows.append(check("allocator in use at fit end (GiB)", None if logged_now is None else logged_now / 2**30,
                          f"{backend} reading {backend_now / 2**30:.4g} GiB ±5% or 64 MiB",
                          logged_now is not None and within(logged_now, backend_now, ALLOCATOR_REL_TOL, ALLOCATOR_ABS_TOL)))
        rows.append(check("allocator run peak (GiB)", None if logged_peak is None else logged_peak / 2**30,
                          f"<= {backend} peak {backend_peak / 2**30:.4g} GiB, >= in use",
                          logged_peak is not None and (logged_now or 0) <= logged_peak <= backend_peak + ALLOCATOR_ABS_TOL))
        rows.append(check("backend peak counter left as found (GiB)", backend_peak / 2**30,
                          f">= {before[1] / 2**30:.4g} GiB read before fit", backend_peak >= before[1],
                          "a reset inside fit would lower the user's own peak reading"))
    figures = {
        "gpu": gpu_name,
        "samples_per_sec": summary.get("samples_per_sec"),
        "tflops_per_sec": summary.get("tflops_per_sec"),
        "mfu_last_epoch": last_mfu,
        "stopwatch_last_epoch_s": watch.train[-1],
    }
    return rows, figures


def _dropout_fit(widths: Sequence[int], batch: int, steps: int, callbacks: list[Any]) -> list[Any]:
    """The weights after a seeded 2-epoch fit of a dropout MLP (its random stream in every step), `verbose=0`."""
    import numpy as np

    model = _ab.mlp(widths, dropout=0.2)
    x, y = _ab.mlp_data(widths, batch * steps)
    model.fit(x, y, batch_size=batch, epochs=2, verbose=0, callbacks=callbacks)
    return [np.asarray(w) for w in model.get_weights()]


def identical_checks(backend: str, log_dir: str, size: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The weights of a fit with keras-gpu against two bare fits: bit for bit, where the bare fits agree.

    The callbacks' arm has the default set and per-epoch `ModelCheckpoint`
    and `BackupAndRestore` (their batch ends run on Keras' pool). Two bare
    fits are the truth: where they differ, the backend's kernels are not
    deterministic here and the check says so instead of comparing.
    """
    import numpy as np

    import keras_gpu

    widths, batch, steps = size["short_widths"], size["short_batch"], min(size["short_steps"], 200)
    callbacks = [
        *keras_gpu.callbacks(os.path.join(log_dir, "runs")),
        keras_gpu.ModelCheckpoint(os.path.join(log_dir, "ckpt.weights.h5"), save_weights_only=True),
        keras_gpu.BackupAndRestore(os.path.join(log_dir, "backup")),
    ]
    first = _dropout_fit(widths, batch, steps, [])
    with_kg = _dropout_fit(widths, batch, steps, callbacks)
    second = _dropout_fit(widths, batch, steps, [])
    name = "weights with keras-gpu (default set, per-epoch checkpoint and backup): arrays that differ"
    expected = "0 (bit for bit, as two bare fits)"
    if any(not np.array_equal(a, b) for a, b in zip(first, second, strict=True)):
        return [skipped(name, expected, f"two bare fits differ on {backend}: its kernels are not deterministic here")], {}
    differ = sum(not np.array_equal(a, b) for a, b in zip(first, with_kg, strict=True))
    return [check(name, differ, expected, differ == 0, f"{len(first)} arrays, {steps} steps x 2 epochs")], {}


def transformer(seq: int, width: int, heads: int, key_dim: int, ff: int, vocab: int, classes: int, blocks: int = 2) -> Any:
    """A compiled text transformer: embedding, `blocks` x (MultiHeadAttention, feed-forward; post-norm), pooling, classifier."""
    import keras

    keras.utils.set_random_seed(0)
    tokens = keras.Input((seq,), dtype="int32")
    x = keras.layers.Embedding(vocab, width)(tokens)
    for _ in range(blocks):
        x = keras.layers.LayerNormalization()(x + keras.layers.MultiHeadAttention(heads, key_dim)(x, x))
        y = keras.layers.Dense(width)(keras.layers.Dense(ff, activation="relu")(x))
        x = keras.layers.LayerNormalization()(x + y)
    x = keras.layers.GlobalAveragePooling1D()(x)
    model = keras.Model(tokens, keras.layers.Dense(classes, dtype="float32")(x))
    model.compile(keras.optimizers.SGD(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def transformer_checks(backend: str, log_dir: str, size: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The transformer's counted FLOPs per sample against the hand count (bfloat16 on a GPU: cuDNN flash attention on JAX)."""
    import keras
    import numpy as np

    import keras_gpu

    seq, width, heads, key_dim, ff, vocab, classes = size["transformer"]
    batch, steps = size["transformer_batch"], size["transformer_steps"]
    policy = "float32" if size["smoke"] else "mixed_bfloat16"
    keras.mixed_precision.set_global_policy(policy)
    try:
        model = transformer(seq, width, heads, key_dim, ff, vocab, classes)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    rng = np.random.default_rng(2)
    x = rng.integers(0, vocab, (batch * steps, seq), dtype=np.int32)
    y = rng.integers(0, classes, (batch * steps,), dtype=np.int32)
    throughput = keras_gpu.ThroughputLogger(log_dir, every_n_steps=max(1, steps // 4))
    watch = stopwatch()
    model.fit(x, y, batch_size=batch, epochs=1, verbose=0, callbacks=[watch, throughput])
    counted = (throughput.summary or {}).get("flops_per_sample")
    hand = hand_transformer_flops_per_sample(seq, width, heads, key_dim, ff, classes)
    attention = 3 * 2 * 4 * seq * seq * heads * key_dim
    row = check(f"transformer FLOPs per sample ({policy})", counted, f"hand count {hand:.4g} .. +1%",
                counted is not None and hand <= counted <= 1.01 * hand,
                f"attention products {attention / hand:.1%} of the hand count")
    return [row], {"transformer_flops_per_sample": counted, "transformer_hand_flops": hand,
                   "transformer_samples_per_sec": batch * steps / watch.train[-1]}


def marked_kernel_seconds(space: Any) -> tuple[int, float] | None:
    """The trace's marked steps and the GPU kernel time inside them, read from the trace alone.

    The steps are the host plane's `train` events carrying `step_num` (Keras'
    step markers); the kernel time is the sum of the durations of every
    compute event (kernels and memsets, `keras_gpu.meters.gpu_lines`) on the
    stream lines of the `/device:GPU:*` planes, clipped to the span from the
    first marked step's start to the last one's end.

    Returns:
        `(marked steps, kernel seconds)`, or None when the trace has no step
        markers or no GPU plane with a stream.
    """
    from keras_gpu.meters import gpu_lines, xspace

    by_name = xspace.planes(space)
    host = by_name.get("/host:CPU")
    if host is None:
        return None
    marks = [e for e in xspace.events(host, stats=True)
             if e.name == "train" and e.stats is not None and "step_num" in e.stats]
    devices = [p for name, p in by_name.items() if name.startswith("/device:GPU:")]
    if not marks:
        return None
    lo, hi = min(e.start_ps for e in marks), max(e.end_ps for e in marks)
    total, streams = 0, 0
    for plane in devices:
        for event in xspace.events(plane):
            kind = gpu_lines.line_kind(event.line)
            if kind is None or not kind.busy:
                continue
            streams += 1
            if gpu_lines.event_kind(event.name).part == "compute" and event.end_ps > lo and event.start_ps < hi:
                total += min(event.end_ps, hi) - max(event.start_ps, lo)
    if not streams:
        return None
    return len(marks), total / 1e12


def trace_checks(backend: str, log_dir: str, size: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A traced fit: StepTimeLogger's compute figure against the kernel sum on the same trace's device plane."""

    import keras_gpu
    from keras_gpu.hooks.step_time_trace import backend_profiler
    from keras_gpu.meters import xspace

    name, expected = "step time: compute vs the trace's kernel sum (ms/step)", "kernel sum in the marked steps ±5%"
    if backend_profiler() is None:
        return [skipped(name, expected, f"StepTimeLogger has no profiler that writes XSpace traces on {backend}")], {}
    widths, batch = size["short_widths"], size["short_batch"]
    warmup, profile = (2, 3) if size["smoke"] else (20, 20)
    steps = warmup + profile + 10
    model = _ab.mlp(widths)
    x, y = _ab.mlp_data(widths, batch * steps, seed=3)
    # profile_every_s: trace this short fit, whatever the trace costs against it.
    logger = keras_gpu.StepTimeLogger(
        log_dir, warmup_steps=warmup, profile_steps=profile, max_traces=1, profile_every_s=300
    )
    model.fit(x, y, batch_size=batch, epochs=1, verbose=0, callbacks=[logger])
    logger.wait(timeout=300)
    last = logger.last
    files = xspace.find_traces(log_dir)
    if last is None or not files:
        return [check(name, None, expected, False, f"no breakdown ({len(files)} trace files)")], {}
    truth = marked_kernel_seconds(xspace.load(files[-1]))
    if truth is None or last.source != "gpu":
        why = "the trace has no GPU stream or no step markers (a CPU run)"
        return [skipped(name, expected, why, 1e3 * last.compute_sec if last.compute_sec is not None else None)], {}
    marked, kernel_s = truth
    per_step = kernel_s / marked
    compute = last.compute_sec
    row = check(name, None if compute is None else 1e3 * compute, f"{1e3 * per_step:.4g} ±5%",
                compute is not None and last.steps == marked and within(compute, per_step, KERNEL_REL_TOL, KERNEL_ABS_TOL_S),
                f"{marked} marked steps, logger {last.steps}; step {1e3 * last.step_sec:.4g} ms")
    return [row], {"trace_compute_ms": None if compute is None else 1e3 * compute, "trace_kernel_ms": 1e3 * per_step}


class _HookTimer:
    """Wraps every `on_*` hook of some callbacks and adds up the time spent inside them (from any thread)."""

    def __init__(self, callbacks: Sequence[Any]) -> None:
        import keras

        self.seconds = 0.0
        self._lock = threading.Lock()
        base = keras.callbacks.Callback
        for cb in callbacks:
            for name in dir(type(cb)):
                if name.startswith("on_") and getattr(type(cb), name) is not getattr(base, name, None):
                    setattr(cb, name, self._wrap(getattr(cb, name)))

    def _wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - t0
                with self._lock:
                    self.seconds += elapsed

        return timed


def _spread(ratios: dict[str, Any]) -> str:
    return (f"IQR {ratios['q1']:+.2%} to {ratios['q3']:+.2%}, range {ratios['min']:+.2%} to {ratios['max']:+.2%}, "
            f"{ratios['n']} pairs")


def cost_checks(log_root: str, pairs: int, size: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Interleaved whole fits, verbose=0, against a bare arm with no callback: dispatch, slowdown, hook time, one-off."""

    import keras_gpu

    smoke = "smoke mode: a CPU timing is not the GPU figure"
    widths, batch, steps = size["short_widths"], size["short_batch"], size["short_steps"]

    def steady_set(log_dir: str) -> list[Any]:
        return keras_gpu.callbacks(log_dir, step_time=False)

    ab = _ab.dispatch_ab(os.path.join(log_root, "steady"), pairs=pairs, steps=steps, widths=widths, batch=batch,
                         make_callbacks=steady_set)
    dispatch = ab["async_dispatch"]
    rows = [
        check("dispatch: bare arm asynchronous", dispatch.get("bare"), "True (Keras' own dispatch)", dispatch.get("bare")),
        check("dispatch: with keras_gpu.callbacks() asynchronous", dispatch.get("callbacks"), "True (every callback async_safe)",
              dispatch.get("callbacks")),
    ]
    slowdown = ab["slowdown"]
    name, expected = "overhead: wall-clock slowdown (median of pairs)", f"<= {OVERHEAD_MAX:.1%}"
    note = f"{_spread(slowdown)}; bare step {ab['step_ms_bare']:.3g} ms; the default set less StepTimeLogger"
    if size["smoke"]:
        rows.append(skipped(name, expected, f"{smoke}; {note}", slowdown["median"]))
    else:
        rows.append(check(name, slowdown["median"], expected, slowdown["median"] <= OVERHEAD_MAX, note))

    # The time inside the hooks, in a separate fit (the A/B arms carry no instrument).
    model = _ab.mlp(widths)
    x, y = _ab.mlp_data(widths, batch * steps, seed=1)
    callbacks = steady_set(os.path.join(log_root, "hooks"))
    _ab.time_fit(model, x, y, batch_size=batch, callbacks=callbacks)  # compile, first-use costs
    timer = _HookTimer(callbacks)
    fit_s = _ab.time_fit(model, x, y, batch_size=batch, callbacks=callbacks)
    direct = timer.seconds / fit_s
    name, expected = "overhead: time in the callbacks' hooks / fit time", f"<= {OVERHEAD_MAX:.1%}"
    if size["smoke"]:
        rows.append(skipped(name, expected, smoke, direct))
    else:
        rows.append(check(name, direct, expected, direct <= OVERHEAD_MAX, f"one fit of {steps} steps"))

    # The one-off cost per fit: short fits with a fresh default set, and bare.
    short = size["one_off_steps"]
    xs, ys = x[: batch * short], y[: batch * short]
    count = itertools.count()

    def fresh() -> float:
        fresh_set = keras_gpu.callbacks(os.path.join(log_root, f"one_off{next(count)}"))
        return _ab.time_fit(model, xs, ys, batch_size=batch, callbacks=fresh_set)

    def bare() -> float:
        return _ab.time_fit(model, xs, ys, batch_size=batch, callbacks=[])

    fresh()
    one_off = _ab.interleaved_pairs(fresh, bare, pairs)
    extra = one_off["difference_of_medians_s"]
    name, expected = "one-off cost per fit (s)", f"<= {ONE_OFF_MAX_S:g} s"
    note = (f"fits of {short} steps with a fresh keras_gpu.callbacks() vs bare, difference of medians "
            f"({median(one_off['a_s']):.3g} s vs {median(one_off['b_s']):.3g} s)")
    if size["smoke"]:
        rows.append(skipped(name, expected, f"{smoke}; {note}", extra))
    else:
        rows.append(check(name, extra, expected, extra <= ONE_OFF_MAX_S, note))
    figures = {"short_step_ms": ab["step_ms_bare"], "hook_fraction": direct, "ab_slowdown": slowdown,
               "ab_async_dispatch": dispatch, "one_off_s": extra, "one_off_fits": describe(one_off["a_s"])}
    return rows, figures


def worker(backend: str, out_path: str, pairs: int, size: dict[str, Any]) -> int:
    """Run every check of one backend in this process and write the rows as JSON."""
    import keras

    versions = {"keras": keras.__version__}
    module = importlib.import_module(BACKEND_MODULES[backend])
    versions[backend] = getattr(module, "__version__", "?")
    result: dict[str, Any] = {"versions": versions, "checks": [], "figures": {}}
    with tempfile.TemporaryDirectory(prefix=f"gpu_check_{backend}_") as tmp:
        parts: list[tuple[str, Callable[[], tuple[list[dict[str, Any]], dict[str, Any]]]]] = [
            ("fit", lambda: fit_checks(backend, os.path.join(tmp, "fit"), size)),
            ("identical", lambda: identical_checks(backend, os.path.join(tmp, "identical"), size)),
            ("transformer", lambda: transformer_checks(backend, os.path.join(tmp, "transformer"), size)),
            ("trace", lambda: trace_checks(backend, os.path.join(tmp, "trace"), size)),
            ("nvml", lambda: (nvml_checks(size), {})),
            ("cost", lambda: cost_checks(os.path.join(tmp, "cost"), pairs, size)),
        ]
        for part, run in parts:
            try:
                rows, figures = run()
            except Exception as exc:  # noqa: BLE001 - report it as a failed check and go on
                rows, figures = [check(f"{part} checks (raised)", f"{type(exc).__name__}: {exc}", "no error", False)], {}
            result["checks"] += rows
            result["figures"].update(figures)
    _cli.write_json(out_path, result, indent=2)
    return 0


# --------------------------------------------------------------------------- the scaling study


SCALE_BACKENDS = ("jax", "tensorflow")
SCALE_SCRIPT_ARGS = ("--steps", "400", "--batch", "256", "--width", "4096")


def scale_lists(gpu_count: int) -> tuple[str, str]:
    """`--replicas` (1, 2, 4, ... up to `gpu_count`) and `--workers` (1, and 2 where two GPUs exist)."""
    replicas = [1]
    while replicas[-1] * 2 <= gpu_count:
        replicas.append(replicas[-1] * 2)
    return ",".join(map(str, replicas)), "1,2" if gpu_count >= 2 else "1"


def scale_study(backend: str, gpu_count: int, repo: str) -> dict[str, Any]:
    """Run `keras-gpu scale` on `backend` over this machine's GPUs; the command, the rows and the wall time."""
    replicas, workers = scale_lists(gpu_count)
    cmd = [sys.executable, "-m", "keras_gpu.cli", "scale", "--replicas", replicas, "--workers", workers, "--cpu",
           "--warmup", "20", "--steps", "100", "--json", os.path.join(repo, "benchmarks", "scale_mlp.py"),
           *SCALE_SCRIPT_ARGS]
    env = dict(os.environ, KERAS_BACKEND=backend,
               PYTHONPATH=os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")])))
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800, cwd=repo)
    except subprocess.TimeoutExpired:
        return {"command": " ".join(["keras-gpu", *cmd[3:]]), "error": "timed out after 1800 s", "rows": []}
    out: dict[str, Any] = {"command": " ".join(["keras-gpu", *cmd[3:]]), "wall_sec": time.perf_counter() - start}
    try:
        out.update(json.loads(proc.stdout))
    except ValueError:
        out["rows"] = []
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["no output"]
        out["error"] = f"exit status {proc.returncode}: {tail[0]}"
    return out


def scale_markdown(studies: dict[str, dict[str, Any]]) -> str:
    """Each backend's study as its command and table."""
    from keras_gpu.output.scale_output import markdown_table

    parts = []
    for backend, study in studies.items():
        rows = [dict(r, devices=f"{r['workers']}x{r['replicas']}") for r in study.get("rows", [])]
        parts += [f"\n### keras-gpu scale on {backend}\n", f"`{study.get('command', '?')}`", "", markdown_table(rows)]
        if study.get("error"):
            parts.append(f"\nFAIL: {study['error']}")
    return "\n".join(parts)


# --------------------------------------------------------------------------- the driver


def hardware() -> dict[str, Any]:
    """The machine, named: GPU 0's product name and memory, the driver, the host CPU."""
    import platform

    from keras_gpu.core import nvml

    info = next((g for g in nvml.static_info() if g.index == nvml.tf_to_nvml_index(0)), None)
    from importlib import metadata

    try:
        keras_version = metadata.version("keras")  # without importing Keras (and a backend) here
    except metadata.PackageNotFoundError:
        keras_version = "not installed"
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {
        "gpu": info.name if info else "?",
        "memory_total_gib": round((info.memory_total_bytes or 0) / 2**30, 1) if info else "?",
        "driver": nvml.driver_version(),
        "gpu_count": nvml.device_count(),
        "host": f"{cpu}, {os.cpu_count()} CPUs",
        "python": platform.python_version(),
        "keras": keras_version,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = _cli.make_parser(
        "python benchmarks/gpu_check.py", __doc__.split("\n\n", 1)[0], output="--json",
        output_help="also write the figures to this JSON file", pairs=7,
    )
    parser.add_argument("--backends", default="jax,torch", help="comma-separated: jax, torch (default: both)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true", help=argparse.SUPPRESS)  # tiny sizes: tests the script on a CPU
    parser.add_argument("--no-scale", action="store_true", help="leave out the scaling study (keras-gpu scale)")
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args.worker, args.out, args.pairs, SIZES["smoke" if args.smoke else "gpu"])

    requested = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = [b for b in requested if b not in BACKEND_MODULES]
    if unknown or not requested:
        parser.error(f"--backends takes jax and/or torch. Received: --backends={args.backends!r}")
    reason = preflight()
    if reason is None and not installed_backends(requested):
        reason = f"none of {', '.join(requested)} is installed (pip install \"jax[cuda12]\" or torch)"
    if reason is not None:
        print(f"gpu_check: cannot run here: {reason}.", file=sys.stderr)
        return 2
    report: dict[str, Any] = {"hardware": hardware(), "backends": {}}
    here = os.path.abspath(__file__)
    repo = os.path.dirname(os.path.dirname(here))
    for backend in installed_backends(requested):
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tmp:
            out = tmp.name
        env = dict(os.environ, KERAS_BACKEND=backend, PYTHONPATH=os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")])))
        cmd = [sys.executable, here, "--worker", backend, "--out", out, "--pairs", str(args.pairs)]
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
            if proc.returncode != 0 or os.path.getsize(out) == 0:
                tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
                report["backends"][backend] = {"error": f"worker exited {proc.returncode}: {tail[0]}"}
            else:
                with open(out) as f:
                    report["backends"][backend] = json.load(f)
        except subprocess.TimeoutExpired:
            report["backends"][backend] = {"error": "worker timed out after 1800 s"}
        finally:
            os.unlink(out)
    if not args.no_scale:
        report["scale"] = {
            b: scale_study(b, int(report["hardware"].get("gpu_count") or 1), repo)
            for b in SCALE_BACKENDS
            if importlib.util.find_spec(b) is not None
        }
    print(markdown(report))
    if report.get("scale"):
        print(scale_markdown(report["scale"]))
    if args.json:
        _cli.write_json(args.json, report, indent=2)
    passed = all(
        "error" not in r and all(row["pass"] is not False for row in r["checks"]) for r in report["backends"].values()
    ) and not any("error" in study for study in report.get("scale", {}).values())
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
