"""The callback sets the benchmark compares, by name.

Each variant is a factory `(context) -> list of callbacks`; `bare` is the
empty list. A variant whose callbacks cannot be built here (for instance a
keras-gpu callback this version does not have) is reported as skipped with
the reason, never silently dropped.

Besides the built-in names, a variant may be given as `module:callable`:
the callable receives the run's log directory and returns a callback or a
list of callbacks, so any callback can be measured with the same harness.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BARE",
    "DEFAULT_VARIANTS",
    "KERAS_GPU_VARIANTS",
    "VARIANTS",
    "Context",
    "Variant",
    "keras_gpu_object",
    "make_callbacks",
    "variant",
]


@dataclass(frozen=True)
class Context:
    """What a variant factory may use: where to log and the batch size."""

    log_dir: str
    batch_size: int


@dataclass(frozen=True)
class Variant:
    """A named set of callbacks.

    Attributes:
        name: Short identifier used on the command line and in the JSON.
        label: What the table shows.
        factory: Builds the callbacks for one run.
        group: `"baseline"`, `"keras_gpu"`, `"peer"` or `"probe"`.
    """

    name: str
    label: str
    factory: Callable[[Context], list]
    group: str


def keras_gpu_object(attr: str) -> Any:
    """`keras_gpu.<attr>` from the public API (raises `AttributeError` where this version lacks it)."""
    import keras_gpu

    return getattr(keras_gpu, attr)


def _keras_gpu(attr: str, **kwargs: Any) -> Callable[[Context], list]:
    def factory(ctx: Context) -> list:
        made = keras_gpu_object(attr)(ctx.log_dir, **kwargs)
        return list(made) if isinstance(made, (list, tuple)) else [made]

    return factory


def _tensorboard(**kwargs: Any) -> Callable[[Context], list]:
    def factory(ctx: Context) -> list:
        import keras

        return [keras.callbacks.TensorBoard(ctx.log_dir, **kwargs)]

    return factory


def _time_history(ctx: Context) -> list:
    from benchmarks.peers import TimeHistory

    return [TimeHistory(ctx.batch_size, log_steps=100, log_dir=ctx.log_dir)]


def _naive(ctx: Context) -> list:
    from benchmarks.peers import NaiveSyncMonitor

    return [NaiveSyncMonitor(ctx.log_dir)]


def _hook_probes(ctx: Context) -> list:
    from benchmarks._probes import BusyHookProbe, EmptyHookProbe

    return [EmptyHookProbe(), BusyHookProbe(100e-6)]


def _spin_thread(ctx: Context) -> list:
    from benchmarks._probes import SpinThreadProbe

    return [SpinThreadProbe(0.2)]


def _step_probe(ctx: Context) -> list:
    import keras

    from keras_gpu.core import backend
    from keras_gpu.hooks import step_probe
    from keras_gpu.hooks.step_time_cluster import install_probe

    if backend.name() == "jax":
        return [_JaxClockOnly()]

    class StepProbeOnly(keras.callbacks.Callback):
        """The step probe in every training step (and in multi-worker jobs the rows' ride), never read: in-graph cost."""

        def set_model(self, model):
            super().set_model(model)
            task = backend.task_info(model)
            if task.num_workers > 1:  # what StepTimeLogger adds to multi-worker steps
                install_probe(model, task.num_workers, task.worker_index or 0)
            else:
                step_probe.install(model, len(backend.replica_devices(model)))

    return [StepProbeOnly()]


def _JaxClockOnly() -> Any:  # noqa: N802 - builds a callback class on demand (keras is imported here only)
    import keras

    from keras_gpu.hooks.step_time_cluster_jax import install_clock, remove_clock

    class JaxClockOnly(keras.callbacks.Callback):
        """On JAX, the cluster view's clock around every call of the train function, never read: its cost per call."""

        def on_train_begin(self, logs=None):
            self.clock = install_clock(self.model)

        def on_epoch_begin(self, epoch, logs=None):
            if self.clock is not None:
                self.clock.epoch_begin()

        def on_train_batch_end(self, batch, logs=None):
            """Nothing, but defined as StepTimeLogger's is: Keras then calls batch ends on the training thread.

            With no callback defining a batch end, Keras on JAX calls them
            from a thread pool of its own, whose CPU time the benchmark
            would count as this callback's.
            """

        def on_train_end(self, logs=None):
            remove_clock(self.model)

    return JaxClockOnly()


BARE = Variant("bare", "bare fit (no callbacks)", lambda ctx: [], "baseline")

VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        BARE,
        Variant("kg-default", "keras_gpu.callbacks()", _keras_gpu("callbacks"), "keras_gpu"),
        Variant("kg-throughput", "ThroughputLogger", _keras_gpu("ThroughputLogger"), "keras_gpu"),
        Variant("kg-memory", "MemoryLogger", _keras_gpu("MemoryLogger"), "keras_gpu"),
        Variant("kg-placement", "PlacementLogger", _keras_gpu("PlacementLogger"), "keras_gpu"),
        Variant("kg-step-probe", "step probe (+ ride) in-graph; on JAX the host clock", _step_probe, "keras_gpu"),
        Variant("tb-epoch", "Keras TensorBoard, per epoch", _tensorboard(update_freq="epoch"), "peer"),
        Variant(
            "tb-batch",
            "Keras TensorBoard, per batch",
            _tensorboard(update_freq=1, write_steps_per_second=True),
            "peer",
        ),
        Variant("timehistory", "TimeHistory(log_steps=100)", _time_history, "peer"),
        Variant("naive", "naive per-batch monitor", _naive, "peer"),
        Variant("probe-hooks", "probes: empty hook and 100 us busy hook per batch", _hook_probes, "probe"),
        Variant("probe-spin-thread", "probe: thread burning 0.2 s CPU", _spin_thread, "probe"),
    )
}
"""The built-in variants, by name."""

KERAS_GPU_VARIANTS = ("kg-default", "kg-throughput", "kg-memory", "kg-placement")
DEFAULT_VARIANTS = (*KERAS_GPU_VARIANTS, "tb-epoch", "tb-batch", "timehistory", "naive")
"""The variants compared against `bare` by default."""


def _custom(spec: str) -> Variant:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(
            f"A variant is a built-in name ({', '.join(VARIANTS)}) or `module:callable`. Received: variant={spec!r}"
        )

    def factory(ctx: Context) -> list:
        fn = getattr(importlib.import_module(module_name), attr)
        made = fn(ctx.log_dir)
        return list(made) if isinstance(made, (list, tuple)) else [made]

    return Variant(spec, spec, factory, "custom")


def variant(name: str) -> Variant:
    """The variant called `name`: a built-in name or `module:callable`."""
    if name in VARIANTS:
        return VARIANTS[name]
    if ":" in name:
        return _custom(name)
    raise ValueError(
        f"Unknown variant. Expected one of {', '.join(VARIANTS)} or `module:callable`. Received: variant={name!r}"
    )


def make_callbacks(v: Variant, ctx: Context) -> tuple[list, str | None]:
    """Build `v`'s callbacks: `(callbacks, None)`, or `([], reason)` when they cannot be built here."""
    try:
        callbacks = v.factory(ctx)
    except (ImportError, AttributeError) as exc:
        return [], f"not available: {type(exc).__name__}: {exc}"
    return callbacks, None
