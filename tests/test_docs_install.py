"""Every install command the project shows works today: none installs keras-gpu by name from a package index.

keras-gpu is not on PyPI yet, so `pip install "keras-gpu[cpu]"` fails with
"No matching distribution found". The README, the docs pages, the examples,
the CI scripts and the package's own messages install it from a clone
(`pip install ".[cpu]"`) or a wheel built from one, and say that the same
extras will install it by name once it is published. The messages that ask
for a TensorFlow build name the one the `cpu` and `cuda` extras install.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli", reason="reading pyproject.toml on Python 3.10 needs tomli")

ROOT = Path(__file__).resolve().parents[1]
FILES = sorted(
    [
        ROOT / "README.md",
        *(ROOT / "docs").rglob("*.md"),
        *(p for p in (ROOT / "examples").iterdir() if p.is_file()),
        *(p for p in (ROOT / ".ci").iterdir() if p.is_file()),
        *(ROOT / "keras_gpu").rglob("*.py"),
        *(ROOT / "tools").rglob("*.py"),
        *(ROOT / "benchmarks").rglob("*.py"),
    ]
)

# `pip install` and its arguments, up to the end of the command: a line end (not escaped), a backtick, `;`, `|`,
# `&&`, `)`, a comment or the end of a quoted message.
_COMMAND = re.compile(r"pip3? install((?:[^\n`;|)&#'\"]|\\\n|'[^'\n]*'|\"[^\"\n]*\")*)")
_BY_NAME = re.compile(r"keras[-_]gpu(?:\[[^\]]*\])?(?:[<>=!~].*)?", re.IGNORECASE)


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def installs_by_name(text: str) -> list[str]:
    """The `pip install` commands in `text` that name keras-gpu as a requirement from an index."""
    out = []
    for match in _COMMAND.finditer(text):
        tokens = [t.strip("'\"") for t in match.group(1).replace("\\\n", " ").split()]
        for i, token in enumerate(tokens):
            direct = i + 1 < len(tokens) and tokens[i + 1] == "@"  # `keras-gpu @ URL` names where it comes from
            if _BY_NAME.fullmatch(token) and not direct:
                out.append(match.group(0).strip())
                break
    return out


def test_the_check_finds_an_install_by_name():
    assert installs_by_name('pip install "keras-gpu[cpu]"    # on a CPU') == ['pip install "keras-gpu[cpu]"']
    assert installs_by_name("`pip install 'keras-gpu[cuda]'`.") == ["pip install 'keras-gpu[cuda]'"]
    assert installs_by_name("RUN pip install --no-cache-dir keras-gpu\n") == ["pip install --no-cache-dir keras-gpu"]
    assert installs_by_name('pip install "keras-gpu" jax') == ['pip install "keras-gpu" jax']
    assert installs_by_name("pip install keras_gpu==0.1 && keras-gpu demo") == ["pip install keras_gpu==0.1"]
    for fine in (
        'pip install ".[cpu]" && keras-gpu demo',
        'pip install . "jax[cpu]"',
        "pip install dist/keras_gpu-0.1.0.dev0-py3-none-any.whl",
        "pip install 'keras-gpu[cpu] @ git+https://example.org/keras-gpu'",
        "the same extras will install it by name (`keras-gpu[cpu]`)",
    ):
        assert installs_by_name(fine) == [], fine


@pytest.mark.parametrize("path", FILES, ids=_rel)
def test_no_install_line_asks_an_index_for_keras_gpu(path):
    found = installs_by_name(path.read_text(encoding="utf-8"))
    assert not found, (
        f"{_rel(path)} installs keras-gpu by name, which no package index has yet: {found}. "
        'Install it from a clone (`pip install ".[cpu]"`) or a wheel built from one, as docs/getting-started.md shows.'
    )


def test_the_tensorflow_install_hint_is_what_the_extras_install():
    from keras_gpu.core.backend import INSTALL_HINT

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    for extra in ("cpu", "cuda"):
        (requirement,) = extras[extra]
        assert f'pip install "{requirement}"' in INSTALL_HINT, (extra, requirement, INSTALL_HINT)
