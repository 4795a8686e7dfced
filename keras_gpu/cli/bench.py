"""`keras-gpu bench`: measure what keras-gpu's callbacks cost a training run.

```
keras-gpu bench --quick                  # a few minutes
keras-gpu bench                          # the full run, about 15-20 minutes on 2 CPU cores
keras-gpu bench --configs mlp-1 --variants kg-throughput,timehistory --rounds 8
```

This runs the overhead benchmark of a keras-gpu source checkout
(`benchmarks/overhead.py`, which documents every measurement and column):
it is not shipped in the wheel. The checkout is found next to the installed
`keras_gpu` package (an editable install), in the current directory, or at
`--source DIR`. The options are defined here, so `python -m
benchmarks.overhead` and `keras-gpu bench` accept the same ones.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path
from types import ModuleType

from keras_gpu.cli import UsageError

__all__ = ["add_options", "add_parser", "find_checkout", "run"]

_CONFIGS = ("mlp-1", "mlp-2", "cnn-1", "cnn-2")
_VARIANTS = ("kg-default", "kg-throughput", "kg-memory", "kg-placement", "tb-epoch", "tb-batch", "timehistory", "naive")


def add_options(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the benchmark's options to `parser` and return it."""
    parser.add_argument(
        "--quick", action="store_true", help="smaller run: 1 round, quarter-length epochs, short leak check (a few minutes)"
    )
    parser.add_argument("--configs", default=",".join(_CONFIGS), help=f"comma-separated, from {', '.join(_CONFIGS)}")
    parser.add_argument(
        "--variants",
        default=",".join(_VARIANTS),
        help=f"comma-separated callback sets compared with bare fit, from {', '.join(_VARIANTS)}, "
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
    return parser


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register `keras-gpu bench`."""
    parser = subparsers.add_parser(
        "bench",
        help="measure what keras-gpu's callbacks cost a training run (needs a source checkout)",
        description=(
            "Run the overhead benchmark: bare fit against keras-gpu's callbacks and common alternatives, in "
            "interleaved A/B pairs, with direct hook and thread timing, one-off costs, ThroughputLogger "
            "accuracy, import cost and a leak check. Writes JSON and prints tables; never fails on a budget. "
            "Needs the benchmarks/ directory of a keras-gpu source checkout."
        ),
    )
    parser.add_argument("--source", help="keras-gpu source checkout holding benchmarks/ (default: found automatically)")
    add_options(parser)


def find_checkout(source: str | os.PathLike | None = None) -> Path | None:
    """The source checkout whose `benchmarks/overhead.py` to run, or `None` if there is none.

    Looks at `source` if given, else next to the installed `keras_gpu`
    package, then in the current directory.
    """
    if source is not None:
        candidates = [Path(source)]
    else:
        candidates = [Path(__file__).resolve().parent.parent.parent, Path.cwd()]
    for root in candidates:
        if (root / "benchmarks" / "overhead.py").is_file() and (root / "benchmarks" / "_worker.py").is_file():
            return root.resolve()
    return None


def _load(source: str | None) -> ModuleType:
    root = find_checkout(source)
    if root is None:
        where = f"--source={source!r}" if source is not None else "next to the installed keras_gpu or in the current directory"
        raise UsageError(
            f"no keras-gpu source checkout with benchmarks/overhead.py found ({where}); the benchmark is not part of "
            "the installed package: run it from a source checkout, or pass --source DIR"
        )
    loaded = sys.modules.get("benchmarks")
    if loaded is not None and Path(getattr(loaded, "__file__", "") or "").resolve().parent != root / "benchmarks":
        raise UsageError(
            f"another module named 'benchmarks' is already imported ({getattr(loaded, '__file__', None)}); "
            f"run `python -m benchmarks.overhead` from {root} instead"
        )
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    return importlib.import_module("benchmarks.overhead")


def run(args: argparse.Namespace) -> int:
    """Run the benchmark with the parsed options; returns its exit status."""
    overhead = _load(args.source)
    try:
        opts = overhead.options_from_args(args)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return overhead.run_from_options(opts, table=not args.no_table)
