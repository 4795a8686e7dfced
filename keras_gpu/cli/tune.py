"""`keras-gpu tune`: the fixes for the user's own script, each measured on it.

```
keras-gpu tune train.py --epochs 3
keras-gpu tune --try spe16,batch2,bf16 --steps 200 --json -m mypackage.train
```

The script runs unchanged as written (the baseline), then once per
candidate change that applies to it (`keras_gpu.meters.tune_candidates`),
applied inside the run by `keras_gpu.hooks.tune_private` to the model `fit`
trains and the data it is given, then as written again (the run-to-run
spread, over the whole study's time), and once more with the changes that
helped together. Each run is measured exactly as `keras-gpu scale` measures
one configuration, by the same runner (`keras_gpu.cli._study_run.run_config`:
the one injection into `fit`, stopped after W + N steps, the N steps timed,
one record per run); `keras_gpu.meters.tune_table` compares them with the
one rule of both commands (`keras_gpu.meters.run_spread`).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from keras_gpu.cli import UsageError
from keras_gpu.cli._study_run import Config, ScaleError, available_gpus, run_config
from keras_gpu.cli.scale import count_option
from keras_gpu.meters.tune_candidates import (
    CANDIDATES,
    Candidate,
    by_name,
    change_for,
    combine,
    for_script,
    line_for,
    skip_reason,
)
from keras_gpu.meters.tune_table import TuneRun, baseline_spread, build_rows, verdict

__all__ = ["DEFAULT_STEPS", "DEFAULT_WARMUP", "add_parser", "parse_try", "render", "run"]

DEFAULT_WARMUP = 20
"""Training steps before the measured window, by default."""
DEFAULT_STEPS = 100
"""Training steps in the measured window, by default."""
_TOOL = "keras-gpu tune"


def parse_try(text: str) -> list[str]:
    """`"spe16,batch2"` as `["spe16", "batch2"]`: candidate names, each once.

    Raises:
        argparse.ArgumentTypeError: An unknown or repeated name, echoing `text`.
    """
    names = [t.strip() for t in text.split(",")]
    try:
        for name in names:
            by_name(name)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"names each candidate once. Received: --try {text}")
    return names


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register `keras-gpu tune`."""
    names = ",".join(c.name for c in CANDIDATES)
    parser = subparsers.add_parser(
        "tune",
        help="measure the usual fixes (steps_per_execution, jit_compile, mixed precision, batch, input) on a script",
        usage=("%(prog)s [--try LIST] [--warmup W] [--steps N] [--log-dir DIR] [--json] (SCRIPT | -m MODULE) "
               "[ARGS ...]"),
        description=(
            "Run a training script unchanged (the baseline), then once per candidate change that applies to it, "
            "each applied the way a user would write it, then unchanged again (the run-to-run spread), and once "
            "with the changes that helped together; stop each run after W warm-up and N measured training steps. Each row: "
            "samples/s over the measured steps, speed-up against the baseline, the part of the step that moved, "
            "peak memory, and whether the losses stayed the same; a change that could not apply to the script is "
            "a row that says so. The verdict names the fastest change that keeps the results (the same losses), "
            "then the fastest that changes the training, with its caveat, or says that nothing helps beyond the "
            "run-to-run spread."
        ),
        epilog=(
            f"Candidates: {names}. spe<k>: model.compile(steps_per_execution=k); jit: jit_compile=True; bf16/fp16: "
            "the mixed_bfloat16/mixed_float16 policy; batch2/batch4: fit's batch_size x2/x4 where fit is given "
            "arrays; prefetch, map (deterministic parallel map of the maps that build fit's dataset), autotune "
            "(tf.data options): on the tf.data.Dataset given to fit; workers: the PyDataset given to fit with "
            "workers=4. The script runs on the first GPU, or on the CPU without one; its "
            "output goes to stderr. Exit status: 0 when the baseline was measured (a failing candidate is a row); "
            "1 when the baseline could not be."
        ),
    )
    parser.add_argument("--try", dest="tries", type=parse_try, default=None, metavar="LIST",
                        help=f"candidates to try, comma-separated (default: all that apply: {names})")
    parser.add_argument("--warmup", type=count_option("--warmup", 0), default=DEFAULT_WARMUP, metavar="W",
                        help=f"training steps before the measured window (default: {DEFAULT_WARMUP})")
    parser.add_argument("--steps", type=count_option("--steps", 1), default=DEFAULT_STEPS, metavar="N",
                        help=f"training steps measured (default: {DEFAULT_STEPS}); the script must train W + N steps")
    parser.add_argument("--log-dir", default=None, metavar="DIR",
                        help="also write the rows as a TensorBoard run, DIR/tune (`keras-gpu report DIR` shows it)")
    parser.add_argument("--json", action="store_true", help='print {"rows": [...], "verdict": ...} as JSON')
    parser.add_argument("-m", dest="module", nargs=argparse.REMAINDER, default=None, metavar="MODULE",
                        help="run a module as `python -m MODULE` instead of a script")
    parser.add_argument("target", nargs=argparse.REMAINDER, metavar="SCRIPT [ARGS]", help="the script and its arguments")


class _Runner:
    """Runs the script once per change, on the first GPU or the CPU."""

    def __init__(self, args: argparse.Namespace) -> None:
        from keras_gpu.cli import launch

        if args.module is None and not [t for t in args.target if t != "--"]:
            raise UsageError("no script given: use `keras-gpu tune [options] script.py [args...]` or `-m MODULE`.")
        self.target, self.is_module, self.script_args = launch.resolve_target(args)
        self.gpu_ids = available_gpus()[:1]
        self.warmup, self.steps = args.warmup, args.steps
        self.count = 0  # runs so far

    def measure(self, name: str, candidate: Candidate | None, record: dict | None = None) -> TuneRun:
        """Run the script with `candidate`'s change (none: as written); a failed run is a row saying why."""
        record = record or {}
        candidate = for_script(candidate, record) if candidate else None
        change = change_for(candidate, record) if candidate else {}
        sys.stderr.write(f"keras-gpu tune: measuring {name}\n")
        self.count += 1
        try:
            measured = run_config(Config(1, 1, 1), self.target, self.script_args, self.is_module, self.warmup,
                                  self.steps, self.gpu_ids, tool="tune", change=change, where=f"({name})")
            result, found, error = measured.result, dict(measured.record), ""
        except ScaleError as exc:
            result, found, error = None, None, str(exc)
        if candidate is None:
            return TuneRun(name, result=result, record=found, error=error, order=self.count)
        return TuneRun(name, line_for(candidate, record), candidate.keeps_results, result, found, error,
                       candidate.caveat, order=self.count)


def run(args: argparse.Namespace) -> int:
    """Measure the baseline and the candidates, print the table and the verdict; 0, or 1 without a baseline."""
    runner = _Runner(args)
    baselines = [runner.measure("baseline", None)]
    if baselines[0].result is None:
        sys.stderr.write(f"keras-gpu tune: error: {baselines[0].error}\n")
        return 1
    record = dict(baselines[0].record or {})
    chosen = [by_name(n) for n in args.tries] if args.tries else list(CANDIDATES)
    skipped = [(c, skip_reason(c, record)) for c in chosen]
    runs = [runner.measure(c.name, c, record) for c, why in skipped if why is None]
    # The baseline again after the candidates: its spread covers the machine's drift over the study.
    baselines.append(runner.measure("baseline (again)", None))
    if baselines[1].result is None:
        sys.stderr.write(f"keras-gpu tune: error: the second baseline run failed: {baselines[1].error}\n")
        return 1
    rows = build_rows(baselines, runs)
    combined = _combinations([for_script(c, record) for c in chosen], rows)
    if combined:
        runs += [runner.measure(c.name, c, record) for c in combined]
        rows = build_rows(baselines, runs)
    text = verdict(rows, baseline_spread(baselines))
    skips = [f"{c.name}: {why}" for c, why in skipped if why is not None]
    if args.log_dir:
        from keras_gpu.output.tune_output import write_log_dir

        write_log_dir(args.log_dir, rows, text, skips)
    if args.json:
        print(json.dumps({"rows": rows, "skipped": skips, "verdict": text}, indent=2))
    else:
        render(rows, skips, text)
    return 0


def _combinations(chosen: list[Candidate], rows: list[dict[str, Any]]) -> list[Candidate]:
    """The changes that helped, the fastest of each family, together: those that keep the results, then all.

    A combination needs two families that helped; the second is tried only
    where a change of the training helped too.
    """
    best: dict[str, tuple[float, Candidate]] = {}
    for c in chosen:
        row = next((r for r in rows if r["change"] == c.name), None)
        if row is None or row["status"] != "measured" or row["helps"] != 1:
            continue
        if c.family not in best or row["samples_per_sec"] > best[c.family][0]:
            best[c.family] = (row["samples_per_sec"], c)
    helped = [c for _, c in best.values()]
    keeping = [c for c in helped if c.keeps_results]
    out = [combine(keeping)] if len(keeping) > 1 else []
    if len(helped) > len(keeping) and len(helped) > 1:
        out.append(combine(helped))
    return out


def render(rows: list[dict[str, Any]], skips: list[str], text: str, console: Any = None) -> None:
    """Print the rows as a table legible at 80 columns, the skipped candidates, the failures and the verdict."""
    from rich.console import Console
    from rich.table import Table

    from keras_gpu.output import tune_output
    from keras_gpu.output.tune_output import format_cell

    if console is None:
        console = Console()
        if not console.is_terminal:  # piped or captured: a fixed width, no terminal to fit
            console = Console(width=80)
    table = Table(title="keras-gpu tune")
    columns = tune_output.columns()
    table.add_column("#", justify="right")
    for key, name in columns:
        table.add_column(name, justify="left" if key in ("change", "moved", "losses") else "right", overflow="fold")
    for i, row in enumerate(rows, 1):
        cells = [format_cell(key, row.get(key), row) for key, _ in columns]
        table.add_row(str(i), *cells)
    console.print(table)
    for i, row in enumerate(rows, 1):
        if row["status"] == "failed":
            console.print(f"{i}. {row['change']} failed: {row['error']}", highlight=False, soft_wrap=True)
        elif row["status"] == "not applied":
            console.print(f"{i}. {row['change']} not applied: {row['not_applied']}", highlight=False, soft_wrap=True)
    for line in skips:
        console.print(f"skipped {line}", highlight=False, soft_wrap=True)
    console.print(text, highlight=False, soft_wrap=True)

