"""Bad-input fuzzing of every public entry point: a clear `ValueError`/`TypeError`, or success.

Each target gets arbitrary values for every argument (hypothesis). The only
outcomes allowed are success or a `ValueError`/`TypeError` raised by keras-gpu
itself: the innermost frame of the traceback must be in the `keras_gpu`
package (no traceback from deep inside a dependency), and the message must
echo what was received or name the argument. Nothing here initialises
TensorFlow's devices in the test process: `configure_devices` is fuzzed
through its validation and planning layer against fake machine snapshots
(plus real calls in one subprocess), strategies through `plan_strategy`
with fake `LocalDevices`, and the CLI through its parsers with the commands'
`run` replaced.
"""

from __future__ import annotations

import io
import itertools
import json
import os
import string
import traceback
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from types import MappingProxyType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import keras_gpu
from keras_gpu.core.cluster import resolve_cluster
from keras_gpu.setup import device_args, device_plan, device_request, device_settings, device_snapshot
from keras_gpu.setup.strategy import KINDS, LocalDevices, make_strategy, plan_strategy
from tests._util import REPO, run_python

PACKAGE = str(Path(keras_gpu.__file__).resolve().parent)
# A longer search, e.g. before a release: KERAS_GPU_FUZZ_EXAMPLES=5000 pytest tests/test_fuzz.py
EXAMPLES = int(os.environ.get("KERAS_GPU_FUZZ_EXAMPLES", "150"))
# Fixtures here only patch module attributes, which hold for every example of a test.
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# --------------------------------------------------------------------------- values


def _ints() -> st.SearchStrategy:
    return st.one_of(st.integers(-5, 70000), st.integers(), st.sampled_from([0, 1, 2, 2**31, 2**63, 10**400]))


def _counts() -> st.SearchStrategy:
    return st.one_of(st.integers(-2, 64), st.sampled_from([2**31 - 1, 2**31, 2**63, 2**64, 10**400]))


def _floats() -> st.SearchStrategy:
    return st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.floats(0, 1e7),
        st.sampled_from([0.5, 1, 1e300, -0.0, 2**63, 10**400, 1 << 40]),
    )


_SCALARS = st.one_of(
    st.none(), st.booleans(), _ints(), _floats(), st.text(max_size=12), st.binary(max_size=6), st.just(object())
)
_JUNK = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.tuples(inner, inner), st.dictionaries(st.one_of(st.text(max_size=6), _ints()), inner, max_size=3)
    ),
    max_leaves=8,
)


def _anything(*likely) -> st.SearchStrategy:
    """Mostly plausible values (`likely`), sometimes arbitrary ones."""
    return st.one_of(*likely, _JUNK) if likely else _JUNK


def _check_outcome(call):
    """Run `call()`; return its value, or the allowed exception it raised. Fail on anything else."""
    try:
        return call()
    except (ValueError, TypeError) as exc:
        frames = traceback.extract_tb(exc.__traceback__)
        assert frames and frames[-1].filename.startswith(PACKAGE), (
            f"{type(exc).__name__} raised outside keras_gpu at {frames[-1].filename}:{frames[-1].lineno}: {exc}"
        )
        message = str(exc)
        assert message and ("Received" in message or "`" in message or "TF_CONFIG" in message or "SLURM" in message), message
        return exc


# --------------------------------------------------------------- configure_devices


_DEVICE_ARGS = {
    "visible_gpus": _anything(st.just("all"), st.lists(st.integers(-1, 4), max_size=4)),
    "memory_growth": _anything(st.booleans()),
    "memory_limit_mb": _anything(_floats(), st.dictionaries(st.integers(-1, 4), _floats(), max_size=3)),
    "memory_fraction": _anything(st.floats(-1, 2), st.dictionaries(st.integers(-1, 4), st.floats(-1, 2), max_size=3)),
    "logical_gpus": _anything(
        st.integers(-1, 10**6),
        st.lists(_floats(), max_size=4),
        st.dictionaries(st.integers(-1, 4), st.one_of(st.integers(-1, 8), st.lists(_floats(), max_size=3)), max_size=3),
    ),
    "cpu_devices": _anything(_counts()),
    "soft_placement": _anything(st.booleans()),
    "log_placement": _anything(st.booleans()),
    "mixed_precision": _anything(st.sampled_from(device_args.MIXED_PRECISION_POLICIES)),
    "xla": _anything(st.booleans()),
    "tf32": _anything(st.booleans()),
    "intra_op_threads": _anything(_counts()),
    "inter_op_threads": _anything(_counts()),
    "gpu_thread_mode": _anything(st.sampled_from(device_args.GPU_THREAD_MODES)),
    "gpu_thread_count": _anything(_counts()),
}


@st.composite
def _device_kwargs(draw) -> dict:
    names = draw(st.sets(st.sampled_from(sorted(_DEVICE_ARGS)), max_size=5))
    return {name: draw(_DEVICE_ARGS[name]) for name in names}


@st.composite
def _snapshots(draw):
    gpus = draw(st.integers(0, 3))
    initialized = draw(st.booleans())
    return device_snapshot.Snapshot(
        initialized=initialized,
        gpu_count=gpus,
        cpu_count=1,
        gpu_memory_bytes=MappingProxyType({i: draw(st.sampled_from([None, 2**30, 16 * 2**30, 80 * 2**30])) for i in range(gpus)}),
        visible_gpus=tuple(range(gpus)),
        memory_growth=tuple(draw(st.sampled_from([None, True, False])) for _ in range(gpus)),
        gpu_logical_mb=tuple(None for _ in range(gpus)),
        cpu_logical_devices=draw(st.sampled_from([None, 2])),
        intra_op_threads=0,
        inter_op_threads=0,
        soft_placement=True,
        log_placement=False,
        xla=False,
        tf32=True,
        mixed_precision="float32",
        env=MappingProxyType({}),
    )


def _plan_devices(kwargs: dict, snapshot) -> object:
    full = {name: kwargs.get(name) for name in _DEVICE_ARGS}
    request = device_request.parse_request(device_request.DeviceArguments(**full))
    return device_plan.make_plan(request, snapshot)


@FUZZ
@given(kwargs=_device_kwargs(), snapshot=_snapshots())
def test_configure_devices_validation_and_plan(kwargs, snapshot):
    try:
        outcome = _check_outcome(lambda: _plan_devices(kwargs, snapshot))
    except RuntimeError as exc:
        # Documented: a late change after initialisation, or a memory fraction NVML cannot size.
        assert snapshot.initialized or "NVML" in str(exc), exc
        assert "Nothing was changed" in str(exc) or "memory_limit_mb" in str(exc), exc
        return
    if isinstance(outcome, device_settings.Plan):
        for change in outcome.changes:
            assert change.setting in device_settings.SETTERS
            if change.setting in ("intra_op_threads", "inter_op_threads"):
                assert 0 <= change.target <= 2**31 - 1  # TensorFlow's setters take an int32
            if change.setting == "gpu_memory_limits_mb":
                assert all(1 <= mb < 2**63 for sizes in change.target.values() for mb in sizes)


_REAL_DEVICES_CHILD = """
import json, sys, traceback
from hypothesis import given, settings, HealthCheck, strategies as st
sys.path.insert(0, ".")
import keras_gpu
from keras_gpu.core.tf_private import runtime_initialized as _runtime_initialized
from tests.test_fuzz import _device_kwargs, PACKAGE

outcomes = []

@settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(kwargs=_device_kwargs())
def run(kwargs):
    try:
        keras_gpu.configure_devices(**kwargs)
        outcomes.append("ok")
    except (ValueError, TypeError, RuntimeError) as exc:
        last = traceback.extract_tb(exc.__traceback__)[-1].filename
        outcomes.append(type(exc).__name__ if last.startswith(PACKAGE) else f"outside: {last}: {exc!r}")

run()
print("RESULT " + json.dumps({"outcomes": outcomes, "initialized": _runtime_initialized()}))
"""


def test_configure_devices_real_calls_in_a_subprocess():
    """Real `configure_devices` calls, one after another in a fresh process that never initialises its runtime."""
    proc = run_python(_REAL_DEVICES_CHILD + "\n", cwd=REPO, timeout=240)
    proc_args = proc.stdout.split("RESULT ", 1)
    assert len(proc_args) == 2, proc.stderr[-4000:]
    result = json.loads(proc_args[1])
    assert result["initialized"] is False
    assert result["outcomes"] and all(o in ("ok", "ValueError", "TypeError", "RuntimeError") for o in result["outcomes"]), result
    assert "ok" in result["outcomes"]


# ------------------------------------------------------------- make_strategy / plan


_FAKE_DEVICES = st.builds(
    lambda gpus, cpus, physical, nccl: LocalDevices(
        gpus=tuple(f"/device:GPU:{i}" for i in range(gpus)),
        cpus=tuple(f"/device:CPU:{i}" for i in range(cpus)),
        physical_gpus=None if physical is None else min(physical, gpus),
        nccl=nccl,
    ),
    st.integers(0, 4),
    st.integers(1, 4),
    st.one_of(st.none(), st.integers(0, 4)),
    st.booleans(),
)
_ADDRESS = st.one_of(
    st.builds(lambda h, p: f"{h}:{p}", st.sampled_from(["127.0.0.1", "localhost", "node-1", "[::1]", "h"]), st.integers(-1, 70000)),
    st.text(max_size=15),
)
_CLUSTER = _anything(
    st.lists(_ADDRESS, max_size=4),
    st.dictionaries(st.sampled_from(["worker", "chief", "evaluator", "ps", "boss"]), st.lists(_ADDRESS, max_size=3), max_size=3),
)
_STRATEGY_ARGS = {
    "devices": _anything(st.lists(st.sampled_from(["GPU:0", "GPU:1", "CPU:0", "/cpu:1", "/device:GPU:3", "TPU:0"]), max_size=3)),
    "cross_device_ops": _anything(st.sampled_from(["auto", "nccl", "hierarchical_copy", "reduce_to_one_device"])),
    "communication": _anything(st.sampled_from(["auto", "ring", "nccl"])),
    "collective_timeout": _anything(_floats(), _ints()),
    "startup_timeout": _anything(_floats(), _ints()),
    "cluster_source": _anything(st.sampled_from(["auto", "tf_config", "slurm", "explicit"])),
    "cluster": _CLUSTER,
    "task_index": _anything(st.integers(-1, 4)),
    "task_type": _anything(st.sampled_from(["worker", "chief", "evaluator", "ps"])),
    "slurm_port_base": _anything(st.integers(-1, 70000)),
    "slurm_gpus_per_task": _anything(st.integers(-1, 4), _counts()),
}


@st.composite
def _tf_config_text(draw) -> str:
    shape = draw(st.sampled_from(["text", "json", "valid-ish"]))
    if shape == "text":
        return draw(st.text(max_size=40))
    if shape == "json":
        return json.dumps(draw(_JUNK), default=str)
    cluster = draw(_CLUSTER)
    task = draw(_anything(st.fixed_dictionaries({"type": _STRATEGY_ARGS["task_type"], "index": _anything(st.integers(-1, 4))})))
    config = {"cluster": cluster, "task": task}
    if draw(st.booleans()):
        config["rpc_layer"] = draw(_anything(st.sampled_from(["grpc", "", "grpc+verbs", "http"])))
    return json.dumps(config, default=str)


_HOST = st.text(alphabet=string.ascii_lowercase + string.digits + "-.", min_size=1, max_size=6)
_RANGE = st.one_of(
    st.builds(str, st.integers(0, 10**9)),
    st.builds(lambda a, b: f"{a}-{b}", st.integers(0, 10**9), st.integers(0, 10**9)),
    st.builds(lambda a, b: f"{a:03d}-{b:03d}", st.integers(0, 20), st.integers(0, 20)),
)
_HOSTLIST = st.one_of(
    st.lists(
        st.one_of(_HOST, st.builds(lambda h, r: f"{h}[{','.join(r)}]", _HOST, st.lists(_RANGE, min_size=1, max_size=3))),
        min_size=1,
        max_size=3,
    ).map(",".join),
    st.text(max_size=20),
)
_TASKS_PER_NODE = st.one_of(
    st.lists(
        st.one_of(st.builds(str, st.integers(0, 10**6)), st.builds(lambda n, k: f"{n}(x{k})", st.integers(0, 9), st.integers(0, 10**9))),
        min_size=1,
        max_size=3,
    ).map(",".join),
    st.text(max_size=10),
)


@st.composite
def _environ(draw) -> dict:
    env = {}
    kind = draw(st.sampled_from(["none", "tf_config", "slurm", "both", "junk"]))
    if kind in ("tf_config", "both"):
        env["TF_CONFIG"] = draw(_tf_config_text())
    if kind in ("slurm", "both"):
        env.update(
            {
                "SLURM_PROCID": draw(st.one_of(st.builds(str, st.integers(-1, 10)), st.text(max_size=4))),
                "SLURM_STEP_NUM_TASKS": draw(st.one_of(st.builds(str, st.integers(0, 10**9)), st.text(max_size=4))),
                "SLURM_STEP_NODELIST": draw(_HOSTLIST),
                "SLURM_STEP_TASKS_PER_NODE": draw(_TASKS_PER_NODE),
                "CUDA_VISIBLE_DEVICES": draw(st.sampled_from(["", "0", "0,1", "-1", "0,1,2,3"])),
            }
        )
    if kind == "junk":
        env = draw(st.dictionaries(st.sampled_from(["TF_CONFIG", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS"]), _SCALARS, max_size=3))
    return env


@st.composite
def _strategy_kwargs(draw) -> dict:
    names = draw(st.sets(st.sampled_from(sorted(_STRATEGY_ARGS)), max_size=4))
    kwargs = {name: draw(_STRATEGY_ARGS[name]) for name in names}
    kwargs["kind"] = draw(_anything(st.sampled_from(KINDS)))
    return kwargs


@pytest.fixture
def fake_detect(monkeypatch):
    """`LocalDevices.detect` answers with a fake instead of initialising TensorFlow."""
    monkeypatch.setattr(LocalDevices, "detect", classmethod(lambda cls: LocalDevices(cpus=("/device:CPU:0", "/device:CPU:1"))))


@FUZZ
@given(
    kwargs=_strategy_kwargs(),
    local=st.one_of(st.none(), _FAKE_DEVICES, _SCALARS),
    environ=_environ(),
    assign=_anything(st.booleans()),
)
def test_plan_strategy(fake_detect, kwargs, local, environ, assign):
    kind = kwargs.pop("kind")
    outcome = _check_outcome(
        lambda: plan_strategy(kind, local_devices=local, environ=environ, slurm_assign_gpus=assign, **kwargs)
    )
    if not isinstance(outcome, Exception):
        assert outcome.kind in ("default", "one_device", "mirrored", "multiworker")
        if outcome.kind == "multiworker":
            assert outcome.startup_timeout is not None and 0 < outcome.startup_timeout <= 7 * 24 * 3600


@FUZZ
@given(kwargs=_strategy_kwargs())
def test_make_strategy_rejects_what_plan_rejects_before_building(fake_detect, monkeypatch, kwargs):
    """`make_strategy` validates through the plan: bad input never reaches TensorFlow."""
    built = []
    monkeypatch.setattr("keras_gpu.setup.strategy._build", lambda plan: built.append(plan) or object())
    monkeypatch.setattr("keras_gpu.setup.strategy.resolve_cluster", _no_slurm_side_effects(resolve_cluster))
    monkeypatch.delenv("TF_CONFIG", raising=False)
    for var in [v for v in os.environ if v.startswith("SLURM_")]:
        monkeypatch.delenv(var)
    kind = kwargs.pop("kind")
    outcome = _check_outcome(lambda: make_strategy(kind, **kwargs))
    assert (not isinstance(outcome, Exception)) == bool(built)


def _no_slurm_side_effects(real):
    def resolve(*args, **kwargs):
        kwargs["slurm_assign_gpus"] = False  # never let the fuzzer rewrite CUDA_VISIBLE_DEVICES
        return real(*args, **kwargs)

    return resolve


# ------------------------------------------------------------------- resolve_cluster


@FUZZ
@given(
    source=_anything(st.sampled_from(["auto", "tf_config", "slurm", "explicit"])),
    environ=_environ(),
    cluster=st.one_of(st.none(), _CLUSTER),
    task_index=st.one_of(st.none(), _STRATEGY_ARGS["task_index"]),
    task_type=_STRATEGY_ARGS["task_type"],
    port_base=_STRATEGY_ARGS["slurm_port_base"],
    gpus_per_task=st.one_of(st.none(), _STRATEGY_ARGS["slurm_gpus_per_task"]),
)
def test_resolve_cluster(source, environ, cluster, task_index, task_type, port_base, gpus_per_task):
    saved = os.environ.get("CUDA_VISIBLE_DEVICES")
    outcome = _check_outcome(
        lambda: resolve_cluster(
            source,
            cluster=cluster,
            task_index=task_index,
            task_type=task_type,
            slurm_port_base=port_base,
            slurm_gpus_per_task=gpus_per_task,
            environ=environ,
        )
    )
    assert os.environ.get("CUDA_VISIBLE_DEVICES") == saved
    if not isinstance(outcome, Exception) and outcome.cluster:
        # What resolves is something TensorFlow accepts: every address host:port with a port in range.
        for addresses in outcome.cluster.values():
            for address in addresses:
                host, _, port = address.rpartition(":")
                assert host and port.isascii() and port.isdigit() and 1 <= int(port) <= 65535, address
        assert outcome.address is not None or outcome.task_type == "evaluator"


@settings(max_examples=EXAMPLES, deadline=None)
@given(tf_config=_tf_config_text())
def test_tf_config_text(tf_config):
    _check_outcome(lambda: resolve_cluster("tf_config", environ={"TF_CONFIG": tf_config}))


def test_deeply_nested_tf_config_is_a_clear_error():
    raw = "[" * 100_000 + "]" * 100_000
    with pytest.raises(ValueError, match="TF_CONFIG"):
        resolve_cluster("tf_config", environ={"TF_CONFIG": raw})


@pytest.mark.parametrize(
    "nodelist, tasks_per_node, num_tasks",
    [
        ("node[0-999999999]", "1(x1000000000)", "1000000000"),  # would expand to 10**9 hosts
        ("node[0-1]", "2(x999999999)", "4"),
        ("n1", "999999999", "999999999"),
    ],
)
def test_huge_slurm_steps_fail_fast(nodelist, tasks_per_node, num_tasks):
    env = {
        "SLURM_PROCID": "0",
        "SLURM_STEP_NUM_TASKS": num_tasks,
        "SLURM_STEP_NODELIST": nodelist,
        "SLURM_STEP_TASKS_PER_NODE": tasks_per_node,
        "CUDA_VISIBLE_DEVICES": "",
    }
    with pytest.raises(ValueError, match="SLURM"):
        resolve_cluster("slurm", environ=env)


# ------------------------------------------------------------------- callbacks


def _cb_floats() -> st.SearchStrategy:
    # Without ints beyond the float range: see test_memory_logger_with_an_int_beyond_float_range.
    return _floats().filter(lambda v: not (isinstance(v, int) and abs(v) > 1e308))


_CALLBACK_ARGS = {
    "ThroughputLogger": {
        "every_n_steps": _anything(st.integers(-1, 100)),
        "every_s": _anything(_cb_floats()),
        "batch_size": _anything(st.integers(-1, 1024)),
        "samples_per_epoch": _anything(st.integers(-1, 10**6)),
        "flops_per_sample": _anything(_cb_floats()),
        "peak_flops": _anything(_cb_floats()),
    },
    "MemoryLogger": {
        "every_s": _anything(_cb_floats()),
        "sample_interval_s": _anything(_cb_floats()),
        "nvml": _anything(st.booleans()),
        "allocator": _anything(st.booleans()),
        "host": _anything(st.booleans()),
        "gpus": _anything(st.lists(st.integers(-1, 4), max_size=3)),
        "reset_peaks": _anything(st.booleans()),
    },
    "PlacementLogger": {"max_rows": _anything(st.integers(-1, 100)), "write_graph": _anything(st.booleans())},
    "callbacks": {
        "throughput": _anything(st.booleans()),
        "memory": _anything(st.booleans()),
        "placement": _anything(st.booleans()),
        "every_s": _anything(_cb_floats()),
        "batch_size": _anything(st.integers(-1, 1024)),
        "samples_per_epoch": _anything(st.integers(-1, 10**6)),
        "flops_per_sample": _anything(_cb_floats()),
        "peak_flops": _anything(_cb_floats()),
    },
}


@st.composite
def _callback_call(draw):
    name = draw(st.sampled_from(sorted(_CALLBACK_ARGS)))
    args = _CALLBACK_ARGS[name]
    chosen = draw(st.sets(st.sampled_from(sorted(args)), max_size=4))
    log_dir = draw(_anything(st.just("LOGDIR"), st.just(""), st.just("  ")))
    return name, log_dir, {k: draw(args[k]) for k in chosen}


@FUZZ
@given(call=_callback_call())
def test_callback_constructors(tmp_path_factory, call):
    from keras_gpu.core.tf_private import runtime_initialized as _runtime_initialized

    name, log_dir, kwargs = call
    if log_dir == "LOGDIR":
        log_dir = str(tmp_path_factory.getbasetemp() / "fuzz_logs")
    before = _runtime_initialized()
    _check_outcome(lambda: getattr(keras_gpu, name)(log_dir, **kwargs))
    assert _runtime_initialized() == before  # building a callback never starts TensorFlow's runtime


# ------------------------------------------------------------------------ the CLI


_FLAGS = {
    "launch": ["-n", "--nproc", "--cpu-replicas", "--grace-period", "--max-restarts", "-m", "--", "-h", "x.py"],
    "report": ["--json", "-h", "LOGDIR"],
    "env": ["--json", "-h"],
    "demo": ["--strategy", "--cpu-replicas", "--workers", "--epochs", "--samples", "--batch-size", "--log-dir"],
}
# Printable text only: argparse echoes unknown arguments verbatim, so a line break inside an argument
# splits the error line (see test_cli_error_with_a_line_break_in_an_argument_is_one_line).
_PRINTABLE = st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), max_size=8)
_TOKENS = st.one_of(
    st.sampled_from([*itertools.chain.from_iterable(_FLAGS.values()), "0", "1", "2", "-1", "1e3", "nan", "inf", "two", "auto", "mirrored", "--bogus", "-", "--n=2"]),
    _PRINTABLE,
)


@st.composite
def _argv(draw) -> list[str]:
    command = draw(st.one_of(st.sampled_from(sorted(_FLAGS)), _PRINTABLE))
    return [command, *draw(st.lists(_TOKENS, max_size=8))]


@pytest.fixture
def parse_only(monkeypatch, tmp_path):
    """`main()` that parses and validates but never runs a command: each `run` is replaced."""
    from keras_gpu.cli import demo, env, launch, report

    def launch_run(args):
        launch.resolve_target(args)  # the validation a real launch does before starting anything
        return 0

    monkeypatch.setattr(launch, "run", launch_run)
    monkeypatch.setattr(report, "run", lambda args: 0)
    monkeypatch.setattr(env, "run", lambda args: 0)
    monkeypatch.setattr(demo, "run", lambda args: demo._positive("--workers", args.workers) or 0)
    (tmp_path / "x.py").write_text("")
    monkeypatch.chdir(tmp_path)
    from keras_gpu.cli.main import main

    return main


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(argv=_argv())
def test_cli_arguments(parse_only, argv):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = parse_only(argv)
    assert code in (0, 2), (argv, code, err.getvalue())
    text = err.getvalue()
    assert "Traceback" not in text
    if code == 2:
        lines = text.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("keras-gpu"), (argv, text)


def test_cli_error_with_a_line_break_in_an_argument_is_one_line(parse_only):
    err = io.StringIO()
    with redirect_stderr(err):
        assert parse_only(["demo", "bad\rarg"]) == 2
    assert len(err.getvalue().strip().splitlines()) == 1, err.getvalue()


def test_memory_logger_with_an_int_beyond_float_range(tmp_path):
    with pytest.raises(ValueError, match="every_s"):
        keras_gpu.MemoryLogger(str(tmp_path), every_s=10**400)
    with pytest.raises(ValueError, match="every_s"):
        keras_gpu.ThroughputLogger(str(tmp_path), every_s=10**400)
    with pytest.raises(ValueError, match=r"sample_interval_s.*at least 0\.001"):
        keras_gpu.MemoryLogger(str(tmp_path), sample_interval_s=1e-320)


# ------------------------------------------------- the worker bootstrap's arguments


@st.composite
def _bootstrap_argv(draw) -> list[str]:
    if draw(st.booleans()):
        replicas = draw(st.one_of(st.builds(str, st.integers(-2, 5000)), _PRINTABLE, st.just("9" * 5000)))
        rest = draw(st.lists(st.one_of(st.sampled_from(["-m", "t.py", "mod", "--"]), _PRINTABLE), max_size=3))
        return ["--cpu-replicas", replicas, draw(st.sampled_from(["--", "-m", "x"])), *rest]
    return draw(st.lists(_TOKENS, max_size=6))


@FUZZ
@given(argv=_bootstrap_argv())
def test_worker_bootstrap_arguments(argv):
    from keras_gpu.cli import _worker

    try:
        replicas, target = _worker._parse(argv)
    except SystemExit as exc:
        assert isinstance(exc.code, str) and ("usage:" in exc.code or "Received" in exc.code or "`-m`" in exc.code)
    else:
        assert (replicas is None or 1 <= replicas <= 4096) and target and (target[0] != "-m" or len(target) >= 2)


# ------------------------------------------- regressions the fuzzers found, pinned


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"intra_op_threads": 2**31}, "from 0 to 4096"),
        ({"inter_op_threads": 10**400}, "from 0 to 4096"),
        ({"cpu_devices": 10**9}, "from 1 to 4096"),
        ({"gpu_thread_mode": "gpu_private", "gpu_thread_count": 2**40}, "from 1 to 4096"),
        ({"memory_limit_mb": 10**400}, "at most 1073741824"),
        ({"memory_limit_mb": 1e300}, "at most 1073741824"),
        ({"memory_fraction": 10**400}, r"in \(0, 1\]"),
        ({"logical_gpus": [1024, 10**400]}, r"logical_gpus\[1\]"),
        ({"logical_gpus": 10**6}, "from 1 to 4096"),
        ({"visible_gpus": range(10**18)}, "at most 4096 GPUs"),
    ],
)
def test_device_arguments_out_of_any_machine_s_range(kwargs, match):
    full = {name: kwargs.get(name) for name in _DEVICE_ARGS}
    with pytest.raises(ValueError, match=match):
        device_request.parse_request(device_request.DeviceArguments(**full))


_W2 = ["127.0.0.1:2222", "127.0.0.1:2223"]


def _slurm_env(nodelist: str, per_node: str, tasks: str = "2", procid: str = "0") -> dict:
    return {
        "SLURM_PROCID": procid,
        "SLURM_STEP_NUM_TASKS": tasks,
        "SLURM_STEP_NODELIST": nodelist,
        "SLURM_STEP_TASKS_PER_NODE": per_node,
        "CUDA_VISIBLE_DEVICES": "",
    }


@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda: resolve_cluster(cluster=["127.0.0.1:\u0663\u0663"], task_index=0, environ={}), ValueError, "not 'host:port'"),
        (lambda: resolve_cluster(environ={"TF_CONFIG": 5}), TypeError, "Received: TF_CONFIG=5"),
        (lambda: resolve_cluster(environ="TF_CONFIG"), TypeError, "Received: environ='TF_CONFIG'"),
        (lambda: resolve_cluster(["auto"], environ={}), ValueError, r"Received: source=\['auto'\]"),
        (
            lambda: resolve_cluster(environ={"TF_CONFIG": json.dumps({"cluster": {"worker": _W2}, "task": {"type": "worker"}, "rpc_layer": ""})}),
            ValueError,
            "rpc_layer",
        ),
        (lambda: resolve_cluster("slurm", environ=_slurm_env("node[1-2", "1(x2)")), ValueError, "unclosed"),
        (lambda: resolve_cluster("slurm", environ=_slurm_env("a,a", "1,1")), ValueError, "names a node twice"),
        (lambda: resolve_cluster("slurm", environ=_slurm_env("no de", "2")), ValueError, "not valid"),
        (lambda: resolve_cluster("slurm", environ=_slurm_env("n[2-1]", "1(x2)")), ValueError, "reversed"),
        (lambda: resolve_cluster("slurm", environ=_slurm_env("n1,n2", "2,0")), ValueError, "Inconsistent"),
        (lambda: resolve_cluster("slurm", environ=_slurm_env("localhost", "2"), slurm_assign_gpus="yes"), TypeError, "slurm_assign_gpus"),
        (lambda: plan_strategy("multiworker", collective_timeout=10**400, environ={}), ValueError, "collective_timeout"),
        (
            lambda: resolve_cluster("slurm", environ=_slurm_env("localhost", "2"), slurm_gpus_per_task=10**9),
            ValueError,
            "from 0 to 1024",
        ),
    ],
)
def test_cluster_input_regressions(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_slurm_hostlists_still_expand_like_slurm():
    info = resolve_cluster("slurm", environ=_slurm_env("gpu[08-10],node7", "1(x3),2", tasks="5", procid="4"))
    assert info.cluster == {"worker": ("gpu08:8888", "gpu09:8888", "gpu10:8888", "node7:8888", "node7:8889")}
    assert info.task_index == 4 and info.address == "node7:8889"


def test_launch_worker_count_is_bounded(capsys):
    from keras_gpu.cli.main import main

    assert main(["launch", "-n", "5000", "x.py"]) == 2
    err = capsys.readouterr().err
    assert "must be an integer from 1 to 1024. Received: -n=5000" in err and len(err.strip().splitlines()) == 1
