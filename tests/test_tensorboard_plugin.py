"""The keras-gpu tab's plugin without a browser: its routes, the log dirs it finds, and what it says is missing."""

from __future__ import annotations

import json
import math
import os
import random
import sys

import pytest

from keras_gpu.output import tags as T
from keras_gpu.output import writer as _writer
from keras_gpu.output.log_dir import report_json
from keras_gpu.tensorboard import series as _series
from keras_gpu.tensorboard.log_dirs import KerasGpuFiles, find_log_dirs
from keras_gpu.tensorboard.plugin import KerasGpuPlugin
from keras_gpu.tensorboard.tab_data import TabCache

GATHERS = (10, 20, 30)
#: Per worker, per gather: (input, compute, communication, other) seconds per step. Worker 1 is slow in compute.
WINDOWS = {
    0: [(0.001, 0.040, 0.020, 0.004), (0.001, 0.041, 0.021, 0.004), (0.001, 0.039, 0.022, 0.004)],
    1: [(0.001, 0.058, 0.002, 0.004), (0.001, 0.060, 0.002, 0.004), (0.001, 0.061, 0.002, 0.004)],
}


def _write(path, points):
    """`points`: `[(step, {tag: value})]`, written the way the callbacks write them."""
    writer = _writer.SummaryWriter(path)
    for step, values in points:
        assert writer.scalars(values, step=step)
    writer.close()


def _window(inp, comp, comm, other):
    return {T.STEP_SEC.name(): inp + comp + comm + other, T.STEP_INPUT_SEC.name(): inp, T.STEP_COMPUTE_SEC.name(): comp,
            T.STEP_COMMUNICATION_SEC.name(): comm, T.STEP_TRANSFER_SEC.name(): 0.0, T.STEP_OTHER_SEC.name(): other,
            T.STEP_TRACED_STEPS.name(): 10.0}


def _run(worker):
    points = [(s, {T.SAMPLES_PER_SEC.name(): 1000.0 + s, T.STEPS_PER_SEC.name(): 10.0,
                   T.TFLOPS_PER_SEC.name(): 1.5, T.HOST_RSS.name(): 1e9 + s * 1e6,
                   T.ALLOC_CURRENT.name(device="GPU_0"): 2e9, T.ALLOC_PEAK.name(device="GPU_0"): 3e9 + s * 2**20,
                   T.GPU_PROCESS_MEMORY.name(gpu="0"): 4e9, T.GPU_UTILIZATION.name(gpu="0"): 80.0})
              for s in (5, 15, 25)]
    points += [(g, _window(*w)) for g, w in zip(GATHERS, WINDOWS[worker])]
    if worker == 0:
        busy = {k: [w[0] + w[1] + w[3] for w in WINDOWS[k]] for k in WINDOWS}
        for i, g in enumerate(GATHERS):
            points.append((g, {
                T.CLUSTER_SLOWEST_WORKER.name(): 1.0, T.CLUSTER_IMBALANCE.name(): 0.25, T.CLUSTER_PART.name(): 0.0,
                T.CLUSTER_PART_SEC.name(): WINDOWS[1][i][1], T.CLUSTER_PART_MEDIAN_SEC.name(): WINDOWS[0][i][1],
                T.CLUSTER_EXCESS_SEC.name(): busy[1][i] - busy[0][i], T.CLUSTER_SPREAD_SEC.name(): 0.0,
                T.CLUSTER_WORKERS_REPORTING.name(): 2.0, T.CLUSTER_SLOWDOWN.name(): 1.05,
                T.CLUSTER_SLOWDOWN_WORKER.name(): 1.0, T.CLUSTER_BUSY_MIN.name(): busy[0][i],
                T.CLUSTER_BUSY_MEDIAN.name(): (busy[0][i] + busy[1][i]) / 2, T.CLUSTER_BUSY_MAX.name(): busy[1][i],
            }))
    return sorted(points, key=lambda p: p[0])


@pytest.fixture()
def root(tmp_path):
    """TensorBoard's --logdir: a two-worker job `job`, and another program's run `plain`."""
    _write(str(tmp_path / "job" / "train"), _run(0))
    _write(str(tmp_path / "job" / "worker_1" / "train"), _run(1))
    _write(str(tmp_path / "plain" / "train"), [(1, {"epoch_loss": 0.5})])
    return tmp_path


def _plugin(logdir):
    from tensorboard.plugins import base_plugin

    return KerasGpuPlugin(base_plugin.TBContext(logdir=str(logdir)))


def _get(plugin, route, **params):
    from werkzeug.test import Client
    from werkzeug.wrappers import Response

    response = Client(plugin.get_plugin_apps()[route], Response).get(route, query_string=params)
    body = response.get_data(as_text=True)
    if response.mimetype == "application/json":
        return response.status_code, json.loads(body, parse_constant=_no_constant)
    return response.status_code, body


def _no_constant(name):
    raise ValueError(f"not JSON: {name}")


def test_the_report_route_returns_what_report_json_prints(root, capsys):
    from keras_gpu.cli.main import main

    plugin = _plugin(root)
    code, listing = _get(plugin, "/log_dirs")
    assert code == 200 and [d["name"] for d in listing["log_dirs"]] == ["job"]
    code, report = _get(plugin, "/report", log_dir="job")
    assert code == 200
    assert main(["report", str(root / "job"), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out, parse_constant=_no_constant)
    assert report == printed == report_json(str(root / "job"))
    assert [r["label"] for r in report["runs"]] == ["chief", "worker 1"]
    assert report["cluster"]["straggler"] == 1 and report["cluster"]["sentence"].startswith("worker 1 is the straggler")


def test_the_view_route_holds_the_logged_points(root):
    code, view = _get(_plugin(root), "/view", log_dir="job")
    assert code == 200 and view["version"]
    chief = view["series"]["runs"]["train"]
    lines = {line["name"]: line["points"] for line in chief["memory"]}
    assert lines["allocator in use, GPU_0"] == [[5, 2e9], [15, 2e9], [25, 2e9]]
    assert lines["allocator peak, GPU_0"] == [[5, 3e9 + 5 * 2**20], [15, 3e9 + 15 * 2**20], [25, 3e9 + 25 * 2**20]]
    assert lines["GPU 0, this process (NVML)"] == [[5, 4e9], [15, 4e9], [25, 4e9]]
    assert lines["host RSS"] == [[5, 1e9 + 5e6], [15, 1e9 + 15e6], [25, 1e9 + 25e6]]
    steps = chief["steps"]
    assert steps["steps"] == list(GATHERS)
    assert steps["parts"]["compute"] == pytest.approx([w[1] for w in WINDOWS[0]])
    cluster = view["series"]["cluster"]
    assert cluster["steps"] == list(GATHERS) and cluster["slowest_worker"] == [1, 1, 1]
    assert cluster["threshold"] == cluster["straggler"] == [None] * 3  # not logged
    assert cluster["standing"] is None  # no table of the slowest workers logged
    matrix = cluster["matrix"]
    assert matrix["shown"] == "all" and [r["worker"] for r in matrix["rows"]] == [0, 1]
    for row in matrix["rows"]:  # busy: input + compute + host, the others' waits left out
        assert row["busy"] == pytest.approx([w[0] + w[1] + w[3] for w in WINDOWS[row["worker"]]], rel=1e-6)
        assert row["best_sec"] == pytest.approx(min(row["busy"]))
        assert row["last_sec"] == pytest.approx(row["busy"][-1])
    slow = matrix["rows"][1]
    assert all(r > 1.0 for r in slow["ratio"]) and slow["score"] > 1.0
    assert slow["slowdown"] == pytest.approx((0.001 + 0.061 + 0.004) / (0.001 + 0.058 + 0.004), rel=1e-6)
    assert view["notes"]["cluster"] == []  # every worker's run is there
    assert view["notes"]["headline"] == [  # one line for the runs that share a reason
        "chief and worker 1: no MFU: keras-gpu knows no peak FLOP/s for this GPU (pass peak_flops= to "
        "keras_gpu.callbacks())."
    ]


def test_log_dirs_are_found_where_the_callbacks_and_the_studies_write(tmp_path):
    _write(str(tmp_path / "a" / "train"), [(1, {T.SAMPLES_PER_SEC.name(): 1.0})])
    _write(str(tmp_path / "deep" / "b" / "worker_3" / "train"), [(1, {T.HOST_RSS.name(): 1.0})])
    _write(str(tmp_path / "other" / "validation"), [(1, {T.SAMPLES_PER_SEC.name(): 1.0})])  # not keras-gpu's shape
    os.makedirs(tmp_path / "study" / "tune")
    (tmp_path / "study" / "tune" / "tune.json").write_text("{}")
    _write(str(tmp_path / "run10" / "train"), [(1, {T.SAMPLES_PER_SEC.name(): 1.0})])
    _write(str(tmp_path / "run2" / "train"), [(1, {T.SAMPLES_PER_SEC.name(): 1.0})])
    assert find_log_dirs(str(tmp_path)) == ["a", os.path.join("deep", "b"), "run2", "run10", "study"]
    assert find_log_dirs(str(tmp_path / "a")) == ["."]  # TensorBoard started on the log dir itself
    assert find_log_dirs(str(tmp_path / "a" / "train")) == ["."]  # ...or on its run
    assert find_log_dirs(str(tmp_path / "nope")) == [] and find_log_dirs("") == []


def test_the_tab_is_active_only_where_keras_gpu_wrote(tmp_path):
    _write(str(tmp_path / "plain" / "train"), [(1, {"epoch_loss": 0.5}), (2, {"epoch_loss": 0.4})])
    plugin = _plugin(tmp_path)
    assert plugin.is_active() is False
    _code, listing = _get(plugin, "/log_dirs")
    assert listing["log_dirs"] == [] and "holds no keras-gpu log directory" in listing["why_none"]
    _write(str(tmp_path / "plain" / "train"), [(3, {T.SAMPLES_PER_SEC.name(): 1.0})])  # a second file, keras-gpu's
    assert plugin.is_active() is True
    assert plugin.frontend_metadata().es_module_path == "/index.js"


def test_an_unknown_log_dir_is_not_served(root):
    plugin = _plugin(root)
    for name in ("plain", "../job", "/etc", "job/train", ""):
        code, body = _get(plugin, "/report", log_dir=name)
        assert code == 404 and "No keras-gpu log directory" in body, name


def test_the_frontend_is_served_by_the_plugin(root):
    plugin = _plugin(root)
    code, js = _get(plugin, "/index.js")
    assert code == 200 and "export async function render()" in js
    assert "http://" not in js.replace("http://www.w3.org/2000/svg", "") and "https://" not in js  # nothing fetched
    code, css = _get(plugin, "/style.css")
    assert code == 200 and "svg.chart" in css


def test_partial_data_is_shown_and_what_is_missing_is_said(root):
    # A third worker whose event file is still empty, and the chief's event file cut in its last record.
    os.makedirs(root / "job" / "worker_2" / "train")
    (root / "job" / "worker_2" / "train" / "events.out.tfevents.1.host.2.0.v2").write_bytes(b"")
    (chief_file,) = (root / "job" / "train").glob("*.tfevents.*")
    data = chief_file.read_bytes()
    chief_file.write_bytes(data[:-7])
    _write(str(root / "job" / "worker_3" / "train"), [(1, {T.HOST_RSS.name(): 1e9})])  # no step yet
    code, view = _get(_plugin(root), "/view", log_dir="job")
    assert code == 200
    runs = " ".join(view["notes"]["runs"])
    assert f"the last record of {chief_file.name} is incomplete" in runs
    assert f"{os.path.join('worker_2', 'train')}: no keras-gpu data yet" in runs
    assert "worker 3: no throughput window yet" in runs
    code, report = _get(_plugin(root), "/report", log_dir="job")
    assert [r["label"] for r in report["runs"]] == ["chief", "worker 1", "worker 3"]
    assert report["runs"][0]["throughput"]["samples_per_sec"]["points"] == 3  # what came before the cut


def test_report_json_prints_null_for_a_number_not_measured(tmp_path, capsys):
    from keras_gpu.cli.main import main

    _write(str(tmp_path / "train"), [(1, {T.SAMPLES_PER_SEC.name(): math.nan})])
    assert main(["report", str(tmp_path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out, parse_constant=_no_constant)  # strict JSON: no NaN
    assert data["runs"][0]["throughput"]["samples_per_sec"]["mean"] is None


def test_the_matrix_keeps_the_slowest_few_of_a_thousand_workers():
    rng = random.Random(0)
    gathers = list(range(10, 130, 10))
    busy = {w: (f"worker {w}", {g: 0.010 * (1 + rng.gauss(0, 0.03)) for g in gathers}) for w in range(1000)}
    for w, factor in ((737, 1.3), (12, 1.2)):
        busy[w] = (f"worker {w}", {g: v * factor for g, v in busy[w][1].items()})
    busy[5][1][50] = 0.05  # one hiccup: not a slow worker
    m = _series.matrix(gathers, busy)
    assert m["shown"] == "slowest" and m["workers"] == 1000 and len(m["rows"]) == _series.SLOWEST_FEW
    assert [r["worker"] for r in m["rows"][:2]] == [737, 12]
    assert all(len(r["busy"]) == len(gathers) for r in m["rows"])
    assert _series.matrix(gathers, {0: ("chief", dict.fromkeys(gathers, 0.01))}) is None  # one worker: no matrix
    # The workers the report names are kept, first and in its order, however their busy time ranks them.
    pinned = _series.matrix(gathers, busy, named=[400, 12, 737])
    assert [r["worker"] for r in pinned["rows"][:3]] == [400, 12, 737] and len(pinned["rows"]) == _series.SLOWEST_FEW
    assert len({r["worker"] for r in pinned["rows"]}) == _series.SLOWEST_FEW


def test_a_chief_only_log_dir_of_1024_workers_draws_the_reports_slowest_workers(tmp_path):
    from benchmarks.studies.straggler_scale import write_log_dir
    from keras_gpu.meters.cluster_view import score_threshold
    from keras_gpu.tensorboard.tab_data import read_tab

    write_log_dir(str(tmp_path / "job"), 1024, straggler=513, seed=1)  # the chief's run, as the callbacks write it
    tab = read_tab(str(tmp_path / "job"))
    report, cluster = tab.report["cluster"], tab.view["series"]["cluster"]
    assert tab.report == report_json(str(tmp_path / "job")) and tab.view["shown_runs"] == ["train"]
    assert (report["straggler"], report["gathers"]) == (513, 8) and cluster["matrix"] is None
    assert cluster["threshold"] == pytest.approx([score_threshold(1024)] * 8)
    assert cluster["straggler"][-1] == report["straggler_so_far"] == 513
    assert cluster["slowest_score"][-1] == pytest.approx(report["slowest_score"])
    # A few rows at 1,024 workers: the report's slowest workers, in its order, at every gather.
    stand = cluster["standing"]
    assert stand["workers"] == [s["worker"] for s in report["slowest_workers"]] and len(stand["workers"]) <= 8
    assert stand["gathers"] == cluster["steps"] and all(len(row) == 8 for row in stand["score"])
    for k, outs in zip(stand["workers"], stand["out"]):
        (ranked,) = [s for s in report["slowest_workers"] if s["worker"] == k]
        assert sum(o is True for o in outs) == ranked["clear_gathers"]
        assert sum(o is not None for o in outs) == ranked["listed_gathers"]
    assert stand["workers"][0] == 513 and all(v > score_threshold(1024) for v in stand["score"][0])  # at every gather
    assert tab.view["notes"]["cluster"][0].startswith("only the chief wrote a run")


def test_the_tab_lists_first_the_runs_the_report_lists(tmp_path):
    from benchmarks.studies.straggler_scale import write_log_dir
    from keras_gpu.output.reader import read_report
    from keras_gpu.output.runs_shown import shown_runs
    from keras_gpu.tensorboard.tab_data import read_tab

    write_log_dir(str(tmp_path / "job"), 20, straggler=13, gathers=4, worker_runs=True, seed=2)
    tab = read_tab(str(tmp_path / "job"))
    shown, hidden = shown_runs(read_report(str(tmp_path / "job")))
    assert hidden > 0 and tab.view["shown_runs"] == [r.run for r in shown]
    assert tab.view["shown_runs"][0] == "train" and os.path.join("worker_13", "train") in tab.view["shown_runs"]
    workers = [r["worker"] for r in tab.report["runs"]]
    assert workers == list(range(20))  # worker 2 before worker 10
    # Twenty runs, one reason: one line, not twenty.
    (line,) = tab.view["notes"]["headline"]
    assert line.startswith("chief, worker 1, worker 2 and 17 more runs: no TFLOP/s nor MFU")
    assert tab.view["notes"]["cluster"][0].startswith("the workers' runs hold no step-time breakdown")


def test_long_series_are_thinned_keeping_their_peaks():
    points = [(s, 1.0) for s in range(1, 1001)]
    points[555] = (556, 9.0)
    thinned = _series.thin(points, 100)
    assert len(thinned) == 100 and max(v for _, v in thinned) == 9.0 and thinned[-1][0] == 1000


def test_the_cache_reads_a_log_dir_again_only_after_it_changed(root):
    cache = TabCache()
    first = cache.get(str(root / "job"))
    assert cache.get(str(root / "job")) is first
    _write(str(root / "job" / "worker_1" / "train"), [(40, {T.SAMPLES_PER_SEC.name(): 5.0})])
    second = cache.get(str(root / "job"))
    assert second is not first and second.version != first.version


def test_a_file_found_to_hold_keras_gpu_data_is_not_read_again(tmp_path, monkeypatch):
    _write(str(tmp_path / "train"), [(1, {T.SAMPLES_PER_SEC.name(): 1.0})])
    (path,) = (tmp_path / "train").glob("*.tfevents.*")
    files = KerasGpuFiles()
    assert files.holds(str(path))
    monkeypatch.setattr("keras_gpu.tensorboard.log_dirs.holds_keras_gpu_data", lambda p: pytest.fail("read again"))
    assert files.holds(str(path))


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib (Python 3.11) reads pyproject.toml")
def test_the_entry_point_and_the_frontend_ship_with_the_package():
    from importlib.metadata import EntryPoint

    import tomllib

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)
    (value,) = project["project"]["entry-points"]["tensorboard_plugins"].values()
    assert EntryPoint("keras_gpu", value, "tensorboard_plugins").load() is KerasGpuPlugin
    globs = project["tool"]["setuptools"]["package-data"]["keras_gpu.tensorboard"]
    static = os.path.join(root, "keras_gpu", "tensorboard", "static")
    assert sorted(os.listdir(static)) == ["index.js", "style.css"] and {"static/*.js", "static/*.css"} <= set(globs)


def _study_files(log_dir):
    from keras_gpu.meters.scale_table import ROW_KEYS as SCALE_KEYS
    from keras_gpu.meters.tune_table import ROW_KEYS as TUNE_KEYS

    os.makedirs(log_dir / "scale")
    row = dict.fromkeys(SCALE_KEYS) | {"devices": "1 CPU", "workers": 1, "replicas": 1, "samples_per_sec": 10.0,
                                       "speedup": 1.0, "efficiency": 1.0, "cause": ""}
    (log_dir / "scale" / "scale.json").write_text(json.dumps({"rows": [row]}))
    os.makedirs(log_dir / "tune")
    tune = dict.fromkeys(TUNE_KEYS) | {"change": "baseline", "status": "measured", "samples_per_sec": 10.0, "speedup": 1.0}
    (log_dir / "tune" / "tune.json").write_text(json.dumps({"rows": [tune], "skipped": [], "verdict": "Nothing helps."}))


def test_report_shows_the_studies_alone_and_beside_the_runs(root, tmp_path, capsys):
    from keras_gpu.cli.main import main

    studies = tmp_path / "studies"
    _study_files(studies)
    assert main(["report", str(studies), "--json"]) == 0
    alone = json.loads(capsys.readouterr().out)
    assert sorted(alone) == ["scale", "tune"]  # no run: the studies stand for the report
    assert main(["report", str(studies)]) == 0
    out = capsys.readouterr().out
    assert "scaling study" in out and "Nothing helps." in out and "No keras-gpu data" not in out
    _study_files(root / "job")
    assert main(["report", str(root / "job"), "--json"]) == 0
    both = json.loads(capsys.readouterr().out)
    assert {"runs", "cluster", "hints", "scale", "tune"} <= set(both) and len(both["runs"]) == 2
    assert main(["report", str(tmp_path / "nothing")]) == 2
    assert "No such log directory" in capsys.readouterr().err
