"""The keras-gpu tab with TensorBoard alone: a JAX run, a real `tensorboard` without TensorFlow, the tab's routes."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from tests._tensorboard import tensorboard_server
from tests._util import run_python, subprocess_env
from tests.backends._common import JAX_ONLY, WITHOUT_TENSORFLOW

pytestmark = [*WITHOUT_TENSORFLOW, *JAX_ONLY, pytest.mark.slow]

TRAIN = """
import sys
import numpy as np, keras, keras_gpu
x, y = np.zeros((512, 16), "float32"), np.zeros((512, 1), "float32")
model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32), keras.layers.Dense(1)])
model.compile("sgd", "mse")
model.fit(x, y, batch_size=32, epochs=2, verbose=0, callbacks=keras_gpu.callbacks(sys.argv[1], every_s=0.05))
"""


def test_tensorboard_alone_lists_the_tab_and_serves_the_report(tmp_path):
    assert importlib.util.find_spec("tensorflow") is None
    log_dir = tmp_path / "jax_run"
    run_python(f"import sys; sys.argv[1:] = [{str(log_dir)!r}]\n" + TRAIN, env={"KERAS_BACKEND": "jax"}, timeout=300)
    printed = json.loads(subprocess.run(
        [sys.executable, "-m", "keras_gpu.cli", "report", str(log_dir), "--json"], env=subprocess_env(),
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout)

    def listed(server):
        listing = server.get("/data/plugins_listing")
        if "keras_gpu" not in listing:
            pytest.skip("TensorBoard lists no keras_gpu plugin: the installed keras-gpu predates its entry point "
                        "(pip install -e . again)")
        return listing["keras_gpu"]["enabled"]

    with tensorboard_server(str(tmp_path)) as tb:
        tb.wait_for(listed, timeout=120)
        assert tb.get("/data/plugin/keras_gpu/log_dirs")["log_dirs"][0]["name"] == "jax_run"
        assert tb.get("/data/plugin/keras_gpu/report", log_dir="jax_run") == printed
        view = tb.get("/data/plugin/keras_gpu/view", log_dir="jax_run")
        assert [line["name"] for line in view["series"]["runs"]["train"]["memory"]][-1] == "host RSS"
        assert b"export async function render()" in tb.get("/data/plugin/keras_gpu/index.js")
        entry = tb.get("/data/plugin_entry.html", name="keras_gpu")
        assert b'import("./index.js")' in entry
    (run,) = printed["runs"]
    assert run["throughput"]["samples_per_sec"]["mean"] > 0
