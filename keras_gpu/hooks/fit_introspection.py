"""The running `fit`, found on the Python stack: what it feeds, and whether it is still running.

This is keras-gpu's one stack walker (`walk_stack`). `FitWatch`
tells background threads whether the `fit` that started them still runs.
The rest describes what the running `fit` feeds: batch size, batches per
pass, the short last batch.

Keras does not tell callbacks the batch size. This module finds the `fit`
call that is running on a model (by walking the Python stack up from the
callback to the frame of `model.fit`) and reads its epoch iterator's data
adapter:

* array adapters (NumPy arrays, tensors) know `batch_size`, the number of
  batches and the size of the short last batch;
* `tf.data` adapters know the number of batches (the dataset's cardinality,
  when it is known) and the static batch dimension, if any: a static batch
  dimension means every batch is full (`drop_remainder=True`);
* other inputs (generators, `PyDataset`, ...) report nothing.

Where nothing tells the batch size before the batches come, JAX and PyTorch
count the batches themselves: `count_batches` wraps the running
`fit`'s epoch iterator so that every batch its train function takes adds
its size (the first dimension of its first array: shape metadata, no
device sync) to a `BatchCounter`. TensorFlow's train function takes
its batches inside the compiled step; there `keras_gpu.hooks.step_probe` counts.

This reads private Keras state through `keras_gpu.core.keras_private`: everything is wrapped
so that a different Keras yields `None` fields, never an exception.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any

from keras_gpu.core import keras_private
from keras_gpu.core.frames import current_frames
from keras_gpu.core.log import logger

__all__ = ["ArrayInput", "BatchCounter", "FitData", "FitWatch", "count_batches", "inspect_fit", "walk_stack"]

_MAX_FRAMES = 64
_LIBRARIES = ("keras.", "keras_gpu.")


@dataclass(frozen=True)
class FitData:
    """What the running `fit` call feeds per step, as far as it can be known.

    Attributes:
        adapter: Class name of the data adapter (for messages).
        batch_size: Samples per step, all replicas together; `None` if unknown.
        last_batch_size: Samples in the last batch of a pass; equals
            `batch_size` when all batches are full; `None` if unknown.
        batches_per_pass: Batches in one pass over the data; `None` if
            unknown or infinite.
        infinite: The data repeats forever.
        samples_per_pass: Samples in one pass, when known.
        steps_per_epoch: The `steps_per_epoch` passed to `fit`.
        steps_per_execution: The model's `steps_per_execution`.
        x_spec: The (nested) `tf.TensorSpec` of the model input `x`, or `None`.
        x_shapes: The model input `x` of array data as a nested structure of
            `ArrayInput` (batch dimension `None`), read without
            TensorFlow; `None` for other data.
        num_batches: Steps Keras runs per epoch (its epoch iterator's
            `num_batches`), or `None` where it stops at the data's end.
    """

    adapter: str = "unknown"
    batch_size: int | None = None
    last_batch_size: int | None = None
    batches_per_pass: int | None = None
    infinite: bool = False
    samples_per_pass: int | None = None
    steps_per_epoch: int | None = None
    steps_per_execution: int = 1
    x_spec: Any = None
    num_batches: int | None = None
    x_shapes: Any = None


@dataclass(frozen=True)
class ArrayInput:
    """One array of a `fit`'s input `x`: its shape (batch dimension `None`) and dtype name."""

    shape: tuple[int | None, ...]
    dtype: str


def _array_inputs(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _array_inputs(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_array_inputs(v) for v in x)
    shape, dtype = getattr(x, "shape", None), getattr(x, "dtype", None)
    if shape is None or dtype is None:
        raise TypeError(f"not an array: {type(x).__name__}")
    return ArrayInput((None, *(int(d) for d in tuple(shape)[1:])), str(getattr(dtype, "name", dtype)))


# --------------------------------------------------------------------------- the stack


def walk_stack(start: FrameType | None, max_frames: int | None = None) -> Iterator[FrameType]:
    """`start` and the frames that called it, innermost first (at most `max_frames` of them)."""
    frame, seen = start, 0
    while frame is not None and (max_frames is None or seen < max_frames):
        yield frame
        frame, seen = frame.f_back, seen + 1


def _is_fit(frame: FrameType) -> bool:
    return frame.f_code.co_name == "fit"


class FitWatch:
    """Tells whether the `fit` call that started a run is still on its thread's stack.

    Keras does not call `on_train_end` when `fit` raises, so background
    threads cannot wait for it. `capture`, called from `on_train_begin`,
    records the frame of the enclosing `fit` (or, when the hook is called by
    hand, of the first caller outside Keras and keras-gpu) and the thread
    running it; the run is alive while that frame is on that thread's stack.
    Checking costs a walk of one stack, on the background thread.
    """

    def __init__(self, frame: FrameType | None, ident: int) -> None:
        self._frame = frame
        self._ident = ident

    @classmethod
    def capture(cls) -> FitWatch:
        """Watch the `fit` (or outside caller) above the frame that calls this."""
        caller = sys._getframe(1)  # noqa: SLF001 - the stack is the only record of the running fit
        frame = next((f for f in walk_stack(caller) if _is_fit(f)), None)
        if frame is None:
            outside = (f for f in walk_stack(caller) if not f.f_globals.get("__name__", "").startswith(_LIBRARIES))
            frame = next(outside, None)
        return cls(frame, threading.get_ident())

    def alive(self) -> bool:
        """Whether the watched frame is still on the watched thread's stack."""
        target = self._frame
        if target is None:
            return False
        frame = current_frames().get(self._ident)
        if any(f is target for f in walk_stack(frame)):
            return True
        self._frame = None  # let the finished frame (and its locals) go
        return False


def _find_epoch_iterator(model: Any) -> Any:
    """The epoch iterator of the `fit` currently running on `model`, or None."""
    for frame in walk_stack(sys._getframe(1), _MAX_FRAMES):  # noqa: SLF001 - the only way to reach fit's locals
        if _is_fit(frame):
            local = frame.f_locals
            if local.get("self") is model and local.get("epoch_iterator") is not None:
                return local["epoch_iterator"]
    return None


def _int_or_none(value: Any) -> int | None:
    try:
        if value is None or isinstance(value, bool):
            return None
        value = int(value)
    except (TypeError, ValueError):
        return None
    return value if value > 0 else None


def _unpack_x(structure: Any) -> Any:
    """`x` from an `(x, y, sample_weight)` element, as Keras unpacks it."""
    if isinstance(structure, list):
        structure = tuple(structure)
    if isinstance(structure, tuple) and 1 <= len(structure) <= 3:
        return structure[0]
    return structure


def _array_spec(x: Any) -> Any:
    import tensorflow as tf

    def leaf(a: Any) -> Any:
        shape = getattr(a, "shape", None)
        dtype = getattr(a, "dtype", None)
        if shape is None or dtype is None:
            raise TypeError(f"not an array: {type(a).__name__}")
        return tf.TensorSpec([None, *tuple(shape)[1:]], tf.as_dtype(getattr(dtype, "name", dtype)))

    return tf.nest.map_structure(leaf, x)


def _from_array_adapter(adapter: Any) -> dict[str, Any]:
    batch = _int_or_none(getattr(adapter, "batch_size", None))
    batches = _int_or_none(getattr(adapter, "num_batches", None))
    partial = getattr(adapter, "partial_batch_size", None)
    samples = _int_or_none(keras_private.array_adapter_num_samples(adapter))
    out: dict[str, Any] = {"batch_size": batch, "batches_per_pass": batches}
    if batch is not None:
        out["last_batch_size"] = _int_or_none(partial) or batch
    if batch is not None and batches is not None:
        out["samples_per_pass"] = (batches - 1) * batch + out["last_batch_size"]
        if samples is not None and samples != out["samples_per_pass"]:
            return {}  # the adapter's fields disagree: trust none of them
    inputs = keras_private.array_adapter_inputs(adapter)
    if inputs is not None:
        try:
            out["x_shapes"] = _array_inputs(_unpack_x(inputs))
            out["x_spec"] = _array_spec(_unpack_x(inputs))
        except Exception:  # noqa: BLE001, S110 - the spec is optional (no TensorFlow: x_shapes only)
            pass
    return out


def _from_tf_dataset_adapter(adapter: Any) -> dict[str, Any]:
    import tensorflow as tf

    dataset = keras_private.tf_dataset_adapter_dataset(adapter)
    if not isinstance(dataset, tf.data.Dataset):
        return {}  # a user-distributed dataset: per-replica specs, batch unknown
    out: dict[str, Any] = {}
    cardinality = int(dataset.cardinality())
    if cardinality == tf.data.INFINITE_CARDINALITY:
        out["infinite"] = True
    elif cardinality > 0:
        out["batches_per_pass"] = cardinality
    spec = dataset.element_spec
    x_spec = _unpack_x(spec)
    leaves = [s for s in tf.nest.flatten(spec) if hasattr(s, "shape")]
    firsts = set()
    for s in leaves:
        shape = tf.TensorShape(s.shape)
        if shape.rank is None or shape.rank == 0:
            firsts.add(None)
        else:
            firsts.add(shape[0])
    if len(firsts) == 1:
        batch = _int_or_none(firsts.pop())
        if batch is not None:
            out["batch_size"] = batch
            out["last_batch_size"] = batch  # a static batch dimension: every batch is full
            if "batches_per_pass" in out:
                out["samples_per_pass"] = batch * out["batches_per_pass"]
    if all(isinstance(s, tf.TensorSpec) for s in tf.nest.flatten(x_spec)):
        out["x_spec"] = x_spec
    return out


def inspect_fit(model: Any) -> FitData | None:
    """Describe the data of the `fit` call running on `model`.

    Call it from a callback hook running inside `model.fit` (for example
    `on_train_begin`).

    Returns:
        A `FitData` (fields it cannot know are `None`), or `None` when
        no running `fit` on `model` is found. Never raises.
    """
    try:
        iterator = _find_epoch_iterator(model)
        if iterator is None:
            return None
        adapter = getattr(iterator, "data_adapter", None)
        name = type(adapter).__name__ if adapter is not None else "unknown"
        fields: dict[str, Any] = {}
        if name == "ArrayDataAdapter":
            fields = _from_array_adapter(adapter)
        elif name == "TFDatasetAdapter":
            fields = _from_tf_dataset_adapter(adapter)
        spe = _int_or_none(getattr(iterator, "steps_per_execution", None))
        spe = spe or _int_or_none(getattr(model, "steps_per_execution", None)) or 1
        return FitData(
            adapter=name,
            steps_per_epoch=_int_or_none(getattr(iterator, "steps_per_epoch", None)),
            steps_per_execution=spe,
            num_batches=_int_or_none(getattr(iterator, "num_batches", None)),
            **fields,
        )
    except Exception as exc:  # noqa: BLE001 - introspection must never break fit
        logger.debug("keras-gpu: could not inspect the running fit: %s: %s", type(exc).__name__, exc)
        return None


# --------------------------------------------------------------------------- counting batches on the host


class BatchCounter:
    """Steps and samples of the batches a `fit`'s train function took, counted on the host as it takes them.

    Call it for the running totals `(steps, samples)`. Each batch costs an
    add and a shape read (the path to the first array is found once); a
    batch with no array of rank 1 or more counts as a step of 0 samples.
    `input_sec` sums the host seconds spent taking the batches (two clock
    reads per batch): the wait for the input pipeline.

    Keras' trainers take a step's batches at different moments: PyTorch's
    before the step's `on_train_batch_begin`, JAX's inside the step, after
    it. A count read at a batch begin therefore covers the batches of the
    epoch up to `taken_in_epoch - 1` (Keras' batch index), whichever the
    backend; `epoch_begin` starts that count (call it from `on_epoch_begin`,
    before the epoch's first batch is taken).
    """

    __slots__ = ("_epoch_start", "_path", "input_sec", "samples", "steps")

    def __init__(self) -> None:
        self.steps = 0
        self.samples = 0
        self.input_sec = 0.0
        self._epoch_start = 0
        self._path: tuple[Any, ...] | None = None

    def __call__(self) -> tuple[int, int]:
        return self.steps, self.samples

    def epoch_begin(self) -> None:
        """Start the epoch's count of batches taken (`taken_in_epoch`); on the training thread."""
        self._epoch_start = self.steps

    @property
    def taken_in_epoch(self) -> int:
        """The batches taken since `epoch_begin`: the count covers the epoch's batches before this index."""
        return self.steps - self._epoch_start

    def wrap(self, batches: Any) -> Iterator[Any]:
        """Yield from `batches`, counting each batch when it is taken and the time taking it."""
        iterator = iter(batches)
        while True:
            start = time.perf_counter()
            try:
                batch = next(iterator)
            except StopIteration:
                return
            self.input_sec += time.perf_counter() - start
            self.steps += 1
            self.samples += self._size(batch)
            yield batch

    def _size(self, batch: Any) -> int:
        path = self._path
        if path is not None:
            size = _size_at(batch, path)
            if size is not None:
                return size
        found = _first_array(batch, ())
        if found is None:
            return 0
        self._path, size = found
        return size


def _size_at(batch: Any, path: tuple[Any, ...]) -> int | None:
    """The first dimension of the leaf at `path`, or `None` where the batch has no such leaf."""
    try:
        leaf = batch
        for key in path:
            leaf = leaf[key]
        return int(leaf.shape[0])
    except Exception:  # noqa: BLE001 - the structure changed: the caller searches again
        return None


def _first_array(value: Any, path: tuple[Any, ...]) -> tuple[tuple[Any, ...], int] | None:
    """The path to the first leaf of `value` with a first dimension, and that dimension."""
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, (list, tuple)):
        items = enumerate(value)
    else:
        shape = getattr(value, "shape", None)
        try:
            return (path, int(shape[0])) if shape is not None and len(shape) > 0 else None
        except (TypeError, ValueError):
            return None  # an unknown dimension
    for key, item in items:
        found = _first_array(item, (*path, key))
        if found is not None:
            return found
    return None


def count_batches(model: Any) -> BatchCounter | None:
    """Count the batches of the `fit` running on `model` (JAX and PyTorch), or `None` where it cannot.

    Call it from a callback hook inside `fit` before the first epoch (e.g.
    `on_train_begin`). It replaces, on that `fit`'s own epoch iterator only,
    the method that makes each pass's iterator, so the counter sees the
    batches in the order the train function takes them; nothing global
    changes, and the iterator goes when the `fit` ends. Never raises.
    """
    try:
        iterator = _find_epoch_iterator(model)
        counter = BatchCounter()
        if iterator is None or not keras_private.wrap_epoch_iterator(iterator, counter.wrap):
            return None
        return counter
    except Exception as exc:  # noqa: BLE001 - counting must never break fit
        logger.debug("keras-gpu: could not count the running fit's batches: %s: %s", type(exc).__name__, exc)
        return None
