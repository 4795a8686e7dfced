"""The package's structure: layers, no import circles, and size bounds.

The import graph is read from the source (every `import` statement,
function-level ones included), so a lazy import counts like any other.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "keras_gpu"

#: Each layer and the layers it may import (itself included). Lower layers first.
LAYERS: dict[str, set[str]] = {
    "core": {"core"},
    "setup": {"core", "setup"},
    "meters": {"core", "meters"},
    "output": {"core", "meters", "output"},
    "hooks": {"core", "setup", "meters", "output", "hooks"},
    "tensorboard": {"core", "meters", "output", "tensorboard"},
    "cli": {"core", "setup", "meters", "output", "hooks", "cli", "public"},
}
# Modules follow concepts, not a size: the bound only catches a module that grew past any one concept (the
# callbacks with their hooks, the meter with its windows and epochs stay whole). Functions stay short.
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 80


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that `name` imports, anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:  # `import a.b.c` of a name inside a module
                target = target.rpartition(".")[0]
            if target.startswith("keras_gpu") and target != name:
                found.add(target)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1 or parts[1] == "_version":
        return "public"
    return parts[1]


def test_every_module_is_in_a_layer():
    stray = sorted(m for m in _graph() if _layer(m) not in LAYERS and _layer(m) != "public")
    assert not stray, f"modules outside the layers {sorted(LAYERS)}: {stray}"


def test_no_import_circle():
    graph = _graph()
    state: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                circles.append([*stack[stack.index(nxt):], nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert not circles, "import circles: " + "; ".join(" -> ".join(c) for c in circles)


def test_each_layer_imports_only_the_layers_below_it():
    wrong = []
    for module, targets in _graph().items():
        layer = _layer(module)
        if layer == "public":
            continue
        for target in targets:
            target_layer = _layer(target)
            if target_layer == "public" and target.split(".")[-1] in ("_version",):
                continue
            if target_layer not in LAYERS[layer]:
                wrong.append(f"{module} ({layer}) imports {target} ({target_layer})")
    assert not wrong, "\n".join(sorted(wrong))


def _function_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines of a function without its docstring."""
    lines = node.end_lineno - node.lineno + 1
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        lines -= first.end_lineno - first.lineno + 1
    return lines


def test_module_and_function_size_bounds():
    too_long = []
    for name, path in _modules().items():
        text = path.read_text(encoding="utf-8")
        if (n := len(text.splitlines())) > MAX_MODULE_LINES:
            too_long.append(f"module {name}: {n} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _function_lines(node) > MAX_FUNCTION_LINES:
                too_long.append(f"function {name}.{node.name}: {_function_lines(node)} lines without its docstring")
    assert not too_long, "\n".join(too_long)


@pytest.mark.parametrize("old", ["keras_gpu.strategy", "keras_gpu.loggers", "keras_gpu.report", "keras_gpu.steptime"])
def test_the_module_paths_of_earlier_layouts_are_gone(old):
    import importlib
    import sys

    sys.modules.pop(old, None)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)


def test_every_callback_with_a_batch_end_hook_declares_async_safe():
    # Keras runs batch ends on its pool (JAX, PyTorch, `verbose=0`) only where every callback that overrides one
    # says `async_safe`: a keras-gpu callback without it would change how the user's `fit` runs.
    import importlib
    import inspect
    import pkgutil

    import keras

    import keras_gpu

    hooks = ("on_batch_end", "on_train_batch_end", "on_test_batch_end", "on_predict_batch_end")
    found = {}
    for info in pkgutil.walk_packages(keras_gpu.__path__, "keras_gpu."):
        try:
            module = importlib.import_module(info.name)
        except ModuleNotFoundError as exc:  # a JAX- or PyTorch-only module, in an environment without them
            assert exc.name in ("jax", "torch"), exc
            continue
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if not (issubclass(cls, keras.callbacks.Callback) and cls.__module__.startswith("keras_gpu")):
                continue
            own = [k for k in cls.__mro__ if k.__module__.startswith("keras_gpu")]
            if any(hook in k.__dict__ for k in own for hook in hooks):
                found[cls.__name__] = any("async_safe" in k.__dict__ for k in own)
    assert {"ThroughputLogger", "StepTimeLogger", "ModelCheckpoint", "RunRecord", "ScaleWindow"} <= set(found)
    assert found == dict.fromkeys(found, True)
