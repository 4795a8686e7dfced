"""The `keras-gpu` entry point itself: what every subcommand gets from it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests._util import subprocess_env

TF_RUN = os.path.join(os.path.dirname(__file__), "data", "tf_run")


@pytest.mark.parametrize(
    "args, status",
    [
        (["report", TF_RUN, "--json"], 141),  # SIGPIPE's status, from the entry point
        (["bench", "--help"], 141),
        (["report", TF_RUN], 1),  # rich's tables stop themselves quietly, with status 1
        (["--help"], 0),  # argparse drops its help quietly
    ],
    ids=["report-json", "bench-help", "report-tables", "help"],
)
def test_a_reader_that_closes_stdout_early_ends_the_command_quietly(args, status):
    """`keras-gpu ... | head`: the reader is gone before the command writes; no traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader closed before a byte was written
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "keras_gpu.cli", *args], stdout=write_end, stderr=subprocess.PIPE, text=True,
            env=subprocess_env(), timeout=300,
        )
    finally:
        os.close(write_end)
    assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr, proc.stderr
    assert "Exception ignored" not in proc.stderr, proc.stderr
    assert proc.returncode == status


def test_the_same_commands_write_everything_to_a_reader_that_stays():
    proc = subprocess.run(
        [sys.executable, "-m", "keras_gpu.cli", "report", TF_RUN, "--json"], capture_output=True, text=True,
        env=subprocess_env(), timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.rstrip().endswith("}")


def test_bench_help_prints_its_help_and_exits_0():
    from keras_gpu.cli.main import main

    proc = subprocess.run(
        [sys.executable, "-m", "keras_gpu.cli", "bench", "--help"], capture_output=True, text=True,
        env=subprocess_env(), timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: keras-gpu bench [-h] [--quick]")
    assert "python -m benchmarks.overhead" in proc.stdout and proc.stderr == ""
    assert main(["bench", "-h"]) == 0
    assert main(["bench", "--quick"]) == 2  # anything else is still passed on to the benchmark's command line
