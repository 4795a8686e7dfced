"""One `keras-gpu tune` candidate applied inside the user's process, the way the user would write it.

The worker bootstrap (`keras_gpu.cli._worker`) calls `install_from_env`
before the script runs when `keras-gpu tune` started it
(`KERAS_GPU_TUNE_CHANGE` is set). This is the one module that patches for
`keras-gpu tune` (a fence module: it replaces methods of Keras and tf.data
classes and hooks the import of `keras` and `tensorflow`, so the script still
chooses its backend). The change is a dict; each key is what a user would
write:

* `steps_per_execution`, `jit_compile`: arguments of `model.compile(...)`;
* `policy`: `keras.mixed_precision.set_global_policy(policy)`, set as soon as
  the script imports Keras;
* `batch_factor`: `model.fit(x, y, batch_size=batch_size * factor)` where
  `fit` is given arrays (`epochs` grows by the same factor, so the run still
  has its warm-up and measured steps);
* `prefetch`: `dataset.prefetch(tf.data.AUTOTUNE)` on the `tf.data.Dataset`
  given to `fit`;
* `parallel_map`: `dataset.map(f, num_parallel_calls=tf.data.AUTOTUNE,
  deterministic=True)` for every `map` the script calls without
  `num_parallel_calls` (the order, and so the arithmetic, stays);
* `tf_data_autotune`: the dataset given to `fit` with tf.data's autotuning,
  parallel map rewrite and injected prefetch on (`with_options`);
* `workers`: `PyDataset(workers=...)` for every `PyDataset` built with fewer.

An empty change (the baseline) changes nothing and still records what the
script did (`FACTS`): what `fit` is given, its batch size, how many `map`
calls run sequentially, whether it prefetches, the dataset's options; the
callback `keras_gpu.hooks.tune_record.TuneRecord`, added to every `fit`,
writes them with the losses and the peak memory.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

from keras_gpu.core import keras_private

__all__ = [
    "ENV_TUNE_CHANGE",
    "ENV_TUNE_DIR",
    "ERROR_FILE",
    "FACTS",
    "change_from_env",
    "compile_arguments",
    "fit_arguments",
    "input_kind",
    "install",
    "install_from_env",
]

ENV_TUNE_CHANGE = "KERAS_GPU_TUNE_CHANGE"
"""Environment variable: the candidate's change as JSON (`{}` for the baseline); unset outside `keras-gpu tune`."""
ENV_TUNE_DIR = "KERAS_GPU_TUNE_DIR"
"""Environment variable: the folder where the run's `tune.json` (facts, losses, memory) is written."""

FACTS: dict[str, Any] = {}
"""What the script did, as the patched calls saw it (this process only)."""

_CHANGE: dict[str, Any] = {}
_FOLDER: list[str] = []
_MARK = "_keras_gpu_tune"  # keras-gpu's mark on a method it put in a class's place
_DEFAULT_BATCH = 32  # Keras' batch size for arrays when fit is given none
_KNOWN = ("steps_per_execution", "jit_compile", "policy", "batch_factor", "prefetch", "parallel_map",
          "tf_data_autotune", "workers")


def change_from_env(env: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The candidate's change from `KERAS_GPU_TUNE_CHANGE`, or `None` outside `keras-gpu tune`.

    Raises:
        ValueError: A value that `keras-gpu tune` would not have set.
    """
    env = os.environ if env is None else env
    text = env.get(ENV_TUNE_CHANGE, "").strip()
    if not text:
        return None
    try:
        change = json.loads(text)
    except ValueError:
        change = None
    if not isinstance(change, dict) or any(k not in _KNOWN for k in change):
        raise ValueError(
            f"{ENV_TUNE_CHANGE} must be a JSON object with keys among {', '.join(_KNOWN)}. Received: {text!r}"
        )
    return change


def install_from_env() -> bool:
    """Apply the change `keras-gpu tune` asked for (see the module's text); returns whether there was one."""
    change = change_from_env()
    if change is None:
        return False
    install(change, os.environ.get(ENV_TUNE_DIR, ""))
    return True


def install(change: Mapping[str, Any], folder: str) -> None:
    """Apply `change` when the script imports Keras and TensorFlow (at once where it has), recording `FACTS`.

    Args:
        change: The candidate (keys: see the module's text; `{}`: the baseline).
        folder: Where `TuneRecord` writes `tune.json` (empty: nowhere).
    """
    _CHANGE.clear()
    _CHANGE.update(change)
    _FOLDER[:] = [folder]
    for name, patch in (("keras", _patch_keras), ("tensorflow", _patch_tf_data)):
        keras_private.patch_on_import(name, patch)


# --------------------------------------------------------------------------- Keras: compile, fit, PyDataset, policy


def _patch_keras(keras: Any) -> None:
    policy = _CHANGE.get("policy")
    if policy:
        keras.mixed_precision.set_global_policy(policy)
    model = keras.Model
    if getattr(model.compile, _MARK, False):
        return
    _replace(model, "compile", _wrap_compile)
    _replace(model, "fit", _wrap_fit)
    _replace(keras.utils.PyDataset, "__init__", _wrap_py_dataset_init)


def _replace(cls: type, name: str, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    wrapped = wrap(getattr(cls, name))
    setattr(wrapped, _MARK, True)
    setattr(cls, name, wrapped)


def compile_arguments(arguments: dict[str, Any], change: Mapping[str, Any]) -> dict[str, Any]:
    """`model.compile`'s bound arguments with the change's `steps_per_execution` and `jit_compile` in place."""
    FACTS["compile_steps_per_execution"] = arguments.get("steps_per_execution", 1)
    FACTS["compile_jit_compile"] = arguments.get("jit_compile", "auto")
    out = dict(arguments)
    for key in ("steps_per_execution", "jit_compile"):
        if key in change:
            out[key] = change[key]
    return out


def _wrap_compile(original: Callable[..., Any]) -> Callable[..., Any]:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def compile(self: Any, *args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        arguments = compile_arguments(dict(bound.arguments), _CHANGE)
        return original(**arguments)

    return compile


def input_kind(x: Any) -> str:
    """What `fit` is given: `"tf.data"`, `"PyDataset"`, `"DataLoader"`, `"generator"` or `"arrays"`."""
    tf = sys.modules.get("tensorflow")
    if tf is not None and isinstance(x, tf.data.Dataset):
        return "tf.data"
    keras = sys.modules.get("keras")
    if keras is not None and isinstance(x, keras.utils.PyDataset):
        return "PyDataset"
    if type(x).__name__ == "DataLoader":
        return "DataLoader"
    if inspect.isgenerator(x) or hasattr(x, "__next__"):
        return "generator"
    return "arrays"


def fit_arguments(arguments: dict[str, Any], change: Mapping[str, Any]) -> dict[str, Any]:
    """`model.fit`'s bound arguments with the change's batch size and tf.data input changes in place."""
    out = dict(arguments)
    x = out.get("x")
    kind = input_kind(x)
    FACTS["fit_input"] = kind
    # The script's own calls, before Keras' data adapters make theirs.
    FACTS["script_sequential_maps"] = FACTS.get("sequential_maps", 0)
    FACTS["script_prefetches"] = FACTS.get("prefetch_calls", 0)
    if kind == "arrays":
        batch = out.get("batch_size") or _DEFAULT_BATCH
        FACTS["batch_size"] = batch
        factor = int(change.get("batch_factor", 1))
        if factor > 1:
            out["batch_size"] = batch * factor
            out["epochs"] = int(out.get("epochs") or 1) * factor
    elif kind == "tf.data":
        import tensorflow as tf

        options = x.options()
        FACTS["tf_data_autotune"] = bool(options.autotune.enabled is not False)
        FACTS["tf_data_map_parallelization"] = bool(options.experimental_optimization.map_parallelization is not False)
        FACTS["tf_data_inject_prefetch"] = bool(options.experimental_optimization.inject_prefetch is not False)
        if change.get("tf_data_autotune"):
            fixed = tf.data.Options()
            fixed.autotune.enabled = True
            fixed.experimental_optimization.map_parallelization = True
            fixed.experimental_optimization.inject_prefetch = True
            x = x.with_options(fixed)
        if change.get("prefetch"):
            x = x.prefetch(tf.data.AUTOTUNE)
        out["x"] = x
    elif kind == "PyDataset":
        FACTS["pydataset_workers"] = int(getattr(x, "workers", 1) or 1)
    return out


def _wrap_fit(original: Callable[..., Any]) -> Callable[..., Any]:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def fit(self: Any, *args: Any, **kwargs: Any) -> Any:
        from keras_gpu.hooks.tune_record import TuneRecord

        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        arguments = fit_arguments(dict(bound.arguments), _CHANGE)
        callbacks = arguments.get("callbacks")
        items = [] if callbacks is None else list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks]
        folder = _FOLDER[0] if _FOLDER else ""
        arguments["callbacks"] = [*items, TuneRecord(folder, FACTS, dict(_CHANGE))]
        try:
            return original(**arguments)
        except Exception as exc:
            _write_error(folder, exc)  # the row says what failed; the script's own handling is unchanged
            raise

    return fit


ERROR_FILE = "error.json"
"""The file a run whose `fit` raised writes in its folder: the exception's type and message."""


def _write_error(folder: str, exc: BaseException) -> None:
    if not folder:
        return
    message = str(exc).strip().splitlines()
    with open(os.path.join(folder, ERROR_FILE), "w", encoding="utf-8") as f:
        json.dump({"error": f"{type(exc).__name__}: {message[0] if message else ''}"[:300]}, f)


def _wrap_py_dataset_init(original: Callable[..., Any]) -> Callable[..., Any]:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807 - it replaces PyDataset.__init__
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        workers = _CHANGE.get("workers")
        if workers and int(bound.arguments.get("workers") or 1) < workers:
            bound.arguments["workers"] = workers
        original(*bound.args, **bound.kwargs)

    return __init__


# --------------------------------------------------------------------------- tf.data: map and prefetch


def _patch_tf_data(tf: Any) -> None:
    dataset = tf.data.Dataset
    if getattr(dataset.map, _MARK, False):
        return
    FACTS.setdefault("sequential_maps", 0)
    FACTS.setdefault("prefetch_calls", 0)
    _replace(dataset, "map", lambda original: _wrap_map(original, tf))
    _replace(dataset, "prefetch", _wrap_prefetch)


def _wrap_map(original: Callable[..., Any], tf: Any) -> Callable[..., Any]:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def map(self: Any, *args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(self, *args, **kwargs)
        if bound.arguments.get("num_parallel_calls") is None:
            FACTS["sequential_maps"] = FACTS.get("sequential_maps", 0) + 1
            if _CHANGE.get("parallel_map"):
                bound.arguments["num_parallel_calls"] = tf.data.AUTOTUNE
                bound.arguments["deterministic"] = True
        return original(*bound.args, **bound.kwargs)

    return map


def _wrap_prefetch(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def prefetch(self: Any, *args: Any, **kwargs: Any) -> Any:
        FACTS["prefetch_calls"] = FACTS.get("prefetch_calls", 0) + 1
        return original(self, *args, **kwargs)

    return prefetch
