"""MkDocs hooks: pages built from the package's own registries at build time, never typed by hand.

* `<!-- keras-gpu:tags -->` becomes the tag reference: one table per group of
  tags, each tag's name, then its meaning, unit, callback and backends, read from
  :mod:`keras_gpu.output.tags`.
* `<!-- keras-gpu:summary -->` becomes :data:`keras_gpu._version.SUMMARY`.

Importing these modules needs no Keras backend (they import neither Keras nor
TensorFlow), so the site builds in an environment without TensorFlow.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from keras_gpu._version import SUMMARY
from keras_gpu.output import tags as _tags

__all__ = ["on_page_markdown", "summary_markdown", "tag_reference"]

_BACKEND_NAMES = {"tensorflow": "TensorFlow", "jax": "JAX", "torch": "PyTorch"}
_TAGS_MARK = "<!-- keras-gpu:tags -->"
_SUMMARY_MARK = "<!-- keras-gpu:summary -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def tag_reference() -> str:
    """Markdown tables of every declared tag, grouped by their first path element, in declaration order."""
    groups: dict[str, list[_tags.Tag]] = {}
    for tag in _tags.TAGS:
        groups.setdefault(tag.pattern.split("/", 1)[0], []).append(tag)
    out = []
    for group, members in groups.items():
        # Two columns, so that the meaning gets the page's width and a tag name is never broken.
        out += [f"## `{group}/`", "", "| tag | meaning |", "|---|---|"]
        for tag in members:
            kind = " (Text)" if tag.text else ""
            backends = ", ".join(_BACKEND_NAMES[b] for b in tag.backends)
            facts = f"unit: {_cell(tag.unit)}; from {_cell(tag.callback)}; on {backends}"
            out.append(f"| `{tag.pattern}`{kind} | {_cell(tag.meaning)}<br><small>{facts}</small> |")
        out.append("")
    return "\n".join(out)


def summary_markdown() -> str:
    """The package's one-line description."""
    return SUMMARY


def on_page_markdown(markdown: str, page, config, files) -> str:
    """Replace the marks of this module with what they stand for."""
    if _TAGS_MARK in markdown:
        markdown = markdown.replace(_TAGS_MARK, tag_reference())
    if _SUMMARY_MARK in markdown:
        markdown = markdown.replace(_SUMMARY_MARK, summary_markdown())
    return markdown
