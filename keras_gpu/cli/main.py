"""Entry point of the `keras-gpu` command: argument parsing and subcommand dispatch.

Each subcommand is one module that exposes two functions:

- `add_parser(subparsers) -> None` adds its parser with
  `subparsers.add_parser("<name>", help=..., description=...)`;
- `run(args: argparse.Namespace) -> int` does the work and returns the exit
  status.

To add a subcommand, write such a module and add its import path to
`SUBCOMMANDS` below; nothing else needs to change. Subcommand modules must be
cheap to import (no TensorFlow at module level): every one of them is imported
to build the parser, whichever command runs.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from keras_gpu._version import SUMMARY, __version__
from keras_gpu.cli import UsageError
from keras_gpu.core.log import PrefixFormatter

__all__ = ["SUBCOMMANDS", "build_parser", "main"]

SUBCOMMANDS: tuple[str, ...] = (
    "keras_gpu.cli.env",
    "keras_gpu.cli.launch",
    "keras_gpu.cli.demo",
    "keras_gpu.cli.report",
    "keras_gpu.cli.trace",
    "keras_gpu.cli.bench",
    "keras_gpu.cli.scale",
    "keras_gpu.cli.tune",
)
"""Import paths of the subcommand modules, in the order `--help` lists them."""

_PROG = "keras-gpu"
_EXIT_BROKEN_PIPE = 128 + 13  # as a process that SIGPIPE ends, the way `head`'s writers end


class _Parser(argparse.ArgumentParser):
    """An `ArgumentParser` that reports a usage error as one line on stderr."""

    def error(self, message: str) -> NoReturn:
        # Arguments echoed in the message may hold line breaks or control characters.
        message = "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    """The `keras-gpu` parser with every module of `SUBCOMMANDS` registered."""
    parser = _Parser(
        prog=_PROG,
        description=SUMMARY,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(title="commands", metavar="<command>", dest="command")
    subparsers.required = True
    for module_name in SUBCOMMANDS:
        module = importlib.import_module(module_name)
        before = set(subparsers.choices)
        module.add_parser(subparsers)
        added = set(subparsers.choices) - before
        if not added:
            raise RuntimeError(f"Subcommand module {module_name!r} did not add a parser in add_parser().")
        for name in added:
            subparsers.choices[name].set_defaults(run_command=module.run, command_parser=subparsers.choices[name])
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run `keras-gpu` with `argv` (default `sys.argv[1:]`) and return the exit status.

    Usage errors print one line to stderr and return 2; `--help` and
    `--version` return 0. When the reader of stdout goes away (a pipe into
    `head`), the command stops quietly and returns 141, the status of a
    process that SIGPIPE ends (rich's tables stop the same way, with status
    1). Messages from the `keras_gpu` logger go to stderr while the command
    runs.
    """
    try:
        status = _main(argv)
        sys.stdout.flush()  # a closed pipe shows here, not in Python's flush at exit
        return status
    except BrokenPipeError:  # the reader went away (`keras-gpu report DIR --json | head`): stop quietly
        _discard_stdout()
        return _EXIT_BROKEN_PIPE


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:  # reported by the subcommand's parser, which names the subcommand
            args.command_parser.error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as exc:  # argparse reports --help, --version and usage errors this way.
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    logger = logging.getLogger("keras_gpu")
    saved_level = logger.level
    handler = _attach_log_handler(logger)
    try:
        return int(args.run_command(args))
    except UsageError as exc:
        sys.stderr.write(f"{_PROG} {args.command}: error: {exc} (see `{_PROG} {args.command} --help`)\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write(f"{_PROG} {args.command}: interrupted\n")
        return 130
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved_level)


def _discard_stdout() -> None:
    """Point stdout's file descriptor at /dev/null, so that Python's flush at exit raises nothing more."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (a test's StringIO): nothing is flushed at exit
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def _attach_log_handler(logger: logging.Logger) -> logging.Handler:
    """Send `logger`'s records of level INFO and above to the current stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(PrefixFormatter())
    handler.setLevel(logging.INFO)
    logger.addHandler(handler)
    if logger.level == logging.NOTSET or logger.level > logging.INFO:
        logger.setLevel(logging.INFO)
    return handler
