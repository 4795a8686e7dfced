"""Every output the docs show comes from a run of what the page shows, and still matches a fresh run.

`tools/docs_outputs.py` runs the commands each page shows (the scenarios of
`tools/docs_scenarios.py`) and writes what the page shows of their output to
`docs/_generated/`, which the pages include. Here:

* every file the pages include exists, every generated file is shown, and
  every page of a scenario shows its stamp (the versions it was checked with);
* every command a scenario runs is on its page, as the page shows it;
* each scenario runs again and its outputs are compared with the shown ones:
  exactly where they are deterministic, by the shape of their lines where
  not. Those that train are `slow`; the JAX and PyTorch pages are checked in
  `tests/backends/test_docs_outputs_backends.py`.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import docs_outputs
from docs_scenarios import BYSTANDERS, CAUSES, HINT, SCENARIOS, SLOWED

PAGES = sorted((ROOT / "docs").rglob("*.md"))
_INCLUDE = re.compile(r'^--8<-- "(docs/_generated/[^"]+)"$', re.M)
_BASH = re.compile(r"^```bash\n(.*?)^```$", re.S | re.M)


def _included() -> dict[str, list[Path]]:
    """Generated file (repository path) -> the pages that include it."""
    out: dict[str, list[Path]] = {}
    for page in PAGES:
        for path in _INCLUDE.findall(page.read_text(encoding="utf-8")):
            out.setdefault(path, []).append(page)
    return out


def _command(text: str) -> str:
    return " ".join(text.replace("\\\n", " ").split())


def test_every_include_exists_and_every_generated_file_is_shown():
    included = _included()
    missing = sorted(p for p in included if not (ROOT / p).exists())
    assert not missing, f"pages include generated files that do not exist (run tools/docs_outputs.py --write): {missing}"
    generated = {p.relative_to(ROOT).as_posix() for p in docs_outputs.GENERATED.iterdir() if p.suffix in (".txt", ".md")}
    assert generated, "docs/_generated/ is empty"
    unshown = sorted(generated - set(included))
    assert not unshown, f"generated files no page shows: {unshown}"


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_each_page_of_a_scenario_shows_its_stamp_and_its_outputs(scenario):
    included = _included()
    stamp = scenario.stamp_path.relative_to(ROOT).as_posix()
    pages = [ROOT / "docs" / page for page in scenario.pages]
    for page in pages:
        assert page in included.get(stamp, []), f"{page.relative_to(ROOT)} does not include its stamp {stamp}"
    for output in scenario.outputs:
        path = scenario.path(output).relative_to(ROOT).as_posix()
        assert set(included.get(path, [])) & set(pages), f"none of {scenario.pages} shows {path}"


def _shown_commands(path: Path) -> set[str]:
    """Each command of the page's bash blocks (continued lines joined, comments and `&&` chains split off)."""
    out = set()
    for block in _BASH.findall(path.read_text(encoding="utf-8")):
        for line in block.replace("\\\n", " ").splitlines():
            out |= {_command(part) for part in re.sub(r"\s#.*$", "", line).split("&&")}
    return out


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_each_command_run_is_the_one_its_page_shows(scenario):
    # The getting-started page shows the README's commands (it includes them).
    shown = set().union(*(_shown_commands(ROOT / "docs" / page) for page in scenario.pages))
    shown |= _shown_commands(ROOT / "README.md")
    for step in scenario.steps:
        if step.shown:
            assert _command(step.command) in shown, f"{scenario.pages} do not show `{step.command}`"


def test_the_shape_keeps_the_words_and_fields_and_nothing_else():
    shape = docs_outputs.shape
    assert shape("58/58 - 1s - 24ms/step - loss: 0.5998") == shape("58/58 - 0s - 870us/step - loss: 1.2e-05")
    assert shape("host peak RSS: 542.1 MiB.") == shape("host peak RSS: 1.1 GiB.")
    assert shape("│ chief  │   3,534.5 │") == shape("│ chief  │ 26,719.6 │")
    assert shape("┏━━━┳━━━━━━┓") == shape("┏━━━━━━━┳━━┓")
    assert shape("replica_0_CPU_0") != shape("replica_1_CPU_1")  # a name keeps its digits
    assert shape("input 3%, other 84%") != shape("input 3%, host 84%")
    assert shape("no straggler (imbalance 2%)") != shape("worker 1 is the straggler (imbalance 40%)")
    assert shape("a line\nwrapped") == shape("a line wrapped")
    assert shape("other 84%. Hint: host-bound: 73%", [HINT]) == shape("other 84%.", [HINT])


def test_the_volatile_clauses_leave_out_what_follows_the_load_and_nothing_else():
    shape = docs_outputs.shape
    causes = "1. baseline (run-to-run spread 38.7%)\n2. input: the host pipeline grows\n(0.5 -> 2.3 ms)\n3. {}\n"
    within = causes.format("within run-to-run spread (38.7%): the step did not\ngrow")
    comm = causes.format("communication: the all-reduce takes 4.56 ms")
    assert shape(within, [CAUSES]) == shape(comm, [CAUSES])
    assert shape(within, [CAUSES]) != shape(within.replace("baseline", "base"), [CAUSES])  # the baseline's line stays
    assert shape(within, [CAUSES]) != shape(within.replace("3. ", "3 "), [CAUSES])
    row = "│ worker 1 (straggler) │ 4 of 4 │ 33.1 │ 64% │ host │\n│ worker 0             │ 0 of 4 │ -7.7 │ -66% │ {} │\n"
    assert shape(row.format("compute"), [BYSTANDERS]) == shape(row.format("input"), [BYSTANDERS])
    assert shape(row.format("compute"), [BYSTANDERS]) != shape(row.replace("host", "input").format("compute"), [BYSTANDERS])
    named = "worker 1 is the straggler: its host time is 23.8 ms (the others wait for it 64% of each step)"
    assert shape(named + "; worker 0 slowed 1.6x against its own best window.", [SLOWED]) == shape(named + ".", [SLOWED])
    assert shape(named + "; the workers slowed 1.5x against their own best windows (median).", [SLOWED]) == shape(
        named + ".", [SLOWED]
    )
    assert shape(named, [SLOWED]) != shape(named.replace("worker 1 is the straggler", "no straggler"), [SLOWED])


def test_a_shown_output_that_no_longer_matches_fails_the_check():
    trace = next(s for s in SCENARIOS if s.name == "read-a-gpu-trace")
    (output,) = trace.outputs
    shown = trace.path(output).read_text(encoding="utf-8")
    same = docs_outputs.Result(texts={output.name: shown})
    assert docs_outputs.check(trace, same) == []
    edited = docs_outputs.Result(texts={output.name: shown.replace("communication      0.000", "communication      0.035")})
    (problem,) = docs_outputs.check(trace, edited)
    assert "read-a-gpu-trace.trace.txt no longer matches a fresh run (exact comparison)" in problem
    assert "+  communication      0.035 ms    0%" in problem


def test_an_output_of_the_core_count_is_compared_only_on_as_many_cores(monkeypatch):
    scale = next(s for s in SCENARIOS if s.name == "scale-tensorflow")
    trace = next(s for s in SCENARIOS if s.name == "read-a-gpu-trace")
    written = json.loads((docs_outputs.GENERATED / "scale-tensorflow.json").read_text(encoding="utf-8"))
    monkeypatch.setattr(docs_outputs.os, "cpu_count", lambda: written["machine"]["cores"])
    assert docs_outputs.unlike_here(scale) is None
    monkeypatch.setattr(docs_outputs.os, "cpu_count", lambda: written["machine"]["cores"] + 2)
    assert "depends on the number of CPU cores" in docs_outputs.unlike_here(scale)
    assert docs_outputs.unlike_here(trace) is None


def _fresh(scenario) -> list[str]:
    if reason := docs_outputs.unlike_here(scenario):
        pytest.skip(reason)
    return docs_outputs.check(scenario, docs_outputs.run(scenario))


_TF = [s for s in SCENARIOS if s.checked and s.backend in (None, "tensorflow")]


@pytest.mark.parametrize(
    "scenario",
    [pytest.param(s, id=s.name, marks=[pytest.mark.slow, pytest.mark.timeout(900)] if s.slow else []) for s in _TF],
)
def test_shown_outputs_match_a_fresh_run(scenario):
    problems = _fresh(scenario)
    assert not problems, "\n\n".join(problems) + "\n(if the change is intended: python tools/docs_outputs.py --write)"
