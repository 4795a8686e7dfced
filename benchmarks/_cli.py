"""The benchmarks' shared command line: one parser factory and one JSON writer.

Every benchmark script builds its parser with :func:`make_parser` (the
common options: the JSON output path, A/B rounds or pairs, `--quick`) and
writes its result with :func:`write_json`, so the options mean the same in
every script and every result file is written the same way.

Examples:
    >>> import json, os, tempfile
    >>> parser = make_parser("python -m benchmarks.example", "An example.", rounds=9)
    >>> args = parser.parse_args(["--rounds", "3", "--output", "r.json"])
    >>> (args.rounds, args.output)
    (3, 'r.json')
    >>> path = os.path.join(tempfile.mkdtemp(), "sub", "r.json")
    >>> write_json(path, {"rounds": args.rounds})
    >>> json.load(open(path))
    {'rounds': 3}
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

__all__ = ["check_at_least", "make_parser", "write_json"]


def make_parser(
    prog: str,
    description: str,
    *,
    output: str | None = "--output",
    output_help: str = "write the result as JSON here",
    rounds: int | None = None,
    pairs: int | None = None,
    quick: str | None = None,
) -> argparse.ArgumentParser:
    """An `ArgumentParser` with the benchmarks' common options.

    Args:
        prog: The command that runs the script (`python -m benchmarks.studies.ride_cost`).
        description: The first line of the script's docstring.
        output: The JSON output option's name (`None`: no such option); its
            value is `None` unless given.
        output_help: The output option's help text.
        rounds: Default of `--rounds` (rounds of interleaved variants); `None`: no such option.
        pairs: Default of `--pairs` (interleaved A/B pairs); `None`: no such option.
        quick: Help text of `--quick` (what the quick run leaves out); `None`: no such option.

    Returns:
        The parser; the script adds its own options to it.
    """
    parser = argparse.ArgumentParser(prog=prog, description=description)
    if output is not None:
        parser.add_argument(output, default=None, help=output_help)
    if rounds is not None:
        parser.add_argument("--rounds", type=int, default=rounds, help=f"rounds (default {rounds})")
    if pairs is not None:
        parser.add_argument("--pairs", type=int, default=pairs, help=f"interleaved A/B pairs (default {pairs})")
    if quick is not None:
        parser.add_argument("--quick", action="store_true", help=quick)
    return parser


def check_at_least(parser: argparse.ArgumentParser, args: argparse.Namespace, **minimums: int) -> None:
    """Exit through `parser.error` (status 2) where an option is below its minimum, naming it and its value.

    Args:
        parser: The parser the options came from.
        args: The parsed options.
        **minimums: Option attribute name -> smallest value allowed (`steps=2`).
    """
    for name, least in minimums.items():
        value = getattr(args, name)
        if value < least:
            option = "--" + name.replace("_", "-")
            parser.error(f"{option} must be at least {least}. Received: {option}={value!r}")


def write_json(path: str | os.PathLike[str], result: Any, *, indent: int = 1) -> None:
    """Write `result` as JSON to `path` atomically, creating its folder; values JSON does not know are written as `str`.

    The file appears whole or not at all: a reader (the overhead benchmark
    waiting for its measuring process) never sees half a result.

    Args:
        path: The file to write.
        result: The result (dicts, lists, numbers, strings).
        indent: JSON indentation (`None`: one line).

    Raises:
        TypeError: Where `result` holds a key JSON cannot hold (a tuple); `path` is then left as it was.
    """
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=indent, default=str)
            f.write("\n")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
