"""The package imports cheaply, without touching devices, and without TensorFlow."""

from __future__ import annotations

import inspect
import subprocess
import sys

import keras_gpu
from tests._util import REPO, run_python, subprocess_env


def test_import_does_not_import_tensorflow_or_initialise_devices():
    proc = run_python(
        """
        import os, sys
        before = dict(os.environ)
        import keras_gpu
        assert "tensorflow" not in sys.modules, "import keras_gpu imported TensorFlow"
        assert dict(os.environ) == before, "import keras_gpu changed the environment"
        import tensorflow as tf
        # Still possible only while the runtime is uninitialised.
        from tests._util import split_cpu
        split_cpu(2)
        print(len(tf.config.list_logical_devices("CPU")))
        """
    )
    assert proc.stdout.strip().splitlines()[-1] == "2"


def test_public_names_resolve_lazily():
    proc = run_python(
        """
        import sys, keras_gpu
        for name in keras_gpu.__all__:
            assert getattr(keras_gpu, name) is not None, name
        print(sorted(n for n in keras_gpu.__all__))
        """
    )
    assert "make_strategy" in proc.stdout and "configure_devices" in proc.stdout


def test_unknown_attribute_raises_attribute_error():
    try:
        keras_gpu.not_a_thing  # noqa: B018
    except AttributeError as exc:
        assert "not_a_thing" in str(exc)
    else:  # pragma: no cover
        raise AssertionError("expected AttributeError")


def test_import_works_without_tensorflow_and_tf_only_parts_name_the_install_line():
    # -S drops site-packages from sys.path, so TensorFlow cannot be found.
    code = (
        f"import sys; sys.path.insert(0, {str(REPO)!r}); import keras_gpu; "
        "from keras_gpu.core.backend import require_tensorflow; print('imported'); "
        "require_tensorflow('keras_gpu.make_strategy()')"
    )
    proc = subprocess.run(
        [sys.executable, "-S", "-c", code], env=subprocess_env(), capture_output=True, text=True, timeout=60
    )
    assert proc.stdout.strip() == "imported"
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: keras_gpu.make_strategy() needs TensorFlow, which is not installed.")
    assert 'pip install "tensorflow-cpu>=2.16,<2.22"' in last and 'pip install "tensorflow[and-cuda]>=2.16,<2.22"' in last


def test_version_is_exposed():
    assert keras_gpu.__version__.count(".") >= 2


def test_callback_hooks_exist_on_keras_callback():
    # A hook name Keras never calls is a silent bug; every on_* we define must be a real hook.
    import keras

    from keras_gpu.hooks.factory import MemoryLogger, PlacementLogger, ThroughputLogger

    for cls in (ThroughputLogger, MemoryLogger, PlacementLogger):
        for name, member in inspect.getmembers(cls, inspect.isfunction):
            if name.startswith("on_"):
                assert hasattr(keras.callbacks.Callback, name), f"{cls.__name__}.{name} is not a Keras hook"
                ours = inspect.signature(member)
                theirs = inspect.signature(getattr(keras.callbacks.Callback, name))
                assert list(ours.parameters) == list(theirs.parameters), f"{cls.__name__}.{name} signature"


def test_the_type_checking_imports_name_every_export_and_its_module():
    # The lazy export table and the imports type checkers read are kept in two places: they must agree.
    import ast

    tree = ast.parse(open(keras_gpu.__file__, encoding="utf-8").read())
    (block,) = [n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"]
    imported = {alias.name: node.module for node in block.body if isinstance(node, ast.ImportFrom) for alias in node.names}
    assert imported == keras_gpu._EXPORTS
