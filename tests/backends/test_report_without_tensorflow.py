"""`keras-gpu report` in the environment without TensorFlow, on a run that TensorFlow wrote."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

pytestmark = [
    pytest.mark.backend,
    pytest.mark.skipif(
        importlib.util.find_spec("tensorflow") is not None, reason="TensorFlow is installed; these tests need it absent"
    ),
]

# keras_gpu.callbacks() and Keras' TensorBoard callback on the TensorFlow backend (tests/data/make_tf_run.py).
TF_RUN = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "tf_run")

# In a fresh interpreter, so that nothing else in the test session has imported Keras.
_REPORT = """
import contextlib, io, json, sys
from keras_gpu.cli.main import main

out = io.StringIO()
with contextlib.redirect_stdout(out):
    codes = [main(["report", sys.argv[1], "--json"]), main(["report", sys.argv[1]])]
text = out.getvalue()
print("RESULT", json.dumps({
    "codes": codes, "data": json.loads(text[:text.index("\\n}\\n") + 2]), "table": text,
    "tensorflow": "tensorflow" in sys.modules, "keras": "keras" in sys.modules,
}))
"""


def test_report_reads_a_tensorflow_run_and_imports_neither_tensorflow_nor_keras():
    proc = subprocess.run([sys.executable, "-c", _REPORT, TF_RUN], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    result = json.loads(line[len("RESULT "):])
    assert result["codes"] == [0, 0]
    (run,) = result["data"]["runs"]
    assert run["steps"] == 128 and run["time"]["epochs"] == 2
    assert run["throughput"]["steady_samples_per_sec"]["points"] == 2
    assert run["step_time"]["steps"] == 10
    assert "Where the time goes" in result["table"]
    assert (result["tensorflow"], result["keras"]) == (False, False)


def test_the_command_prints_the_report_and_nothing_else():
    proc = subprocess.run(
        [sys.executable, "-m", "keras_gpu.cli", "report", TF_RUN], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    # The steady rate of the end-of-fit line the fit that wrote the run logged:
    # "steady state 36276.4 samples/s".
    assert "Throughput" in proc.stdout and "36,276.4" in proc.stdout
