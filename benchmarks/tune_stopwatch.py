"""`keras-gpu tune` on one of `benchmarks/tune_cases.py`'s scripts, each row against the script's own stopwatch.

    python -m benchmarks.tune_stopwatch --case mlp
    KERAS_BACKEND=jax python -m benchmarks.tune_stopwatch --case mlp --try spe4,spe16,spe64,jit,bf16
    python -m benchmarks.tune_stopwatch --case mlp --warmup 50 --steps 1000 -- --steps 1200

Prints the command's terminal table and verdict, then a Markdown table: each measured row's samples/s as
`keras-gpu tune` measured it and as the script's stopwatch saw the same window (batch ends from step W to
W + N on), and the command's wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def stopwatch_rate(line: dict, batch: int, warmup: int, steps: int) -> float:
    """Samples/s over the window the scale window measures: from the first batch end at step >= W, N steps on.

    The time between an epoch's last batch end and the next epoch's start is left out, as the window does.
    """
    ends = line["ends"]
    start = next(i for i, (s, _) in enumerate(ends) if s >= warmup)
    stop = next(i for i, (s, _) in enumerate(ends) if s - ends[start][0] >= steps)
    t0, t1 = ends[start][1], ends[stop][1]
    gaps = sum(begin - max(t for _, t in ends if t < begin) for begin in line["epochs"][1:] if t0 < begin < t1)
    return batch * (ends[stop][0] - ends[start][0]) / (t1 - t0 - gaps)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--case", default="mlp")
    p.add_argument("--try", dest="tries", default=None)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("script_args", nargs="*", help="more arguments of tune_cases.py (after --)")
    a = p.parse_args()
    batch = 32 if a.case == "conv" else 64
    with tempfile.TemporaryDirectory() as folder:
        watch = os.path.join(folder, "stopwatch.jsonl")
        command = [sys.executable, "-m", "keras_gpu.cli", "tune", "--json", "--warmup", str(a.warmup),
                   "--steps", str(a.steps), *(["--try", a.tries] if a.tries else []),
                   str(REPO / "benchmarks" / "tune_cases.py"), "--case", a.case, "--stopwatch", watch, *a.script_args]
        start = time.perf_counter()
        proc = subprocess.run(command, capture_output=True, text=True, cwd=REPO,
                              env=dict(os.environ, PYTHONPATH=str(REPO)))
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            raise SystemExit(proc.stderr[-3000:])
        out = json.loads(proc.stdout)
        lines = [json.loads(t) for t in Path(watch).read_text().splitlines()]
    from keras_gpu.cli.tune import render

    render(out["rows"], out["skipped"], out["verdict"])
    print(f"\nwall time: {wall:.0f} s ({len(out['rows'])} runs)\n")
    print("| # | run | change | samples/s (keras-gpu tune) | samples/s (stopwatch) | difference |")
    print("|---|---|---|---|---|---|")
    measured = sorted((r for r in out["rows"] if r["status"] == "measured"), key=lambda r: r["run"])  # run order
    for row, line in zip(measured, lines):
        i = out["rows"].index(row) + 1
        factor = int(m.group(1)) if (m := re.search(r"batch(\d)", row["change"])) else 1
        truth = stopwatch_rate(line, batch * factor, a.warmup, a.steps)
        diff = row["samples_per_sec"] / truth - 1
        print(f"| {i} | {row['run']} | {row['change']} | {row['samples_per_sec']:,.0f} | {truth:,.0f} | {diff:+.1%} |")


if __name__ == "__main__":
    main()
