"""The documentation pages keep a shape a reader can take in: no wall of text, no code that overflows.

Checked on the Markdown sources, pages generated at build time left out (the
tag reference and the API reference pages, which `tools/docs_hooks.py` and
mkdocstrings fill in):

* no line of a code block over 88 characters, the width a page shows without a
  scroll bar, in the page or in a file it includes (`--8<-- "path"`);
* no paragraph, list item or table cell over 150 words;
* each explanation page (the "Explanation" section of the site's navigation)
  under 1,550 words of prose, code left out.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
CODE_WIDTH = 88
PARAGRAPH_WORDS = 150
EXPLANATION_WORDS = 1550

_GENERATED = re.compile(r"^(?:::: |<!-- keras-gpu:tags -->)", re.M)
_FENCE = re.compile(r"^\s*(```|~~~)")
_INCLUDE = re.compile(r'^\s*--8<-- "([^":]+)"\s*$')


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


PAGES = [p for p in sorted(DOCS.rglob("*.md")) if not _GENERATED.search(p.read_text(encoding="utf-8"))]


def _code_lines(text: str) -> list[str]:
    """The lines inside fenced code blocks, with included files expanded."""
    out, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            continue
        include = _INCLUDE.match(line)
        if include:
            out += (ROOT / include.group(1)).read_text(encoding="utf-8").splitlines()
        else:
            out.append(line)
    return out


def _blocks(text: str) -> list[str]:
    """Paragraphs, list items and table cells of the prose (code blocks, headings and comments left out)."""
    out, current, fenced = [], [], False

    def flush():
        if current:
            out.append(" ".join(current))
            current.clear()

    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            flush()
            continue
        if fenced:
            continue
        if line.startswith("|"):
            flush()
            out += [cell for cell in re.split(r"(?<!\\)\|", line) if cell.strip()]
            continue
        if not line.strip() or line.startswith(("#", "<!--", "--8<--")):
            flush()
            continue
        if re.match(r"\s*(?:[-*]|\d+\.)\s", line):
            flush()
        current.append(line.strip())
    flush()
    return out


def _prose_words(text: str) -> int:
    return sum(len(block.split()) for block in _blocks(text))


def _explanation_pages() -> list[str]:
    yaml = pytest.importorskip("yaml", reason="PyYAML is in the [test] extra")
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8").split("\nnav:", 1)[1].join(["nav:", ""]))
    section = next(item["Explanation"] for item in nav["nav"] if isinstance(item, dict) and "Explanation" in item)
    return [next(iter(entry.values())) for entry in section]


def test_the_checks_see_the_pages():
    assert len(PAGES) >= 20 and DOCS / "callbacks.md" in PAGES and DOCS / "tags.md" not in PAGES
    assert _blocks("a b\nc\n\n| x | y z |\n\n```\nno\n```\n- d\n- e f") == ["a b c", " x ", " y z ", "- d", "- e f"]
    assert _code_lines('x\n```\n--8<-- "pyproject.toml"\n```') == (ROOT / "pyproject.toml").read_text().splitlines()


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_no_code_line_overflows_the_page(page):
    long = [line for line in _code_lines(page.read_text(encoding="utf-8")) if len(line) > CODE_WIDTH]
    assert not long, f"{len(long)} code line(s) over {CODE_WIDTH} characters: wrap them; first: {long[0]!r}"


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_no_paragraph_is_a_wall(page):
    walls = [b[:80] for b in _blocks(page.read_text(encoding="utf-8")) if len(b.split()) > PARAGRAPH_WORDS]
    assert not walls, f"paragraphs or cells over {PARAGRAPH_WORDS} words (split them): {walls}"


def test_explanation_pages_are_short_enough_to_read():
    pages = _explanation_pages()
    assert "callbacks.md" in pages and "performance.md" in pages
    words = {page: _prose_words((DOCS / page).read_text(encoding="utf-8")) for page in pages}
    long = {page: n for page, n in words.items() if n > EXPLANATION_WORDS}
    assert not long, f"explanation pages over {EXPLANATION_WORDS} words (move a section to a page of its own): {long}"


_EXAMPLE_LINE = re.compile(r"^\s*(?:>>>|\.\.\.)(?: |$)")


def test_no_docstring_example_line_overflows_the_api_reference():
    """The API reference shows each `Examples:` section as a code block, dedented: its lines fit the page too."""
    long = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "keras_gpu").rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if _EXAMPLE_LINE.match(line) and len(line.strip()) > CODE_WIDTH
    ]
    assert not long, f"docstring example lines over {CODE_WIDTH} characters (wrap them): {long}"


_SECTION = re.compile(r"^[A-Z][A-Za-z ]*:$")


def _docstrings():
    """(name, docstring) of every public name and of its public members: what the API reference shows."""
    import inspect

    import keras_gpu

    for name in keras_gpu.__all__:
        obj = getattr(keras_gpu, name)
        yield name, inspect.getdoc(obj) or ""
        if inspect.isclass(obj):
            for member, value in vars(obj).items():
                if not member.startswith("_") and (inspect.isfunction(value) or isinstance(value, property)):
                    yield f"{name}.{member}", inspect.getdoc(value) or ""


def test_no_docstring_paragraph_is_a_wall():
    """The API reference's prose: no paragraph over 150 words (the Google sections are lists, left out)."""
    pytest.importorskip("keras", reason="the public names import Keras")
    walls = [
        f"{name}: {len(paragraph.split())} words: {paragraph[:60]!r}"
        for name, doc in _docstrings()
        for paragraph in re.split(r"\n\s*\n", doc)
        if not _SECTION.match(paragraph.strip().splitlines()[0] if paragraph.strip() else "")
        and len(paragraph.split()) > PARAGRAPH_WORDS
    ]
    assert not walls, "\n".join(walls)
