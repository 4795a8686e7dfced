"""The keras-gpu tab in a real TensorBoard, drawn by headless Chromium, over real runs of one and of two workers.

A real `tensorboard` on 127.0.0.1 serves a folder holding five keras-gpu log
dirs: `keras-gpu demo`'s run (one worker, two CPU replicas, traced), a
two-worker `keras-gpu launch` job whose worker 1 sleeps 20 ms after every
step (the straggler), `studies`: the breakdown of a recorded H200 trace
written as the callbacks write it, with a scaling and a tuning study beside
it, and two generated jobs (`benchmarks.studies.straggler_scale.write_log_dir`,
the chief's cluster view as `StepTimeLogger` logs it): `big`, 1,024 workers
of which only the chief writes a run (the default above 16 workers), and
`twenty`, 20 workers each writing its own run. Chromium loads TensorBoard's
page on the tab and the test reads the drawn page: every run, its numbers as
`keras-gpu report --json` gives them, the charts drawn with their data, the
verdict and the slowest workers.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from tests._tensorboard import tensorboard_server
from tests._util import REPO, subprocess_env

pytestmark = pytest.mark.slow

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_workers", "cluster_worker.py")

# Every element of the page, shadow roots included, and the tab's own document inside TensorBoard's iframe.
_PRELUDE = """
const deepAll = (root) => {
  const out = [];
  const walk = (r) => { for (const el of r.querySelectorAll('*')) { out.push(el); if (el.shadowRoot) walk(el.shadowRoot); } };
  walk(root);
  return out;
};
const tab = () => { const f = deepAll(document).find((e) => e.tagName === 'IFRAME' && e.src.includes('name=keras_gpu'));
                    return f && f.contentDocument; };
"""

_READY = """(() => { const d = tab(); const state = d && d.body && d.body.dataset.state;
  return {ready: state === 'drawn' || state === 'error', state,
          sections: d ? [...d.querySelectorAll('.log-dir')].map((s) => [s.dataset.logDir, s.dataset.state]) : []}; })()"""

# More than four log dirs: the tab opens the first; open the others as a user would, each drawn when opened.
_OPEN_ALL = "tab().querySelectorAll('details.log-dir').forEach((s) => { s.open = true; }), true"
_ALL_DRAWN = """(() => { const s = [...tab().querySelectorAll('.log-dir')].map((x) => [x.dataset.logDir, x.dataset.state]);
  return {ready: s.every(([, state]) => state === 'drawn' || state === 'error'), sections: s}; })()"""

# What the page shows of each log dir, as data (every number is the raw value of the element's data-value).
_PAGE = """(() => {
  const d = tab();
  const num = (e) => (e.dataset.value === '' ? null : Number(e.dataset.value));
  return [...d.querySelectorAll('.log-dir')].map((s) => ({
    name: s.dataset.logDir, state: s.dataset.state, text: s.innerText,
    headline: [...s.querySelectorAll('table[data-table=headline] tbody tr')].map((tr) => ({
      run: tr.dataset.run, cells: [...tr.querySelectorAll('td[data-key]')].map((td) => [td.dataset.key, num(td)])})),
    bars: [...s.querySelectorAll('svg[data-chart=time-per-worker] rect')].map((r) =>
      [r.parentNode.dataset.run, r.dataset.part, num(r)]),
    breakdowns: s.querySelectorAll('svg[data-chart=time-per-breakdown] rect').length,
    verdict: (s.querySelector('p.verdict[data-verdict]') || {dataset: {}}).dataset.verdict || null,
    heatmap: [...s.querySelectorAll('svg[data-chart=cluster-heatmap] rect.cell')].map((r) =>
      [Number(r.dataset.worker), Number(r.dataset.gather), num(r)]),
    memory: [...s.querySelectorAll('svg[data-chart=memory] path.line')].map((p) => [p.dataset.name, Number(p.dataset.points)]),
    hints: [...s.querySelectorAll('ul.hints li')].map((li) => li.textContent),
    kernels: [...s.querySelectorAll('svg[data-chart=kernel-classes] rect')].map((r) => [r.dataset.class, num(r)]),
    scale: [...s.querySelectorAll('svg[data-chart=scale-speedup] path.line')].map((p) => [p.dataset.name, Number(p.dataset.points)]),
    scaleRows: [...s.querySelectorAll('table[data-table=scale] td[data-key=speedup]')].map(num),
    tuneRows: [...s.querySelectorAll('table[data-table=tune] td[data-key=samples_per_sec]')].map(num),
    notes: [...s.querySelectorAll('ul.notes li')].map((li) => li.textContent),
    facts: [...s.querySelectorAll('table[data-table=verdict] [data-key]')].map((e) => [e.dataset.key, e.dataset.json]),
    slowest: [...s.querySelectorAll('table[data-table=slowest-workers] tbody tr')].map((tr) =>
      Object.fromEntries([...tr.querySelectorAll('td[data-key]')].map((td) => [td.dataset.key, td.dataset.json]))),
    standing: [...s.querySelectorAll('svg[data-chart=cluster-standing] rect.cell')].map((r) =>
      [Number(r.dataset.worker), Number(r.dataset.gather), r.dataset.out]),
    scores: [...s.querySelectorAll('svg[data-chart=cluster-score] path.line')].map((p) => [p.dataset.name, Number(p.dataset.points)]),
    rest: (s.querySelector('section[data-part=headline] details.more summary') || {}).textContent || null,
    cluster_rows: s.querySelectorAll('section[data-part=cluster] tr, section[data-part=cluster] rect').length,
  }));
})()"""

_PARTS = ("input", "compute", "communication", "transfer", "other")


def _chromium() -> str:
    sys.path.insert(0, str(REPO))
    from tools.chromium import find_chromium

    try:
        return find_chromium()
    except FileNotFoundError as exc:
        if os.environ.get("KERAS_GPU_CHROMIUM_REQUIRED"):  # CI (.ci/run) installs it: the test must run there
            raise
        pytest.skip(f"{exc} (CI installs it: .ci/run)")


def _run(cmd: list[str], timeout: float) -> None:
    proc = subprocess.run(cmd, env=subprocess_env(), capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """TensorBoard's folder: `single` (keras-gpu demo) and `two` (a two-worker job, worker 1 the straggler)."""
    chromium = _chromium()
    root = tmp_path_factory.mktemp("tab")
    out = tmp_path_factory.mktemp("tab-out")
    cli = [sys.executable, "-m", "keras_gpu.cli"]
    _run([*cli, "demo", "--cpu-replicas", "2", "--epochs", "2", "--samples", "1024", "--profile-every-s", "1",
          "--log-dir", str(root / "single")], timeout=300)
    _run([*cli, "launch", "-n", "2", WORKER, str(root / "two"), "host-20ms", str(out)], timeout=420)
    _studies(root / "studies")
    _generated(root)
    return root, chromium


def _generated(root) -> None:
    """`big`: the chief's run of a 1,024-worker fit of 8 gathers, worker 513 slowed +20% in compute (only the
    chief writes a run above 16 workers); `twenty`: 20 workers, each writing its run, worker 13 slowed."""
    sys.path.insert(0, str(REPO))
    from benchmarks.studies.straggler_scale import write_log_dir

    write_log_dir(str(root / "big"), 1024, straggler=513, seed=1)
    write_log_dir(str(root / "twenty"), 20, straggler=13, gathers=4, worker_runs=True, seed=2)


def _studies(log_dir) -> None:
    """A run with the breakdown of a recorded H200 trace (kernel classes), and a scale and a tune study beside it."""
    from keras_gpu.meters import step_time as steptime
    from keras_gpu.meters import xspace
    from keras_gpu.meters.scale_table import ROW_KEYS as SCALE_KEYS
    from keras_gpu.meters.tune_table import ROW_KEYS as TUNE_KEYS
    from keras_gpu.output import tags as T
    from keras_gpu.output.step_time_tags import step_time_values
    from keras_gpu.output.step_time_text import kernels_markdown
    from keras_gpu.output.writer import SummaryWriter

    step = steptime.analyze(xspace.load(str(REPO / "tests" / "data" / "h200_jax_transformer_bf16.xplane.pb")),
                            steps=None, num_replicas=1)
    writer = SummaryWriter(str(log_dir / "train"))
    writer.scalars({T.SAMPLES_PER_SEC.name(): 900.0, T.STEPS_PER_SEC.name(): 7.0, T.MFU.name(): 0.41,
                    T.HOST_RSS.name(): 2e9}, step=50)
    writer.scalars(step_time_values(step, ["0_GPU_0"]), step=100)
    writer.text(T.STEP_KERNELS.name(), kernels_markdown(step), step=100)
    writer.close()
    scale = [dict.fromkeys(SCALE_KEYS) | {"devices": f"{n} GPU", "workers": 1, "replicas": n, "device": "GPU",
                                          "samples_per_sec": 1000.0 * n * e, "speedup": n * e, "efficiency": e,
                                          "cause": "" if n == 1 else "communication"}
             for n, e in ((1, 1.0), (2, 0.9), (4, 0.8))]
    os.makedirs(log_dir / "scale")
    (log_dir / "scale" / "scale.json").write_text(json.dumps({"rows": scale, "baseline_spread": 0.01}))
    tune = [dict.fromkeys(TUNE_KEYS) | {"change": change, "status": "measured", "samples_per_sec": rate,
                                        "speedup": rate / 1000.0, "helps": helps}
            for change, rate, helps in (("baseline", 1000.0, 0), ("steps_per_execution=16", 1500.0, 1))]
    os.makedirs(log_dir / "tune")
    (log_dir / "tune" / "tune.json").write_text(json.dumps({"rows": tune, "skipped": [], "verdict": "spe16 helps."}))


def _report_json(log_dir) -> dict:
    proc = subprocess.run([sys.executable, "-m", "keras_gpu.cli", "report", str(log_dir), "--json"],
                          env=subprocess_env(), capture_output=True, text=True, timeout=120, check=True)
    return json.loads(proc.stdout)


def _at(data: dict, key: str):
    for part in key.split("."):
        if data is None:
            return None
        data = data.get(part)
    return data


def _listed(server) -> dict | None:
    listing = server.get("/data/plugins_listing")
    if "keras_gpu" not in listing:
        pytest.skip("TensorBoard lists no keras_gpu plugin: the installed keras-gpu predates its entry point "
                    "(pip install -e . again)")
    return listing["keras_gpu"]["enabled"] and listing["keras_gpu"]


def test_the_tab_draws_every_run_with_the_report_numbers(runs, tmp_path):
    from tools.chromium import Browser

    root, chromium = runs
    reports = {name: _report_json(root / name) for name in ("big", "single", "studies", "twenty", "two")}
    with tensorboard_server(str(root)) as tb:
        entry = tb.wait_for(_listed, timeout=120)
        assert entry["tab_name"] == "keras-gpu" and entry["loading_mechanism"]["type"] == "IFRAME"
        for name, printed in reports.items():  # the data route gives what `keras-gpu report --json` prints
            assert tb.get("/data/plugin/keras_gpu/report", log_dir=name) == printed
        with Browser(chromium, str(tmp_path / "profile"), width=1000, height=1200, prelude=_PRELUDE) as browser:
            browser.open(f"{tb.base_url}/#keras_gpu", timeout=120)
            state = browser.wait_until(_READY, 180, "the keras-gpu tab", settle=0.0)
            assert state["state"] == "drawn", state
            browser.evaluate(_OPEN_ALL)
            browser.wait_until(_ALL_DRAWN, 180, "every log dir of the keras-gpu tab", settle=0.0)
            assert browser.evaluate(
                "deepAll(document).some((e) => e.children.length === 0 && e.textContent.trim() === 'keras-gpu')"
            ), "TensorBoard's tab bar shows no keras-gpu tab"
            page = {s["name"]: s for s in browser.evaluate(_PAGE)}
    assert sorted(page) == ["big", "single", "studies", "twenty", "two"]
    assert all(s["state"] == "drawn" for s in page.values())
    for name in ("single", "studies", "two"):
        _check_numbers(page[name], reports[name])
    for name in ("big", "twenty", "two"):
        _check_cluster(page[name], reports[name])
    single, two = page["single"], page["two"]
    # One worker: its traces drawn per breakdown, no cluster view, and said so.
    assert single["breakdowns"] > 0 and single["verdict"] is None and not single["heatmap"]
    assert "a single worker: no cluster view." in single["notes"]
    # Two workers: the verdict names worker 1, the matrix has both workers at every gather.
    assert two["verdict"] == reports["two"]["cluster"]["sentence"]
    assert two["verdict"].startswith("worker 1 is the straggler")
    gathers = reports["two"]["cluster"]["gathers"]
    assert sorted({w for w, _, _ in two["heatmap"]}) == [0, 1] and len(two["heatmap"]) == 2 * gathers
    assert all(v is not None and v > 0 for _, _, v in two["heatmap"])
    # A GPU trace's kernel classes, the scaling study's curve against linear, the tuning study's rows.
    studies, report = page["studies"], reports["studies"]
    assert studies["kernels"] == [[name, k["sec_per_step"]] for name, k in
                                  report["runs"][0]["step_time"]["kernel_classes"].items()]
    assert len(studies["kernels"]) >= 3 and not single["kernels"]
    assert studies["scale"] == [["measured speed-up", 3], ["linear", 3]]
    assert studies["scaleRows"] == [r["speedup"] for r in report["scale"]]
    assert studies["tuneRows"] == [r["samples_per_sec"] for r in report["tune"]["rows"]]
    # 1,024 workers, the chief's run alone: the verdict and the slowest workers as the report gives them, a few
    # rows drawn from the chief's summary, never a row per worker.
    big, report = page["big"], reports["big"]
    assert big["verdict"].startswith("worker 513 is the straggler: its compute is ")
    assert [row["run"] for row in big["headline"]] == ["train"] and big["rest"] is None
    assert not big["heatmap"] and big["standing"] and big["cluster_rows"] < 120
    assert {w for w, _, _ in big["standing"]} == {s["worker"] for s in report["cluster"]["slowest_workers"]}
    assert [out for w, _, out in big["standing"] if w == 513] == ["true"] * 8  # standing out at every gather
    assert [name for name, _ in big["scores"]] == ["the slowest worker's score", "worker 513's score (the straggler)",
                                                  "threshold"]
    # 20 workers, each writing its run: the headline lists the runs the report lists, in worker order, the others
    # behind a toggle; worker 2 comes before worker 10 everywhere.
    twenty, report = page["twenty"], reports["twenty"]
    from keras_gpu.output.reader import read_report
    from keras_gpu.output.runs_shown import shown_runs

    listed, hidden = shown_runs(read_report(str(root / "twenty")))
    assert [row["run"] for row in twenty["headline"]] == [r.run for r in listed] and hidden > 0
    assert twenty["rest"].startswith(f"the other {hidden} runs")
    assert [r["worker"] for r in report["runs"]] == list(range(20))
    worker = {r["run"]: r["worker"] for r in report["runs"]}
    drawn = [worker[row["run"]] for row in twenty["headline"]]
    assert drawn == sorted(drawn) and 13 in drawn


def _check_cluster(section: dict, report: dict) -> None:
    """The verdict, its facts and the slowest workers' table, each value as `keras-gpu report --json` gives it."""
    cluster = report["cluster"]
    assert section["verdict"] == cluster["sentence"]
    facts = {key: json.loads(value) for key, value in section["facts"]}
    assert len(facts) == len(section["facts"])  # each field once
    for key, value in facts.items():
        assert value == cluster[key], key
    always = {"straggler", "gathers", "imbalance", "more_stragglers", "slowed_worker", "cluster_slowdown",
              "slowest_score", "threshold", "workers_out", "workers_reporting", "straggler_so_far"}
    named = {"clear_gathers", "part", "part_sec", "part_median_sec"} if cluster["straggler"] is not None else set()
    assert always | named <= set(facts), sorted(always | named - set(facts))
    shown = [{key: json.loads(value) for key, value in row.items()} for row in section["slowest"]]
    assert shown == cluster["slowest_workers"] and shown


def _check_numbers(section: dict, report: dict) -> None:
    """Every run of the report in the headline, each number as the report gives it; the step's parts drawn."""
    assert [row["run"] for row in section["headline"]] == [r["run"] for r in report["runs"]]
    for row, run in zip(section["headline"], report["runs"]):
        for key, value in row["cells"]:
            expected = _at(run, key)
            if isinstance(expected, (int, float)) and math.isfinite(expected):
                assert value == expected, (run["label"], key)
            else:
                assert value is None, (run["label"], key)
        assert dict(row["cells"])["throughput.samples_per_sec.mean"] > 0
    drawn = {(run, part): value for run, part, value in section["bars"]}
    for run in report["runs"]:
        for part in _PARTS:
            value = run["step_time"][f"{part}_sec"]
            if value:
                assert drawn[(run["run"], part)] == value, (run["label"], part)
    assert {run for run, _ in drawn} == {r["run"] for r in report["runs"] if r["step_time"]}
    assert section["memory"] and all(points >= 1 for _, points in section["memory"])
    assert section["hints"] == report["hints"]
