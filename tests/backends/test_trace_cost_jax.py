"""On JAX, a short `fit` starts no profiler by default, one with `profile_every_s` does, and its start and stop
are measured for JAX on the CPU."""

from __future__ import annotations

import json
import textwrap

from tests._util import run_python
from tests.backends._common import JAX_ONLY

pytestmark = JAX_ONLY

FIT = """
import json, logging, tempfile
import jax, numpy as np, keras
from keras_gpu.hooks import trace_cost
from keras_gpu.hooks.step_time_logger import StepTimeLogger

records = []
handler = logging.Handler()
handler.emit = lambda r: records.append(r.getMessage())
logging.getLogger("keras_gpu").addHandler(handler)
logging.getLogger("keras_gpu").setLevel(logging.INFO)
starts = []
real = jax.profiler.start_trace
jax.profiler.start_trace = lambda d, *a, **k: (starts.append(d), real(d, *a, **k))[1]
# A cost no 60-step fit covers, whatever the machine's load.
trace_cost.PRIOR_COST_S[("jax", "cpu")] = (1e4, "a test's prior")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
model.compile("sgd", "mse")
x, y = np.ones((16 * 30, 8), np.float32), np.ones((16 * 30, 4), np.float32)
out = {}
with tempfile.TemporaryDirectory() as log_dir:
    cb = StepTimeLogger(log_dir + "/default", warmup_steps=5)
    model.fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[cb])
    out["default"] = dict(starts=len(starts), traces=len(cb.traces), reason=cb.no_trace_reason)
    forced = StepTimeLogger(log_dir + "/forced", warmup_steps=5, profile_steps=3, profile_every_s=300)
    model.fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[forced])
    cost = forced.profiler_cost
    out["forced"] = dict(starts=len(starts), traces=len(forced.traces), backend=cost.backend,
                         kind=cost.device_kind, measured=cost.traces, start=cost.start_sec, stop=cost.stop_sec)
out["lines"] = [m for m in records if "no trace" in m]
print("RESULT", json.dumps(out))
"""


def test_a_short_jax_fit_starts_no_profiler_and_a_forced_one_is_measured():
    proc = run_python(textwrap.dedent(FIT), env={"KERAS_BACKEND": "jax"}, timeout=300)
    out = json.loads(proc.stdout.split("RESULT", 1)[1])
    default, forced = out["default"], out["forced"]
    assert default["starts"] == 0 and default["traces"] == 0 and "a test's prior" in default["reason"]
    assert len(out["lines"]) == 1 and "pass profile_every_s=... to trace anyway" in out["lines"][0]
    assert forced["starts"] == 1 and forced["traces"] == 1
    assert (forced["backend"], forced["kind"], forced["measured"]) == ("jax", "cpu", 1)
    assert forced["start"] > 0 and forced["stop"] > 0
