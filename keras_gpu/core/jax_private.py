"""Every private JAX API keras-gpu uses, behind small named functions.

JAX's private modules (`jax._src...`) are touched here and nowhere else in
keras-gpu (`tests/test_private_fence.py` keeps it so);
`tests/backends/test_jax_private.py` checks every function here against the
installed JAX. Each function imports JAX lazily: importing this module
imports nothing. Keras' own private state on the JAX backend lives in
`keras_gpu/core/keras_private.py`.
"""

from __future__ import annotations

__all__ = ["backends_initialized"]


def backends_initialized() -> bool:
    """Whether JAX has started its backends in this process, without starting them.

    After that, the device settings JAX reads at start (platforms, memory
    fraction, host device count) are fixed. JAX has no public call that
    answers without starting the backends (`jax.devices()` starts them).
    Checked on JAX 0.10: `jax._src.xla_bridge.backends_are_initialized()`.
    """
    from jax._src import xla_bridge

    return bool(xla_bridge.backends_are_initialized())
