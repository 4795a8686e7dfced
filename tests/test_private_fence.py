"""The private-API fence, read from the source: private Keras, TensorFlow and JAX access only in the fence modules.

The fence modules are `keras_gpu/setup/keras_compat.py` (fixes of upstream
defects) and every `keras_gpu/**/*_private.py` (today `core/tf_private.py`,
`core/keras_private.py`, `core/jax_private.py`). Each private access there is
a named function with a test against the installed versions
(`tests/test_tf_private.py`, `tests/test_keras_private.py`,
`tests/backends/test_jax_private.py`). Everywhere else these are refused:

private-import
    An import of a private module: `keras.src`, `jax._src`, `jaxlib`,
    `torch._*`, and TensorFlow's `tensorflow.python`, `tensorflow.core`,
    `tensorflow.compiler` and `tensorflow.tsl`; also such a module named by
    a string (`importlib.import_module`, `sys.modules`, an import hook) or
    reached as an attribute (`keras.src.x`). TensorFlow's generated protobuf
    modules count as private too: none is in TensorFlow's public API
    (`tf.*`), and their place is a build detail (TensorFlow 2.21 ships the
    coordination protos under `tensorflow.compiler.xla.tsl.protobuf`, while
    its `tensorflow.tsl` has no `protobuf` package). TensorBoard's own
    `tensorboard.compat.proto` is TensorBoard's public API and is not fenced.
private-name
    `getattr`, `hasattr`, `setattr`, `delattr` or `object.__setattr__` with
    a private name (`"_x"`, literal or a module-level string constant),
    which ruff's SLF001 does not see.
private-attribute
    `x._name` where `x` is not `self`/`cls` and no class of keras-gpu defines
    `_name` (a name some keras-gpu class defines is taken as that class's own).
patching
    Assigning or deleting an attribute of an object other than `self`/`cls`
    when the value is a function made here (a `def`, a `lambda`,
    `functools.partial`/`wraps`, `types.MethodType`), or when the attribute is
    one no keras-gpu class declares (a Keras object's `train_function`, a
    module's function, ...), or is a method Keras calls
    (:data:`KERAS_PATCH_POINTS`); also `setattr` with a name it cannot read.
import-hook
    `sys.meta_path`, `sys.path_hooks`, `builtins.__import__`, or a loader's
    `exec_module` replaced.

Attributes in keras-gpu's own namespace on foreign objects (`_keras_gpu_*`,
marks that change no behaviour) are allowed. A few public names that start
with `_` (`os._exit`, `sys._getframe`, `namedtuple._replace`, ...) are
allowed by :data:`PUBLIC_UNDERSCORE_NAMES`, and public attribute stores on
objects that are not keras-gpu's (ctypes prototypes, protobuf fields,
argparse) by :data:`PUBLIC_STORES`. Anything else that must stay outside
the fence goes in :data:`ALLOWED` with its reason.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "keras_gpu"
FENCE_FIX = (
    "Move it into a named function in keras_gpu/core/tf_private.py (TensorFlow), keras_gpu/core/keras_private.py "
    "(Keras), keras_gpu/core/jax_private.py (JAX), or keras_gpu/setup/keras_compat.py (an upstream fix), with a test "
    "in tests/test_*_private.py, and call that function here; or, if it is public after all, add it to ALLOWED, "
    "PUBLIC_UNDERSCORE_NAMES or PUBLIC_STORES in tests/test_private_fence.py with the reason."
)

PRIVATE_MODULE = re.compile(
    r"^(keras\.src|jax\._src|jaxlib|torch\._\w+|tensorflow\.(python|core|compiler|tsl))(\.\w+)*$"
)
PRIVATE_ATTRIBUTE_MODULE = re.compile(r"^(keras|tf|tensorflow)\.(src|python|core|compiler|tsl)$")
OWN_NAMESPACE = "_keras_gpu"

#: Names starting with `_` that are public API of Python's standard library.
PUBLIC_UNDERSCORE_NAMES = {
    "_exit": "os._exit: the documented exit without cleanup",
    "_getframe": "sys._getframe: documented CPython API",
    "_current_frames": "sys._current_frames: documented CPython API",
    "_SubParsersAction": "argparse's type of add_subparsers()'s result (for annotations)",
    "_replace": "namedtuple's documented method",
    "_asdict": "namedtuple's documented method",
    "_fields": "namedtuple's documented attribute",
    "_make": "namedtuple's documented method",
}

#: Attributes that may be assigned on objects that are not keras-gpu's: public fields of non-Keras objects.
PUBLIC_STORES = {
    "argtypes": "a ctypes function prototype's documented field",
    "restype": "a ctypes function prototype's documented field",
    "argv": "sys.argv, set for the program the worker runs",
    "required": "argparse: subparsers.required",
    "cluster_register_with_barrier": "a field of TensorFlow's coordination config protobuf (public message API)",
    "type_name": "a protobuf descriptor field (public protobuf API)",
    "oneof_index": "a protobuf descriptor field (public protobuf API)",
    "__wrapped__": "functools' mark on a wrapper keras-gpu made",
    "__module__": "the module of a class keras-gpu made",
    "__doc__": "the docstring of a class keras-gpu made",
    "__path__": "a keras-gpu package's own search path",
    "__signature__": "inspect's documented override, on a function keras-gpu made",
    "stop_training": "Model.stop_training: Keras' documented way for a callback to end fit",
}

#: Methods and functions Keras calls: replacing one on any object is patching, whatever keras-gpu declares.
KERAS_PATCH_POINTS = {
    "train_step", "test_step", "predict_step", "train_function", "test_function", "predict_function",
    "make_train_function", "make_test_function", "make_predict_function", "apply", "apply_gradients",
    "call", "compute_loss", "__init__", "__call__", "_get_iterator", "distribute_data_input",
}  # fmt: skip

#: Findings that stay where they are, keyed by (file, rule, name), with the reason.
#: An entry whose file no longer exists is ignored; one that matches nothing in an existing file fails.
ALLOWED: dict[tuple[str, str, str], str] = {
    ("keras_gpu/setup/jax_exit.py", "patching", "sys.excepthook"): (
        "Python's documented hook for uncaught exceptions, chained to the one it replaces; no Keras or JAX object"
    ),
    ("keras_gpu/cli/_worker.py", "private-import", "jaxlib"): (
        "a module name matched against a stack frame's file to tell which runtime a worker waits in; nothing is imported"
    ),
    ("keras_gpu/hooks/progress.py", "private-import", "jaxlib"): (
        "a module name matched against a stack frame's file to tell which runtime a worker waits in; nothing is imported"
    ),
    ("keras_gpu/hooks/step_probe.py", "patching", "self._trace.updated"): "the probe's own `threading.local`",
}


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    rule: str
    name: str
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: [{self.rule}] {self.name}: {self.text}"


def _modules() -> dict[str, ast.Module]:
    return {
        path.relative_to(ROOT).as_posix(): ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def _in_fence(path: str) -> bool:
    return path.endswith("_private.py") or path == "keras_gpu/setup/keras_compat.py"


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _own_members(modules: dict[str, ast.Module]) -> set[str]:
    """Every attribute name a keras-gpu class declares: methods, class attributes, slots, `self.x = ...`."""
    names: set[str] = set()
    for tree in modules.values():
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            for node in ast.walk(cls):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not cls:
                    names.add(node.name)
                elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                    names.add(node.target.id)
                elif isinstance(node, ast.Assign):
                    for target in node.targets:
                        if isinstance(target, ast.Name):
                            names.add(target.id)
                            if target.id == "__slots__":
                                names.update(c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant))
                if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _is_self(node.value):
                    names.add(node.attr)
    return {n for n in names if isinstance(n, str)}


def _is_self(node: ast.AST) -> bool:
    if isinstance(node, ast.Name) and node.id in ("self", "cls"):
        return True
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"


def _string_constants(tree: ast.Module) -> dict[str, str]:
    """The module-level `NAME = "text"` constants of a module."""
    out = {}
    for node in tree.body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        value = getattr(node, "value", None)
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            out.update({t.id: value.value for t in targets if isinstance(t, ast.Name)})
    return out


def _docstrings(tree: ast.Module) -> set[int]:
    """The ids of the string constants that are docstrings or other bare string statements."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
    }


def _function_names(tree: ast.Module) -> set[str]:
    return {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _makes_function(value: ast.AST, functions: set[str]) -> bool:
    """Whether `value` is a function made in this module (a def, lambda, partial, wraps, MethodType)."""
    if isinstance(value, ast.Lambda):
        return True
    if isinstance(value, ast.Name):
        return value.id in functions
    if isinstance(value, ast.Call):
        func = value.func
        if isinstance(func, ast.Call):  # functools.wraps(original)(wrapper)
            func = func.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        return name in ("partial", "wraps", "MethodType", "update_wrapper")
    return False


class _Scanner(ast.NodeVisitor):
    """Every fence finding in one module."""

    def __init__(self, path: str, tree: ast.Module, own: set[str], constants: dict[str, str]) -> None:
        self.path = path
        self.lines = Path(ROOT / path).read_text(encoding="utf-8").splitlines()
        self.own = own
        self.constants = {**constants, **_string_constants(tree)}
        self.docstrings = _docstrings(tree)
        self.functions = _function_names(tree)
        self.findings: list[Finding] = []
        self.selves: list[frozenset[str]] = [frozenset()]  # the names bound to the instance or class, per scope
        self.class_body = False

    def _is_self(self, node: ast.AST) -> bool:
        """`self`/`cls` of the enclosing method (first parameter of a def in a class body), or `super()`."""
        if isinstance(node, ast.Name):
            return node.id in self.selves[-1]
        return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        outer, self.class_body = self.class_body, True
        for child in node.body:
            self.visit(child)
        self.class_body = outer

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        selves = self.selves[-1]
        params = [*node.args.posonlyargs, *node.args.args]
        is_static = any(ast.unparse(d) == "staticmethod" for d in node.decorator_list)
        if self.class_body and params and not is_static:
            selves = selves | {params[0].arg}
        outer, self.class_body = self.class_body, False
        self.selves.append(frozenset(selves))
        self.generic_visit(node)
        self.selves.pop()
        self.class_body = outer

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self.visit_FunctionDef(node)

    def _add(self, node: ast.AST, rule: str, name: str) -> None:
        text = self.lines[node.lineno - 1].strip() if node.lineno <= len(self.lines) else ""
        self.findings.append(Finding(self.path, node.lineno, rule, name, text))

    # -- imports and module names ---------------------------------------------------------------

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if PRIVATE_MODULE.match(alias.name):
                self._add(node, "private-import", alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level == 0 and PRIVATE_MODULE.match(module):
            self._add(node, "private-import", module)
        elif node.level == 0 and module in ("keras", "jax", "tensorflow"):
            for alias in node.names:
                if PRIVATE_MODULE.match(f"{module}.{alias.name}"):
                    self._add(node, "private-import", f"{module}.{alias.name}")

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and id(node) not in self.docstrings and PRIVATE_MODULE.match(node.value):
            self._add(node, "private-import", node.value)

    # -- attributes -----------------------------------------------------------------------------

    def visit_Attribute(self, node: ast.Attribute) -> None:
        dotted = ast.unparse(node)
        if PRIVATE_ATTRIBUTE_MODULE.match(dotted):
            self._add(node, "private-import", dotted)
        elif dotted in ("sys.meta_path", "sys.path_hooks", "builtins.__import__"):
            self._add(node, "import-hook", dotted)
        elif (
            _is_private(node.attr)
            and not self._is_self(node.value)
            and not node.attr.startswith(OWN_NAMESPACE)
            and node.attr not in PUBLIC_UNDERSCORE_NAMES
            and node.attr not in self.own
        ):
            self._add(node, "private-attribute", node.attr)
        self.generic_visit(node)

    def _store(self, target: ast.AST, value: ast.AST | None) -> None:
        if not isinstance(target, ast.Attribute) or self._is_self(target.value):
            return
        attr = target.attr
        if attr == "exec_module":
            self._add(target, "import-hook", ast.unparse(target))
        elif attr.startswith(OWN_NAMESPACE):
            return
        elif attr in KERAS_PATCH_POINTS or (value is not None and _makes_function(value, self.functions)):
            self._add(target, "patching", ast.unparse(target))
        elif attr not in self.own and attr not in PUBLIC_STORES:
            self._add(target, "patching", ast.unparse(target))

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            for element in target.elts if isinstance(target, ast.Tuple) else [target]:
                self._store(element, node.value)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._store(node.target, node.value)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._store(node.target, None)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self._store(target, None)
        self.generic_visit(node)

    # -- getattr and friends --------------------------------------------------------------------

    def visit_Call(self, node: ast.Call) -> None:
        func = ast.unparse(node.func)
        if func in ("getattr", "hasattr", "setattr", "delattr", "object.__setattr__", "object.__delattr__"):
            if len(node.args) >= 2 and not self._is_self(node.args[0]):
                self._by_name(node, func, node.args[1], node.args[2] if len(node.args) > 2 else None)
        self.generic_visit(node)

    def _by_name(self, node: ast.Call, func: str, arg: ast.AST, value: ast.AST | None) -> None:
        name = None
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            name = arg.value
        elif isinstance(arg, ast.Name):
            name = self.constants.get(arg.id)
        writes = func.endswith(("setattr", "delattr", "__setattr__", "__delattr__"))
        if name is None:
            if writes:
                self._add(node, "patching", f"{func}(..., {ast.unparse(arg)}, ...): a name the fence cannot read")
            return
        if name.startswith(OWN_NAMESPACE):
            return
        if _is_private(name):
            self._add(node, "private-name", f"{func}(..., {name!r})")
        elif writes and (name in KERAS_PATCH_POINTS or (value is not None and _makes_function(value, self.functions))):
            self._add(node, "patching", f"{func}(..., {name!r}, ...)")


def _findings() -> list[Finding]:
    modules = _modules()
    own = _own_members(modules)
    constants: dict[str, str] = {}
    for tree in modules.values():  # keras-gpu's string constants, for names imported from another module
        constants.update(_string_constants(tree))
    out = []
    for path, tree in modules.items():
        if _in_fence(path):
            continue
        scanner = _Scanner(path, tree, own, constants)
        scanner.visit(tree)
        out.extend(scanner.findings)
    return out


def test_no_private_keras_tensorflow_or_jax_access_outside_the_fence():
    findings = _findings()
    refused = [f for f in findings if (f.path, f.rule, f.name) not in ALLOWED]
    message = "\n".join(str(f) for f in refused)
    assert not refused, (
        f"{len(refused)} private Keras/TensorFlow/JAX access(es) outside the fence modules "
        f"(rules: see tests/test_private_fence.py's docstring):\n{message}\n\n{FENCE_FIX}"
    )


def test_every_allowed_exception_still_matches_something():
    found = {(f.path, f.rule, f.name) for f in _findings()}
    stale = [key for key in ALLOWED if (ROOT / key[0]).exists() and key not in found]
    assert not stale, f"ALLOWED in tests/test_private_fence.py lists what the code no longer does; delete: {stale}"


def test_the_fence_modules_exist_and_have_their_tests():
    fence = sorted(p.relative_to(ROOT).as_posix() for p in PACKAGE.rglob("*_private.py"))
    assert "keras_gpu/core/tf_private.py" in fence and "keras_gpu/core/keras_private.py" in fence
    tests = {p.name for p in (ROOT / "tests").rglob("test_*_private.py")}
    missing = [p for p in fence if f"test_{Path(p).name}" not in tests]
    assert not missing, (
        f"fence modules without a tests/test_<module>.py checking them on the installed versions: {missing}"
    )


# --------------------------------------------------------------------------- the scanner itself


def _scan(source: str) -> list[tuple[str, str]]:
    tree = ast.parse(source)
    scanner = _Scanner.__new__(_Scanner)
    scanner.path, scanner.lines, scanner.own = "x.py", source.splitlines(), {"_own"}
    scanner.constants, scanner.docstrings = _string_constants(tree), _docstrings(tree)
    scanner.functions, scanner.findings = _function_names(tree), []
    scanner.selves, scanner.class_body = [frozenset()], False
    scanner.visit(tree)
    return [(f.rule, f.name) for f in scanner.findings]


def test_the_scanner_catches_each_kind_of_private_access():
    source = '''
"""Docstring naming keras.src.trainers is fine."""
import importlib, sys
from keras.src.trainers import epoch_iterator
from jax._src import xla_bridge
import tensorflow.python.framework.ops
from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2
from tensorflow import python
_NAME = "_num_samples"
MODULE = "keras.src.callbacks.callback_list"
importlib.import_module("jax._src.xla_bridge")
getattr(adapter, "_inputs", None)
hasattr(ctx, _NAME)
setattr(model, "_x", 1)
object.__setattr__(model, "_keras_gpu_probe", probe)
model._inputs_struct
probe._own
os._exit(1)
def step(data):
    return data
model.train_step = step
optimizer.apply = lambda *a: None
model.train_function = None
module.distribute_data_input = functools.wraps(f)(g)
record.field = 3
setattr(model, name, 1)
sys.meta_path.insert(0, finder)
spec.loader.exec_module = run
keras.src.backend
class Owner:
    def method(self, cls):
        self._x = lambda: None
        cls.__init__ = init
        def inner():
            self._y = 1
    @staticmethod
    def static(self):
        self.train_step = None
def patch(cls):
    cls.__init__ = lambda self: None
'''
    assert _scan(source) == [
        ("private-import", "keras.src.trainers"),
        ("private-import", "jax._src"),
        ("private-import", "tensorflow.python.framework.ops"),
        ("private-import", "tensorflow.compiler.xla.tsl.protobuf"),
        ("private-import", "tensorflow.python"),
        ("private-import", "keras.src.callbacks.callback_list"),
        ("private-import", "jax._src.xla_bridge"),
        ("private-name", "getattr(..., '_inputs')"),
        ("private-name", "hasattr(..., '_num_samples')"),
        ("private-name", "setattr(..., '_x')"),
        ("private-attribute", "_inputs_struct"),
        ("patching", "model.train_step"),
        ("patching", "optimizer.apply"),
        ("patching", "model.train_function"),
        ("patching", "module.distribute_data_input"),
        ("patching", "record.field"),
        ("patching", "setattr(..., name, ...): a name the fence cannot read"),
        ("import-hook", "sys.meta_path"),
        ("import-hook", "spec.loader.exec_module"),
        ("private-import", "keras.src"),
        ("patching", "cls.__init__"),
        ("patching", "self.train_step"),
        ("patching", "cls.__init__"),
    ]
