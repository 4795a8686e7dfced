"""The module paths of earlier releases, kept importable for one release.

keras-gpu's modules moved into layer subpackages (`core`, `setup`, `meters`,
`output`, `hooks`, `cli`). Importing a module by its old path, for example
`keras_gpu.strategy` or `keras_gpu.loggers`, still works: it gives the module
at its new path (the same module object) and warns once with a
`DeprecationWarning` naming the new path. The public API (`keras_gpu.X`)
did not move.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType
from typing import Any

__all__ = ["MOVED", "install"]

#: Old module path -> new module path.
MOVED: dict[str, str] = {
    "keras_gpu.backend": "keras_gpu.core.backend",
    "keras_gpu.cluster": "keras_gpu.core.cluster",
    "keras_gpu.nvml": "keras_gpu.core.nvml",
    "keras_gpu.nvml_sampler": "keras_gpu.core.nvml_sampler",
    "keras_gpu.topology": "keras_gpu.core.topology",
    "keras_gpu.devices": "keras_gpu.setup.devices",
    "keras_gpu.strategy": "keras_gpu.setup.strategy",
    "keras_gpu.cluster_view": "keras_gpu.meters.cluster_view",
    "keras_gpu.flops": "keras_gpu.meters.flops",
    "keras_gpu.gpu_lines": "keras_gpu.meters.gpu_lines",
    "keras_gpu.placement": "keras_gpu.meters.placement",
    "keras_gpu.steptime": "keras_gpu.meters.step_time",
    "keras_gpu.throughput": "keras_gpu.meters.throughput",
    "keras_gpu.xspace": "keras_gpu.meters.xspace",
    "keras_gpu.placement_markdown": "keras_gpu.output.placement_markdown",
    "keras_gpu.report": "keras_gpu.output.reader",
    "keras_gpu.tags": "keras_gpu.output.tags",
    "keras_gpu.backup": "keras_gpu.hooks.backup",
    "keras_gpu.checkpoint": "keras_gpu.hooks.checkpoint",
    "keras_gpu.gather": "keras_gpu.hooks.gather",
    "keras_gpu.heartbeat": "keras_gpu.hooks.heartbeat",
    "keras_gpu.loggers": "keras_gpu.hooks.factory",
    "keras_gpu.loggers.memory": "keras_gpu.hooks.memory_logger",
    "keras_gpu.loggers.placement": "keras_gpu.hooks.placement_logger",
    "keras_gpu.loggers.step_time": "keras_gpu.hooks.step_time_logger",
    "keras_gpu.loggers.throughput": "keras_gpu.hooks.throughput_logger",
    "keras_gpu.progress": "keras_gpu.hooks.progress",
    "keras_gpu.step_probe": "keras_gpu.hooks.step_probe",
    "keras_gpu.envinfo": "keras_gpu.cli.envinfo",
}

_PACKAGES = frozenset({"keras_gpu.loggers"})  # old paths that were packages


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path and loads the module of its new path under it."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=fullname in _PACKAGES)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = MOVED[spec.name]
        warnings.warn(
            f"`{spec.name}` moved to `{new}`; the old path works in this release only. Import `{new}` (or the "
            "public `keras_gpu.<name>`) instead.",
            DeprecationWarning,
            stacklevel=2,
        )
        module = importlib.import_module(new)
        if spec.name not in _PACKAGES:
            return module
        # An old package path (its submodules' old paths import through it): a package that re-exports.
        package = ModuleType(spec.name, module.__doc__)
        package.__dict__.update({name: getattr(module, name) for name in getattr(module, "__all__", ())})
        package.__path__ = []
        return package

    def exec_module(self, module: ModuleType) -> None:
        """The module ran already, at its new path."""


def install() -> None:
    """Make the old paths importable (once per process)."""
    if not any(isinstance(f, _Alias) for f in sys.meta_path):
        sys.meta_path.insert(0, _Alias())  # before any path finder: an old path never finds a file
