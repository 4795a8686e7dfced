"""The public docstrings as the API reference renders them: every keyword listed, no Sphinx role.

The reference (mkdocstrings) reads the docstrings' Google-style sections and
renders Markdown; a Sphinx role such as ":func:`x`" shows as raw text there.
Nothing is built here: the sources and the signatures are read.
"""

from __future__ import annotations

import inspect
import pathlib
import re

import pytest

import keras_gpu

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Function -> its parameters that are not in its signature's declared keywords' list, documented under Args.
FUNCTIONS = {
    "make_strategy": {"kind"},
    "plan_strategy": {"kind", "local_devices"},
    "configure_devices": set(),
    "resolve_cluster": {"source"},
}


def _documented(doc: str, section: str) -> list[str]:
    """The names an `Args:`-style section of `doc` lists (its entries at the first indent)."""
    match = re.search(rf"^( *){section}:\n((?:\1 +\S.*\n|\n)+)", doc, re.M)
    if match is None:
        return []
    entries = match.group(2)
    indent = min(len(line) - len(line.lstrip()) for line in entries.splitlines() if line.strip())
    return re.findall(rf"^ {{{indent}}}(\**\w+)(?: \(.*\))?:", entries, re.M)


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_every_declared_keyword_is_documented_under_keyword_args(name):
    """The `Keyword Args` section lists exactly the keywords the declaration gives the signature, in its order."""
    function = getattr(keras_gpu, name)
    doc = inspect.getdoc(function)
    parameters = inspect.signature(function).parameters
    keywords = [p for p in parameters if p not in FUNCTIONS[name]]
    assert _documented(doc, "Keyword Args") == keywords
    args = _documented(doc, "Args")
    assert [a for a in args if not a.startswith("**")] == [p for p in parameters if p in FUNCTIONS[name]]
    assert len([a for a in args if a.startswith("**")]) == 1  # the **options entry that points at the keywords


_ROLE = re.compile(r":(?:py:)?(?:func|class|mod|meth|attr|data|exc|obj|const|ref|doc):`")


def test_no_sphinx_role_in_the_package_sources():
    """The API reference renders Markdown: a role such as :func:`x` would show as raw text; use `x` or [x][path]."""
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in sorted((ROOT / "keras_gpu").rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if _ROLE.search(line)
    ]
    assert not found, "\n".join(found[:20])
