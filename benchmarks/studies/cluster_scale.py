"""What a one-hour job of 8, 64 or 256 workers leaves in `log_dir`, and how long TensorBoard takes to serve it.

Run from the repository root (needs the `tensorboard` package; no TensorFlow, no GPU):

```
python -m benchmarks.studies.cluster_scale                    # 8, 64 and 256 workers, per-worker runs as by default
python -m benchmarks.studies.cluster_scale --also-all-runs    # and every worker writing its own run, for comparison
```

For each job size it writes, with keras-gpu's own writer and tag names, what
`keras_gpu.callbacks()` logs over one hour at its defaults on nodes of
`--gpus-per-worker` GPUs: throughput windows every 5 s, memory and NVML
windows every 10 s, 60 epochs of `time/` tags, and the step probe's window
every 30 s and at each epoch's end (every worker's `step_time/*`, and on the
chief the cluster view from every worker's window; multi-worker
jobs take no profiler trace by default). Per-worker runs follow the
default: every worker up to 16 workers, only the chief above. Then it starts a
real `tensorboard` server on 127.0.0.1 and measures the seconds until its
scalars API lists every tag of every run, and reads one tag of the last run
back. It prints a table (and writes JSON with `--output`): workers, runs,
bytes, scalar points, TensorBoard seconds.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from typing import Any

from benchmarks import _cli

__all__ = ["main", "simulate", "stop"]

HOUR_S = 3600
THROUGHPUT_EVERY_S, MEMORY_EVERY_S, EPOCHS = 5, 10, 60


def _gather_times(seconds: int = HOUR_S) -> list[float]:
    """When the cluster view gathers: every `CLUSTER_EVERY_S` within an epoch and at each epoch's end.

    The epochs last a minute, more than `EPOCH_SHARE_S`, so every epoch's end shares.
    """
    from keras_gpu.hooks.step_time_logger import CLUSTER_EVERY_S

    epoch_s = seconds / EPOCHS
    times = []
    for e in range(EPOCHS):
        start = e * epoch_s
        times += [start + k * CLUSTER_EVERY_S for k in range(1, int(epoch_s // CLUSTER_EVERY_S))]
        times.append(start + epoch_s - 0.5)
    return times


def _run_values(
    worker: int, gpus: int, chief: bool, workers: int, seconds: int = HOUR_S,
    judged: list[dict[str, Any]] | None = None,
) -> list[tuple[float, dict[str, float]]]:
    """`(seconds into the job, {tag: value})` for one worker's run over `seconds` (one hour); on the chief, each
    gather's `cluster/*` scalars from `judged` where given (else the same fixed values at every gather)."""
    from keras_gpu.output import tags as T

    out: list[tuple[float, dict[str, float]]] = []
    for i in range(1, seconds // THROUGHPUT_EVERY_S + 1):
        out.append((i * THROUGHPUT_EVERY_S, {
            T.SAMPLES_PER_SEC.name(): 5000.0 + i, T.STEPS_PER_SEC.name(): 20.0, T.SAMPLES_PER_SEC_PER_REPLICA.name(): 600.0,
            T.TFLOPS_PER_SEC.name(): 300.0, T.MFU.name(): 0.4,
        }))
    for i in range(1, seconds // MEMORY_EVERY_S + 1):
        values = {T.HOST_RSS.name(): 3e10, T.HOST_PEAK_RSS.name(): 3.1e10}
        for g in range(gpus):
            device = f"GPU_{g}"
            values.update({
                T.ALLOC_CURRENT.name(device=device): 6e10, T.ALLOC_PEAK.name(device=device): 7e10,
                T.ALLOC_RUN_PEAK.name(device=device): 7e10,
            })
            for tag in T.TAGS:
                if tag.pattern.startswith("gpu/{gpu}/"):
                    values[tag.name(gpu=str(g))] = 50.0
        out.append((i * MEMORY_EVERY_S + 0.5, values))
    for e in range(1, EPOCHS + 1):
        out.append((e * seconds / EPOCHS, {
            T.EPOCH_SEC.name(): 60.0, T.TRAIN_SEC.name(): 58.0, T.FIRST_STEP_SEC.name(): 0.5,
            T.VALIDATION_SEC.name(): 1.5, T.OTHER_EPOCH_SEC.name(): 0.5,
            T.STEADY_SAMPLES_PER_SEC.name(): 5100.0, T.STEADY_STEPS_PER_SEC.name(): 20.5,
        }))
    for i, t in enumerate(_gather_times(seconds)):
        values = {T.STEP_SEC.name(): 0.05, T.STEP_TRACED_STEPS.name(): 20.0, T.STEP_INPUT_SEC.name(): 0.001,
                  T.STEP_COMPUTE_SEC.name(): 0.04, T.STEP_COMMUNICATION_SEC.name(): 0.008, T.STEP_OTHER_SEC.name(): 0.001}
        for g in range(gpus):
            label = f"{worker * gpus + g}_GPU_{g}"
            values[T.REPLICA_COMPUTE_SEC.name(replica=label)] = 0.04
            values[T.REPLICA_COMMUNICATION_SEC.name(replica=label)] = 0.008
        if chief and workers > 1 and judged is not None:
            values.update(judged[i]["scalars"])
        elif chief and workers > 1:
            values.update({
                T.CLUSTER_SLOWEST_WORKER.name(): 3.0, T.CLUSTER_IMBALANCE.name(): 0.05,
                T.CLUSTER_WORKERS_REPORTING.name(): float(workers),
            })
            for part in ("busy", "input", "communication"):
                for stat in ("min", "median", "max"):
                    values[f"cluster/{part}_sec/{stat}"] = 0.04
        out.append((t, values))
    return sorted(out, key=lambda p: p[0])


def simulate(
    log_dir: str, workers: int, gpus: int, all_runs: bool, seconds: int = HOUR_S, straggler: int | None = None
) -> dict[str, Any]:
    """Write `seconds` (one hour) of logging for a job of `workers` workers; returns runs, tags and points.

    With `straggler`, the chief's gathers are judged from simulated rows with
    that worker slowed +20% in compute
    (`benchmarks.studies.straggler_scale.judged_gathers`): the `cluster/*`
    scalars, each gather's table of the slowest workers and the verdict, as
    `StepTimeLogger` logs them; without, every gather logs the same fixed
    `cluster/*` values.
    """
    from keras_gpu.core.cluster import ClusterInfo
    from keras_gpu.hooks._base import PER_WORKER_RUNS_MAX
    from keras_gpu.output import tags as T
    from keras_gpu.output import writer as _writer

    writing = range(workers) if (all_runs or workers <= PER_WORKER_RUNS_MAX) else range(1)
    steps_per_s = 20
    judged, sentence = None, None
    if straggler is not None and workers > 1:
        from benchmarks.studies.straggler_scale import judged_gathers

        judged, sentence = judged_gathers(workers, straggler, len(_gather_times(seconds)))
    tables = {} if judged is None else {
        int(t * steps_per_s): g["table"] for t, g in zip(_gather_times(seconds), judged)
    }
    runs, tags, points = [], set(), 0
    for worker in writing:
        info = ClusterInfo(
            source="tf_config", cluster={"worker": tuple(f"h{i}:1" for i in range(workers))}, task_index=worker
        )
        path = _writer.run_dir(log_dir, info)
        writer = _writer.SummaryWriter(path)
        for t, values in _run_values(worker, gpus, worker == 0, workers, seconds, judged):
            step = int(t * steps_per_s)
            writer.scalars(values, step)
            if worker == 0 and step in tables:
                writer.text(T.CLUSTER_SLOWEST_WORKERS.name(), tables[step], step)
            if worker == 0 or len(runs) == 0:
                tags.update(values)
            points += len(values)
        if worker == 0 and sentence is not None:
            writer.text(T.CLUSTER_VERDICT.name(), sentence, int(seconds * steps_per_s))
        writer.close()
        runs.append(os.path.relpath(path, log_dir))
    nbytes = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(log_dir) for f in fs)
    return {"runs": runs, "tags_per_run_chief": len(tags), "points": points, "bytes": nbytes}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(base: str, path: str, **query: str) -> Any:
    url = f"{base}{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read())


def serve_time(log_dir: str, runs: list[str], timeout: float) -> dict[str, Any]:
    """Seconds from starting `tensorboard` until it lists every tag of every run, and one tag read back."""
    from keras_gpu.output.reader import read_scalars

    expected = {r: set(read_scalars(os.path.join(log_dir, r))) for r in (runs[0], runs[-1])}
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tensorboard.main", "--logdir", log_dir, "--host", "127.0.0.1", "--port", str(port),
         "--reload_interval", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        while True:
            if time.perf_counter() - t0 > timeout:
                return {"seconds": None, "timed_out_after_s": timeout}
            if proc.poll() is not None:
                raise RuntimeError(f"tensorboard exited with {proc.returncode}")
            try:
                listed = _get(base, "/data/plugin/scalars/tags")
            except OSError:
                time.sleep(0.2)
                continue
            runs_ok = set(runs) <= set(listed)
            tags_ok = runs_ok and all(set(listed.get(r, {})) >= tags for r, tags in expected.items())
            if tags_ok and len(listed) >= len(runs):
                seconds = time.perf_counter() - t0
                tag = sorted(expected[runs[-1]])[0]
                served = _get(base, "/data/plugin/scalars/scalars", run=runs[-1], tag=tag)
                return {"seconds": seconds, "points_served_of_one_tag": len(served)}
            time.sleep(0.2)
    finally:
        stop(proc)


def stop(proc: subprocess.Popen) -> None:
    """End a server this benchmark started: SIGTERM, then SIGKILL after 10 s."""
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def main(argv: list[str] | None = None) -> int:
    parser = _cli.make_parser("python -m benchmarks.studies.cluster_scale", __doc__.split("\n\n")[0], output_help="write the results as JSON here")
    parser.add_argument("--workers", type=int, nargs="+", default=[8, 64, 256])
    parser.add_argument("--gpus-per-worker", type=int, default=8)
    parser.add_argument("--also-all-runs", action="store_true", help="also measure every worker writing its run")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for TensorBoard per job")
    args = parser.parse_args(argv)
    results = []
    cases = [(n, False) for n in args.workers]
    if args.also_all_runs:
        cases += [(n, True) for n in args.workers if n > 16]
    for workers, all_runs in cases:
        log_dir = tempfile.mkdtemp(prefix="keras-gpu-scale-")
        try:
            t0 = time.perf_counter()
            written = simulate(log_dir, workers, args.gpus_per_worker, all_runs)
            write_s = time.perf_counter() - t0
            served = serve_time(log_dir, written["runs"], args.timeout)
        finally:
            shutil.rmtree(log_dir, ignore_errors=True)
        row = {"workers": workers, "per_worker_runs": all_runs or workers <= 16, "write_s": write_s, **written,
               "tensorboard": served}
        row.pop("runs")
        row["runs"] = len(written["runs"])
        results.append(row)
        tb = served["seconds"]
        print(
            f"{workers:4d} workers, {'every worker' if row['per_worker_runs'] else 'chief only':>12}: {row['runs']:4d} run(s), "
            f"{row['bytes'] / 2**20:8.1f} MiB, {row['points']:>10,} points; TensorBoard serves every tag after "
            f"{'timeout' if tb is None else f'{tb:.1f} s'}",
            flush=True,
        )
    if args.output:
        _cli.write_json(args.output, {"gpus_per_worker": args.gpus_per_worker, "results": results}, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
