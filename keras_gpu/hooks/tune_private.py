"""A `keras-gpu tune` change, applied to the objects the measured `fit` trains, the way the user would write it.

The study's injection into Keras' `fit` (`keras_gpu.hooks.study`) calls
`apply(model, arguments, change)` with the bound arguments of the `fit` it
measures, and passes the arguments it returns on to Keras. This is the one
module that changes the script for `keras-gpu tune` (a fence module: it sets
a model's attributes, reads tf.data's private lineage, and wraps
`tf.data.Dataset.map`). Each key of the change is a line a user would write,
and it applies to the model that `fit` trains and the dataset given to it,
nothing else:

* `steps_per_execution`, `jit_compile`: set on the model, as
  `model.compile(...)` sets them (its train function is built anew);
* `policy`: `keras.mixed_precision.set_global_policy(policy)` as soon as
  the script imports Keras (`install`), before it builds its model, which is
  where a user writes it; applied where the model computes in it;
* `batch_factor`: `fit`'s `batch_size` times the factor where `fit` is given
  arrays (`epochs` grows by the same factor, so the run still has its
  warm-up and measured steps), unless the model's class overrides `fit` (its
  `fit` passes on a batch size of its own);
* `prefetch`: `x.prefetch(tf.data.AUTOTUNE)` on the `tf.data.Dataset` given
  to `fit`;
* `tf_data_autotune`: that dataset with tf.data's autotuning, parallel map
  rewrite and injected prefetch on (`with_options`);
* `parallel_map`: the sequential `map` calls that built that dataset in the
  run as written, named by their call site and count there (`[file, line,
  n]`, from the baseline's record), made with
  `num_parallel_calls=tf.data.AUTOTUNE, deterministic=True` (the order, and
  so the arithmetic, stays). The same function's other calls (a validation
  pipeline's, a library's) run as written;
* `workers`: the `PyDataset` given to `fit` gets `workers` where it has
  fewer (put back after `fit`).

`apply` checks each key where it applies; `Applied.not_applied` says why a
key did not (an import of Keras or TensorFlow past keras-gpu's hook, a
model that computes in another policy, a `fit` given another input), and
the command then shows a row saying so instead of a rate of the unchanged
script. `Applied.facts` is what this `fit` was given (its input, batch size,
the sequential maps and prefetches of its dataset, tf.data's options, the
PyDataset's workers), read for this `fit` alone.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from keras_gpu.core import keras_private

__all__ = ["Applied", "apply", "input_kind", "install"]

_DEFAULT_BATCH = 32  # Keras' batch size for arrays when fit is given none
_MARK = "_keras_gpu_tune_map"  # keras-gpu's mark on the map it put in tf.data's place

# The map hook's own state (this process): the call that made each dataset, the calls per site, what to rewrite.
_MADE_BY: weakref.WeakKeyDictionary[Any, tuple[str, int, int]] = weakref.WeakKeyDictionary()
_CALLS: dict[tuple[str, int], int] = {}
_PARALLEL: set[tuple[str, int, int]] = set()


@dataclass
class Applied:
    """What `apply` did to one `fit`.

    Attributes:
        arguments: `fit`'s bound arguments, changed.
        facts: What the `fit` was given, before the change (see the module's text).
        applied: Each key of the change that applied, with what was done.
        not_applied: Each key that did not, with why.
        undo: Calls that put the script's objects back as they were, after `fit`.
    """

    arguments: dict[str, Any]
    facts: dict[str, Any] = field(default_factory=dict)
    applied: dict[str, str] = field(default_factory=dict)
    not_applied: dict[str, str] = field(default_factory=dict)
    undo: list[Callable[[], None]] = field(default_factory=list)


def install(change: Mapping[str, Any]) -> None:
    """Set the change's dtype policy when the script imports Keras, and watch tf.data's `map` calls.

    The `map` hook records which call made each dataset (for the baseline's
    record) and makes the calls named by `change["parallel_map"]` parallel.
    Both wait for the script's own import (the backend is the script's choice).
    """
    policy = change.get("policy")
    if policy:
        keras_private.patch_on_import("keras", lambda keras: keras.mixed_precision.set_global_policy(policy),
                                      key=("tune-policy", policy))
    _PARALLEL.clear()
    _PARALLEL.update(tuple(site) for site in change.get("parallel_map") or ())
    keras_private.patch_on_import("tensorflow", _patch_map, key="tune-map")


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


def apply(model: Any, arguments: Mapping[str, Any], change: Mapping[str, Any]) -> Applied:
    """Apply `change` to this `fit` (its `model` and bound `arguments`); see the module's text.

    Args:
        model: The model `fit` trains.
        arguments: `fit`'s bound arguments (`x`, `batch_size`, `epochs`, ...).
        change: The change (`{}`: the script as written, whose facts are
            still read).

    Returns:
        The changed arguments, the facts, what applied and what did not.
    """
    out = Applied(dict(arguments), _facts(model, arguments))
    kind = out.facts["fit_input"]
    for key, value in change.items():
        if key in ("steps_per_execution", "jit_compile"):
            _set_model(out, model, key, value)
        elif key == "policy":
            _check_policy(out, model, value)
        elif key == "batch_factor":
            _batch(out, value)
        elif key == "workers":
            _workers(out, value)
        elif key != "parallel_map" and kind != "tf.data":
            out.not_applied[key] = f"fit is given {kind}, not a tf.data.Dataset"
    _parallel_map(out, change)
    if kind == "tf.data":
        _tf_data(out, change)
    return out


# --------------------------------------------------------------------------- the model


def _set_model(out: Applied, model: Any, key: str, value: Any) -> None:
    """`steps_per_execution` or `jit_compile` on the model, as `compile` sets it, the train function built anew."""
    setattr(model, key, value)
    keras_private.drop_train_function(model)
    if getattr(model, key, None) == value:
        out.applied[key] = f"model.{key} = {value!r}"
    else:  # Keras refused it (a model XLA cannot compile keeps jit_compile=False, with its warning)
        out.not_applied[key] = f"Keras kept {key}={getattr(model, key, None)!r} for this model"


def _check_policy(out: Applied, model: Any, policy: str) -> None:
    have = getattr(getattr(model, "dtype_policy", None), "name", None)
    if have == policy:
        out.applied["policy"] = f"the model computes in {policy}"
        return
    missed = keras_private.missed_import("keras")
    out.not_applied["policy"] = missed or (
        f"the model computes in {have}: the script sets its own dtype policy after importing Keras, or its layers "
        "set their dtype"
    )


# --------------------------------------------------------------------------- fit's input


def _facts(model: Any, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """What this `fit` was given (see the module's text)."""
    x = arguments.get("x")
    kind = input_kind(x)
    facts: dict[str, Any] = {"fit_input": kind, "fit_override": keras_private.fit_override(model)}
    if kind == "arrays":
        facts["batch_size"] = arguments.get("batch_size") or _DEFAULT_BATCH
    elif kind == "PyDataset":
        facts["pydataset_workers"] = int(getattr(x, "workers", 1) or 1)
        facts["shuffle"] = bool(arguments.get("shuffle", True))
    elif kind == "tf.data":
        facts.update(_pipeline_facts(x))
    return facts


def _pipeline_facts(x: Any) -> dict[str, Any]:
    """The sequential maps (with the calls that made them, where seen), prefetches and options of `x`."""
    nodes = _lineage(x)
    maps = [d for d in nodes if type(d).__name__ == "_MapDataset"]
    options = x.options()
    facts: dict[str, Any] = {
        "sequential_maps": len(maps),
        "map_sites": sorted(list(_MADE_BY[d]) for d in maps if d in _MADE_BY),
        "prefetches": sum(type(d).__name__ == "_PrefetchDataset" for d in nodes),
        "tf_data_autotune": bool(options.autotune.enabled is not False),
        "tf_data_map_parallelization": bool(options.experimental_optimization.map_parallelization is not False),
        "tf_data_inject_prefetch": bool(options.experimental_optimization.inject_prefetch is not False),
    }
    missed = keras_private.missed_import("tensorflow")
    if maps and len(facts["map_sites"]) < len(maps):
        facts["map_hook"] = missed or "the map calls that made this pipeline ran before keras-gpu's hook"
    return facts


def _lineage(dataset: Any) -> list[Any]:
    """`dataset` and every dataset it reads from (tf.data's `_inputs()`), each once."""
    seen: dict[int, Any] = {}
    todo = [dataset]
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen[id(node)] = node
        with contextlib.suppress(Exception):  # a dataset kind without inputs
            todo.extend(node._inputs())
    return list(seen.values())


def _batch(out: Applied, factor: int) -> None:
    facts = out.facts
    if facts["fit_input"] != "arrays":
        out.not_applied["batch_factor"] = f"fit is given {facts['fit_input']}, not arrays with batch_size"
    elif facts["fit_override"]:
        out.not_applied["batch_factor"] = (
            f"{facts['fit_override']} overrides Keras' fit, so the batch size Keras' fit gets is the one it passes on, "
            f"not necessarily the script's: change the batch size in {facts['fit_override']}"
        )
    else:
        batch = facts["batch_size"] * int(factor)
        out.arguments["batch_size"] = batch
        out.arguments["epochs"] = int(out.arguments.get("epochs") or 1) * int(factor)
        out.applied["batch_factor"] = f"fit(batch_size={batch})"


def _workers(out: Applied, workers: int) -> None:
    x = out.arguments.get("x")
    if out.facts["fit_input"] != "PyDataset":
        out.not_applied["workers"] = f"fit is given {out.facts['fit_input']}, not a PyDataset"
        return
    have = out.facts["pydataset_workers"]
    if have < workers:
        x.workers = workers
        out.undo.append(lambda: setattr(x, "workers", have))
    out.applied["workers"] = f"the PyDataset given to fit runs {max(have, workers)} workers"


def _tf_data(out: Applied, change: Mapping[str, Any]) -> None:
    """`tf_data_autotune` and `prefetch` on the dataset given to `fit` (prefetch last, as the user writes it)."""
    import tensorflow as tf

    x = out.arguments["x"]
    if change.get("tf_data_autotune"):
        fixed = tf.data.Options()
        fixed.autotune.enabled = True
        fixed.experimental_optimization.map_parallelization = True
        fixed.experimental_optimization.inject_prefetch = True
        x = x.with_options(fixed)
        out.applied["tf_data_autotune"] = "the dataset given to fit has tf.data's autotune options on"
    if change.get("prefetch"):
        x = x.prefetch(tf.data.AUTOTUNE)
        out.applied["prefetch"] = "the dataset given to fit ends with prefetch(tf.data.AUTOTUNE)"
    out.arguments["x"] = x


def _parallel_map(out: Applied, change: Mapping[str, Any]) -> None:
    """Whether the sequential maps of the run as written are parallel in the dataset given to this `fit`."""
    if "parallel_map" not in change:
        return
    facts = out.facts
    if facts["fit_input"] != "tf.data":
        out.not_applied["parallel_map"] = f"fit is given {facts['fit_input']}, not a tf.data.Dataset"
        return
    made = [list(_MADE_BY[d]) for d in _lineage(out.arguments["x"])
            if d in _MADE_BY and type(d).__name__ == "_ParallelMapDataset"]
    rewritten = [site for site in made if tuple(site) in _PARALLEL]
    if facts["sequential_maps"] == 0 and rewritten:
        out.applied["parallel_map"] = "map calls made parallel: " + ", ".join(_site(s) for s in rewritten)
        return
    left = ", ".join(_site(s) for s in facts["map_sites"]) or f"{facts['sequential_maps']} map call(s)"
    out.not_applied["parallel_map"] = facts.get("map_hook") or (
        f"the training pipeline's {left} still run sequentially: not the calls the run as written made"
    )


def _site(site: Any) -> str:
    file, line, n = site
    return f"{file.rsplit('/', 1)[-1]}:{line}" + (f" (call {n})" if n > 1 else "")


# --------------------------------------------------------------------------- tf.data's map


def _patch_map(tf: Any) -> None:
    dataset = tf.data.Dataset
    if getattr(dataset.map, _MARK, False):
        return
    wrapped = _wrap_map(dataset.map, tf)
    setattr(wrapped, _MARK, True)
    dataset.map = wrapped


def _wrap_map(original: Callable[..., Any], tf: Any) -> Callable[..., Any]:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def map(self: Any, *args: Any, **kwargs: Any) -> Any:
        caller = inspect.currentframe().f_back  # the line that called map
        where = (caller.f_code.co_filename, caller.f_lineno) if caller is not None else ("?", 0)
        _CALLS[where] = n = _CALLS.get(where, 0) + 1
        site = (*where, n)
        bound = signature.bind(self, *args, **kwargs)
        if site in _PARALLEL and bound.arguments.get("num_parallel_calls") is None:
            bound.arguments["num_parallel_calls"] = tf.data.AUTOTUNE
            bound.arguments["deterministic"] = True
        result = original(*bound.args, **bound.kwargs)
        with contextlib.suppress(TypeError):  # a result that cannot be referenced weakly is not tracked
            _MADE_BY[result] = site
        return result

    return map
