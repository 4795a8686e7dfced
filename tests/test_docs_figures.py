"""The figures the pages give come from the raw benchmark results they cite.

Each figure is read from the page and compared with the JSON file it links
to, at the precision the page prints (a page's "0.945" agrees with a median of
0.94530 and not with 0.9462). A figure changed on a page without a new
result, or a result replaced without updating its page, fails here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
RESULTS = DOCS / "benchmarks"


def _result(name: str) -> dict:
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


def _agrees(printed: str, value: float, scale: float = 1.0) -> bool:
    """Whether `printed` (e.g. "0.77", "1,191") is `value * scale` rounded to the digits it shows."""
    text = printed.replace(",", "")
    decimals = len(text.split(".")[1]) if "." in text else 0
    return abs(float(text) - value * scale) <= 0.5 * 10**-decimals + 1e-9


def test_the_comparison_reads_the_printed_precision():
    assert _agrees("0.945", 0.94530) and not _agrees("0.945", 0.9462)
    assert _agrees("0.77", 0.0076994, scale=100) and _agrees("1,191", 1190.6)
    assert not _agrees("851", 852.0)


def _section(page: str, heading: str) -> str:
    text = (DOCS / page).read_text(encoding="utf-8")
    start = text.index(heading)
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else len(text)]


def _cited(section: str, name: str) -> None:
    assert f"(benchmarks/{name})" in section, f"the figures' section does not link {name}"


# The one-CPU table: row label on the page -> the variant of the result, in the page's order.
_ROWS = {
    "bare `fit`": "bare",
    "`keras_gpu.callbacks()`": "kg-default",
    "`ThroughputLogger`": "kg-throughput",
    "`MemoryLogger`": "kg-memory",
    "`PlacementLogger`": "kg-placement",
    'Keras `TensorBoard(update_freq="epoch")`': "tb-epoch",
    "Keras `TensorBoard(update_freq=1": "tb-batch",
    "Model Garden-style `TimeHistory": "timehistory",
    "naive per-batch synchronous monitor": "naive",
}
_NUMBER = r"([\d,]+(?:\.\d+)?)"
_DASH = "\u2013"  # the en dash of the pages' ranges


def test_the_one_cpu_table_is_the_cited_result():
    name = "cpu-2core-2026-11-22.json"
    section = _section("performance.md", "## The callbacks on one CPU")
    _cited(section, name)
    summary = _result(name)["configs"]["mlp-1"]["summary"]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) == len(_ROWS), rows
    checked = 0
    for row, (label, key) in zip(rows, _ROWS.items()):
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[0].startswith(label), (cells[0], label)
        stats = summary["bare"] if key == "bare" else summary["variants"][key]
        assert _agrees(cells[1], stats["steps_per_s"]["median"]), (label, "steps/s", cells[1])
        if key == "bare":
            continue
        ratio = re.fullmatch(rf"{_NUMBER} \({_NUMBER}{_DASH}{_NUMBER}\)", cells[2])
        assert ratio, cells[2]
        for printed, q in zip(ratio.groups(), ("median", "q1", "q3")):
            assert _agrees(printed, stats["ratio_to_bare"][q]), (label, "A/B ratio", q, printed)
        direct = re.fullmatch(rf"(?:\*\*)?{_NUMBER}(?:\*\*)?(?: \({_NUMBER}{_DASH}{_NUMBER}\))?", cells[3])
        assert direct, cells[3]
        for printed, q in zip(direct.groups(), ("median", "q1", "q3")):
            if printed is not None:
                assert _agrees(printed, stats["direct_steady"][q], scale=100), (label, "direct %", q, printed)
        per_step = re.fullmatch(rf"{_NUMBER}(?: µs)?", cells[4])
        assert per_step, cells[4]
        assert _agrees(per_step.group(1), stats["batch_hook_us_per_step"]["median"]), (label, "per step", cells[4])
        checked += 1
    assert checked == len(_ROWS) - 1


def test_the_small_cnn_figures_are_the_cited_result():
    name = "cpu-2core-2026-11-22.json"
    section = _section("performance.md", "## The callbacks on one CPU")
    variants = _result(name)["configs"]["cnn-1"]["summary"]["variants"]
    cnn = re.search(r"\*\*Small CNN.*", section).group(0)
    figures = {
        "kg-default": rf"`keras_gpu.callbacks\(\)` {_NUMBER}% direct",
        "tb-epoch": rf"`TensorBoard` per epoch {_NUMBER}%",
        "tb-batch": rf"per batch {_NUMBER}%",
        "timehistory": rf"`TimeHistory` {_NUMBER}%",
        "naive": rf"naive monitor {_NUMBER}%",
    }
    for key, pattern in figures.items():
        match = re.search(pattern, cnn)
        assert match, pattern
        assert _agrees(match.group(1), variants[key]["direct_steady"]["median"], scale=100), (key, match.group(1))
    ratio = re.search(rf"direct \(A/B {_NUMBER}\)", cnn)
    assert ratio and _agrees(ratio.group(1), variants["kg-default"]["ratio_to_bare"]["median"]), cnn[:200]


@pytest.mark.parametrize("page", ["README.md", "docs/performance.md"])
def test_the_default_set_cost_with_tf_data_is_the_cited_result(page):
    name = "overhead-tfdata-cpu-2core.json"
    net = _result(name)["configs"]["mlp-1-tfdata"]["summary"]["variants"]["kg-default"]["direct_steady_net"]["median"]
    text = (ROOT / page).read_text(encoding="utf-8")
    match = re.search(rf"{_NUMBER}%(?:\*\*)? (?:net|of the training time \(net)", text)
    assert match, f"{page} gives no net cost of the default set"
    assert _agrees(match.group(1), net, scale=100), (page, match.group(1), net)
    if page != "README.md":
        _cited(text, name)


@pytest.mark.parametrize("page", ["README.md", "docs/performance-workers.md"])
def test_the_two_worker_cost_is_the_cited_result(page):
    name = "overhead-2workers-cluster-parts-cpu-2core.json"
    configs = _result(name)["configs"]
    costs = [configs[c]["summary"]["variants"]["kg-default"]["direct_steady"]["median"] for c in ("mlp-2w", "mlp-2w/worker1")]
    text = (ROOT / page).read_text(encoding="utf-8")
    pattern = {
        "README.md": rf"{_NUMBER}% and {_NUMBER}% on the two workers",
        "docs/performance-workers.md": rf"gave \*\*{_NUMBER}% on worker 0 and {_NUMBER}% on worker 1\*\*",
    }[page]
    match = re.search(pattern, text)
    assert match, f"{page} gives no two-worker cost"
    for printed, cost in zip(match.groups(), costs):
        assert _agrees(printed, cost, scale=100), (page, printed, cost)
    if page != "README.md":
        _cited(text, name)


def test_the_tab_render_times_are_the_cited_result():
    name = "tab-render-cpu-2core.json"
    section = _section("tensorboard-tab.md", "## How fast")
    _cited(section, name)
    results = _result(name)["results"]
    assert [(r["workers"], r["runs"]) for r in results] == [(256, 1), (1024, 1), (256, 256)]
    rows = re.findall(r"^\| ([\d,]+) workers[^|]*\| (\d+)[^|]*\| ([\d,]+) \| ([\d,.]+) (ms|s) \| ([\d,]+) ms \|$", section, re.M)
    assert len(rows) == len(results), rows
    for (workers, runs, points, cold, unit, warm), row in zip(rows, results):
        assert (int(workers.replace(",", "")), int(runs), int(points.replace(",", ""))) == (
            row["workers"], row["runs"], row["points"])
        assert _agrees(cold, row["drawn_ms"][0], 1e-3 if unit == "s" else 1.0)
        assert _agrees(warm, min(row["drawn_ms"][1:]))
