"""On JAX, an execution that compiles a new batch shape is left out of the steady rate, where a counter counts.

A child fits a model fed by a generator (samples counted on the host, the
schedule knows no batch size) for each case of `tests._workers.compile_worker`:
a short last batch with the epoch's length given (`steps_per_epoch`) and not
given, and a new batch size in the middle of the epoch. Truths: JAX's own
`backend_compile` events per execution (which executions compiled), and a
stopwatch callback after the logger (each execution's time). The logged
steady rate of each epoch must match the stopwatch's rate over the
executions that did not compile, the first left out, and the compiles must
be in `first_step_sec`.
"""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests._util import run_python
from tests._workers.compile_worker import steady_bounds
from tests.backends._common import WITHOUT_TENSORFLOW

pytestmark = [
    *WITHOUT_TENSORFLOW,
    pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed"),
]
CASES = ["short_last", "short_last_dense", "new_in_middle"]
_RESULT: dict = {}


def _result() -> dict:
    if not _RESULT:
        code = f"from tests._workers.compile_worker import main; main({CASES!r})"
        proc = run_python(code, env={"KERAS_BACKEND": "jax"}, timeout=600)
        _RESULT.update(json.loads(proc.stdout.split("RESULT", 1)[1]))
    return _RESULT


def _rate(executions: list[dict]) -> float:
    return sum(e["samples"] for e in executions) / sum(e["sec"] for e in executions)


def _compiled(executions: list[dict]) -> set[int]:
    return {i for i, e in enumerate(executions) if i > 0 and e["compiles"]}


@pytest.mark.parametrize("case", ["short_last", "short_last_dense"])
def test_the_steady_rate_leaves_out_exactly_the_execution_that_compiled(case):
    """A short last batch: the batch end before it is looked at, so the left-out execution is exactly the one."""
    result = _result()[case]
    executions = result["epochs"][0]["executions"]
    compiled = _compiled(executions)
    # JAX's word: exactly one execution after the first compiled, the short last one, and it cost more than the rest.
    assert compiled == {len(executions) - 1}
    steady = [e for i, e in enumerate(executions) if i > 0 and i not in compiled]
    assert executions[-1]["sec"] > 0.5 * sum(e["sec"] for e in steady)  # counted in, the rate would be far lower
    low, high = steady_bounds(executions, compiled)
    assert low * (1 - 1e-9) <= result["epochs"][0]["steady"] <= high * (1 + 1e-9)
    # The compile is counted with the first execution, in time/first_step_sec.
    assert result["first_step_sec"][0] == pytest.approx(executions[0]["sec"] + executions[-1]["sec"], rel=0.1)


def test_a_new_size_mid_epoch_leaves_out_exactly_the_execution_that_compiled():
    """The compile is heard on the training thread; the execution is timed from its batch begin to the next."""
    result = _result()["new_in_middle"]
    executions = result["epochs"][0]["executions"]
    compiled = _compiled(executions)
    assert compiled == {20}
    low, high = steady_bounds(executions, compiled)
    assert low * (1 - 1e-9) <= result["epochs"][0]["steady"] <= high * (1 + 1e-9)
    assert result["epochs"][0]["steady"] > 1.3 * _rate(executions[1:])  # with the compile counted it would be far lower
    first, compiling = executions[0], executions[20]
    # The logger's first_step_sec holds both executions, each between the stopwatches' readings of it.
    shortest = first["end"][0] - executions[0]["end"][0] + first["sec"] - (first["end"][1] - first["end"][0])
    assert result["first_step_sec"][0] >= shortest + compiling["end"][0] - executions[19]["end"][1]


@pytest.mark.parametrize("case", ["short_last", "new_in_middle"])
def test_the_next_epoch_compiles_nothing_and_leaves_out_only_its_first_execution(case):
    executions = _result()[case]["epochs"][1]["executions"]
    assert not _compiled(executions)
    low, high = steady_bounds(executions, set())
    assert low * (1 - 1e-9) <= _result()[case]["epochs"][1]["steady"] <= high * (1 + 1e-9)


def test_compile_watch_hears_jax_compiles_on_its_thread_until_closed():
    import jax
    import jax.numpy as jnp

    from keras_gpu.hooks.throughput_setup import CompileWatch

    calls = []
    watch = CompileWatch(lambda: calls.append(1))
    assert watch.start()
    f = jax.jit(lambda x: x * 2 + 1)
    f(jnp.ones(3)).block_until_ready()
    compiled = watch.count
    f(jnp.ones(3)).block_until_ready()  # cached: no event
    assert compiled >= 1 and watch.count == compiled and len(calls) == compiled
    f(jnp.ones(5)).block_until_ready()  # a new shape compiles again
    assert watch.count > compiled
    watch.close()
    watch.close()
    before = watch.count
    f(jnp.ones(7)).block_until_ready()
    assert watch.count == before
