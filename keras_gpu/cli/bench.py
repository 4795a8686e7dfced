"""`keras-gpu bench`: say how to run the overhead benchmark, a script of the source repository.

The overhead benchmark (`benchmarks/overhead.py`) measures what keras-gpu's
callbacks cost a training run. It is developer tooling, kept in the
repository and not shipped in the wheel, so the installed command never
imports it. `keras-gpu bench [options]` prints the command that runs it from
a source checkout, with the same options, and exits with status 2;
`keras-gpu bench --help` (or `-h`) prints this command's help and exits 0:

```
git clone <keras-gpu repository> && cd keras-gpu
python -m benchmarks.overhead --quick      # a few minutes
python -m benchmarks.overhead --help       # every option
```
"""

from __future__ import annotations

import argparse
import shlex
import sys

__all__ = ["add_parser", "command", "run"]

_SCRIPT = "python -m benchmarks.overhead"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register `keras-gpu bench`."""
    parser = subparsers.add_parser(
        "bench",
        help=f"how to run the overhead benchmark (a repository script: `{_SCRIPT}`)",
        description=(
            "The overhead benchmark (bare fit against keras-gpu's callbacks and common alternatives) is a script "
            f"of the keras-gpu source repository, not part of the installed package. From a checkout, run "
            f"`{_SCRIPT} [--quick] [options]`; `{_SCRIPT} --help` lists the options. This command prints that "
            "line for the options given and exits with status 2."
        ),
        # Everything after `bench` is the benchmark's: no option of its own but a leading -h/--help (see run).
        prefix_chars="+",
        add_help=False,
        usage="%(prog)s [-h] [--quick] [options ...]",
    )
    parser.add_argument(
        "options",
        nargs=argparse.REMAINDER,
        help=f"options to pass on to `{_SCRIPT}`, e.g. --quick; -h/--help first prints this help",
    )
    parser.set_defaults(bench_help=parser.format_help)


def command(options: list[str] | tuple[str, ...] = ()) -> str:
    """The shell command that runs the benchmark with `options`, from the root of a source checkout."""
    return shlex.join([*_SCRIPT.split(), *options])


def run(args: argparse.Namespace) -> int:
    """Print where the benchmark lives and the command that runs it; returns 2 (nothing was measured).

    With `-h` or `--help` first, print this command's help instead and return 0.
    """
    if args.options[:1] in (["-h"], ["--help"]):
        sys.stdout.write(args.bench_help())
        return 0
    sys.stderr.write(
        "keras-gpu bench: the overhead benchmark is a script of the keras-gpu source repository, not part of the "
        f"installed package. From the root of a checkout, run:\n  {command(args.options)}\n"
    )
    return 2
