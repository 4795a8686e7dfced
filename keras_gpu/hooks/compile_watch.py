"""The backend's own signal that the training thread compiled, for leaving compiles out of the steady rate.

A batch shape new to the fit (a generator's short last batch, a dynamic
batch dimension) makes JAX trace and compile the train step again: an
execution that takes hundreds of milliseconds where the others take
milliseconds. Where `fit`'s data schedule cannot know the batch sizes
(`ThroughputLogger` counts the samples instead), the compile is seen here,
by the backend, not guessed from the times:

* JAX: `jax.monitoring`'s duration events `/jax/core/compile/*` (in JAX
  0.10: `jaxpr_trace_duration`, `jaxpr_to_mlir_module_duration`,
  `backend_compile_duration`), sent on the thread that traces and compiles,
  on every cache miss (measured: a Keras 3.15 fit fed by a generator whose
  last batch is short sends all three in the execution that runs it, and
  none in the next epoch). A listener counts the events sent on the training
  thread and calls back: O(1), no clock, no device.
* TensorFlow: nothing to watch without `jit_compile=True`. Keras 3 traces
  the train function once per fit, on the data iterator, whose batch
  dimension is dynamic (measured on Keras 3.15: its tracing count stays 1
  through a short last batch, for generators, `tf.data` and arrays, and the
  last execution takes as long as the others). With `jit_compile=True`, XLA
  compiles for each new shape (measured: 191 ms for the short last batch
  against 2.6 ms per step), and TensorFlow has no public signal of it: not
  watched.
* PyTorch: nothing compiles unless `jit_compile=True` (`torch.compile`),
  whose recompiles have no public event; not watched.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from keras_gpu.core import backend

__all__ = ["JAX_COMPILE_EVENTS", "CompileWatch", "watch_compiles"]

logger = logging.getLogger("keras_gpu")

#: Prefix of the `jax.monitoring` duration events JAX sends when it traces, lowers or compiles a function.
JAX_COMPILE_EVENTS = "/jax/core/compile/"


class CompileWatch:
    """Counts the compile events the backend sends on one thread, from :meth:`start` to :meth:`close`.

    :attr:`count` only grows; a reader compares it with the value it last
    saw. `on_compile` is called on the compiling thread after each event:
    it must do O(1) work (the caller sets its next batch-end check there).

    Args:
        on_compile: Called with no argument after each compile event.
        thread: The thread whose compiles count (default: the calling thread).
    """

    __slots__ = ("_listener", "_on_compile", "_thread", "count")

    def __init__(self, on_compile: Callable[[], None], thread: int | None = None) -> None:
        if not callable(on_compile):
            raise TypeError(f"`on_compile` must be callable. Received: on_compile={on_compile!r}")
        self.count = 0
        self._on_compile = on_compile
        self._thread = threading.get_ident() if thread is None else thread
        self._listener: Callable[..., None] | None = None

    def event(self, name: str, *_args: Any, **_kwargs: Any) -> None:
        """A `jax.monitoring` duration event: count it if it is a compile on the watched thread."""
        if name.startswith(JAX_COMPILE_EVENTS) and threading.get_ident() == self._thread:
            self.count += 1
            self._on_compile()

    def start(self) -> bool:
        """Start listening to JAX's compile events; False where JAX has no `jax.monitoring` listener."""
        import jax.monitoring

        register = getattr(jax.monitoring, "register_event_duration_secs_listener", None)
        if register is None or self._listener is not None:
            return False
        self._listener = self.event
        register(self._listener)
        return True

    def close(self) -> None:
        """Stop listening (idempotent)."""
        listener, self._listener = self._listener, None
        if listener is None:
            return
        import jax.monitoring

        unregister = getattr(jax.monitoring, "unregister_event_duration_listener", None)
        if unregister is None:
            return
        try:
            unregister(listener)
        except Exception as exc:  # noqa: BLE001 - an already-cleared listener
            logger.debug("keras-gpu: could not remove the compile listener: %s: %s", type(exc).__name__, exc)


def watch_compiles(on_compile: Callable[[], None]) -> CompileWatch | None:
    """A started :class:`CompileWatch` of the calling thread where the backend signals its compiles, else `None`.

    Only JAX does (see the module's docstring). Call it on the training
    thread (a callback's `on_train_begin`) and close the watch when `fit`
    ends. Never raises: a watch that cannot start is `None`.

    Example:
        >>> watch = watch_compiles(lambda: None)  # None off JAX
        >>> watch is None or watch.count == 0
        True
        >>> if watch is not None:
        ...     watch.close()
    """
    if backend.name() != "jax":
        return None
    try:
        watch = CompileWatch(on_compile)
        return watch if watch.start() else None
    except Exception as exc:  # noqa: BLE001 - a watch must never break fit
        logger.debug("keras-gpu: cannot watch JAX's compiles: %s: %s", type(exc).__name__, exc)
        return None
