"""The programs of "Use it on JAX" and "Use it on PyTorch": `examples/add_callbacks.py`, unchanged, on each backend.

The how-to pages run the tutorial's program with `KERAS_BACKEND=jax` and
`KERAS_BACKEND=torch` and show what it printed; here it runs at a tiny size
on every installed backend, without TensorFlow, and must train, log
keras-gpu's tags and say what it does not measure.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from keras_gpu.output.reader import read_scalars
from tests._util import REPO, subprocess_env
from tests.backends._common import BACKENDS, WITHOUT_TENSORFLOW

pytestmark = WITHOUT_TENSORFLOW

EXAMPLE = REPO / "examples" / "add_callbacks.py"


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_tutorial_program_runs_unchanged_on_the_backend(backend, tmp_path):
    log_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE), "--log-dir", str(log_dir), "--epochs", "2", "--samples", "256"],
        cwd=tmp_path, env=subprocess_env({"KERAS_BACKEND": backend}), capture_output=True, text=True,
        timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert re.search(r"^final loss \d+\.\d{4}$", proc.stdout, re.MULTILINE), proc.stdout[-2000:]
    tags = set(read_scalars(str(log_dir / "train")))
    assert {"throughput/samples_per_sec", "memory/host/rss_bytes"} <= tags, sorted(tags)
    # No MFU on a CPU: nothing is logged where nothing was measured.
    assert "throughput/mfu" not in tags, sorted(tags)
    if backend == "torch":
        # The page quotes this line: no step-time breakdown on PyTorch, said in words.
        assert "StepTimeLogger logs no step-time breakdown on the torch backend" in proc.stderr, proc.stderr[-3000:]
        assert not any(t.startswith("step_time/") for t in tags), sorted(tags)
