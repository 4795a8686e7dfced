"""What `keras-gpu scale` tells each worker it starts: where to write its window, and the window's length.

Keras-free, so the worker bootstrap can read it before the script chooses
its backend. The callback that measures the window is
`keras_gpu.hooks.scale_window.ScaleWindow`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["ENV_SCALE_DIR", "ENV_SCALE_STEPS", "ENV_SCALE_WARMUP", "ScaleSettings", "result_path", "settings_from_env"]

ENV_SCALE_DIR = "KERAS_GPU_SCALE_DIR"
"""Environment variable: the folder where each worker writes `worker<i>.json`; unset outside `keras-gpu scale`."""
ENV_SCALE_WARMUP = "KERAS_GPU_SCALE_WARMUP"
"""Environment variable: training steps before the measured window."""
ENV_SCALE_STEPS = "KERAS_GPU_SCALE_STEPS"
"""Environment variable: training steps in the measured window."""


@dataclass(frozen=True)
class ScaleSettings:
    """One worker's part in a scaling study.

    Attributes:
        folder: Where the worker writes its result.
        warmup: Steps before the window (compilation, first executions).
        steps: Steps in the window.
        worker: The worker's rank.
    """

    folder: str
    warmup: int
    steps: int
    worker: int


def settings_from_env(env: Mapping[str, str] | None = None) -> ScaleSettings | None:
    """The study's settings from the environment, or `None` outside `keras-gpu scale`.

    Raises:
        ValueError: A variable that `keras-gpu scale` would not have set.
    """
    env = os.environ if env is None else env
    folder = env.get(ENV_SCALE_DIR, "").strip()
    if not folder:
        return None
    values = {}
    for name, minimum in ((ENV_SCALE_WARMUP, 0), (ENV_SCALE_STEPS, 1)):
        text = env.get(name, "")
        try:
            values[name] = int(text)
        except ValueError:
            values[name] = -1
        if values[name] < minimum:
            raise ValueError(f"{name} must be an integer >= {minimum}. Received: {name}={text!r}")
    worker = int(env.get("KERAS_GPU_WORKER_INDEX", "0") or 0)
    return ScaleSettings(folder, values[ENV_SCALE_WARMUP], values[ENV_SCALE_STEPS], worker)


def result_path(folder: str, worker: int) -> str:
    """The file worker `worker` writes its result to."""
    return os.path.join(folder, f"worker{worker}.json")
