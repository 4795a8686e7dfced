"""`keras_gpu.meters.trace_child`: a trace read in a child process gives the breakdown the same read gives here."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from keras_gpu.meters import trace_child

DATA = pathlib.Path(__file__).parent / "data"


@pytest.mark.parametrize("name", ["h200_jax_small_mlp", "h200_jax_mlp_cupti_failed", "gpu_multi_worker"])
def test_the_child_reads_what_this_process_reads(name):
    path = str(DATA / f"{name}.xplane.pb")
    child, here = trace_child.analyze_file(path, expect_device="GPU"), trace_child.analyze_here(path, expect_device="GPU")
    assert repr(child) == repr(here)  # repr: an unmeasured part is NaN on both sides


def test_the_trace_is_read_in_another_process(monkeypatch):
    def not_here(*args, **kwargs):
        raise AssertionError("read in the training process")

    monkeypatch.setattr(trace_child, "analyze_here", not_here)
    step = trace_child.analyze_file(str(DATA / "h200_jax_small_mlp.xplane.pb"))
    assert step.steps == 19


def test_a_damaged_trace_is_named_with_the_childs_error(tmp_path):
    damaged = tmp_path / "cut.xplane.pb"
    data = (DATA / "h200_jax_small_mlp.xplane.pb").read_bytes()
    damaged.write_bytes(data[: len(data) // 3])
    with pytest.raises(trace_child.TraceReadError, match=r"^ValueError: .*does not parse as an XSpace"):
        trace_child.analyze_file(str(damaged))
    with pytest.raises(trace_child.TraceReadError, match=r"^ValueError: `steps` must be"):
        trace_child.analyze_file(str(DATA / "h200_jax_small_mlp.xplane.pb"), steps=0)


def test_the_child_imports_no_keras_and_no_backend():
    code = "import sys, keras_gpu.meters.trace_child; print(sorted(m for m in ('keras', 'tensorflow', 'jax', 'torch') if m in sys.modules))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "[]"


def test_without_an_interpreter_to_start_it_reads_here(monkeypatch, tmp_path):
    missing = tmp_path / "no-python"
    monkeypatch.setattr(trace_child.sys, "executable", str(missing))
    assert shutil.which(str(missing)) is None
    assert trace_child.analyze_file(str(DATA / "h200_jax_small_mlp.xplane.pb")).steps == 19
