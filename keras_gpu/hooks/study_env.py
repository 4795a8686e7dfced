"""What `keras-gpu scale` and `keras-gpu tune` tell each process they start: one child protocol for both.

Keras-free, so the worker bootstrap can read it before the script chooses
its backend. Every run of either command is one job of the script, each
worker started with:

* `KERAS_GPU_STUDY_DIR`: the folder where worker `i` writes its one record,
  `worker<i>.json` (`result_path`): the measured window, what the run
  trained, and the error where its `fit` raised;
* `KERAS_GPU_STUDY_WARMUP`, `KERAS_GPU_STUDY_STEPS`: the window's place;
* `KERAS_GPU_STUDY_TOOL`: `scale` or `tune` (the messages name it);
* `KERAS_GPU_STUDY_CHANGE`: the change to apply, a JSON object (`{}`: the
  script as written; the keys are `CHANGE_KEYS`, see
  `keras_gpu.hooks.tune_private`).

The one injection into the script's `fit` that reads them is
`keras_gpu.hooks.study`.

Examples:
    >>> env = {ENV_STUDY_DIR: "/tmp/run", ENV_STUDY_WARMUP: "20", ENV_STUDY_STEPS: "100"}
    >>> settings = settings_from_env(env)
    >>> (settings.warmup, settings.steps, settings.tool, settings.change)
    (20, 100, 'scale', {})
    >>> result_path("/tmp/run", 1)
    '/tmp/run/worker1.json'
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CHANGE_KEYS",
    "ENV_STUDY_CHANGE",
    "ENV_STUDY_DIR",
    "ENV_STUDY_STEPS",
    "ENV_STUDY_TOOL",
    "ENV_STUDY_WARMUP",
    "StudySettings",
    "result_path",
    "settings_from_env",
    "study_env",
]

ENV_STUDY_DIR = "KERAS_GPU_STUDY_DIR"
"""Environment variable: the folder where each worker writes `worker<i>.json`; unset outside a study."""
ENV_STUDY_WARMUP = "KERAS_GPU_STUDY_WARMUP"
"""Environment variable: training steps before the measured window."""
ENV_STUDY_STEPS = "KERAS_GPU_STUDY_STEPS"
"""Environment variable: training steps in the measured window."""
ENV_STUDY_TOOL = "KERAS_GPU_STUDY_TOOL"
"""Environment variable: the command that started the run, `scale` or `tune`."""
ENV_STUDY_CHANGE = "KERAS_GPU_STUDY_CHANGE"
"""Environment variable: the change to apply in the run, as a JSON object (`{}` or unset: none)."""

CHANGE_KEYS = ("steps_per_execution", "jit_compile", "policy", "batch_factor", "prefetch", "parallel_map",
               "tf_data_autotune", "workers")
"""The keys a change may have (what each does: `keras_gpu.hooks.tune_private`)."""

_TOOLS = ("scale", "tune")


@dataclass(frozen=True)
class StudySettings:
    """One process's part in a study's run.

    Attributes:
        folder: Where the worker writes its record.
        warmup: Steps before the window (compilation, first executions).
        steps: Steps in the window.
        worker: The worker's rank.
        tool: `"scale"` or `"tune"`.
        change: The change to apply (`{}`: the script as written).
    """

    folder: str
    warmup: int
    steps: int
    worker: int = 0
    tool: str = "scale"
    change: Mapping[str, Any] = field(default_factory=dict)


def study_env(folder: str, warmup: int, steps: int, tool: str, change: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The variables that start one run of a study (`settings_from_env` reads them back in the worker)."""
    return {
        ENV_STUDY_DIR: folder,
        ENV_STUDY_WARMUP: str(warmup),
        ENV_STUDY_STEPS: str(steps),
        ENV_STUDY_TOOL: tool,
        ENV_STUDY_CHANGE: json.dumps(dict(change or {})),
    }


def settings_from_env(env: Mapping[str, str] | None = None) -> StudySettings | None:
    """The run's settings from the environment, or `None` outside `keras-gpu scale` and `keras-gpu tune`.

    Raises:
        ValueError: A variable that neither command would have set.
    """
    env = os.environ if env is None else env
    folder = env.get(ENV_STUDY_DIR, "").strip()
    if not folder:
        return None
    values = {}
    for name, minimum in ((ENV_STUDY_WARMUP, 0), (ENV_STUDY_STEPS, 1)):
        text = env.get(name, "")
        try:
            values[name] = int(text)
        except ValueError:
            values[name] = -1
        if values[name] < minimum:
            raise ValueError(f"{name} must be an integer >= {minimum}. Received: {name}={text!r}")
    tool = env.get(ENV_STUDY_TOOL, "scale").strip() or "scale"
    if tool not in _TOOLS:
        raise ValueError(f"{ENV_STUDY_TOOL} must be one of {', '.join(_TOOLS)}. Received: {ENV_STUDY_TOOL}={tool!r}")
    worker = int(env.get("KERAS_GPU_WORKER_INDEX", "0") or 0)
    return StudySettings(folder, values[ENV_STUDY_WARMUP], values[ENV_STUDY_STEPS], worker, tool,
                         _change(env.get(ENV_STUDY_CHANGE, "")))


def _change(text: str) -> dict[str, Any]:
    if not text.strip():
        return {}
    try:
        change = json.loads(text)
    except ValueError:
        change = None
    if not isinstance(change, dict) or any(k not in CHANGE_KEYS for k in change):
        raise ValueError(
            f"{ENV_STUDY_CHANGE} must be a JSON object with keys among {', '.join(CHANGE_KEYS)}. Received: {text!r}"
        )
    return change


def result_path(folder: str, worker: int) -> str:
    """The file worker `worker` writes its record to."""
    return os.path.join(folder, f"worker{worker}.json")
