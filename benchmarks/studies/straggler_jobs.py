"""Real jobs with one slowed worker, on TensorFlow or JAX, with as many workers as the machine holds: is it named?

Run from the repository root, in the environment of the backend::

    python -m benchmarks.studies.straggler_jobs --workers 2 4 8 16 --output straggler-jobs-tf.json
    KERAS_BACKEND=jax python -m benchmarks.studies.straggler_jobs --workers 2 4 8 16 --output straggler-jobs-jax.json

Each job is `tests/_workers/straggler_worker.py` under `keras-gpu launch` on
loopback: a small MLP, 4 epochs of 24 steps (a gather at each epoch's end),
the last worker sleeping `--sleep` seconds after every step (host time).
Per job it prints the workers, the seconds the job took, each gather's
workers standing out, the chief's verdict, and the largest peak resident
memory of a worker (how many workers the machine's memory holds follows
from it). `--output` writes it as JSON. It reports; it never fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

from benchmarks import _cli

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKER = os.path.join(REPO, "tests", "_workers", "straggler_worker.py")


def run_job(workers: int, sleep_s: float, epochs: int = 4, timeout_s: float = 3600) -> dict[str, Any]:
    """One launched job, the last worker slowed; the chief's record and every worker's peak memory."""
    backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "keras_gpu.cli", "launch", "-n", str(workers)]
        cmd += ["--cpu-replicas", "1"] if backend == "jax" else []
        cmd += [WORKER, out, str(workers - 1), str(sleep_s), str(epochs)]
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
        seconds = time.perf_counter() - start
        records = []
        for k in range(workers):
            path = os.path.join(out, f"w{k}.json")
            if os.path.exists(path):
                with open(path) as f:
                    records.append(json.load(f))
    result: dict[str, Any] = {
        "backend": backend, "workers": workers, "slow": workers - 1, "sleep_s": sleep_s, "exit": proc.returncode,
        "seconds": seconds, "records": len(records),
    }
    if proc.returncode != 0 or not records:
        result["error"] = (proc.stdout + proc.stderr)[-3000:]
        return result
    chief = next((r for r in records if r["rank"] == 0), records[0])
    result.update(
        straggler=chief["straggler"], part=chief["part"], clear_gathers=chief["clear_gathers"],
        gathers=len(chief["gathers"]), sentence=chief["sentence"],
        standing_out=[g["out"] for g in chief["gathers"]], busy_ms=[g["busy_ms"] for g in chief["gathers"]],
        peak_rss_bytes=max(r["peak_rss_bytes"] for r in records),
        named=chief["straggler"] == workers - 1 and chief["part"] == "host",
    )
    return result


def main(argv: list[str] | None = None) -> None:
    parser = _cli.make_parser("python -m benchmarks.studies.straggler_jobs", __doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 4, 8], help="job sizes, in workers")
    parser.add_argument("--sleep", type=float, default=0.02, help="seconds the last worker sleeps after each step")
    parser.add_argument("--epochs", type=int, default=4, help="epochs per job (one gather each)")
    args = parser.parse_args(argv)
    _cli.check_at_least(parser, args, epochs=1)
    if min(args.workers) < 2:
        parser.error(f"--workers must be at least 2. Received: --workers={min(args.workers)}")
    results = []
    for workers in args.workers:
        r = run_job(workers, args.sleep, args.epochs)
        results.append(r)
        if "error" in r:
            print(f"{r['backend']} {workers} workers: the job failed (exit {r['exit']}) after {r['seconds']:.0f} s",
                  flush=True)
            continue
        print(f"{r['backend']} {workers} workers: {r['seconds']:.0f} s, peak RSS per worker "
              f"{r['peak_rss_bytes'] / 2**20:.0f} MiB; standing out per gather {[[w for w, _, _ in g] for g in r['standing_out']]}; "
              f"named: {r['named']} ({r['sentence']})", flush=True)
    if args.output:
        _cli.write_json(args.output, {"results": results})


if __name__ == "__main__":
    main()
