"""Smoke tests of the overhead benchmark harness (`benchmarks/`, a repository script), and of `keras-gpu bench`.

They check that the instruments measure what they claim (exact call counts,
hook time against the hook's own timing, thread CPU against the thread's own
`thread_time`), the arithmetic of the summaries on hand-made inputs, and the
JSON a tiny end-to-end run writes. No test asserts a speed: the benchmark
reports costs, it does not judge them. TensorFlow's devices are only touched
in the benchmark's own subprocesses.
"""

from __future__ import annotations

import importlib
import importlib.util
import pathlib
import re
import subprocess
import sys
import threading
import time

import keras
import pytest

from benchmarks import _analysis, _cli, _stats
from benchmarks._instrument import HookTimer, wrapper_overhead_s
from benchmarks._probes import BusyHookProbe, SpinThreadProbe
from benchmarks._proc import open_fd_count, rss_bytes, task_count, thread_cpu_seconds
from benchmarks._variants import DEFAULT_VARIANTS, VARIANTS, variant
from benchmarks._worker import _accuracy_windows
from benchmarks._workload import CONFIGS, DEFAULT_CONFIGS
from tests._util import run_overhead, subprocess_env

# --------------------------------------------------------------------------- instruments


def test_hook_timer_times_overridden_hooks_only_and_counts_every_call():
    class OnlyBatchEnd(keras.callbacks.Callback):
        def on_batch_end(self, batch, logs=None):
            pass

    busy, forwarding = BusyHookProbe(200e-6), OnlyBatchEnd()
    timer = HookTimer([busy, forwarding]).install()
    assert set(timer.slots) == {"BusyHookProbe.on_train_batch_end", "OnlyBatchEnd.on_batch_end"}
    for i in range(40):
        busy.on_train_batch_end(i)
        forwarding.on_train_batch_end(i)  # Keras' default forwards to on_batch_end: counted once
    seconds, calls, _, _ = timer.slots["BusyHookProbe.on_train_batch_end"]
    assert calls == busy.calls == 40
    assert timer.slots["OnlyBatchEnd.on_batch_end"][1] == 40
    # The timer brackets the hook's own timing, plus only its own small per-call cost.
    assert busy.self_timed_s <= seconds <= busy.self_timed_s + 40 * 1e-3
    assert timer.hook_seconds() == pytest.approx(seconds + timer.slots["OnlyBatchEnd.on_batch_end"][0])
    assert timer.install() is timer and set(timer.slots) == {"BusyHookProbe.on_train_batch_end", "OnlyBatchEnd.on_batch_end"}


def test_hook_timer_counts_slow_calls_apart():
    class Sometimes(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch % 10 == 0:
                time.sleep(0.002)

    cb = Sometimes()
    timer = HookTimer([cb]).install()
    for i in range(30):
        cb.on_train_batch_end(i)
    seconds, calls, slow, slow_s = timer.slots["Sometimes.on_train_batch_end"]
    assert calls == 30 and slow >= 3
    assert slow_s >= 3 * 0.002 and slow_s <= seconds


def test_hook_timer_finds_attributes_and_reads_callback_threads():
    probe = SpinThreadProbe(0.15)
    timer = HookTimer([probe]).install()
    assert timer.threads == []
    probe.on_train_begin()
    threads = timer.threads
    assert [(t["name"], t["owner"]) for t in threads] == [("spin-thread-probe", "SpinThreadProbe")]
    deadline = time.monotonic() + 30
    while probe.burned_s == 0.0 and time.monotonic() < deadline:
        time.sleep(0.01)
    cpu = timer.sample_threads()
    assert probe.burned_s >= 0.15
    assert cpu == pytest.approx(probe.burned_s, rel=0.05, abs=0.02)
    assert timer.alive_threads() == ["spin-thread-probe"]
    probe.on_train_end()  # joins; the wrapper read the CPU time just before
    assert timer.alive_threads() == []
    assert timer.threads[0]["cpu_s"] == pytest.approx(probe.burned_s, rel=0.05, abs=0.02)


def test_proc_readers_agree_with_the_thread_itself():
    result = {}

    def spin():
        start = time.thread_time()
        while time.thread_time() - start < 0.1:
            pass
        result["own"] = time.thread_time()
        result["outside"] = thread_cpu_seconds(threading.get_native_id())

    t = threading.Thread(target=spin)
    t.start()
    t.join()
    assert result["outside"] == pytest.approx(result["own"], abs=0.02)
    deadline = time.monotonic() + 10  # the OS thread ends a moment after `join` returns
    while thread_cpu_seconds(t.native_id) is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert thread_cpu_seconds(t.native_id) is None  # gone
    assert rss_bytes() > 10 * 2**20
    assert task_count() >= 1 and open_fd_count() >= 3


def test_wrapper_overhead_is_a_small_positive_number():
    per_call = wrapper_overhead_s(2000)
    assert 0 < per_call < 1e-3


# --------------------------------------------------------------------------- arithmetic


def test_describe_and_quantiles():
    d = _stats.describe([4.0, 1.0, 3.0, 2.0, float("nan"), None])
    assert d == {"n": 4, "median": 2.5, "q1": 1.75, "q3": 3.25, "min": 1.0, "max": 4.0}
    assert _stats.describe([]) == {"n": 0, "median": None, "q1": None, "q3": None, "min": None, "max": None}
    with pytest.raises(ValueError, match=r"Received: q=2"):
        _stats.quantile([1.0], 2)


def _epoch(cycle, hook=0.0, thread=0.0, batch_hook=0.0, hooks=None):
    return {"cycle_s": cycle, "hook_s": hook, "thread_cpu_s": thread, "batch_hook_s": batch_hook, "hooks": hooks or {}}


def _fit(epochs, wall, total_hook=0.0, total_thread=0.0, steps=100, first=None, inner=None, interposed=False):
    return {
        "wall_s": wall, "steps_per_epoch": steps, "epochs": epochs,
        "train_begin": {"wall_s": 0.0, "hook_s": 0.0, "thread_cpu_s": 0.0},
        "train_end": {"wall_s": 0.0, "hook_s": 0.0, "thread_cpu_s": 0.0},
        "total_hook_s": total_hook, "total_thread_cpu_s": total_thread,
        "first_call_s": first, "inner_first_call_s": inner, "interposed": interposed, "hooks": {},
    }


def test_run_metrics_on_a_hand_made_run():
    batch = {"X.on_train_batch_end": [100, 0.002, 0, 0.0]}
    run = {"fits": [
        _fit([_epoch(0.5, 0.01), _epoch(0.1, 0.003, 0.001, 0.002, batch), _epoch(0.1, 0.003, 0.001, 0.002, batch)],
             wall=0.9, total_hook=0.05, total_thread=0.002, first=0.30, inner=0.25, interposed=True),
        _fit([_epoch(0.12, 0.004), _epoch(0.1, 0.003, 0.001, 0.002, batch)], wall=0.3, total_hook=0.01,
             total_thread=0.001, first=0.002, inner=0.001, interposed=True),
    ]}
    m = _analysis.run_metrics(run, floor_s=1e-6)
    assert m["steps_per_s"] == pytest.approx(1000.0)  # 100 steps over the median steady epoch, 0.1 s
    assert m["direct_steady"] == pytest.approx(0.012 / 0.3)
    assert m["direct_steady_net"] == pytest.approx((0.012 - 300 * 1e-6) / 0.3)
    assert m["thread_fraction"] == pytest.approx(0.003 / 0.3)
    assert m["batch_hook_us_per_step"] == pytest.approx(20.0)
    assert m["epoch_cost_ms"] == pytest.approx(2.0)
    first, later = m["fits"]
    assert first["oneoff_wall_s"] == pytest.approx(0.9 - 3 * 0.1)
    assert first["oneoff_direct_s"] == pytest.approx(0.052 - 3 * 0.004)
    assert first["interposer_s"] == pytest.approx(0.05)
    assert later["oneoff_wall_s"] == pytest.approx(0.3 - 2 * 0.1)
    assert later["interposer_s"] == pytest.approx(0.001)


def test_accuracy_windows_use_the_same_steps_as_the_logger():
    # 2 epochs of 10 steps, 64 samples each; the benchmark's clock: step k ends at k * 0.01 s,
    # except epoch 1's steps run twice as fast.
    stamps = {k: k * 0.01 for k in range(1, 11)}
    stamps.update({k: 0.1 + (k - 10) * 0.005 for k in range(11, 21)})
    logged = {"throughput/samples_per_sec": [(6, 6400.0), (10, 6400.0 * 1.01), (20, 12800.0)]}
    # Epochs start at 0 s and at 0.1 s: the first window of each opens there (wall-clock rates).
    windows = _accuracy_windows(logged, stamps, steps_per_epoch=10, batch=64, epoch_starts={0: 0.0, 10: 0.1})
    assert [(w["from_step"], w["to_step"]) for w in windows] == [(0, 6), (6, 10), (10, 20)]
    assert [w["truth"] for w in windows] == pytest.approx([6400.0, 6400.0, 12800.0])
    assert [w["rel_error"] for w in windows] == pytest.approx([0.0, 0.01, 0.0])
    summary = _analysis.summarise_accuracy(
        {"windows": windows, "batch_size": 64, "steps_per_epoch": 10, "settings": {}}
    )
    assert summary["windows"] == 3 and summary["max_abs_rel_error"] == pytest.approx(0.01)


# --------------------------------------------------------------------------- options and CLI


def test_variants_and_configs_are_known_and_bad_names_are_rejected():
    assert set(DEFAULT_VARIANTS) <= set(VARIANTS) and "bare" in VARIANTS
    assert variant("benchmarks.peers:TimeHistory").group == "custom"
    with pytest.raises(ValueError, match=r"Received: variant='nope'"):
        variant("nope")
    from benchmarks import overhead

    defaults = overhead.build_parser().parse_args([])
    assert defaults.configs == ",".join(DEFAULT_CONFIGS)  # every TensorFlow configuration the harness runs
    assert set(CONFIGS) - set(DEFAULT_CONFIGS) == {"mlp-2w-jax"}  # asked for by name, where JAX is installed
    assert defaults.variants == ",".join(DEFAULT_VARIANTS)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--configs", "mlp-3"], "Received: --configs='mlp-3'"),
        (["--variants", "kg-throughput,kg-throughput"], "lists a variant twice"),
        (["--epochs", "3,1"], "Received: --epochs='3,1'"),
        (["--rounds", "0"], "Received: --rounds=0"),
        (["--leak-steps", "-1"], "Received: --leak-steps=-1"),
        (["--async-ab", "tensorflow"], "Received: --async-ab='tensorflow'"),
        (["--ab-pairs", "0"], "Received: --ab-pairs=0"),
        (["--configs", ""], "Received: --configs=''"),
    ],
)
def test_bad_options_name_the_argument(argv, message, capsys):
    from benchmarks import overhead

    with pytest.raises(SystemExit) as exit_info:
        overhead.main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_installed_cli_never_imports_the_benchmark_and_says_how_to_run_it(tmp_path):
    """`keras-gpu bench` run outside the checkout: no `benchmarks` import, the command to run, status 2."""
    code = (
        "import sys\n"
        "from keras_gpu.cli.main import main\n"
        "before = list(sys.path)\n"
        "status = main(['bench', '--quick', '--configs', 'mlp-1'])\n"
        "print('imported' if any(m == 'benchmarks' or m.startswith('benchmarks.') for m in sys.modules) else 'clean')\n"
        "print('same-path' if sys.path == before else 'path-changed')\n"
        "sys.exit(status)\n"
    )
    env = subprocess_env()
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout.split() == ["clean", "same-path"]
    assert "python -m benchmarks.overhead --quick --configs mlp-1" in proc.stderr
    assert "not part of the installed package" in proc.stderr


# --------------------------------------------------------------------------- commands and the shared CLI

ROOT = pathlib.Path(__file__).resolve().parent.parent
STUDIES = (
    "ride_cost", "sample_count_cost", "step_time_cost", "straggler_rule", "profiler_crash_rate", "fit_return",
    "cluster_scale", "scale_time", "straggler_scale", "straggler_jobs", "spread_rule",
)


def _documented_commands() -> dict[str, set[str]]:
    """`python -m benchmarks...` module -> the documents naming it, over docs/ and README.md."""
    found: dict[str, set[str]] = {}
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for module in re.findall(r"python -m (benchmarks(?:\.\w+)*)", path.read_text(encoding="utf-8")):
            found.setdefault(module, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_documented_benchmark_command_names_an_importable_module():
    commands = _documented_commands()
    assert {"benchmarks.overhead", "benchmarks.studies.ride_cost", "benchmarks.studies.straggler_rule"} <= set(commands)
    missing = {m: sorted(docs) for m, docs in commands.items() if importlib.util.find_spec(m) is None}
    assert not missing, f"documented commands whose module does not exist: {missing}"


def test_every_documented_benchmark_script_path_exists():
    named = set()
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        named |= set(re.findall(r"\bbenchmarks/[\w/]+\.py\b", path.read_text(encoding="utf-8")))
    assert "benchmarks/gpu_check.py" in named
    assert not sorted(p for p in named if not (ROOT / p).is_file())


@pytest.mark.parametrize("name", STUDIES)
def test_each_study_is_a_module_of_the_studies_package_with_the_shared_options(name, capsys):
    module = importlib.import_module(f"benchmarks.studies.{name}")
    with pytest.raises(SystemExit) as exit_info:
        module.main(["--help"])
    assert exit_info.value.code == 0
    usage = capsys.readouterr().out
    assert usage.startswith(f"usage: python -m benchmarks.studies.{name}")
    assert ("--json" if name == "scale_time" else "--output") in usage
    assert not (ROOT / "benchmarks" / f"{name}.py").exists()  # one copy, in studies/


@pytest.mark.parametrize(
    ("name", "argv", "message"),
    [
        ("ride_cost", ["--rounds", "0"], "--rounds must be at least 1. Received: --rounds=0"),
        ("ride_cost", ["--steps", "1"], "--steps must be at least 2. Received: --steps=1"),
        ("sample_count_cost", ["--rounds", "0"], "--rounds must be at least 1. Received: --rounds=0"),
        ("fit_return", ["--rounds", "0"], "--rounds must be at least 1. Received: --rounds=0"),
        ("profiler_crash_rate", ["--workers", "1"], "--workers must be at least 2. Received: --workers=1"),
    ],
)
def test_bad_study_options_are_refused_before_any_run(name, argv, message, capsys):
    module = importlib.import_module(f"benchmarks.studies.{name}")
    with pytest.raises(SystemExit) as exit_info:
        module.main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_the_step_time_study_wraps_what_the_step_time_logger_calls(tmp_path):
    """`step_time_cost` follows the traces through the schedule's start/stop and times the parser's handler."""
    import inspect

    from keras_gpu.hooks.factory import StepTimeLogger
    from keras_gpu.hooks.step_time_trace import TraceSchedule

    assert list(inspect.signature(TraceSchedule.start).parameters) == ["self", "batch"]
    assert list(inspect.signature(TraceSchedule.stop).parameters) == ["self"]
    assert {"tracing", "last_batch"} <= set(inspect.getsource(TraceSchedule.__init__).replace("self.", " ").split())
    logger = StepTimeLogger(str(tmp_path))
    assert callable(logger._parser._handle) and callable(logger.wait)


def test_the_shared_parser_has_only_the_options_asked_for():
    full = _cli.make_parser("p", "d", rounds=5, pairs=3, quick="smaller").parse_args([])
    assert vars(full) == {"output": None, "rounds": 5, "pairs": 3, "quick": False}
    assert vars(_cli.make_parser("p", "d", output=None).parse_args([])) == {}
    assert vars(_cli.make_parser("p", "d", output="--json").parse_args(["--json", "x.json"])) == {"json": "x.json"}


def test_write_json_creates_the_folder_and_leaves_no_partial_file(tmp_path):
    import json

    import numpy as np

    path = tmp_path / "a" / "b" / "result.json"
    _cli.write_json(path, {"n": 3, "seconds": [0.5, 1.5], "dtype": np.dtype("float32")})
    assert json.loads(path.read_text()) == {"n": 3, "seconds": [0.5, 1.5], "dtype": "float32"}
    assert sorted(p.name for p in path.parent.iterdir()) == ["result.json"]
    with pytest.raises(TypeError):
        _cli.write_json(path, {(1, 2): 0})  # a key JSON cannot hold
    assert json.loads(path.read_text())["n"] == 3  # the earlier result is intact
    assert sorted(p.name for p in path.parent.iterdir()) == ["result.json"]


def test_the_shared_cli_examples_run():
    import doctest

    assert doctest.testmod(_cli, optionflags=doctest.ELLIPSIS).failed == 0


# --------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    data, stdout = run_overhead(
        tmp_path_factory.mktemp("bench") / "smoke.json",
        "--configs", "mlp-2", "--variants", "kg-throughput,timehistory", "--rounds", "1", "--scale", "0.2",
        "--epochs", "2,2", "--leak-steps", "200", "--import-repeats", "1", "--label", "smoke", "--async-ab", "none",
    )  # fmt: skip
    data["_stdout"] = stdout
    return data


def test_result_schema(result):
    assert result["schema"] == "keras-gpu-bench-overhead/1" and result["label"] == "smoke"
    machine = result["machine"]
    for key in ("cpu_model", "cpu_count", "usable_cpus", "tensorflow", "keras", "keras_gpu", "nvml", "load_average"):
        assert key in machine
    assert result["options"]["configs"] == ["mlp-2"] and result["budgets"] == _analysis.BUDGETS
    summary = result["configs"]["mlp-2"]["summary"]
    assert summary["config"]["replicas"] == 2 and len(summary["devices"]) == 2
    assert summary["steps_per_epoch"] == 20 and summary["epochs"] == [2, 2]
    assert set(summary["variants"]) == {"kg-throughput", "timehistory"} and summary["skipped"] == {}
    for v in summary["variants"].values():
        assert v["pairs"] == 1
        for key in ("steps_per_s", "ratio_to_bare", "direct_steady", "direct_steady_net", "batch_hook_us_per_step"):
            assert set(v[key]) == {"n", "median", "q1", "q3", "min", "max"} and v[key]["median"] is not None
        assert set(v["one_off"]) == {"first_fit", "later_fit"}
    assert {c["ok"] for c in result["checks"]} <= {True, False, None} and result["checks"]
    assert "mlp-2" in result["_stdout"] and "Budgets" in result["_stdout"]


def test_instruments_counted_every_hook_call_and_nothing_in_bare_runs(result):
    raw = result["configs"]["mlp-2"]["raw"]
    assert len(raw["pairs"]) == 2
    for pair in raw["pairs"]:
        for fit in pair["bare"]["fits"]:
            assert fit["total_hook_s"] == 0 and fit["hooks"] == {} and not fit["interposed"]
        assert pair["bare"]["threads"] == []
        run = pair["run"]
        for fit in run["fits"]:
            assert len(fit["epochs"]) == 2
            # The clocks' intervals lie within the fit and the hooks' time within the epochs.
            inside = fit["train_begin"]["wall_s"] + sum(e["cycle_s"] for e in fit["epochs"]) + fit["train_end"]["wall_s"]
            assert 0 < inside <= fit["wall_s"]
            assert sum(e["hook_s"] for e in fit["epochs"]) <= fit["total_hook_s"] + 1e-9
        key = {"timehistory": "TimeHistory", "kg-throughput": "ThroughputLogger"}[pair["variant"]]
        assert [f["hooks"][f"{key}.on_train_batch_end"]["calls"] for f in run["fits"]] == [40, 40]
        assert [sum(e["hooks"][f"{key}.on_train_batch_end"][0] for e in f["epochs"]) for f in run["fits"]] == [40, 40]


def test_self_check_agrees_with_the_probes_own_measurements(result):
    check = result["configs"]["mlp-2"]["summary"]["self_check"]
    assert check["busy_hook_calls_match"] and check["spin_thread_attributed"]
    busy = result["configs"]["mlp-2"]["raw"]["self_check"]["busy_hook"]
    assert busy["calls"] == 2 * 2 * 20  # two fits of two epochs of 20 steps
    # The timer's interval contains the hook's own timing, plus only its small per-call cost.
    assert busy["self_timed_s"] <= busy["measured_s"] <= busy["self_timed_s"] + busy["calls"] * 1e-3
    # Thread CPU read from outside agrees with the thread's own `thread_time`.
    assert abs(check["spin_thread_rel_error"]) < 0.1
    assert check["timer_floor_us_per_call"] > 0


def test_throughput_accuracy_import_and_leak_sections(result):
    accuracy = result["configs"]["mlp-2"]["summary"]["accuracy"]
    assert [a["settings"] for a in accuracy] == [{}, {"every_s": 0.25}]
    for a in accuracy:
        assert a["windows"] >= 3 and a["max_abs_rel_error"] is not None  # at least one window per epoch
    windows = result["configs"]["mlp-2"]["raw"]["accuracy"][0]["windows"]
    assert all(w["truth"] > 0 and w["to_step"] > w["from_step"] for w in windows)
    imp = result["import"]["summary"]
    assert imp["processes"] == 1 and imp["device_initialised_after_import"] == ["False"]
    leak = result["leak"]["summary"]
    for name in ("bare", "kg-default"):
        assert leak[name]["steps"] == 200 and leak[name]["python_threads_left"] == []
    assert "default_vs_bare" in leak


def test_two_worker_scenario_times_each_workers_hooks(tmp_path):
    """`mlp-2w`: one multi-worker job of two processes; each worker's hooks are timed in its own process."""
    data, _ = run_overhead(
        tmp_path / "two_workers.json",
        "--configs", "mlp-2w", "--variants", "kg-default,tb-epoch", "--rounds", "1", "--scale", "0.1",
        "--epochs", "2,2", "--leak-steps", "0", "--import-repeats", "0", "--label", "two-workers", "--no-table",
        "--async-ab", "none",
    )  # fmt: skip
    assert set(data["configs"]) == {"mlp-2w", "mlp-2w/worker1"}
    for name, task in (("mlp-2w", 0), ("mlp-2w/worker1", 1)):
        summary = data["configs"][name]["summary"]
        assert summary["devices"] == [f"/job:worker/replica:0/task:{task}/device:CPU:0"]
        assert set(summary["variants"]) == {"kg-default"}  # a peer's cost does not depend on workers
        assert summary["variants"]["kg-default"]["direct_steady"]["median"] is not None
    raw = data["configs"]["mlp-2w"]["raw"]
    for worker_raw in (raw, raw["other_workers"][0]):
        (pair,) = worker_raw["pairs"]
        calls = [f["hooks"]["StepTimeLogger.on_train_batch_end"]["calls"] for f in pair["run"]["fits"]]
        assert calls == [2 * 20, 2 * 20]  # two fits of two epochs of 20 steps, on each worker


def test_shuffled_rounds_run_each_variant_once_per_round_in_a_seeded_order():
    from benchmarks import _ab

    calls = []

    def run_one(variant, n):
        calls.append((n, variant))
        return f"{variant}{n}"

    out = _ab.shuffled_rounds(("a", "b", "c"), run_one, 4, seed=3)
    assert out == {v: [f"{v}{n}" for n in range(4)] for v in "abc"}
    assert [sorted(v for n, v in calls if n == r) for r in range(4)] == [["a", "b", "c"]] * 4
    again = []
    _ab.shuffled_rounds(("a", "b", "c"), lambda v, n: again.append((n, v)), 4, seed=3)
    assert again == calls  # the same seed, the same orders
    with pytest.raises(ValueError, match="rounds"):
        _ab.shuffled_rounds(("a",), run_one, 0)


def test_the_spread_rule_study_judges_every_triple_as_the_commands_do():
    from benchmarks.studies.spread_rule import judge
    from keras_gpu.meters.scale_runs import RunResult

    parts = {"input": 0.001, "compute": 0.002, "communication": 0.0005, "other": 0.0005}
    same = [RunResult(1, 1, 100, 0.4, 6400, parts, halves=(0.004, 0.004)) for _ in range(3)]
    assert judge([*same, same[0]])["floors"]["0.05"] == {
        "tune_helps": 0, "tune_hurts": 0, "tune_rate": 0.0, "tune_helps_rate": 0.0, "scale_causes": 0, "scale_rate": 0.0}
    # A run twice as fast in both halves is a help where it is the candidate (j: 2 of the 4 triples), and no
    # cause where it is a row (every part shrank); as a baseline run its own spread covers the others.
    fast = RunResult(1, 1, 100, 0.2, 6400, {k: v / 2 for k, v in parts.items()}, halves=(0.002, 0.002))
    judged = judge([same[0], fast, same[1], same[2]])
    assert judged["triples"] == 4
    assert (judged["floors"]["0.05"]["tune_helps"], judged["floors"]["0.05"]["scale_causes"]) == (2, 0)
