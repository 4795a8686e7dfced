"""Helpers for what keras-gpu puts inside a training step: its variables, and which replica is being traced."""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["plain_variables", "replica_id"]


def plain_variables(*initial: Any, device: str | None = "/cpu:0") -> list[Any]:
    """Plain variables on `device` (`None`: the default device), outside any distribution strategy's scope.

    A strategy's scope is per thread, so the variables are made on a thread of
    their own: inside a `with strategy.scope():` block (where users often call
    `fit`), they would otherwise become mirrored variables.
    """
    import tensorflow as tf

    made: list[Any] = []
    errors: list[BaseException] = []

    def create() -> None:
        try:
            with tf.device(device):
                made.extend(tf.Variable(v, trainable=False) for v in initial)
        except BaseException as exc:  # noqa: BLE001 - re-raised on the caller's thread
            errors.append(exc)

    thread = threading.Thread(target=create, name="keras-gpu-plain-variables")
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return made


def replica_id() -> Any:
    """The replica being traced, in the job: a Python int where it is known while tracing, else an int32 tensor."""
    import tensorflow as tf

    ctx = tf.distribute.get_replica_context()
    if ctx is None:
        return 0
    rid = tf.cast(ctx.replica_id_in_sync_group, tf.int32)
    static = tf.get_static_value(rid)
    return rid if static is None else int(static)
