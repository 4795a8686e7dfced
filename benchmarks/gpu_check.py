"""Every real-GPU check of keras-gpu in one call, on the JAX and PyTorch backends of Keras.

Run it on a machine with an NVIDIA GPU, in an environment with Keras, JAX
and/or PyTorch (CUDA builds), `nvidia-ml-py` and `tensorboard`; TensorFlow is
not needed::

    python benchmarks/gpu_check.py                      # every installed backend
    python benchmarks/gpu_check.py --backends jax --json gpu_check.json

Each backend runs in its own process (`KERAS_BACKEND` is fixed per process)
on the first visible GPU, and checks:

1. **NVML against the driver.** `keras_gpu.core.nvml` (one reading, and the
   sampler over a busy second) against `nvidia-smi` taken at the same moment:
   total and used memory, this process's memory, utilization, power,
   temperature and SM clock, each in its unit and a sane range.
2. **A Keras fit with the callbacks** (a large, matmul-bound MLP in
   `mixed_bfloat16`):
   - `throughput/samples_per_sec` against a stopwatch in the same process
     (within 2 %);
   - model FLOPs per sample against a hand count, the peak FLOP/s from the
     GPU's entry in the peak table, and MFU in a plausible range (0.15 to 1);
   - `memory/allocator/GPU_0/current_bytes` at the end of `fit` against the
     backend's own reading (JAX `Device.memory_stats()`, PyTorch
     `torch.cuda.memory_allocated`).
3. **Overhead on a short GPU step**: interleaved fits with and without
   `keras_gpu.callbacks()`; the time spent inside the callbacks' hooks as a
   fraction of `fit` time, and the median wall-clock slowdown, each at most
   0.5 %.
4. **The scaling study** (`keras-gpu scale`, on JAX and on TensorFlow where
   installed): `benchmarks/scale_mlp.py` at 1, 2, 4, ... GPUs (as many as
   the machine has), 1 and 2 workers, and the CPU row (`--cpu`), printed as
   the study's table with its causes and the all-reduce's bus bandwidth; it
   passes when the study runs to the end (`--no-scale` leaves it out).

It prints a Markdown table of the figures with the hardware named, and writes
them as JSON with `--json`. Exit status: 0 when every check passes, 1 when
one fails, 2 when it cannot run here (no NVIDIA GPU or NVML, `nvidia-smi`
missing, neither JAX nor PyTorch installed), with one line saying why.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

# Thresholds of the checks.
SAMPLES_REL_TOL = 0.02
MFU_RANGE = (0.15, 1.0)
ALLOCATOR_REL_TOL, ALLOCATOR_ABS_TOL = 0.05, 64 * 2**20
OVERHEAD_MAX = 0.005
SMI_FIELDS = ("uuid", "name", "memory.total", "memory.used", "utilization.gpu", "power.draw", "temperature.gpu", "clocks.sm")

# Model and run sizes. "fit": Dense widths of a large, matmul-bound MLP (bfloat16);
# "short": short GPU steps for the overhead check. `--smoke` uses tiny sizes, to
# test the script itself on a CPU.
SIZES: dict[str, dict[str, Any]] = {
    "gpu": {"widths": (1024, 8192, 8192, 8192, 1024), "batch": 2048, "steps": 40, "epochs": 3, "window": 4,
            "short_widths": (512, 1024, 1024, 512), "short_batch": 256, "short_steps": 2000, "busy": 8192},
    "smoke": {"widths": (16, 64, 8), "batch": 32, "steps": 8, "epochs": 2, "window": 2,
              "short_widths": (8, 16, 8), "short_batch": 16, "short_steps": 20, "busy": 64},
}

BACKEND_MODULES = {"jax": "jax", "torch": "torch"}


def hand_flops_per_sample(widths: Sequence[int]) -> int:
    """Training FLOPs per sample of an MLP: 3 x (2 x in x out) per Dense layer."""
    return 3 * sum(2 * a * b for a, b in itertools.pairwise(widths))


# --------------------------------------------------------------------------- results


def check(name: str, measured: Any, expected: str, ok: bool, note: str = "") -> dict[str, Any]:
    """One row of the result table."""
    return {"check": name, "measured": measured, "expected": expected, "pass": bool(ok), "note": note}


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
            lines.append(
                f"| {label} | {row['check']} | {_fmt(row['measured'])}{note} | {row['expected']} | "
                f"{'pass' if row['pass'] else 'FAIL'} |"
            )
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


def nvml_checks(size: dict[str, Any]) -> list[dict[str, Any]]:
    """keras_gpu.core.nvml against nvidia-smi on CUDA device 0, while this process holds GPU memory."""
    from keras_gpu.core import nvml

    rows = []
    info = next((g for g in nvml.static_info() if g.index == nvml.tf_to_nvml_index(0)), None)
    mine = nvml.sample(0)
    smi = parse_smi_gpu(_smi(f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits"))
    apps = parse_smi_apps(_smi("--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"))
    ref = smi.get(info.uuid) if info is not None and info.uuid else None
    if mine is None or ref is None:
        return [check("NVML reading of GPU 0", None, "a reading and its nvidia-smi row", False)]
    mib = 2**20
    total = mine.memory_total_bytes
    rows.append(check("NVML memory total (GiB)", (total or 0) / 2**30, f"nvidia-smi {ref['memory.total'] / 1024:.4g} GiB, ±1%",
                      total is not None and within(total, ref["memory.total"] * mib, 0.01)))
    used = mine.memory_used_bytes
    rows.append(check("NVML memory used (GiB)", (used or 0) / 2**30, f"nvidia-smi {ref['memory.used'] / 1024:.4g} GiB, ±3% or 256 MiB",
                      used is not None and within(used, ref["memory.used"] * mib, 0.03, 256 * mib)))
    proc = mine.process_memory_bytes
    if os.getpid() in apps:
        rows.append(check("NVML this process's memory (GiB)", (proc or 0) / 2**30,
                          f"nvidia-smi {apps[os.getpid()] / 1024:.4g} GiB, ±3% or 64 MiB",
                          proc is not None and within(proc, apps[os.getpid()] * mib, 0.03, 64 * mib)))
    else:
        rows.append(check("NVML this process's memory (GiB)", None if proc is None else proc / 2**30,
                          "nvidia-smi lists this pid", proc is None,
                          "nvidia-smi does not list this pid (another PID namespace): NVML must say not available too"))
    for name, value, key, low, high, rel, abs_tol in (
        ("utilization (%)", mine.utilization_percent, "utilization.gpu", 0.0, 100.0, None, None),
        ("power (W)", mine.power_watts, "power.draw", 1.0, 1500.0, 0.25, 30.0),
        ("temperature (C)", mine.temperature_c, "temperature.gpu", 5.0, 110.0, 0.0, 5.0),
        ("SM clock (MHz)", mine.sm_clock_mhz, "clocks.sm", 100.0, 4000.0, 0.15, 50.0),
    ):
        smi_value = ref.get(key)
        ok = value is not None and low <= value <= high
        expected = f"{low:g}..{high:g}"
        if rel is not None and smi_value is not None:
            ok = ok and within(value, smi_value, rel, abs_tol)
            expected += f", nvidia-smi {smi_value:g} ±{max(rel * smi_value, abs_tol):.3g}"
        rows.append(check(f"NVML {name}", value, expected, ok))
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
    """A Keras callback timing the training phase of each epoch (`.train`, seconds): its start to its last batch end."""
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


def _mlp(widths: Sequence[int]) -> Any:
    import keras

    layers = [keras.Input((widths[0],))]
    layers += [keras.layers.Dense(w, activation="relu") for w in widths[1:-1]]
    layers += [keras.layers.Dense(widths[-1], dtype="float32")]
    model = keras.Sequential(layers)
    model.compile(keras.optimizers.SGD(1e-4), "mse")
    return model


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


def fit_checks(backend: str, log_dir: str, size: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A large matmul-bound fit with keras_gpu.callbacks(): throughput, FLOPs, MFU and allocator memory."""
    widths, batch, steps, epochs, window = (size[k] for k in ("widths", "batch", "steps", "epochs", "window"))
    import keras
    import numpy as np

    import keras_gpu
    from keras_gpu.core import nvml
    from keras_gpu.meters import flops
    from keras_gpu.output.reader import read_scalars

    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        model = _mlp(widths)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch * steps, widths[0]), dtype=np.float32)
    y = rng.standard_normal((batch * steps, widths[-1]), dtype=np.float32)
    watch = stopwatch()
    callbacks = keras_gpu.callbacks(log_dir, every_s=1.0, step_time=False)
    throughput = keras_gpu.ThroughputLogger(log_dir, every_n_steps=window)
    callbacks = [throughput if isinstance(c, keras_gpu.ThroughputLogger) else c for c in callbacks]
    model.fit(x, y, batch_size=batch, epochs=epochs, verbose=0, callbacks=[watch, *callbacks])
    reading = _allocator_reading(backend)
    summary = throughput.summary or {}
    scalars = read_scalars(os.path.join(log_dir, "train"))
    rows = []

    # samples/s against the stopwatch: the last epoch's windows imply its training time.
    first_step = (epochs - 1) * steps
    points = [(s, v) for s, v in scalars.get("throughput/samples_per_sec", []) if s > first_step]
    implied = sum(window * batch / v for _, v in points)
    rows.append(check("samples/s vs stopwatch (last epoch, s)", implied, f"stopwatch {watch.train[-1]:.4g} s ±2%",
                      bool(points) and within(implied, watch.train[-1], SAMPLES_REL_TOL),
                      f"{batch * steps / watch.train[-1]:.4g} samples/s by the stopwatch"))

    hand = hand_flops_per_sample(widths)
    counted = summary.get("flops_per_sample")
    if backend == "torch":  # matmul-like ops only, as the hand count
        ok, expected = counted == hand, f"hand count {hand:.4g}"
    else:  # XLA also counts element-wise ops: under 1% more here
        ok, expected = counted is not None and hand <= counted <= 1.01 * hand, f"hand count {hand:.4g} .. +1%"
    rows.append(check("model FLOPs per sample", counted, expected, ok))

    gpu_name = next((g.name for g in nvml.static_info() if g.index == nvml.tf_to_nvml_index(0)), "") or ""
    table_peak = flops.peak_flops(gpu_name, "bfloat16")
    rows.append(check("peak FLOP/s from the peak table (bfloat16)", summary.get("peak_flops"),
                      f"table entry for {gpu_name!r}: {table_peak}",
                      table_peak is not None and summary.get("peak_flops") == table_peak))
    mfu = scalars.get("throughput/mfu", [])
    last_mfu = statistics.median(v for s, v in mfu if s > first_step) if any(s > first_step for s, _ in mfu) else None
    rows.append(check("MFU (median, last epoch)", last_mfu, f"{MFU_RANGE[0]}..{MFU_RANGE[1]}",
                      last_mfu is not None and MFU_RANGE[0] <= last_mfu < MFU_RANGE[1]))

    current = scalars.get("memory/allocator/GPU_0/current_bytes", [])
    run_peak = scalars.get("memory/allocator/GPU_0/run_peak_bytes", [])
    logged_now = current[-1][1] if current else None
    logged_peak = max((v for _, v in run_peak), default=None)
    if reading is None:
        rows.append(check("allocator in use at fit end (GiB)", logged_now, f"a {backend} GPU allocator reading", False,
                          f"{backend} reports no GPU allocator statistics here"))
    else:
        backend_now, backend_peak = reading
        rows.append(check("allocator in use at fit end (GiB)", None if logged_now is None else logged_now / 2**30,
                          f"{backend} reading {backend_now / 2**30:.4g} GiB ±5% or 64 MiB",
                          logged_now is not None and within(logged_now, backend_now, ALLOCATOR_REL_TOL, ALLOCATOR_ABS_TOL)))
        rows.append(check("allocator run peak (GiB)", None if logged_peak is None else logged_peak / 2**30,
                          f"<= {backend} peak {backend_peak / 2**30:.4g} GiB, >= in use",
                          logged_peak is not None and (logged_now or 0) <= logged_peak <= backend_peak + ALLOCATOR_ABS_TOL))
    figures = {
        "gpu": gpu_name,
        "samples_per_sec": summary.get("samples_per_sec"),
        "tflops_per_sec": summary.get("tflops_per_sec"),
        "mfu_last_epoch": last_mfu,
        "stopwatch_last_epoch_s": watch.train[-1],
    }
    return rows, figures


class _HookTimer:
    """Wraps every `on_*` hook of some callbacks and adds up the time spent inside them."""

    def __init__(self, callbacks: Sequence[Any]) -> None:
        import keras

        self.seconds = 0.0
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
                self.seconds += time.perf_counter() - t0

        return timed


def overhead_checks(log_root: str, pairs: int, size: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Interleaved fits with and without keras_gpu.callbacks() on short GPU steps."""
    import numpy as np

    import keras_gpu

    widths, batch, steps = size["short_widths"], size["short_batch"], size["short_steps"]
    model = _mlp(widths)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((batch * steps, widths[0]), dtype=np.float32)
    y = rng.standard_normal((batch * steps, widths[-1]), dtype=np.float32)

    def fit(callbacks: list[Any]) -> float:
        t0 = time.perf_counter()
        model.fit(x, y, batch_size=batch, epochs=1, verbose=0, callbacks=callbacks)
        return time.perf_counter() - t0

    fit([])  # compile and warm up; then once with the callbacks, whose one-time work (FLOP count, NVML start) is cached
    fit(keras_gpu.callbacks(os.path.join(log_root, "warmup"), step_time=False))
    ratios, hook_fractions, bare_times = [], [], []
    for i in range(pairs):
        callbacks = keras_gpu.callbacks(os.path.join(log_root, f"pair{i}"), step_time=False)
        timer = _HookTimer(callbacks)
        order = (True, False) if i % 2 == 0 else (False, True)
        times = {}
        for with_callbacks in order:
            times[with_callbacks] = fit(callbacks if with_callbacks else [])
        ratios.append(times[True] / times[False] - 1.0)
        hook_fractions.append(timer.seconds / times[True])
        bare_times.append(times[False])
    step_ms = 1e3 * statistics.median(bare_times) / steps
    direct = statistics.median(hook_fractions)
    ab = statistics.median(ratios)
    rows = [
        check("overhead: time in the callbacks' hooks / fit time", direct, f"<= {OVERHEAD_MAX:.1%}", direct <= OVERHEAD_MAX,
              f"median of {pairs}; step {step_ms:.3g} ms"),
        check("overhead: wall-clock slowdown (median of pairs)", ab, f"<= {OVERHEAD_MAX:.1%}", ab <= OVERHEAD_MAX,
              f"pairs {', '.join(f'{r:+.2%}' for r in ratios)}"),
    ]
    return rows, {"short_step_ms": step_ms, "hook_fraction": direct, "ab_slowdown": ab}


def worker(backend: str, out_path: str, pairs: int, size: dict[str, Any]) -> int:
    """Run every check of one backend in this process and write the rows as JSON."""
    import keras

    versions = {"keras": keras.__version__}
    module = importlib.import_module(BACKEND_MODULES[backend])
    versions[backend] = getattr(module, "__version__", "?")
    result: dict[str, Any] = {"versions": versions, "checks": [], "figures": {}}
    with tempfile.TemporaryDirectory(prefix=f"gpu_check_{backend}_") as tmp:
        for part in (
            lambda: fit_checks(backend, os.path.join(tmp, "fit"), size),
            lambda: (nvml_checks(size), {}),
            lambda: overhead_checks(os.path.join(tmp, "overhead"), pairs, size),
        ):
            try:
                rows, figures = part()
            except Exception as exc:  # noqa: BLE001 - report it as a failed check and go on
                rows, figures = [check("(check raised)", f"{type(exc).__name__}: {exc}", "no error", False)], {}
            result["checks"] += rows
            result["figures"].update(figures)
    with open(out_path, "w") as f:
        json.dump(result, f, indent=2, default=str)
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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--backends", default="jax,torch", help="comma-separated: jax, torch (default: both)")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    parser.add_argument("--pairs", type=int, default=5, help="interleaved fit pairs for the overhead check")
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
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2, default=str)
    passed = all(
        "error" not in r and all(row["pass"] for row in r["checks"]) for r in report["backends"].values()
    ) and not any("error" in study for study in report.get("scale", {}).values())
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
