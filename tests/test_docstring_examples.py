"""Every public name of `keras_gpu` carries an `Examples:` section, and every docstring example runs on CPU.

`Examples:` (not `Example:`) is the section the API reference's Google parser
renders as highlighted code; under `Example:` the `>>>` lines would run into
one paragraph. Besides the public names, the examples in every other module
of the package (private helpers included) run too, one fresh interpreter per
module, so no docstring example goes unchecked.

The examples run with `doctest`, never in the pytest process: the names whose
examples change process-wide state (TensorFlow's devices, a strategy) each in a
fresh interpreter of their own, the others together in one more, each name with
fresh globals. GPUs are hidden from the children, so the examples show what a
CPU-only machine prints, on any machine.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import pathlib

import pytest

import keras_gpu
from tests._util import run_python

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("tensorflow") is None, reason="the examples run on Keras' TensorFlow backend"
)

PUBLIC = [name for name in keras_gpu.__all__ if name != "__version__"]

# Name -> the process-wide state its example changes; each runs in a fresh interpreter.
OWN_PROCESS = {
    "configure_devices": "splits the CPU into logical devices",
    "make_strategy": "splits the CPU and initialises TensorFlow's devices",
}

# Name -> why its example cannot run on a CPU (it is checked for, but not run).
NEEDS_GPU: dict[str, str] = {}

_CHILD = """
import doctest, json, re
import keras_gpu

results = {}
for name in NAMES:
    obj = getattr(keras_gpu, name)
    doc = obj.__doc__ or ""
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    report = []
    if RUN:
        for test in doctest.DocTestFinder(recurse=False).find(obj, f"keras_gpu.{name}", globs={}):
            runner.run(test, out=report.append)
    results[name] = {
        "example": re.search(r"^ *Examples:$", doc, re.M) is not None,
        "attempted": runner.tries,
        "failed": runner.failures,
        "report": "".join(report),
    }
print("RESULTS", json.dumps(results))
"""


@functools.cache
def _results(names: tuple[str, ...], run: bool) -> dict[str, dict]:
    """Run the examples of `names` (or, with `run` false, only look for them) in one fresh interpreter."""
    code = f"NAMES = {list(names)!r}\nRUN = {run!r}\n{_CHILD}"
    proc = run_python(code, env={"CUDA_VISIBLE_DEVICES": ""}, timeout=240)
    line = next(text for text in proc.stdout.splitlines() if text.startswith("RESULTS "))
    return json.loads(line[len("RESULTS "):])


def _result(name: str) -> dict:
    if name in NEEDS_GPU:
        return _results(tuple(NEEDS_GPU), False)[name]
    if name in OWN_PROCESS:
        return _results((name,), True)[name]
    shared = tuple(n for n in PUBLIC if n not in OWN_PROCESS and n not in NEEDS_GPU)
    return _results(shared, True)[name]


def test_the_lists_name_public_names_only():
    assert set(OWN_PROCESS) <= set(PUBLIC) and set(NEEDS_GPU) <= set(PUBLIC)


@pytest.mark.parametrize("name", PUBLIC)
def test_public_name_has_an_example_that_runs_on_cpu(name):
    result = _result(name)
    assert result["example"], f"keras_gpu.{name}'s docstring has no 'Examples:' section"
    if name in NEEDS_GPU:
        pytest.skip(f"keras_gpu.{name}'s example needs a GPU: {NEEDS_GPU[name]}")
    assert result["attempted"] > 0, f"keras_gpu.{name}'s 'Examples:' section has no '>>>' line"
    assert result["failed"] == 0, result["report"]


# ------------------------------------------------- every other module's examples

ROOT = pathlib.Path(keras_gpu.__file__).resolve().parent


def _module_name(path: pathlib.Path) -> str:
    return ".".join(("keras_gpu", *path.relative_to(ROOT).with_suffix("").parts))


MODULES_WITH_EXAMPLES = sorted(
    _module_name(path) for path in ROOT.rglob("*.py") if ">>> " in path.read_text(encoding="utf-8")
)

_MODULE_CHILD = """
import doctest, importlib, json
module = importlib.import_module(MODULE)
runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
report = []
for test in doctest.DocTestFinder().find(module, MODULE):
    runner.run(test, out=report.append)
print("RESULTS", json.dumps({"attempted": runner.tries, "failed": runner.failures, "report": "".join(report)}))
"""


def test_the_modules_with_examples_are_found():
    assert "keras_gpu.core.cluster" in MODULES_WITH_EXAMPLES and len(MODULES_WITH_EXAMPLES) >= 15


def test_every_example_sits_under_an_examples_section():
    """`Example:` renders as a quote in the reference: the section is `Examples:` everywhere."""
    found = [
        f"{path.relative_to(ROOT.parent)}:{number}"
        for path in sorted(ROOT.rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if line.strip() == "Example:"
    ]
    assert not found, found


# Module -> the package its examples need besides TensorFlow; where it is absent, its backend tests run them.
NEEDS_PACKAGE = {"keras_gpu.core.torch_private": "torch"}


@pytest.mark.parametrize("module", MODULES_WITH_EXAMPLES)
def test_every_docstring_example_of_the_module_runs(module):
    """Each module's examples (its public names' ones again, its private helpers' too) in a fresh interpreter."""
    needed = NEEDS_PACKAGE.get(module)
    if needed is not None and importlib.util.find_spec(needed) is None:
        pytest.skip(f"{module}'s examples need {needed}; tests/backends runs them")
    proc = run_python(f"MODULE = {module!r}\n{_MODULE_CHILD}", env={"CUDA_VISIBLE_DEVICES": ""}, timeout=240)
    line = next((t for t in proc.stdout.splitlines() if t.startswith("RESULTS ")), None)
    assert line is not None, proc.stdout[-2000:] + proc.stderr[-4000:]
    result = json.loads(line[len("RESULTS "):])
    assert result["attempted"] > 0, f"{module} has '>>>' lines but doctest found none"
    assert result["failed"] == 0, result["report"]
