"""Worker bootstrap for `keras-gpu launch --cpu-replicas K`.

```
python -m keras_gpu.cli._worker --cpu-replicas K -- script.py [args...]
python -m keras_gpu.cli._worker --cpu-replicas K -- -m module [args...]
```

Splits the process's CPU into `K` logical devices, which must happen before
TensorFlow initialises its devices, then runs the script (or module) as
`__main__` with the `sys.argv` and `sys.path[0]` that plain `python` would
give it.
"""

from __future__ import annotations

import os
import runpy
import sys
from collections.abc import Sequence

__all__ = ["main"]

_MAX_REPLICAS = 4096  # configure_devices' bound on logical devices
_USAGE = "usage: python -m keras_gpu.cli._worker --cpu-replicas K -- (script.py | -m module) [args...]"


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the bootstrap's arguments, split the CPU, then run the target."""
    argv = list(sys.argv[1:] if argv is None else argv)
    replicas, target = _parse(argv)
    _split_cpu(replicas)
    _run_target(target)


def _parse(argv: list[str]) -> tuple[int, list[str]]:
    if len(argv) < 4 or argv[0] != "--cpu-replicas" or argv[2] != "--":
        raise SystemExit(f"{_USAGE}\nReceived: {argv!r}")
    try:
        replicas = int(argv[1])
    except ValueError:
        replicas = 0
    if not 1 <= replicas <= _MAX_REPLICAS:
        raise SystemExit(
            f"--cpu-replicas must be an integer from 1 to {_MAX_REPLICAS}. Received: --cpu-replicas {argv[1]!r}"
        )
    target = argv[3:]
    if target[0] == "-m" and len(target) < 2:
        raise SystemExit(f"`-m` needs a module name.\n{_USAGE}")
    return replicas, target


def _split_cpu(replicas: int) -> None:
    """Give this process `replicas` logical CPU devices."""
    from keras_gpu.devices import configure_devices

    configure_devices(cpu_devices=replicas)


def _run_target(target: list[str]) -> None:
    """Run `script.py args...` or `-m module args...` as `__main__`."""
    if target[0] == "-m":
        module, args = target[1], target[2:]
        sys.argv = [module, *args]  # run_module replaces argv[0] with the module's file
        sys.path[0] = os.getcwd()
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    else:
        script, args = target[0], target[1:]
        sys.argv = [script, *args]
        sys.path[0] = os.path.dirname(os.path.abspath(script))
        runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
