"""Every private Keras API keras-gpu uses, behind small named functions.

Keras' private state (attributes starting with `_`, the `keras.src...`
modules) and every change keras-gpu makes to a Keras object or class
(a method replaced on an instance, a class method wrapped, an import hook)
are touched here and nowhere else in keras-gpu, besides
`keras_gpu/core/tf_private.py` (TensorFlow's), `keras_gpu/core/jax_private.py`
(JAX's) and `keras_gpu/setup/keras_compat.py` (fixes of upstream defects).
`tests/test_private_fence.py` keeps it so; `tests/test_keras_private.py`
checks every function here against the installed Keras, so an upgrade that
moves one of these shows up there first.

Each function names the fact it reads or the change it makes, states what it
was checked on (Keras 3.15), and imports Keras lazily: importing this module
imports nothing. Readers never raise on a Keras that lacks the attribute;
they return the documented default.

Examples:
    >>> import keras
    >>> from keras_gpu.core import keras_private
    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    >>> keras_private.call_has_training_arg(model)
    True
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterator
from typing import Any

__all__ = [
    "CALLBACK_LIST_MODULE",
    "array_adapter_inputs",
    "array_adapter_num_samples",
    "call_has_training_arg",
    "callback_model",
    "drop_train_function",
    "fit_override",
    "inputs_struct",
    "jax_initialize_rng",
    "missed_import",
    "optimizer_trainable_variables",
    "patch_on_import",
    "patched_train_step",
    "restore_train_step",
    "set_optimizer_apply",
    "set_train_function",
    "set_train_step",
    "tf_dataset_adapter_dataset",
    "wrap_callback_lists",
    "wrap_epoch_iterator",
    "wrap_fit",
    "wrap_jax_data_input",
    "wrap_jax_predict_function",
]

CALLBACK_LIST_MODULE = "keras.src.callbacks.callback_list"
"""The module that defines Keras' `CallbackList` (what `fit`, `evaluate` and `predict` build)."""

_WRAPS = "_keras_gpu_wraps"  # keras-gpu's mark on a function it put in Keras' place: the wrap it applies


# --------------------------------------------------------------------------- data adapters of a running fit


def array_adapter_num_samples(adapter: Any) -> Any:
    """The number of samples an `ArrayDataAdapter` holds (`adapter._num_samples`), or None."""
    return getattr(adapter, "_num_samples", None)


def array_adapter_inputs(adapter: Any) -> Any:
    """The `(x, y, sample_weight)` arrays an `ArrayDataAdapter` was built from (`adapter._inputs`), or None."""
    return getattr(adapter, "_inputs", None)


def tf_dataset_adapter_dataset(adapter: Any) -> Any:
    """The `tf.data.Dataset` a `TFDatasetAdapter` reads (`adapter._dataset`), or None.

    A distributed dataset the user built is not a `tf.data.Dataset`; callers check.
    """
    return getattr(adapter, "_dataset", None)


def wrap_epoch_iterator(iterator: Any, wrap: Callable[[Iterator[Any]], Iterator[Any]]) -> bool:
    """Make `iterator` (a Keras `EpochIterator`) hand out its batches through `wrap`, on this instance only.

    Keras' epoch iterator makes each pass's batch iterator with its private
    `_get_iterator()` and keeps the pass under way in `_current_iterator`.
    Both are replaced on the instance: nothing global changes, and the
    change goes with the iterator when `fit` ends.

    Returns:
        Whether the iterator had the method to replace (False: nothing changed).
    """
    make = getattr(iterator, "_get_iterator", None)
    if iterator is None or not callable(make):
        return False

    def _get_iterator() -> Iterator[Any]:
        return wrap(make())

    iterator._get_iterator = _get_iterator
    current = getattr(iterator, "_current_iterator", None)
    if current is not None:  # a pass already under way (Keras resets it before on_train_begin)
        iterator._current_iterator = wrap(current)
    return True


# --------------------------------------------------------------------------- models and optimizers


def inputs_struct(model: Any) -> Any:
    """A functional model's inputs in the structure it was defined with (`model._inputs_struct`), or None."""
    return getattr(model, "_inputs_struct", None)


def call_has_training_arg(layer: Any) -> bool:
    """Whether `layer.call` takes a `training` argument (`layer._call_has_training_arg`); True where unknown."""
    return bool(getattr(layer, "_call_has_training_arg", True))


def optimizer_trainable_variables(optimizer: Any) -> Any:
    """The variables `optimizer` was built for (`optimizer._trainable_variables`), or None."""
    return getattr(optimizer, "_trainable_variables", None)


def set_optimizer_apply(optimizer: Any, apply: Callable[..., Any]) -> None:
    """Replace `optimizer.apply` on this instance by `apply` (Keras' `train_step` calls `self.optimizer.apply`)."""
    optimizer.apply = apply


def set_train_step(model: Any, step: Callable[[Any], Any]) -> None:
    """Replace `model.train_step` on this instance by `step`.

    Keras' `make_train_function` calls `self.train_step` when it traces, so
    the next train function built uses `step`; call `drop_train_function`
    so that one is built.
    """
    model.train_step = step


def patched_train_step(model: Any) -> Any:
    """The `train_step` set on this instance (by `set_train_step`), or None where the class's is in use."""
    return vars(model).get("train_step")


def restore_train_step(model: Any, original: Any) -> None:
    """Put `original` back as `model.train_step`; where it is the class's own method, drop the instance's."""
    own = getattr(type(model), "train_step", None)
    if getattr(original, "__self__", None) is model and getattr(original, "__func__", None) is own:
        vars(model).pop("train_step", None)
    else:
        model.train_step = original


def drop_train_function(model: Any) -> None:
    """Forget `model`'s built train function, so that the next `fit` builds (and traces) it anew.

    Keras' `make_train_function` returns the cached `model.train_function`
    unless it is None.
    """
    model.train_function = None


def set_train_function(model: Any, function: Callable[..., Any] | None) -> None:
    """Replace `model.train_function` (what `fit` calls once per step) by `function`, on this instance.

    Keras' `fit` calls `make_train_function()` first and then reads
    `self.train_function` for every step, so a replacement made after
    `on_train_begin` is what the steps call.
    """
    model.train_function = function


def callback_model(callback: Any) -> Any:
    """The model `callback` was set to (`callback._model`), without the state sync `Callback.model` runs on JAX.

    On JAX, Keras' `Callback.model` property first calls
    `model.jax_state_sync()`, which writes the training state into the
    model's variables and makes the next step read it back from them. On
    the training thread, between steps, that is only slow; from a batch
    end on Keras' thread pool it races the step running on the training
    thread, whose state buffers are donated: `fit` then fails with "Array
    has been deleted" (checked on Keras 3.15 with JAX 0.10). A hook that
    may run on the pool reads the model here, and touches no variable.
    """
    return getattr(callback, "_model", None)


# --------------------------------------------------------------------------- every CallbackList of the process


def wrap_callback_lists(wrap: Callable[[Any], Any]) -> None:
    """Make every Keras `CallbackList` built from now on take its callbacks through `wrap(callbacks)`.

    Wraps `CallbackList.__init__` now where Keras' callback module is
    imported, else right after the program imports it (a meta-path finder
    that imports nothing itself, so the program still chooses the backend).
    Calling it again with the same `wrap` changes nothing.
    """
    patch_on_import(
        CALLBACK_LIST_MODULE, lambda module: _wrap_callback_list_init(module.CallbackList, wrap), key=wrap
    )


def patch_on_import(name: str, patch: Callable[[Any], None], key: Any = None) -> None:
    """Call `patch(module)` on the module `name`: now where it is imported, else right after it first runs.

    The second case puts one meta-path finder per module name first in
    `sys.meta_path`. It imports nothing itself (so the program still chooses
    what it imports, the backend included): it asks the finders after it for
    the module (the ones Python would ask, an editable install's or a zip
    import's included), lets the module run, calls the patches, and takes
    itself out of `sys.meta_path`. One patch per `name` and `key` (default:
    `name`): calling it again before the import adds none. A module that
    gets imported past the finder (a finder placed ahead of it, a loader
    without `exec_module`) is left unpatched: `missed_import` says so.
    """
    key = name if key is None else key
    module = sys.modules.get(name)
    if module is not None:
        patch(module)
        return
    hook = next((f for f in sys.meta_path if isinstance(f, _PatchOnImport) and f.name == name), None)
    if hook is None:
        hook = _PatchOnImport(name)
        sys.meta_path.insert(0, hook)
    hook.patches.setdefault(key, patch)


def missed_import(name: str) -> str | None:
    """Why the module `name` was imported without its `patch_on_import` patches, or `None` where it was not.

    `None` too where nothing waits for `name`, or it is not imported yet.
    """
    hook = next((f for f in sys.meta_path if isinstance(f, _PatchOnImport) and f.name == name), None)
    if hook is None or (hook.missed is None and name not in sys.modules):
        return None
    if hook.missed is not None:
        return f"`{name}` was imported by a loader keras-gpu cannot follow ({hook.missed})"
    loader = getattr(getattr(sys.modules[name], "__spec__", None), "loader", None)
    return (
        f"`{name}` was imported past keras-gpu's import hook (loaded by {type(loader).__name__}, found by a finder "
        "ahead of the hook in sys.meta_path)"
    )


class _PatchOnImport:
    """A meta-path finder that patches the module `name` right after it runs (it imports nothing itself)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.patches: dict[Any, Callable[[Any], None]] = {}
        self.missed: str | None = None  # why the module could not be patched as it loaded

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != self.name:
            return None
        spec = self._spec_from_the_others(name, path, target)
        if spec is None:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            self.missed = f"{type(loader).__name__} has no exec_module"
            return spec
        # On the loader instance, for this one call: a loader can serve several modules (a zip importer).
        exec_module = loader.exec_module

        def exec_and_patch(module: Any) -> None:
            with contextlib.suppress(AttributeError):
                del loader.exec_module
            exec_module(module)
            self._done()
            for patch in self.patches.values():
                patch(module)

        loader.exec_module = exec_and_patch
        return spec

    def _spec_from_the_others(self, name: str, path: Any, target: Any) -> Any:
        """The spec the finders after this one give (`None` where none finds `name`)."""
        finders = list(sys.meta_path)
        after = finders[finders.index(self) + 1 :] if self in finders else finders
        for finder in after:
            find = getattr(finder, "find_spec", None)
            if find is None or isinstance(finder, _PatchOnImport):
                continue
            spec = find(name, path, target)
            if spec is not None:
                return spec
        return None

    def _done(self) -> None:
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)


# --------------------------------------------------------------------------- Keras' own fit


def wrap_fit(wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    """Make Keras' own `fit` go through `wrap(original)`, now or when the program imports Keras; once per `wrap`.

    Keras' own `fit` is the backend trainer's (`TensorFlowTrainer.fit`,
    `JAXTrainer.fit`, `TorchTrainer.fit`: the class that defines the `fit`
    of `keras.Model`), which every model's `fit` reaches, through a
    subclass's override that calls `super().fit(...)` too. `wrap` returns a
    function with `fit`'s signature (`self` first).
    """
    patch_on_import("keras", lambda keras: _wrap_trainer_fit(keras.Model, wrap), key=("fit", wrap))


def _fit_owner(cls: type) -> type:
    """The class in `cls`'s method order that defines the `fit` it runs."""
    return next(c for c in cls.__mro__ if "fit" in vars(c))


def _wrap_trainer_fit(model_class: type, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    owner = _fit_owner(model_class)
    original = vars(owner)["fit"]
    while getattr(original, _WRAPS, None) is not None:  # already wrapped: by this wrap, or another around Keras'
        if getattr(original, _WRAPS) is wrap:
            return
        original = original.__wrapped__
    wrapped = functools.wraps(vars(owner)["fit"])(wrap(vars(owner)["fit"]))
    setattr(wrapped, _WRAPS, wrap)
    owner.fit = wrapped


def fit_override(model: Any) -> str | None:
    """`"Class.fit"` where `model`'s class (or a class between it and Keras) overrides Keras' own `fit`; else `None`."""
    import keras

    owner = _fit_owner(type(model))
    if owner is _fit_owner(keras.Model):
        return None
    return f"{owner.__qualname__}.fit"


def _wrap_callback_list_init(cls: type, wrap: Callable[[Any], Any]) -> None:
    original = cls.__init__
    if getattr(original, _WRAPS, None) is wrap:
        return

    @functools.wraps(original)
    def __init__(self, callbacks=None, *args, **kwargs):  # noqa: N807 - it replaces CallbackList.__init__
        original(self, wrap(callbacks), *args, **kwargs)

    setattr(__init__, _WRAPS, wrap)
    cls.__init__ = __init__


# --------------------------------------------------------------------------- Keras on JAX


def jax_initialize_rng() -> None:
    """Give every process of a multi-process JAX job Keras' one random seed (what `keras.distribution.initialize` does).

    Call it after `jax.distributed.initialize`: equal initial weights and
    shuffles in every process.
    """
    from keras.src.backend.jax import distribution_lib

    distribution_lib.initialize_rng()


def wrap_jax_data_input(wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    """Replace Keras' JAX `distribute_data_input(batch, layout, batch_dim_name)` by `wrap(original)`, once.

    Keras' JAX trainer turns every batch into a `jax.Array` through that
    module function. Calling again with the same `wrap` changes nothing.
    """
    from keras.src.backend.jax import distribution_lib

    original = distribution_lib.distribute_data_input
    if getattr(original, _WRAPS, None) is wrap:
        return
    wrapped = functools.wraps(original)(wrap(original))
    setattr(wrapped, _WRAPS, wrap)
    distribution_lib.distribute_data_input = wrapped


def wrap_jax_predict_function(transform: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    """Make every predict function Keras' JAX trainer builds go through `transform(function)`, once.

    Wraps `JAXTrainer.make_predict_function`: after Keras builds (or keeps)
    `model.predict_function`, it becomes `transform(model.predict_function)`;
    `transform` returns its argument where it has nothing to change.
    Calling again with the same `transform` changes nothing.
    """
    from keras.src.backend.jax.trainer import JAXTrainer

    original = JAXTrainer.make_predict_function
    if getattr(original, _WRAPS, None) is transform:
        return

    @functools.wraps(original)
    def make_predict_function(self: Any, force: bool = False) -> Any:
        original(self, force)
        if self.predict_function is not None:
            self.predict_function = transform(self.predict_function)
        return self.predict_function

    setattr(make_predict_function, _WRAPS, transform)
    JAXTrainer.make_predict_function = make_predict_function
