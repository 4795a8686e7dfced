"""The keras-gpu tab in a real TensorBoard, drawn by headless Chromium, over real runs of one and of two workers.

A real `tensorboard` on 127.0.0.1 serves a folder holding two keras-gpu log
dirs: `keras-gpu demo`'s run (one worker, two CPU replicas, traced) and a
two-worker `keras-gpu launch` job whose worker 1 sleeps after every step (the
straggler). Chromium loads TensorBoard's page on the tab and the test reads
the drawn page: every run, its numbers as `keras-gpu report --json` gives
them, the charts drawn with their data, the verdict.
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
    notes: [...s.querySelectorAll('ul.notes li')].map((li) => li.textContent),
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
    _run([*cli, "launch", "-n", "2", WORKER, str(root / "two"), "host", str(out)], timeout=420)
    return root, chromium


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
    reports = {name: _report_json(root / name) for name in ("single", "two")}
    with tensorboard_server(str(root)) as tb:
        entry = tb.wait_for(_listed, timeout=120)
        assert entry["tab_name"] == "keras-gpu" and entry["loading_mechanism"]["type"] == "IFRAME"
        for name, printed in reports.items():  # the data route gives what `keras-gpu report --json` prints
            assert tb.get("/data/plugin/keras_gpu/report", log_dir=name) == printed
        with Browser(chromium, str(tmp_path / "profile"), width=1000, height=1200, prelude=_PRELUDE) as browser:
            browser.open(f"{tb.base_url}/#keras_gpu", timeout=120)
            state = browser.wait_until(_READY, 180, "the keras-gpu tab", settle=0.0)
            assert state["state"] == "drawn", state
            assert browser.evaluate(
                "deepAll(document).some((e) => e.children.length === 0 && e.textContent.trim() === 'keras-gpu')"
            ), "TensorBoard's tab bar shows no keras-gpu tab"
            page = {s["name"]: s for s in browser.evaluate(_PAGE)}
    assert sorted(page) == ["single", "two"] and all(s["state"] == "drawn" for s in page.values())
    for name, report in reports.items():
        _check_numbers(page[name], report)
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
