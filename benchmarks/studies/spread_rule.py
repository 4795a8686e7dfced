"""How often the one rule of `keras-gpu scale` and `keras-gpu tune` calls a difference where there is none.

Run from the repository root::

    python -m benchmarks.studies.spread_rule --runs 16 --output docs/benchmarks/spread-rule-tensorflow-cpu-2core.json
    KERAS_BACKEND=jax python -m benchmarks.studies.spread_rule --runs 16 --output r.json
    python -m benchmarks.studies.spread_rule --runs 12 -- --case pipeline --steps 300   # another script
    python -m benchmarks.studies.spread_rule --from r.json   # judge runs already measured again

The same configuration of the same script (default `benchmarks/tune_cases.py --case mlp --steps 300`) runs
`--runs` times in a row, each exactly as both commands run a configuration
(`keras_gpu.cli._study_run.run_config`: the one injection into `fit`, the window of `--warmup` and `--steps`).
Nothing differs between the runs, so every difference the rule calls is a false alarm. Every ordered triple of
runs `i < j < k` is judged as the commands would judge it, `i` and `k` being the baseline's two runs (the
second after the others, as both commands run it) and `j` the row in between:

* `tune`: run `j` as a candidate: `beyond_spread(the rates of j's window halves, mean of the baseline's rates,
  spread)` is 1 (a help, which the verdict would name) or -1 (a hurt, marked `-` in the table);
* `scale`: run `j` as a row of the same replicas: `explain_shortfall` names a part of its step as the cause.

The spread is `measured_spread` of the two baseline runs (their window halves). Each rate is given for the
rule as shipped (the floor `MIN_MARGIN`) and, for comparison, with other floors. It reports; it never fails.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import sys
from dataclasses import asdict
from typing import Any

from benchmarks import _cli
from keras_gpu.meters import run_spread
from keras_gpu.meters.scale_runs import RunResult

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_SCRIPT = ["--case", "mlp", "--steps", "300"]
FLOORS = (0.0, 0.02, run_spread.MIN_MARGIN, 0.10)


def _measure(runs: int, warmup: int, steps: int, script_args: list[str]) -> list[dict[str, Any]]:
    from keras_gpu.cli._study_run import Config, ScaleError, run_config

    script = os.path.join(REPO, "benchmarks", "tune_cases.py")
    out = []
    for n in range(runs):
        sys.stderr.write(f"spread_rule: run {n + 1} of {runs}\n")
        try:
            measured = run_config(Config(1, 1, 1), script, script_args, False, warmup, steps, [], tool="tune")
        except ScaleError as exc:
            sys.stderr.write(f"spread_rule: run {n + 1} failed: {exc}\n")
            continue
        out.append(asdict(measured.result))
    return out


def _result(d: dict[str, Any]) -> RunResult:
    fields = dict(d)
    fields["halves"] = tuple(fields["halves"]) if fields.get("halves") else None
    fields["allreduce"] = None
    return RunResult(**fields)


def _with_floor(floor: float, judge: Any) -> Any:
    """`judge()` with `run_spread.MIN_MARGIN` set to `floor` for its duration."""
    kept = run_spread.MIN_MARGIN
    run_spread.MIN_MARGIN = floor
    try:
        return judge()
    finally:
        run_spread.MIN_MARGIN = kept


def judge(results: list[RunResult]) -> dict[str, Any]:
    """The rule's false alarms over every triple `i < j < k` of `results` (see the module's text)."""
    from keras_gpu.meters.scale_cause import explain_shortfall

    triples = list(itertools.combinations(range(len(results)), 3))
    out: dict[str, Any] = {"triples": len(triples), "floors": {}}
    spreads = []
    for floor in FLOORS:
        helps = hurts = scale = 0
        for i, j, k in triples:
            base, row, again = results[i], results[j], results[k]
            spread = run_spread.measured_spread([base, again])
            mean = (base.samples / base.seconds + again.samples / again.seconds) / 2
            halves = [row.samples / row.steps / h for h in row.halves] if row.halves else [row.samples / row.seconds]
            said = _with_floor(floor, lambda: run_spread.beyond_spread(halves, mean, spread))  # noqa: B023
            helps, hurts = helps + (said == 1), hurts + (said == -1)
            cause = _with_floor(floor, lambda: explain_shortfall(base, row, spread))  # noqa: B023
            scale += not cause.startswith(("within run-to-run spread", "none:", "not measured"))
            if floor == FLOORS[0]:
                spreads.append(spread)
        n = len(triples)
        out["floors"][f"{floor:g}"] = {
            "tune_helps": helps, "tune_hurts": hurts, "tune_rate": (helps + hurts) / n, "tune_helps_rate": helps / n,
            "scale_causes": scale, "scale_rate": scale / n,
        }
    out["spread_median"] = statistics.median(spreads)
    out["spread_range"] = [min(spreads), max(spreads)]
    rates = [r.samples / r.seconds for r in results]
    out["rates"] = {"min": min(rates), "median": statistics.median(rates), "max": max(rates),
                    "first_over_median": rates[0] / statistics.median(rates)}
    return out


def main(argv: list[str] | None = None) -> None:
    """Measure (or read) the runs, judge them, print the result and write it as JSON where asked."""
    parser = _cli.make_parser("python -m benchmarks.studies.spread_rule", __doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=16, help="runs of the one configuration (default 16)")
    parser.add_argument("--warmup", type=int, default=20, help="steps before the window (default 20, as the commands)")
    parser.add_argument("--steps", type=int, default=100, help="steps in the window (default 100, as the commands)")
    parser.add_argument("--from", dest="source", default=None, help="judge the runs of a result file again")
    parser.add_argument("script_args", nargs="*", help="arguments of benchmarks/tune_cases.py (after --)")
    args = parser.parse_args(argv)
    if args.source:
        with open(args.source, encoding="utf-8") as f:
            previous = json.load(f)
        runs, setup = previous["runs"], previous["setup"]
    else:
        _cli.check_at_least(parser, args, runs=3, steps=2)
        script_args = args.script_args or DEFAULT_SCRIPT
        runs = _measure(args.runs, args.warmup, args.steps, script_args)
        setup = {"backend": os.environ.get("KERAS_BACKEND", "tensorflow"), "warmup": args.warmup,
                 "steps": args.steps, "script": ["benchmarks/tune_cases.py", *script_args], "cores": os.cpu_count(),
                 "load_average": os.getloadavg()}
    result = {"setup": setup, "min_margin": run_spread.MIN_MARGIN, "judged": judge([_result(r) for r in runs]),
              "runs": runs}
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=1))
    if args.output:
        _cli.write_json(args.output, result)


if __name__ == "__main__":
    main()
