"""`keras-gpu trace` on a recorded multi-GPU trace, in the environment without TensorFlow."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

pytestmark = [
    pytest.mark.backend,
    pytest.mark.skipif(
        importlib.util.find_spec("tensorflow") is not None, reason="TensorFlow is installed; these tests need it absent"
    ),
]

FIXTURE = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "gpu_multi_worker.xplane.pb")

# In a fresh interpreter, so that nothing else in the test session has imported Keras.
_TRACE = """
import contextlib, io, json, sys
from keras_gpu.cli.main import main

out, err = io.StringIO(), io.StringIO()
with contextlib.redirect_stdout(out):
    text_code = main(["trace", sys.argv[1], "--gpus", "4,6"])
text = out.getvalue()
out.seek(0)
out.truncate()
with contextlib.redirect_stdout(out):
    json_code = main(["trace", sys.argv[1], "--json"])
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
    bad_code = main(["trace", sys.argv[1] + ".missing"])
print("RESULT", json.dumps({
    "codes": [text_code, json_code, bad_code], "text": text, "json": out.getvalue(), "error": err.getvalue(),
    "tensorflow": "tensorflow" in sys.modules, "keras": "keras" in sys.modules,
}))
"""


def test_trace_prints_the_fixture_breakdown_without_tensorflow_or_keras():
    proc = subprocess.run(
        [sys.executable, "-c", _TRACE, FIXTURE], check=False, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.split("RESULT ", 1)[1])
    assert result["codes"] == [0, 0, 2]
    assert not result["tensorflow"] and not result["keras"]
    text = result["text"]
    assert "1 step (device markers), 21.310 ms per step" in text
    assert re.search(r"\n  compute +14\.865 ms +70%\n", text)
    assert "GPU:4    compute 14.825 ms" in text and "replica 0" in text
    assert "GPU:6    compute 14.865 ms" in text and "replica 1" in text
    assert "slowest input stage: Generator" in text
    (line,) = result["json"].splitlines()  # one trace, one object
    data = json.loads(line)
    assert data["steps"] == 1 and data["step_sec"] == pytest.approx(0.02131, rel=1e-3)
    assert 0.65 <= data["compute_sec"] / data["step_sec"] <= 0.75
    parts = ("input_sec", "compute_sec", "communication_sec", "transfer_sec", "other_sec")
    assert sum(data[k] for k in parts) == pytest.approx(data["step_sec"])
    assert data["communication_sec"] == 0.0 and data["transfer_sec"] > 0  # copies, no collective
    assert data["devices"]["GPU:4"]["compute_sec"] == pytest.approx(14.83e-3, rel=0.01)
    assert data["devices"]["GPU:6"]["compute_sec"] == pytest.approx(14.87e-3, rel=0.01)
    assert set(data["devices"]["GPU:6"]) >= {"compute_sec", "transfer_sec"}
    assert data["step_source"] == "device markers" and isinstance(data["hints"], list)
    assert "Received: PATH=" in result["error"]
