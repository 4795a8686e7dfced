"""The callbacks on Keras' JAX and PyTorch backends, in an environment without TensorFlow.

CI runs this directory in a second environment (JAX and PyTorch CPU builds, no
TensorFlow). Each fit runs in a fresh interpreter with `KERAS_BACKEND` set,
and the run is read back from a real `tensorboard` server. Elsewhere these
tests skip with the reason.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import textwrap

import pytest

from tests._tensorboard import tensorboard_server
from tests._util import run_python

BACKENDS = [
    pytest.param(name, marks=pytest.mark.skipif(importlib.util.find_spec(module) is None, reason=f"{module} is not installed"))
    for name, module in (("jax", "jax"), ("torch", "torch"))
]
NO_TF = pytest.mark.skipif(
    importlib.util.find_spec("tensorflow") is not None, reason="TensorFlow is installed; these tests need it absent"
)
pytestmark = [pytest.mark.backend]

IN, HIDDEN, OUT = 64, 256, 10
BATCH, STEPS = 32, 8  # steps per epoch
HAND_COUNT = 3 * 2 * (IN * HIDDEN + HIDDEN * OUT)  # training FLOPs per sample: 3 x the two matmuls

FIT = """
import json, os, sys, time
import numpy as np, keras, keras_gpu
from tests._callbacks import TrainingPhases


class Pause(keras.callbacks.Callback):
    # Longer than MemoryLogger's window (every_s=0.05): the first epoch's end
    # gets a memory window of its own, however fast the steps are.
    def on_epoch_end(self, epoch, logs=None):
        time.sleep(0.12)


rng = np.random.default_rng(0)
x = rng.random(({n}, {IN}), dtype=np.float32)
y = rng.random(({n}, {OUT}), dtype=np.float32)
model = keras.Sequential([keras.Input(({IN},)), keras.layers.Dense({HIDDEN}, activation="relu"), keras.layers.Dense({OUT})])
model.compile("sgd", "mse")
watch = TrainingPhases()
cbs = keras_gpu.callbacks({log_dir!r}, every_s=0.05, step_time=False)
throughput = next(c for c in cbs if isinstance(c, keras_gpu.ThroughputLogger))
cbs[cbs.index(throughput)] = throughput = keras_gpu.ThroughputLogger({log_dir!r}, every_n_steps=2)
model.fit(x, y, batch_size={BATCH}, epochs=2, verbose=0, callbacks=[watch, *cbs, Pause()])
with open("/proc/self/statm") as f:
    rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
print("RESULT", json.dumps({{
    "stopwatch": watch.train, "summary": throughput.summary, "rss_after_fit": rss,
    "callbacks": sorted(type(c).__name__ for c in cbs), "tensorflow_imported": "tensorflow" in sys.modules,
}}))
"""


def _fit(backend: str, log_dir: str):
    code = FIT.format(n=BATCH * STEPS, IN=IN, OUT=OUT, HIDDEN=HIDDEN, BATCH=BATCH, log_dir=log_dir)
    proc = run_python(code, env={"KERAS_BACKEND": backend}, timeout=300)
    return json.loads(proc.stdout.split("RESULT", 1)[1]), proc.stderr


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One fit per installed backend into `root/<backend>`, as `{backend: (result, stderr)}`."""
    root = tmp_path_factory.mktemp("backends")
    out = {}
    for name, module in (("jax", "jax"), ("torch", "torch")):
        if importlib.util.find_spec(module) is not None:
            out[name] = _fit(name, str(root / name))
    return root, out


@pytest.fixture(scope="module")
def served(runs):
    """What a real TensorBoard serves for each run: `{backend: {tag: [(step, value), ...]}}`."""
    root, results = runs
    if not results:
        pytest.skip("neither JAX nor PyTorch is installed")
    out = {}
    with tensorboard_server(str(root)) as tb:
        for backend in results:
            run = f"{backend}/train"
            tags = tb.wait_for(
                lambda s, run=run: (t := s.get("/data/plugin/scalars/tags").get(run))
                and "memory/host/rss_bytes" in t and "throughput/samples_per_sec" in t and t
            )
            out[backend] = {
                tag: [(step, value) for _wall, step, value in tb.get("/data/plugin/scalars/scalars", run=run, tag=tag)]
                for tag in tags
            }
        layout = tb.get("/data/plugin/custom_scalars/layout")
    return out, layout


@NO_TF
@pytest.mark.parametrize("backend", BACKENDS)
def test_callbacks_run_without_tensorflow(runs, backend):
    result, stderr = runs[1][backend]
    assert result["tensorflow_imported"] is False
    # Placement is TensorFlow-only: left out, with one INFO line.
    assert "PlacementLogger" not in result["callbacks"]
    assert {"MemoryLogger", "ThroughputLogger"} <= set(result["callbacks"])
    assert stderr.count("placement is logged on the TensorFlow backend only") == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_samples_per_sec_matches_a_stopwatch(runs, served, backend):
    result, _ = runs[1][backend]
    points = served[0][backend]["throughput/samples_per_sec"]
    # Windows of 2 steps: the time they imply for the second epoch is the stopwatch's.
    implied = sum(2 * BATCH / value for step, value in points if step > STEPS)
    assert [step for step, _ in points] == list(range(2, 2 * STEPS + 1, 2))
    assert implied == pytest.approx(result["stopwatch"][1], rel=0.02)
    summary = result["summary"]
    assert (summary["steps"], summary["samples"], summary["num_replicas"]) == (2 * STEPS, 2 * STEPS * BATCH, 1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_model_flops_match_a_hand_count(runs, served, backend):
    summary = runs[1][backend][0]["summary"]
    # Both count the matmuls only, like TensorFlow's graph count and the hand count.
    assert summary["flops_per_sample"] == HAND_COUNT
    tflops = dict(served[0][backend]["throughput/tflops_per_sec"])
    for step, samples_per_sec in served[0][backend]["throughput/samples_per_sec"]:
        assert tflops[step] == pytest.approx(samples_per_sec * summary["flops_per_sample"] / 1e12, rel=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_memory_on_cpu_is_the_host_memory(runs, served, backend):
    result, stderr = runs[1][backend]
    tags = served[0][backend]
    rss, peak = tags["memory/host/rss_bytes"], tags["memory/host/peak_rss_bytes"]
    assert len(rss) == len(peak) >= 2
    assert all(p >= r for (_, p), (_, r) in zip(peak, rss))
    # The last window is read at the end of fit; the process's own reading just after agrees.
    assert rss[-1][1] == pytest.approx(result["rss_after_fit"], rel=0.15)
    # No allocator statistics on CPU for JAX and PyTorch: left out, with one INFO line.
    assert not any(tag.startswith("memory/allocator/") for tag in tags)
    assert stderr.count("no allocator statistics for") == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_tag_schema_on_every_backend(served, backend):
    tags, layout = served[0][backend], served[1]
    regexes = [tag for category in layout["category"] for chart in category["chart"] for tag in chart["multiline"]["tag"]]
    unmatched = [tag for tag in tags if not any(re.match(r, tag) for r in regexes)]
    assert unmatched == []
    for tag in (
        "throughput/samples_per_sec", "throughput/steps_per_sec", "throughput/samples_per_sec_per_replica",
        "throughput/tflops_per_sec", "memory/host/rss_bytes", "memory/host/peak_rss_bytes",
    ):
        assert tag in tags, (tag, sorted(tags))
    others = [set(t) for name, t in served[0].items() if name != backend]
    for other in others:
        assert set(tags) == other  # JAX and PyTorch write the same tags


TF_ONLY = {  # TensorFlow-only on every backend
    "keras_gpu.PlacementLogger": "keras_gpu.PlacementLogger('logs')",
}
TF_ONLY_ON_TORCH = {  # JAX has its own (tests/backends/test_jax_multiprocess.py); make_strategy names the backends
    "keras_gpu.configure_devices()": "keras_gpu.configure_devices(memory_growth=True)",
}


@NO_TF
@pytest.mark.parametrize("backend", BACKENDS)
def test_tensorflow_only_parts_raise_one_clear_import_error(backend):
    calls = {**TF_ONLY, **(TF_ONLY_ON_TORCH if backend == "torch" else {})}
    code = textwrap.dedent(
        f"""
        import keras_gpu
        for name, call in {calls!r}.items():
            try:
                eval(call)
            except ImportError as exc:
                print("IMPORTERROR", name, "|", exc)
            else:
                print("NO ERROR", name)
        from keras_gpu.cli.main import main
        try:
            print("RETURNED keras-gpu launch |", main(["launch", "-n", "2", "train.py"]))
        except ImportError as exc:
            print("IMPORTERROR keras-gpu launch |", exc)
        """
    )
    lines = run_python(code, env={"KERAS_BACKEND": backend}).stdout.strip().splitlines()
    assert len(lines) == len(calls) + 1
    for line, name in zip(lines, calls):
        assert 'pip install "tensorflow-cpu>=2.16,<2.22"' in line and 'pip install "tensorflow[and-cuda]>=2.16,<2.22"' in line
        if name in TF_ONLY_ON_TORCH:  # it works on JAX too: the fix is a backend, as make_strategy's error says
            assert line.startswith(f"IMPORTERROR {name} | {name} works on Keras' TensorFlow and JAX backends, not on 'torch': set KERAS_BACKEND=jax"), line
            continue
        assert line.startswith(f"IMPORTERROR {name} | {name} needs TensorFlow, which is not installed."), line
        assert "StepTimeLogger" in line and "configure_devices() and keras-gpu launch work on JAX" in line
    # The launcher needs TensorFlow only for TensorFlow workers: here it gets as far as the missing script.
    assert lines[-1] == "RETURNED keras-gpu launch | 2", lines[-1]


@pytest.mark.parametrize("backend", [p for p in BACKENDS if p.values[0] == "jax"])
def test_jax_data_parallel_replicas_are_the_mesh_devices(tmp_path, backend):
    code = textwrap.dedent(
        f"""
        import json
        import numpy as np, keras, keras_gpu
        from keras_gpu.core import backend
        keras.distribution.set_distribution(keras.distribution.DataParallel())
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
        model.compile("sgd", "mse")
        cb = keras_gpu.ThroughputLogger({str(tmp_path)!r}, every_n_steps=2)
        model.fit(np.ones((128, 8), "float32"), np.ones((128, 4), "float32"), batch_size=32, epochs=1, verbose=0,
                  callbacks=[cb])
        print("RESULT", json.dumps({{
            "devices": backend.replica_devices(model), "replicas": backend.num_replicas(model),
            "allocators": [a.tag for a in backend.allocators(model)], "summary": cb.summary,
        }}))
        """
    )
    env = {"KERAS_BACKEND": "jax", "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    result = json.loads(run_python(code, env=env).stdout.split("RESULT", 1)[1])
    assert result["devices"] == ["/device:CPU:0", "/device:CPU:1"]
    assert result["replicas"] == 2
    assert result["allocators"] == ["CPU_0"]  # one host allocator
    summary = result["summary"]
    assert summary["num_replicas"] == 2
    assert summary["samples_per_sec_per_replica"] == pytest.approx(summary["samples_per_sec"] / 2)


STEP_TIME = """
import json, numpy as np, keras
from keras_gpu.hooks.factory import StepTimeLogger

rng = np.random.default_rng(0)
x, y = rng.random((64 * 30, 32), dtype=np.float32), rng.random((64 * 30, 10), dtype=np.float32)
model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(256, activation="relu"), keras.layers.Dense(10)])
model.compile("sgd", "mse")
cb = StepTimeLogger({log_dir!r}, profile_steps=10, profile_every_s=300)
model.fit(x, y, batch_size=64, epochs=2, verbose=0, callbacks=[cb])
print("RESULT", json.dumps(None if cb.last is None else cb.last.as_dict()))
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_step_time_breakdown_where_the_profiler_writes_xspace(tmp_path, backend):
    proc = run_python(STEP_TIME.format(log_dir=str(tmp_path)), env={"KERAS_BACKEND": backend}, timeout=300)
    last = json.loads(proc.stdout.split("RESULT", 1)[1])
    if backend == "torch":  # PyTorch's profiler writes no XSpace: one INFO line, nothing logged
        assert last is None
        assert proc.stderr.count("StepTimeLogger logs no step-time breakdown on the torch backend") == 1
        return
    # JAX's profiler writes the XSpace format: the traced steps' breakdown, parts adding up to the step.
    assert last["steps"] == 10 and last["compute_sec"] > 0
    parts = last["input_sec"] + last["compute_sec"] + last["communication_sec"] + last["other_sec"]
    assert parts == pytest.approx(last["step_sec"])
    assert any(name.endswith(".xplane.pb") for _, _, files in os.walk(tmp_path / "train") for name in files)
