"""The `keras-gpu` command line.

`keras-gpu <command> ...` dispatches to one module per subcommand (see
`keras_gpu.cli.main`). Importing this package is cheap: no subcommand module
imports TensorFlow until its command runs.
"""

from __future__ import annotations

__all__ = ["UsageError"]


class UsageError(Exception):
    """Bad command-line input detected after parsing.

    `keras_gpu.cli.main.main` prints the message as one line,
    `keras-gpu <command>: error: <message>`, and exits with status 2, the way
    `argparse` reports its own errors. Subcommands raise it from `run(args)`
    for input that `argparse` cannot check by itself (a missing file, an
    inconsistent combination of options).
    """
