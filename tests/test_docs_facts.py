"""Each fact in one place: what the README, the docs pages and the docstrings say agrees with the code.

* The one-line description (`keras_gpu._version.SUMMARY`) is the README's
  first paragraph, `pyproject.toml`'s description and `keras-gpu --help`'s,
  and the docs pages that show it take it from the package at build time.
* Every `keras_gpu/...` path they name exists.
* Every tag they name in backticks is one the tag registry declares.
* The README stays a landing page: at most 2,500 words, no paragraph over 150.
"""

from __future__ import annotations

import itertools
import re
import sys
from pathlib import Path

import pytest

from keras_gpu._version import SUMMARY
from keras_gpu.cli.main import build_parser
from keras_gpu.output import tags

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").rglob("*.md"))
SOURCES = sorted((ROOT / "keras_gpu").rglob("*.py"))
TEXTS = [README, *PAGES, *SOURCES]

_PATH = re.compile(r"keras_gpu/[\w/]*\w(?:\.py)?")
_SOURCE_PATH = re.compile(r"keras_gpu/[\w/]*\w\.py")  # in code, other strings look like paths (store keys)
_TAG_GROUPS = ("throughput", "time", "step_time", "cluster", "memory", "gpu", "placement")
_TAG_MENTION = re.compile(r"`((?:" + "|".join(_TAG_GROUPS) + r")/[^`\s]*)`")


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _paragraphs(markdown: str) -> list[str]:
    """Prose paragraphs: blank-line separated, code blocks, tables and HTML comments left out."""
    markdown = re.sub(r"```.*?```", "", markdown, flags=re.S)
    out = []
    for block in re.split(r"\n\s*\n", markdown):
        lines = [ln for ln in block.splitlines() if not ln.lstrip().startswith(("|", "<!--", "#"))]
        if lines:
            out.append(" ".join(lines))
    return out


def test_the_summary_is_said_the_same_everywhere():
    first = _paragraphs(README.read_text())[0]
    assert first == SUMMARY
    description = re.search(r'^description = "(.*)"$', (ROOT / "pyproject.toml").read_text(), re.M)
    assert description is not None and description.group(1) == SUMMARY
    assert build_parser().description == SUMMARY
    for page in ("index.md", "getting-started.md"):
        assert "<!-- keras-gpu:summary -->" in (ROOT / "docs" / page).read_text(), page


def test_the_readme_is_a_landing_page():
    text = README.read_text()
    prose = " ".join(_paragraphs(text))
    assert len(prose.split()) <= 2500
    long = [p[:80] for p in _paragraphs(text) if len(p.split()) > 150]
    assert not long, f"README paragraphs over 150 words: {long}"


def test_the_readme_keeps_the_commands_ci_runs():
    text = README.read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    for command in ('pip install -e ".[cpu,test]"', 'python -m pytest -m "not gpu" -q'):
        assert command in text and command in ci, command


@pytest.mark.parametrize("path", TEXTS, ids=_rel)
def test_every_package_path_named_exists(path):
    pattern = _SOURCE_PATH if path.suffix == ".py" else _PATH
    missing = sorted(
        {m for m in pattern.findall(path.read_text()) if not (ROOT / m).exists() and not (ROOT / f"{m}.py").exists()}
    )
    assert not missing, f"{_rel(path)} names {missing}, which do not exist"


def _mention_regex(mention: str) -> re.Pattern[str]:
    """A mention such as `memory/allocator/<device>/peak_bytes`, `cluster/{busy,input}_sec/...` or `throughput/steady_*`."""
    out, i = [], 0
    while i < len(mention):
        rest = mention[i:]
        if rest.startswith("..."):
            out.append(".*")
            i += 3
        elif m := re.match(r"\{(\w+(?:,\w+)+)\}", rest):
            out.append("(?:" + "|".join(map(re.escape, m.group(1).split(","))) + ")")
            i += m.end()
        elif m := re.match(r"[<{]\w+[>}]", rest):
            out.append(r"[^/]+")
            i += m.end()
        elif rest[0] == "*":
            out.append(".*")
            i += 1
        else:
            out.append(re.escape(rest[0]))
            i += 1
    regex = "".join(out)
    if mention.endswith("/"):
        regex += ".*"
    return re.compile(regex)


_PLACEHOLDER = re.compile(r"<\w+>")
_SAMPLES = ("0", "GPU", "GPU_0", "0_GPU_0")


def _is_declared(mention: str) -> bool:
    if tags.match(mention) is not None:
        return True
    holes = _PLACEHOLDER.findall(mention)
    if holes:  # `step_time/replica_<i>_<DEV>_<n>/compute_sec`: try sample values
        for values in itertools.product(_SAMPLES, repeat=len(holes)):
            filled = mention
            for value in values:
                filled = _PLACEHOLDER.sub(value, filled, count=1)
            if tags.match(filled) is not None:
                return True
    regex = _mention_regex(mention.rstrip(".,;:"))
    return any(regex.fullmatch(tag.pattern) for tag in tags.TAGS)


@pytest.mark.parametrize("path", [README, *PAGES, *SOURCES], ids=_rel)
def test_every_tag_named_is_declared(path):
    text = path.read_text()
    unknown = sorted({m for m in _TAG_MENTION.findall(text) if not _is_declared(m)})
    assert not unknown, f"{_rel(path)} names tags the registry does not declare: {unknown}"


def test_the_tag_reference_is_generated_from_the_registry():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import docs_hooks
    finally:
        sys.path.remove(str(ROOT / "tools"))
    page = docs_hooks.on_page_markdown((ROOT / "docs" / "tags.md").read_text(), None, None, None)
    for tag in tags.TAGS:
        row = next((ln for ln in page.splitlines() if ln.startswith(f"| `{tag.pattern}`")), None)
        assert row is not None, tag.pattern
        assert tag.meaning.replace("|", "\\|") in row and tag.callback in row
    assert "<!-- keras-gpu:tags -->" not in page


def test_every_raw_result_is_listed_and_every_listed_one_exists():
    page = (ROOT / "docs" / "performance.md").read_text()
    listed = page[page.index("## Raw results") :]
    names = set(re.findall(r"\(benchmarks/([\w.-]+\.json)\)", listed))
    on_disk = {p.name for p in (ROOT / "docs" / "benchmarks").glob("*.json")}
    assert names == on_disk, f"listed but missing: {sorted(names - on_disk)}; not listed: {sorted(on_disk - names)}"
    # Each is linked where its figures are given too, not only in the list.
    text = "".join(p.read_text() for p in PAGES)
    body = text.replace(listed, "")
    unlinked = sorted(n for n in on_disk if f"benchmarks/{n})" not in body)
    assert not unlinked, f"raw results linked only from the list: {unlinked}"
