"""A model's training FLOPs per sample and the peak FLOP/s of its GPUs, on every Keras backend.

The same convention on every backend (that of `keras_gpu.meters.flops`):
matmul-like ops only, a multiply-add is 2 FLOPs, training is 3 x the forward
pass, so MFU means the same thing on all three.

=============================  ====================================================
backend                        how the forward FLOPs are counted
=============================  ====================================================
TensorFlow                     the traced graph (`keras_gpu.meters.flops`)
JAX                            the forward pass's jaxpr: `dot_general` and
                               convolution equations (traced, never run or
                               compiled; `scan` bodies count once per iteration)
PyTorch                        `torch.utils.flop_counter.FlopCounterMode` over one
                               forward pass of zeros (no gradients are touched)
=============================  ====================================================

The backend's facts (which backend, the replicas' GPUs, the model's device)
come from `keras_gpu.core.backend`. Importing this module imports no
backend.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from keras_gpu.core import backend, keras_private
from keras_gpu.core.log import logger
from keras_gpu.core.rng_private import preserved_random_state
from keras_gpu.meters import flops
from keras_gpu.meters.per_model import PerModel

__all__ = ["flops_failure", "gpu_peak_flops", "training_flops_per_sample"]


# --------------------------------------------------------------------------- peak FLOP/s


def gpu_peak_flops(model: Any, dtype: str) -> tuple[float | None, list[str]]:
    """Summed peak FLOP/s (the table of `keras_gpu.meters.flops`) of the distinct GPUs under this process's replicas.

    Replicas on logical GPUs that share one physical GPU count it once.

    Args:
        model: The model being trained.
        dtype: A key of the peak table (see `keras_gpu.core.backend.compute_dtype`).

    Returns:
        `(peak, names)`: the GPUs' product names, and their summed peak in
        FLOP/s, or `None` when one of them is not in the table; `(None, [])`
        when the replicas run on no GPU.
    """
    names = [gpu_name for _, gpu_name in backend.replica_gpus(model)]
    peaks = [flops.peak_flops(n, dtype) for n in names]
    if not peaks or any(p is None for p in peaks):
        return None, names
    return float(sum(p for p in peaks if p is not None)), names


# --------------------------------------------------------------------------- model FLOPs


def training_flops_per_sample(model: Any, input_spec: Any = None) -> float | None:
    """Training FLOPs per sample (3 x forward), or None; `flops_failure` then says why.

    TensorFlow: the traced graph count of `keras_gpu.meters.flops`
    (`input_spec` is its `tf.TensorSpec` structure). JAX and PyTorch: see the
    module docs; the input shapes are `input_spec`'s (a nested structure of
    anything with `shape` and `dtype`: the training data's, so that a
    dimension the model leaves to the data, such as an RNN's time steps, is
    counted as the data has it), else the model's symbolic inputs (functional
    and `Sequential` models, any nesting of inputs and outputs), else the
    shapes the model was built with (a subclassed model, built by `fit` before
    the callbacks start). Losses added with `add_loss` are left out, like the
    loss itself. Counted once per model and input shape, then cached.
    """
    current = backend.name()
    if current == "tensorflow":
        return flops.training_flops_per_sample(model, input_spec)
    try:
        return _training_flops(model, current, input_spec)
    except _UncountedError as exc:
        reason = str(exc)
    _counted.fail(model, reason)
    logger.debug("keras-gpu: model FLOPs are not available on the %s backend for %s: %s.", current,
                 getattr(model, "name", "this model"), reason)
    return None


def flops_failure(model: Any) -> str:
    """Why `training_flops_per_sample` returned None for `model`, in a few words."""
    if backend.name() == "tensorflow":
        return flops.failure(model)
    return _counted.failure(model)


_PROBE_BATCH = {"jax": 4096, "torch": 2}
"""Samples in the probe batch the FLOPs are counted on (divided out again). JAX traces
abstract shapes, so a large batch costs nothing and makes work done once per
step rather than per sample vanish from the per-sample count; PyTorch runs a
real forward pass, so its batch is small."""

_counted = PerModel()  # training FLOPs per sample, per model and backend and input structure


class _UncountedError(Exception):
    """The model's FLOPs cannot be counted; the message says why."""


def _training_flops(model: Any, current: str, input_spec: Any = None) -> float:
    """Training FLOPs per sample on the JAX or PyTorch backend, cached per model and input shape.

    Raises:
        _UncountedError: Why the count is not possible.
    """
    counter = _counter(current)
    if input_spec is not None:
        inputs = _data_structure(input_spec, _PROBE_BATCH[current])
    else:
        inputs = _input_structure(model, _PROBE_BATCH[current])
    key = (current, repr(inputs))
    cached = _counted.get(model, key, None)
    if cached is not None:
        return cached
    try:
        with preserved_random_state(model):  # seeds drawn while tracing or calling it must not reach training
            forward = counter(model, inputs)
    except _UncountedError:
        raise
    except Exception as exc:
        raise _UncountedError(f"running its forward pass to count them failed ({type(exc).__name__}: {exc})") from exc
    if forward <= 0:
        raise _UncountedError(_NONE_FOUND[current])
    _counted.put(model, key, 3.0 * forward)
    return 3.0 * forward


_NONE_FOUND = {
    "jax": "its forward pass, traced by JAX, holds no matrix product or convolution (no `dot_general` or "
    "`conv_general_dilated` in its jaxpr)",
    "torch": "PyTorch's FLOP counter (`torch.utils.flop_counter.FlopCounterMode`) found no matrix product, "
    "convolution or attention op it counts in one forward pass of it",
}


def _counter(current: str) -> Callable[[Any, Any], float]:
    """The forward-FLOP counter of backend `current`."""
    if current == "jax":
        return _jax_forward_flops
    if current == "torch":
        return _torch_forward_flops
    raise _UncountedError(f"the {current} backend has no FLOP counter keras-gpu can use")


# --------------------------------------------------------------------------- the probe batch


class _Input(NamedTuple):
    """One input of the probe batch: its shape (batch first) and dtype."""

    shape: tuple[int, ...]
    dtype: str


def _input_structure(model: Any, batch: int) -> Any:
    """The model's input as a nested structure of `_Input`, with batch size `batch`.

    Raises:
        _UncountedError: The model has no known input shapes, or one of them has a
            dimension besides the batch whose size only the data decides.
    """
    import keras

    struct = keras_private.inputs_struct(model)  # a functional model: its inputs as it was defined
    if struct is not None:
        leaves = [(tuple(t.shape), str(t.dtype), getattr(t, "name", "")) for t in keras.tree.flatten(struct)]
        return keras.tree.pack_sequence_as(struct, [_probe_input(shape, dtype, n, batch) for shape, dtype, n in leaves])
    config = model.get_build_config() if getattr(model, "built", False) else None
    shapes = (config or {}).get("input_shape")
    if shapes is None:
        raise _UncountedError(
            "it has no symbolic inputs and was not built with an input shape (build it, or call it once, before fit)"
        )
    floatx = keras.config.floatx()
    return keras.tree.map_shape_structure(lambda shape: _probe_input(tuple(shape), floatx, "", batch), shapes)


def _data_structure(spec: Any, batch: int) -> Any:
    """The training data's input (leaves with `shape` and `dtype`) as a structure of `_Input`."""
    if isinstance(spec, dict):
        return {k: _data_structure(v, batch) for k, v in spec.items()}
    if isinstance(spec, (list, tuple)):
        return type(spec)(_data_structure(v, batch) for v in spec)
    dtype = getattr(spec, "dtype", None)
    shape = getattr(spec, "shape", None)
    if shape is None or dtype is None:
        raise _UncountedError(f"its training data's input {spec!r} has no shape and dtype")
    shape = tuple(shape.as_list()) if hasattr(shape, "as_list") else tuple(shape)
    return _probe_input(shape, str(getattr(dtype, "name", dtype)), "the training data's x", batch)


def _probe_input(shape: tuple[Any, ...], dtype: str, label: str, batch: int) -> _Input:
    if label.startswith("keras_tensor"):  # Keras' own name for an unnamed `keras.Input`
        label = ""
    what = label if label.startswith("the ") else f"its input {label!r}" if label else "its input"
    if not shape:
        raise _UncountedError(f"{what} has no batch dimension")
    if any(dim is None for dim in shape[1:]):
        raise _UncountedError(
            f"{what} has shape {shape}: a dimension besides the batch is known only from the data "
            "(a sequence length, say), and the data's shapes cannot be read before training (only array "
            "data's can)"
        )
    return _Input((batch, *(int(d) for d in shape[1:])), dtype)


def _first(inputs: Any) -> _Input:
    if isinstance(inputs, _Input):
        return inputs
    if isinstance(inputs, dict):
        return _first(next(iter(inputs.values())))
    return _first(inputs[0])


def _map_inputs(fn: Any, inputs: Any) -> Any:
    """`inputs` with every `_Input` replaced by `fn(input)` (dicts, lists and tuples kept)."""
    if isinstance(inputs, _Input):
        return fn(inputs)
    if isinstance(inputs, dict):
        return {k: _map_inputs(fn, v) for k, v in inputs.items()}
    return type(inputs)(_map_inputs(fn, v) for v in inputs)


# --------------------------------------------------------------------------- JAX


def _jax_forward_flops(model: Any, inputs: Any) -> float:
    import jax

    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]
    x = _map_inputs(lambda i: jax.ShapeDtypeStruct(i.shape, i.dtype), inputs)

    # stateless_call hands its keywords to `call` as they are (unlike `__call__`).
    training = {"training": False} if keras_private.call_has_training_arg(model) else {}

    def forward(trainable, non_trainable, x):
        outputs, _ = model.stateless_call(trainable, non_trainable, x, **training)
        return outputs

    closed = jax.make_jaxpr(forward)(trainable, non_trainable, x)
    return _jaxpr_flops(closed.jaxpr, depth=0) / _first(inputs).shape[0]


def _jaxpr_flops(jaxpr: Any, depth: int) -> int:
    """Matmul-like FLOPs of a jaxpr: `dot_general` and `conv_general_dilated`, sub-jaxprs included."""
    if depth > 30:
        raise _UncountedError("its forward pass nests functions too deeply to count")
    total = 0
    for eqn in jaxpr.eqns:
        prim = eqn.primitive.name
        if prim == "dot_general":
            (contract, _), _ = eqn.params["dimension_numbers"]
            lhs = eqn.invars[0].aval.shape
            total += 2 * _prod(eqn.outvars[0].aval.shape) * _prod(lhs[d] for d in contract)
        elif prim == "conv_general_dilated":
            total += _conv_flops(eqn)
        elif prim == "scan":
            total += _jaxpr_flops(eqn.params["jaxpr"].jaxpr, depth + 1) * int(eqn.params["length"])
        elif prim == "cond":
            costs = {_jaxpr_flops(b.jaxpr, depth + 1) for b in eqn.params["branches"]}
            if len(costs) > 1:
                raise _UncountedError(f"a conditional{_where(eqn)} has branches of different cost ({sorted(costs)})")
            total += costs.pop()
        elif prim == "while":
            if _jaxpr_flops(eqn.params["body_jaxpr"].jaxpr, depth + 1):
                raise _UncountedError(f"a loop{_where(eqn)} has no constant number of iterations")
        else:  # calls (jit, custom gradients, remat): their bodies run once
            for value in eqn.params.values():
                sub = getattr(value, "jaxpr", value)
                if hasattr(sub, "eqns"):
                    total += _jaxpr_flops(sub, depth + 1)
    return total


def _where(eqn: Any) -> str:
    """` in layer 'name'`: the Keras layers (JAX name stack) an equation was traced in; else ` in its forward pass`."""
    stack = str(getattr(getattr(eqn, "source_info", None), "name_stack", "") or "")
    return f" in layer {stack!r}" if stack else " in its forward pass"


def _conv_flops(eqn: Any) -> int:
    """FLOPs of one `conv_general_dilated` equation: 2 x the multiply-adds of real (not inserted zero) inputs.

    A transposed convolution reaches XLA as a convolution over the input
    dilated with zeros (`lhs_dilation` > 1); counting its output would count
    the multiplications by those zeros too (4x for a stride of 2 in 2-D).
    Each real input element meets every kernel tap once per output channel of
    its group, which is TensorFlow's and PyTorch's count of the same layer.
    """
    lhs, rhs = eqn.invars[0].aval.shape, eqn.invars[1].aval.shape
    spec = eqn.params["dimension_numbers"].rhs_spec  # (out feature, in feature, *spatial)
    taps = _prod(rhs[d] for d in spec[2:])
    if any(int(d) != 1 for d in eqn.params.get("lhs_dilation") or ()):
        groups = max(1, int(eqn.params.get("feature_group_count", 1)))
        return 2 * _prod(lhs) * taps * (int(rhs[spec[0]]) // groups)
    return 2 * _prod(eqn.outvars[0].aval.shape) * taps * int(rhs[spec[1]])


def _prod(values: Any) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out


# --------------------------------------------------------------------------- PyTorch


def _torch_forward_flops(model: Any, inputs: Any) -> float:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    device = backend.torch_device(model)
    x = _map_inputs(lambda i: torch.zeros(i.shape, dtype=getattr(torch, i.dtype), device=device), inputs)
    counter = FlopCounterMode(display=False, custom_mapping=_torch_formulas(torch))
    with torch.no_grad(), counter:
        model(x, training=False)
    return float(counter.get_total_flops()) / _first(inputs).shape[0]


def _torch_formulas(torch: Any) -> dict[Any, Callable[..., int]]:
    """FLOP formulas for matmul-like ATen ops that PyTorch's counter leaves out (torch 2.13).

    A matrix-vector or vector-vector product (`keras.ops.matmul` or `dot` with
    a vector) runs as `mv` or `dot`, and attention on the CPU as
    `_scaled_dot_product_flash_attention_for_cpu`; the counter knows none of
    them. Formulas receive shapes; multiply-add = 2.
    """

    def mv(a: Any, b: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
        return 2 * _prod(a)

    def addmv(bias: Any, a: Any, b: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
        return 2 * _prod(a)

    def dot(a: Any, b: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
        return 2 * _prod(a)

    def attention(query: Any, key: Any, value: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
        *lead, length_q, depth = query
        length_k, depth_v = key[-2], value[-1]
        return 2 * _prod(lead) * length_q * length_k * (depth + depth_v)  # scores, then weighted values

    aten = torch.ops.aten
    wanted = {"mv": mv, "addmv": addmv, "dot": dot, "vdot": dot, "_scaled_dot_product_flash_attention_for_cpu": attention}
    return {getattr(aten, name): f for name, f in wanted.items() if hasattr(aten, name)}
