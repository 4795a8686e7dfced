"""Static checks of the packaging metadata: entry point, extras, what the wheel ships.

These are fast and run in every test session. `.ci/package_check.sh` builds
the real wheel and sdist, installs the wheel into a fresh environment and runs
the installed command; it is checked here only for being well formed.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli", reason="reading pyproject.toml on Python 3.10 needs tomli")

from tests._util import REPO

PACKAGE_CHECK = REPO / ".ci" / "package_check.sh"


@pytest.fixture(scope="module")
def pyproject() -> dict:
    with open(REPO / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def _requirement_names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0].lower() for r in requirements}


def test_console_script_points_at_a_callable_main(pyproject):
    scripts = pyproject["project"]["scripts"]
    assert set(scripts) == {"keras-gpu"}
    module_name, _, attr = scripts["keras-gpu"].partition(":")
    assert attr, f"entry point needs `module:function`, got {scripts['keras-gpu']!r}"
    target = getattr(importlib.import_module(module_name), attr)
    assert callable(target)


def test_tensorflow_is_an_extra_not_a_hard_dependency(pyproject):
    project = pyproject["project"]
    hard = _requirement_names(project["dependencies"])
    assert not {n for n in hard if n.startswith("tensorflow") and n != "tensorboard"}, hard
    # The event reader and the TensorBoard server need the tensorboard package,
    # which TensorFlow 2.21 no longer pulls in.
    assert "tensorboard" in hard
    extras = project["optional-dependencies"]
    assert _requirement_names(extras["cpu"]) == {"tensorflow-cpu"}
    assert any(r.startswith("tensorflow[and-cuda]") for r in extras["cuda"]), extras["cuda"]
    # The tests read YAML (examples/tfjob.yaml) and use pytest-timeout.
    assert {"pytest", "pytest-timeout", "pyyaml"} <= _requirement_names(extras["test"])


def test_wheel_ships_only_the_package(pyproject):
    find = pyproject["tool"]["setuptools"]["packages"]["find"]
    from setuptools import find_packages

    shipped = find_packages(where=str(REPO), include=find["include"], exclude=find.get("exclude", ()))
    assert shipped, "packages.find matched nothing"
    assert all(p == "keras_gpu" or p.startswith("keras_gpu.") for p in shipped), shipped
    layers = {f"keras_gpu.{layer}" for layer in ("core", "setup", "meters", "output", "hooks", "cli")}
    assert {"keras_gpu", *layers} <= set(shipped), shipped


def test_version_comes_from_the_package(pyproject):
    import keras_gpu

    assert "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "keras_gpu._version.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+((a|b|rc)\d+)?(\.dev\d+)?", keras_gpu.__version__), keras_gpu.__version__


def test_every_subpackage_has_an_init_so_the_wheel_finds_it():
    # `packages.find` only finds folders with an __init__.py; a module in a
    # folder without one would silently be left out of the wheel.
    for root, dirs, files in os.walk(REPO / "keras_gpu"):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        if any(f.endswith(".py") for f in files):
            assert "__init__.py" in files, f"{root} has modules but no __init__.py"


def test_package_check_script_is_well_formed():
    assert PACKAGE_CHECK.exists()
    assert os.access(PACKAGE_CHECK, os.X_OK), "chmod +x .ci/package_check.sh"
    text = PACKAGE_CHECK.read_text()
    assert text.startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in text
    assert re.search(r"trap 'rm -rf \"\$\{WORK\}\"' EXIT", text), "temporary files must be removed on exit"
    for needle in ("-m build", "[cpu]", " env ", "demo --epochs 1 --samples 256"):
        assert needle in text, needle
    proc = subprocess.run(["bash", "-n", str(PACKAGE_CHECK)], capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
