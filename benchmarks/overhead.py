"""What keras-gpu's monitoring callbacks cost a training run, next to common alternatives.

Run from the repository root (nothing else should run on the machine meanwhile):

```
python -m benchmarks.overhead                 # full: about 15-20 minutes on 2 quiet CPU cores
python -m benchmarks.overhead --quick         # the same measurements, smaller: 2-4 minutes
```

This is a script of the repository, not part of the installed package:
`keras-gpu bench` only says how to run it.

It writes a JSON result (default `benchmarks/results/<hostname>.json`;
`--output`, `--label`) with the machine description, the raw measurements
and their summaries, and prints the tables below. It reports; it never fails
because a budget is missed (the exit status is 1 only if a measurement
process itself failed).

**Protocol.** Each configuration (`mlp-1`, `mlp-2`, `cnn-1`, `cnn-2`: model
and replica count, see :mod:`benchmarks._workload`) runs in its own process.
A *run* builds a fresh model (same seed every time) and calls `fit` twice on
it with the same callback instances: a first `fit` of 3 epochs and a later
`fit` of 2 (quick: 2 and 2). Every variant (a set of callbacks) runs in A/B
pairs with a bare run, back to back, the order alternating from pair to pair
and the variants shuffled in each round (full: 3 rounds, quick: 1), so that
machine drift cancels in the per-pair ratios. Every variant first runs once,
briefly and unmeasured, in the process (module imports and first-use costs:
kept in the JSON as `cold_first_fit`, not in the tables).

`mlp-2w` is a two-worker job on 127.0.0.1 (two processes run each run
together); it runs only keras-gpu's variants, without the accuracy runs and
the self-check, and its tables show worker 0 (`mlp-2w`) and worker 1
(`mlp-2w/worker1`) apart: each worker's hooks are timed in its own process.
`mlp-2w-jax` is the same two-process job on Keras' JAX backend
(`jax.distributed`, run it with JAX installed; TensorFlow is not needed):
`python -m benchmarks.overhead --configs mlp-2w-jax --variants kg-default`.
There the cluster view's clock wraps the train function, outside every
hook: its own cost per call is calibrated in each process (an empty train
function, timed bare and wrapped) and kept as `jax_clock_s_per_call`.

Variants: `kg-default` (`keras_gpu.callbacks(log_dir)`), `kg-throughput`,
`kg-memory`, `kg-placement` (each keras-gpu callback alone, at its defaults),
`kg-step-probe` (only what `StepTimeLogger` puts into multi-worker steps,
installed in any job: the step probe, and in multi-worker jobs the rows'
ride on the gradient all-reduce; their in-graph cost, seen in `vs bare`; on
JAX the cluster view's clock around the train function), `tb-epoch` and `tb-batch` (Keras' `TensorBoard` with `update_freq="epoch"`,
and with `update_freq=1, write_steps_per_second=True`), `timehistory` and
`naive` (see :mod:`benchmarks.peers`), or any `module:callable`.

**Instruments** (see :mod:`benchmarks._instrument`): every hook the measured
callbacks define is timed on the training thread with `time.perf_counter()`;
Python threads they start are found by diffing `threading.enumerate()` and
their CPU time is read from `/proc/self/task/<tid>/schedstat`; two clock
callbacks, first and last in the list, timestamp each epoch end; the first
call of the training function is timed too (for callbacks that interpose on
it). The self-check (in every configuration; quick: the first only;
`--no-self-check` skips it) runs probes with their own ground truth through
the same instruments, and measures the timer's floor per hook call. Hook
time and thread CPU are added up, so a hook that waits for its own thread
(a join, or the GIL that thread holds) counts twice: the direct figures are
upper bounds.

**Columns of the per-configuration tables** (median over runs, [first
quartile, third quartile]):

* `steps/s`: steps per epoch over the median steady epoch time (steady
  epochs: all but the first of each `fit`; an epoch's time runs from the end
  of the previous epoch to its own end, all hooks included).
* `vs bare`: that variant's steps/s over its paired bare run's: the wall-clock
  A/B ratio (1.000 = no cost). Shared machines move this by several percent.
* `direct %`: time inside the callbacks' hooks plus their threads' CPU time,
  as a fraction of the steady epochs' wall time: the cost measured directly,
  far steadier than `vs bare`.
* `net %`: `direct %` less the timer's own floor per batch-hook call (the
  self-check's empty hook, typically 1-2 us in a real `fit`).
* `us/step`: microseconds per step spent in batch hooks (the per-step part of
  `direct %`, including the occasional batch-hook call that writes a window).
* `ms/epoch`: milliseconds per steady epoch in epoch hooks and threads (the
  per-epoch part of `direct %`). `us/step` times your steps per epoch plus
  `ms/epoch`, over your epoch time, scales `direct %` to your run; the quick
  mode's epochs are a quarter as long, so per-epoch work weighs four times
  as much there.
* `1st fit s` / `later fit s`: one-off cost of the first `fit` on a fresh model
  and of a later `fit` on the same model: `direct` (hook and thread time
  beyond the steady per-epoch cost, plus the first-call excess for
  interposing callbacks) and `wall` (extra wall time over the paired bare
  run beyond its steady epochs). The bare row shows its own absolute one-off
  wall time (tracing, data set-up) for scale.

**Asynchronous-dispatch A/B** (`--async-ab`, default: JAX and PyTorch where
installed; `none` skips it; `--configs none` runs it alone). On those
backends Keras dispatches batch-end hooks on a thread pool unless a callback
overrides one without `async_safe = True`; the instruments above override
`on_train_batch_end` and so make every arm synchronous, the bare one
included. So this A/B (see :mod:`benchmarks._ab`), in a fresh process per
backend, times whole `fit` calls with `time.perf_counter()` outside `fit`,
`verbose=0`: the default `keras_gpu.callbacks()` (the same instances from fit
to fit, after one unmeasured fit of each arm) against a bare arm with no
callback at all, in interleaved pairs (`--ab-pairs`, full 7, quick 3; fits of
`--ab-steps` steps, full 2000, quick 500, of a 32-256-256-10 MLP, batch 64).
The JSON's `async_ab` holds each pair's times, the median slowdown with its
quartiles and range, and whether Keras' `CallbackList` of each arm was
asynchronous.

Then: ThroughputLogger's accuracy (its logged `throughput/samples_per_sec`
against samples over wall time between the benchmark's own timestamps at the
same batch ends: median and max relative error over its windows), the import
cost of `keras_gpu` (fresh processes), a leak check (RSS growth over
`--leak-steps` steps with the default callbacks and bare, Python and OS
threads and file descriptors left after `fit` beyond what the first `fit` with
the same callbacks left: the run's event file and its writer thread stay open
for later fits by design, and are reported apart), and every budget with the
measured value.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import _analysis, _cli
from benchmarks._machine import describe_machine, load_average
from benchmarks._variants import DEFAULT_VARIANTS, VARIANTS, variant
from benchmarks._workload import CONFIGS, DEFAULT_CONFIGS

__all__ = ["SCHEMA", "build_parser", "failed_parts", "main", "options_from_args", "run_benchmark", "run_from_options", "write_result"]

SCHEMA = "keras-gpu-bench-overhead/1"
"""The `schema` of the JSON result."""

REPO = Path(__file__).resolve().parent.parent

_FULL = {"rounds": 3, "scale": 1.0, "leak_steps": 20000, "import_repeats": 7, "epochs": [3, 2], "short_windows": True,
         "ab_pairs": 7, "ab_steps": 2000}
_QUICK = {"rounds": 1, "scale": 0.25, "leak_steps": 2000, "import_repeats": 3, "epochs": [2, 2], "short_windows": False,
          "ab_pairs": 3, "ab_steps": 500}
_AB_BACKENDS = ("jax", "torch")


def add_options(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the benchmark's options to `parser` and return it."""
    parser.add_argument(
        "--quick", action="store_true", help="smaller run: 1 round, quarter-length epochs, short leak check (a few minutes)"
    )
    parser.add_argument(
        "--configs",
        default=",".join(DEFAULT_CONFIGS),
        help=f"comma-separated, from {', '.join(CONFIGS)} (default: all but mlp-2w-jax, which needs JAX)",
    )
    parser.add_argument(
        "--variants",
        default=",".join(DEFAULT_VARIANTS),
        help=f"comma-separated callback sets compared with bare fit, from {', '.join(DEFAULT_VARIANTS)}, "
        "or module:callable (called with the log directory, returns callbacks)",
    )
    parser.add_argument("--rounds", type=int, help="A/B pairs per variant and configuration (full: 3, quick: 1)")
    parser.add_argument("--scale", type=float, help="steps per epoch as a multiple of the defaults (full: 1, quick: 0.25)")
    parser.add_argument("--epochs", help="epochs of each successive fit on a model (full: 3,2, quick: 2,2; each at least 2)")
    parser.add_argument("--leak-steps", type=int, help="steps of the leak check (full: 20000, quick: 2000; 0 skips it)")
    parser.add_argument("--import-repeats", type=int, help="fresh processes timing the import (full: 7, quick: 3; 0 skips)")
    parser.add_argument("--no-accuracy", action="store_true", help="skip the ThroughputLogger accuracy runs")
    parser.add_argument("--no-self-check", action="store_true", help="skip the instruments' self-check")
    parser.add_argument("--seed", type=int, default=0, help="model, data and shuffling seed (default 0)")
    parser.add_argument("--label", help="name of the result file (default: the host name)")
    parser.add_argument("--output", help="path of the JSON result (default: benchmarks/results/<label>.json)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds allowed to each measuring process")
    parser.add_argument("--no-table", action="store_true", help="do not print the tables")
    parser.add_argument(
        "--async-ab",
        default="auto",
        help="backends (jax, torch) of the asynchronous-dispatch A/B: whole fits, verbose=0, the default "
        "keras_gpu.callbacks() against no callback (default auto: those installed; none skips it)",
    )
    parser.add_argument("--ab-pairs", type=int, help="interleaved pairs of that A/B (full: 7, quick: 3)")
    parser.add_argument("--ab-steps", type=int, help="steps per fit of that A/B (full: 2000, quick: 500)")
    return parser



def build_parser() -> argparse.ArgumentParser:
    """The benchmark's parser (`python -m benchmarks.overhead --help`)."""
    parser = _cli.make_parser(
        "python -m benchmarks.overhead", "Measure what keras-gpu's callbacks cost a training run.", output=None
    )
    return add_options(parser)


def options_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """Validated options from parsed arguments; raises `ValueError` naming the bad argument."""
    preset = _QUICK if args.quick else _FULL
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    if configs == ["none"]:
        configs = []
    elif not configs:
        configs = ["?"]
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown:
        raise ValueError(
            f"`--configs` takes names from {', '.join(CONFIGS)}, or none. Received: --configs={args.configs!r}"
        )
    variants = [v.strip() for v in args.variants.split(",") if v.strip() and v.strip() != "bare"]
    for name in variants:
        variant(name)  # raises ValueError naming the variant
    if len(set(variants)) != len(variants):
        raise ValueError(f"`--variants` lists a variant twice. Received: --variants={args.variants!r}")
    epochs = preset["epochs"] if args.epochs is None else _int_list("--epochs", args.epochs)
    if not epochs or any(e < 2 for e in epochs):
        raise ValueError(f"`--epochs` needs each fit to have at least 2 epochs (one steady). Received: --epochs={args.epochs!r}")
    opts = {
        "quick": bool(args.quick),
        "configs": configs,
        "variants": variants,
        "rounds": _positive("--rounds", preset["rounds"] if args.rounds is None else args.rounds),
        "scale": _positive("--scale", preset["scale"] if args.scale is None else args.scale, number=True),
        "epochs": epochs,
        "leak_steps": _non_negative("--leak-steps", preset["leak_steps"] if args.leak_steps is None else args.leak_steps),
        "import_repeats": _non_negative(
            "--import-repeats", preset["import_repeats"] if args.import_repeats is None else args.import_repeats
        ),
        "accuracy": not args.no_accuracy,
        "accuracy_settings": [{}, {"every_s": 0.25}] if preset["short_windows"] else [{}],
        "self_check": "all" if not args.no_self_check and not args.quick else ("first" if not args.no_self_check else "none"),
        "async_ab": _ab_backends(args.async_ab),
        "ab_pairs": _positive("--ab-pairs", preset["ab_pairs"] if args.ab_pairs is None else args.ab_pairs),
        "ab_steps": _positive("--ab-steps", preset["ab_steps"] if args.ab_steps is None else args.ab_steps),
        "seed": args.seed,
        "timeout": _positive("--timeout", args.timeout, number=True),
    }
    label = args.label or re.sub(r"[^A-Za-z0-9_.-]+", "_", os.uname().nodename if hasattr(os, "uname") else "machine")
    opts["label"] = label
    opts["output"] = os.path.abspath(args.output) if args.output else str(REPO / "benchmarks" / "results" / f"{label}.json")
    return opts


def _ab_backends(text: str) -> list[str]:
    """The backends of `--async-ab`: `auto` (JAX and PyTorch where installed), `none`, or a list of them."""
    import importlib.util

    text = (text or "").strip()
    if text == "none":
        return []
    if text == "auto":
        return [b for b in _AB_BACKENDS if importlib.util.find_spec(b) is not None]
    chosen = [b.strip() for b in text.split(",") if b.strip()]
    if not chosen or any(b not in _AB_BACKENDS for b in chosen):
        raise ValueError(
            f"`--async-ab` takes jax and/or torch (comma-separated), auto or none. Received: --async-ab={text!r}"
        )
    return chosen


def _int_list(name: str, text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"`{name}` takes comma-separated integers, e.g. 3,2. Received: {name}={text!r}") from None


def _positive(name: str, value: Any, number: bool = False) -> Any:
    if not (isinstance(value, (int, float)) if number else isinstance(value, int)) or not value > 0:
        raise ValueError(f"`{name}` must be a positive {'number' if number else 'integer'}. Received: {name}={value!r}")
    return value


def _non_negative(name: str, value: Any) -> int:
    if not isinstance(value, int) or value < 0:
        raise ValueError(f"`{name}` must be a non-negative integer. Received: {name}={value!r}")
    return value


# --------------------------------------------------------------------------- processes


def _progress(message: str) -> None:
    sys.stderr.write(f"keras-gpu bench: {message}\n")
    sys.stderr.flush()


def _worker_env(backend: str = "tensorflow") -> dict[str, str]:
    env = dict(os.environ)
    env.pop("TF_CONFIG", None)
    env.update(
        {
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "KERAS_BACKEND": backend,
            "PYTHONHASHSEED": "0",
            "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p),
        }
    )
    return env


def _run_worker(spec: dict[str, Any], timeout: float, workers: int = 1, backend: str = "tensorflow") -> dict[str, Any]:
    """Run one job in a fresh process; its result, or `{"error": ..., "stderr_tail": ...}`.

    With `workers > 1`, the job runs in that many processes at once, one
    multi-worker job on 127.0.0.1 (each gets its `TF_CONFIG`); the result is
    worker 0's, with the other workers' under `"other_workers"`. One failed
    worker ends the others. `backend` is Keras' backend in the processes (on
    JAX the same `TF_CONFIG` makes `keras_gpu.make_strategy` join them).
    """
    with tempfile.TemporaryDirectory(prefix="keras_gpu_bench_job_") as tmp:
        job = os.path.join(tmp, "job.json")
        _cli.write_json(job, spec, indent=None)
        outs = [os.path.join(tmp, f"result{i}.json") for i in range(workers)]
        envs = [_worker_env(backend)] * workers
        if workers > 1:
            cluster = {"worker": [f"127.0.0.1:{port}" for port in _free_ports(workers)]}
            envs = [{**_worker_env(backend), "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}})}
                    for i in range(workers)]
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "benchmarks._worker", job, out],
                cwd=str(REPO), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                text=True,
            )
            for env, out in zip(envs, outs)
        ]
        tails: list[list[str]] = [[] for _ in procs]

        def kill_all() -> None:
            for p in procs:
                if p.poll() is None:
                    p.kill()

        def read(i: int) -> None:
            for line in procs[i].stderr:
                if i == 0 and line.startswith("keras-gpu bench: "):
                    sys.stderr.write(line)
                    sys.stderr.flush()
                tails[i] = (tails[i] + [line.rstrip()])[-40:]
            if procs[i].wait() != 0:
                kill_all()  # a multi-worker job cannot go on without one of its workers

        timer = threading.Timer(timeout, kill_all)
        timer.start()
        readers = [threading.Thread(target=read, args=(i,), daemon=True) for i in range(workers)]
        try:
            for t in readers:
                t.start()
            for t in readers:
                t.join()
            codes = [p.wait() for p in procs]
        finally:
            timer.cancel()
            kill_all()
        results = []
        for i, (code, out) in enumerate(zip(codes, outs)):
            if code != 0 or not os.path.exists(out):
                why = f"timed out after {timeout:.0f} s" if code in (-9, 137) else f"exited with status {code}"
                who = f"the {spec['job']} process" + (f" of worker {i}" if workers > 1 else "")
                return {"error": f"{who} {why}", "stderr_tail": tails[i]}
            with open(out, encoding="utf-8") as f:
                results.append(json.load(f))
        if workers == 1:
            return results[0]
        return {**results[0], "other_workers": results[1:]}


def _free_ports(n: int) -> list[int]:
    """`n` distinct free TCP ports on 127.0.0.1."""
    import socket

    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


# --------------------------------------------------------------------------- the benchmark


def run_benchmark(opts: dict[str, Any]) -> dict[str, Any]:
    """Run every measurement described by `opts` (from :func:`options_from_args`) and return the result."""
    started = time.perf_counter()
    labels = {name: (v.label, v.group) for name, v in VARIANTS.items()}
    result: dict[str, Any] = {
        "schema": SCHEMA,
        "label": opts["label"],
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "options": {k: v for k, v in opts.items() if k != "output"},
        "machine": describe_machine(),
        "budgets": dict(_analysis.BUDGETS),
        "configs": {},
    }
    for i, name in enumerate(opts["configs"]):
        _progress(f"configuration {name} ({i + 1}/{len(opts['configs'])}), {time.perf_counter() - started:.0f} s so far")
        workers, backend = CONFIGS[name].workers, CONFIGS[name].backend
        spec = {
            "job": "overhead",
            "config": name,
            "scale": opts["scale"],
            "rounds": opts["rounds"],
            "epochs": opts["epochs"],
            "variants": opts["variants"] if workers == 1 else _multiworker_variants(opts["variants"]),
            "seed": opts["seed"],
            "accuracy": opts["accuracy"] and workers == 1,
            "accuracy_settings": opts["accuracy_settings"],
            "self_check": workers == 1 and (opts["self_check"] == "all" or (opts["self_check"] == "first" and i == 0)),
        }
        raw = _run_worker(spec, opts["timeout"], workers, backend)
        if "error" in raw:
            _progress(f"configuration {name} failed: {raw['error']}")
            result["configs"][name] = raw
            continue
        result["configs"][name] = {"summary": _analysis.summarise_config(raw, labels), "raw": raw}
        for w, worker_raw in enumerate(raw.get("other_workers", []), start=1):
            result["configs"][f"{name}/worker{w}"] = {"summary": _analysis.summarise_config(worker_raw, labels)}
    if opts["async_ab"]:
        result["async_ab"] = {}
        for backend in opts["async_ab"]:
            _progress(f"asynchronous-dispatch A/B on {backend}: {opts['ab_pairs']} pairs of {opts['ab_steps']} steps")
            result["async_ab"][backend] = _run_ab(backend, opts)
    if opts["import_repeats"]:
        _progress(f"import cost ({opts['import_repeats']} fresh processes)")
        runs = [_run_worker({"job": "import"}, opts["timeout"]) for _ in range(opts["import_repeats"])]
        good = [r for r in runs if "error" not in r]
        result["import"] = {"raw": runs, "summary": _analysis.summarise_import(good) if good else None}
    if opts["leak_steps"]:
        leak = {}
        for name in ("bare", "kg-default"):
            _progress(f"leak check: {name}, {opts['leak_steps']} steps")
            spec = {"job": "leak", "config": "mlp-1", "variant": name, "steps": opts["leak_steps"],
                    "epoch_steps": min(1000, opts["leak_steps"])}
            leak[name] = _run_worker(spec, opts["timeout"])
        result["leak"] = {"raw": leak, "summary": _analysis.summarise_leak(leak)}
    result["checks"] = _analysis.budget_checks(result)
    result["load_average_end"] = load_average()
    result["duration_s"] = time.perf_counter() - started
    return result


def _run_ab(backend: str, opts: dict[str, Any]) -> dict[str, Any]:
    """`benchmarks._ab` in a fresh process on `backend`: its result, or `{"error": ..., "stderr_tail": ...}`."""
    with tempfile.TemporaryDirectory(prefix="keras_gpu_bench_ab_") as tmp:
        out = os.path.join(tmp, "ab.json")
        cmd = [sys.executable, "-m", "benchmarks._ab", out, "--pairs", str(opts["ab_pairs"]), "--steps", str(opts["ab_steps"])]
        try:
            proc = subprocess.run(cmd, cwd=str(REPO), env=_worker_env(backend), capture_output=True, text=True,
                                  timeout=opts["timeout"])
        except subprocess.TimeoutExpired:
            return {"error": f"the {backend} A/B process timed out after {opts['timeout']:.0f} s", "stderr_tail": []}
        if proc.returncode != 0 or not os.path.exists(out):
            return {"error": f"the {backend} A/B process exited with status {proc.returncode}",
                    "stderr_tail": proc.stderr.strip().splitlines()[-40:]}
        with open(out, encoding="utf-8") as f:
            return json.load(f)


def _multiworker_variants(variants: list[str]) -> list[str]:
    """The variants a multi-worker configuration runs: keras-gpu's (what a peer costs does not depend on workers)."""
    chosen = [v for v in variants if v.startswith("kg-")]
    return chosen or ["kg-default"]


def failed_parts(result: dict[str, Any]) -> list[str]:
    """Names of the measurements whose process failed."""
    failed = [f"configuration {n}" for n, c in result.get("configs", {}).items() if "error" in c]
    failed += ["import" for r in result.get("import", {}).get("raw", []) if "error" in r][:1]
    failed += [f"leak {n}" for n, r in result.get("leak", {}).get("raw", {}).items() if "error" in r]
    failed += [f"async A/B {b}" for b, r in result.get("async_ab", {}).items() if "error" in r]
    return failed


def write_result(result: dict[str, Any], path: str) -> None:
    """Write `result` as JSON to `path` (atomically), creating its directory."""
    _cli.write_json(path, result)


def run_from_options(opts: dict[str, Any], *, table: bool = True) -> int:
    """Measure, write the JSON, print the tables. Returns the exit status (1 if a measurement failed)."""
    result = run_benchmark(opts)
    write_result(result, opts["output"])
    if table:
        from rich.console import Console

        console = Console()
        _render(result, console if console.is_terminal else Console(width=160))
    failed = failed_parts(result)
    _progress(f"wrote {opts['output']} in {result['duration_s']:.0f} s" + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


def _render(result: dict[str, Any], console: Any) -> None:
    from benchmarks._report import render

    render(result, console)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m benchmarks.overhead [options]`; returns the exit status."""
    # TensorFlow keeps CPU allocator statistics (read by MemoryLogger and the
    # per-batch peer) only with its oneDNN kernels, which are off by default on
    # some CPUs (AMD EPYC here): ask for them, so that every machine measures
    # the same work. The measurement processes inherit it.
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        opts = options_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    return run_from_options(opts, table=not args.no_table)


if __name__ == "__main__":
    sys.exit(main())
