"""All random state a trace or call of the user's model can advance, saved and put back.

keras-gpu traces or calls the user's model outside training: to count its
FLOPs, and to retrace the training step once to see its placement. Tracing
runs the model's Python code, and real programs draw seeds there: Keras'
legacy `tf.keras.backend.random_normal(shape)` takes `np.random.randint(...)`
each time it is traced, `keras.random.normal(shape)` without a seed advances
Keras' global `SeedGenerator`, and a call on PyTorch advances torch's
generator. Any of these left advanced would change the noise that training
then draws. `preserved_random_state` saves all of it and restores it,
so that training is bit-identical with and without keras-gpu.

What is saved (each only where its library is already imported; nothing is
imported here):

* Python's `random` module and NumPy's global generator;
* Keras' global `SeedGenerator` (which object, and its state), and the state
  of every `SeedGenerator` the model's layers own;
* TensorFlow's eager op-seed generator (what `tf.random.set_seed` seeds, and
  what random ops without an op seed draw from) and its global
  `tf.random.Generator`;
* torch's CPU generator, and the CUDA generators once CUDA is initialised.

JAX has no global random state; Keras' seed generators cover it. Private
Keras and TensorFlow names are touched here only (checked on Keras 3.15,
TensorFlow 2.21, torch 2.13).
"""

from __future__ import annotations

import contextlib
import random
import sys
from collections.abc import Callable, Iterator
from typing import Any

from keras_gpu.core.log import logger

__all__ = ["model_seed_generators", "preserved_random_state", "random_state_snapshot"]

_KERAS_GLOBAL_SEED_GENERATOR = "global_seed_generator"  # keras.src.random.seed_generator.GLOBAL_SEED_GENERATOR


@contextlib.contextmanager
def preserved_random_state(model: Any = None) -> Iterator[None]:
    """Run the block, then put every global random state (and `model`'s seed generators) back as it was.

    Restores also when the block raises. Costs a few small copies, once per
    trace: never use it per batch.

    Args:
        model: The model being traced or called; its layers' own
            `SeedGenerator` states are restored too. `None`: globals only.

    Examples:
        >>> import random
        >>> before = random.random()
        >>> with preserved_random_state():
        ...     _ = random.random()
        >>> random.seed(0); a = random.random()
        >>> random.seed(0)
        >>> with preserved_random_state():
        ...     _ = [random.random() for _ in range(3)]
        >>> random.random() == a
        True
    """
    restore = random_state_snapshot(model)
    try:
        yield
    finally:
        restore()


def random_state_snapshot(model: Any = None) -> Callable[[], None]:
    """Save the random state now; the function returned puts it back (any number of times)."""
    restorers = [_python()]
    for part in (_numpy, lambda: _keras(model), _tensorflow, _torch):
        try:
            restorers += part()
        except Exception as exc:  # noqa: BLE001 - a library that cannot be read must not stop training
            logger.debug("keras-gpu: could not save a random state (%s: %s)", type(exc).__name__, exc)

    def restore() -> None:
        for put_back in restorers:
            try:
                put_back()
            except Exception as exc:  # noqa: BLE001 - restore the rest
                logger.warning("keras-gpu: could not restore a random state (%s: %s)", type(exc).__name__, exc)

    return restore


def _python() -> Callable[[], None]:
    state = random.getstate()
    return lambda: random.setstate(state)


def _numpy() -> list[Callable[[], None]]:
    np = sys.modules.get("numpy")
    if np is None:
        return []
    state = np.random.get_state()
    return [lambda: np.random.set_state(state)]


# --------------------------------------------------------------------------- Keras


def _keras(model: Any) -> list[Callable[[], None]]:
    if "keras" not in sys.modules:
        return []
    from keras.src.backend.common import global_state

    out = []
    generator = global_state.get_global_attribute(_KERAS_GLOBAL_SEED_GENERATOR)

    def put_generator_back() -> None:
        global_state.set_global_attribute(_KERAS_GLOBAL_SEED_GENERATOR, generator)

    out.append(put_generator_back)
    generators = [generator] if generator is not None else []
    generators += model_seed_generators(model)
    out += [_variable(g.state) for g in generators if getattr(g, "state", None) is not None]
    return out


def model_seed_generators(model: Any) -> list[Any]:
    """The `keras.random.SeedGenerator`s owned by `model`'s layers (the model included)."""
    if model is None:
        return []
    flatten = getattr(model, "_flatten_layers", None)
    layers = list(flatten(include_self=True, recursive=True)) if callable(flatten) else [model]
    seen: dict[int, Any] = {}
    for layer in layers:
        for generator in getattr(layer, "_seed_generators", None) or ():
            seen.setdefault(id(generator), generator)
    return list(seen.values())


def _variable(variable: Any) -> Callable[[], None]:
    """Put a Keras variable's current value back later."""
    import keras
    import numpy as np

    raw = variable.value
    if keras.config.backend() == "tensorflow":
        raw = raw.read_value() if hasattr(raw, "read_value") else raw  # a tf.Variable: read it, not its __array__
    value = np.array(keras.ops.convert_to_numpy(raw), copy=True)
    return lambda: variable.assign(value)


# --------------------------------------------------------------------------- TensorFlow


def _tensorflow() -> list[Callable[[], None]]:
    if "tensorflow" not in sys.modules:
        return []
    from tensorflow.python.eager import context
    from tensorflow.python.ops import stateful_random_ops

    out = []
    ctx = context.context()
    # The global seed (`tf.random.set_seed`) and the eager op-seed generator drawn from it, a
    # random.Random (None: no global seed set). Put back as they were, without set_global_seed,
    # which would also clear the kernel cache and restart every stateful random op.
    seed, rng = getattr(ctx, "_seed", None), getattr(ctx, "_rng", None)
    state = rng.getstate() if rng is not None else None

    def put_seed_back() -> None:
        ctx._seed, ctx._rng = seed, rng
        if rng is not None:
            rng.setstate(state)

    out.append(put_seed_back)
    generator = stateful_random_ops.global_generator

    def put_generator_back() -> None:
        stateful_random_ops.global_generator = generator

    out.append(put_generator_back)
    if generator is not None:
        saved = generator.state.numpy()
        out.append(lambda: generator.state.assign(saved))
    return out


# --------------------------------------------------------------------------- PyTorch


def _torch() -> list[Callable[[], None]]:
    torch = sys.modules.get("torch")
    if torch is None:
        return []
    cpu = torch.get_rng_state()
    out = [lambda: torch.set_rng_state(cpu)]
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        cuda = torch.cuda.get_rng_state_all()
        out.append(lambda: torch.cuda.set_rng_state_all(cuda))
    return out
