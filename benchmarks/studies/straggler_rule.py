"""How often balanced multi-worker jobs would be called straggling: the false-alarm rate of the straggler rule.

Run from the repository root::

    python -m benchmarks.studies.straggler_rule --runs 4 --workers 2 3 4 --dir /tmp/straggler_rule
    python -m benchmarks.studies.straggler_rule --dir /tmp/straggler_rule --no-run   # analyze jobs already run

Raw result of the 12 jobs measured: `docs/benchmarks/straggler-rule-balanced-cpu-2core.json`.

Each job is `tests/_workers/cluster_worker.py` in its `measure` mode under
`keras-gpu launch` on loopback: every worker does the same work (6 epochs of
32 steps, one gather per epoch). Every gather's rows, as the chief received
them, are judged by the current rule and by the rule without its spread
condition (an imbalance above
:data:`keras_gpu.meters.cluster_view.STRAGGLER_IMBALANCE` alone), per gather
(how many gathers look clear) and per job (whether the fit's verdict names a
worker: a false alarm, since no worker was slowed). It reports; it never fails.
The same jobs' rows give `python -m benchmarks.studies.straggler_scale`
its measured noise model (`--measured DIR`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from typing import Any

from benchmarks import _cli, _stats
from keras_gpu.meters import cluster_view

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKER = os.path.join(REPO, "tests", "_workers", "cluster_worker.py")


def _run(directory: str, workers: int, run: int) -> str:
    out = os.path.join(directory, f"n{workers}-r{run}")
    os.makedirs(out, exist_ok=True)
    cmd = [sys.executable, "-m", "keras_gpu.cli", "launch", "-n", str(workers), WORKER, os.path.join(out, "logs"),
           "measure", out]
    with open(os.path.join(out, "log.txt"), "w") as log:
        subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=False, timeout=1800)
    return out


def _gathers(out: str) -> list[cluster_view.ClusterSummary]:
    """The gathers the chief received, summarized again from their rows by the current code."""
    with open(os.path.join(out, "w0.json")) as f:
        record = json.load(f)
    summaries = []
    for view in record["cluster"]:
        if view is None:
            continue
        rows = view["rows"]
        width = len(cluster_view.ROW_FIELDS)
        table = [
            [rows[str(k)][name] for name in cluster_view.ROW_FIELDS] if str(k) in rows else [float("nan")] * width
            for k in range(max(int(k) for k in rows) + 1)
        ]
        summary = cluster_view.summarize_rows(table)
        if summary is not None:
            summaries.append(summary)
    return summaries


def analyze(directory: str) -> dict[str, Any]:
    """Per worker count: gathers, clear gathers under each rule, and jobs whose verdict names a worker."""
    out: dict[str, Any] = {}
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if not (name.startswith("n") and os.path.exists(os.path.join(path, "w0.json"))):
            continue
        workers = name[1:].split("-")[0]
        gathers = _gathers(path)
        imbalance_only = [dataclasses.replace(g, spread_sec=0.0, excess_sec=float("inf"), slowest=()) for g in gathers]
        entry = out.setdefault(workers, {
            "jobs": 0, "gathers": 0, "clear": 0, "clear_imbalance_only": 0, "named": 0, "named_imbalance_only": 0,
            "imbalances": [], "excess_over_spread": [],
        })
        entry["jobs"] += 1
        entry["gathers"] += len(gathers)
        entry["clear"] += sum(g.clear for g in gathers)
        entry["clear_imbalance_only"] += sum(g.clear for g in imbalance_only)
        entry["named"] += cluster_view.verdict_over(gathers).straggler is not None
        entry["named_imbalance_only"] += cluster_view.verdict_over(imbalance_only).straggler is not None
        entry["imbalances"] += [round(g.imbalance, 4) for g in gathers]
        entry["excess_over_spread"] += [
            round(g.excess_sec / g.spread_sec, 2) for g in gathers
            if g.spread_sec > 0 and g.imbalance > cluster_view.STRAGGLER_IMBALANCE
        ]
    for entry in out.values():
        entry["median_imbalance"] = _stats.median(entry["imbalances"]) if entry["imbalances"] else None
        entry["max_imbalance"] = max(entry["imbalances"], default=None)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = _cli.make_parser(
        "python -m benchmarks.studies.straggler_rule", __doc__.splitlines()[0], output_help="write the analysis as JSON here"
    )
    parser.add_argument("--runs", type=int, default=4, help="jobs per worker count")
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--dir", required=True, help="where each job writes its records")
    parser.add_argument("--no-run", action="store_true", help="only analyze the jobs already in --dir")
    args = parser.parse_args(argv)
    if not args.no_run:
        for run in range(1, args.runs + 1):
            for workers in args.workers:
                _run(args.dir, workers, run)
    result = analyze(args.dir)
    print(f"rule: imbalance > {cluster_view.STRAGGLER_IMBALANCE} and excess > score_threshold(n) x the others' "
          "spread, in more than half of the gathers")
    for workers, entry in sorted(result.items()):
        print(f"{workers} workers: {entry['jobs']} jobs, {entry['gathers']} gathers; clear gathers {entry['clear']} "
              f"(imbalance alone: {entry['clear_imbalance_only']}); jobs naming a worker {entry['named']} "
              f"(imbalance alone: {entry['named_imbalance_only']}); imbalance median {entry['median_imbalance']:.3f}, "
              f"max {entry['max_imbalance']:.3f}")
    if args.output:
        _cli.write_json(args.output, result)


if __name__ == "__main__":
    main()
