"""A model's training FLOPs per sample and the peak FLOP/s of its GPUs, on every Keras backend.

The same convention on every backend (that of `keras_gpu.meters.flops`):
matmul-like ops only, a multiply-add is 2 FLOPs, training is 3 x the forward
pass, so MFU means the same thing on all three.

=============================  ====================================================
backend                        how the forward FLOPs are counted
=============================  ====================================================
TensorFlow                     the traced graph (`keras_gpu.meters.flops`)
JAX                            the forward pass's jaxpr: `dot_general`,
                               convolution and cuDNN attention equations (traced,
                               never run or compiled; `scan` bodies count once
                               per iteration)
PyTorch                        `torch.utils.flop_counter.FlopCounterMode` over one
                               forward pass of zeros (no gradients are touched)
=============================  ====================================================

Fused attention counts as the two products it replaces, on every backend and
implementation (XLA's or cuDNN's on JAX, any of PyTorch's scaled dot-product
attention kernels, einsums on TensorFlow): 2·B·H·Lq·Lk·(Dk + Dv) forward, with
H the query's heads (grouped-query attention included). A mask does not
reduce the count: the full Lq x Lk product is counted, causal or not, as
PyTorch's own counter does.

Where the forward pass holds an op that may hide work keras-gpu cannot count
(a Pallas or custom kernel, a foreign call, a sparse product, a host
callback such as `tf.numpy_function`, `jax.pure_callback` or a Python op,
a custom op or primitive the counter does not know), the count leaves its
work out: `flops_uncounted_ops` names those ops, the count and any MFU from
it are lower bounds, and one WARNING per process says so. On JAX a
primitive is known when it is `jax.lax`'s or JAX's own random or sharding
primitive; on PyTorch an op is watched as it runs, and one outside ATen (a
`torch.library` custom op), a sparse product, or a product ATen op the
counter has no formula for is named.

The backend's facts (which backend, the replicas' GPUs, the model's device)
come from `keras_gpu.core.backend`. Importing this module imports no
backend.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any, NamedTuple

from keras_gpu.core import backend, jax_private, keras_private, torch_private
from keras_gpu.core.log import log_once, logger
from keras_gpu.core.rng_private import preserved_random_state
from keras_gpu.meters import flops
from keras_gpu.meters.per_model import PerModel

__all__ = ["flops_failure", "flops_uncounted_ops", "gpu_peak_flops", "training_flops_per_sample"]


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
        value = flops.training_flops_per_sample(model, input_spec)
        if value is not None:
            _warn_lower_bound(model, flops.uncounted_ops(model))
        return value
    try:
        value = _training_flops(model, current, input_spec)
    except _UncountedError as exc:
        reason = str(exc)
    else:
        _warn_lower_bound(model, flops_uncounted_ops(model))
        return value
    _counted.fail(model, reason)
    _uncounted.put(model, _LAST, ())
    logger.debug("keras-gpu: model FLOPs are not available on the %s backend for %s: %s.", current,
                 getattr(model, "name", "this model"), reason)
    return None


def flops_uncounted_ops(model: Any) -> tuple[str, ...]:
    """The ops whose matrix products the last count of `model` left out; empty when it left out none.

    Where this is not empty, `training_flops_per_sample` returned a lower
    bound, and so is any FLOP/s or MFU computed from it. Each entry names the
    op and, where known, the layer it was traced in, e.g.
    `"pallas_call in layer 'attention'"`.
    """
    if backend.name() == "tensorflow":
        return flops.uncounted_ops(model)
    return _uncounted.get(model, _LAST, ())


def _warn_lower_bound(model: Any, ops: tuple[str, ...]) -> None:
    """One WARNING per process and set of ops: the count of `model` is a lower bound."""
    if ops:
        log_once(
            logging.WARNING,
            "flops:uncounted:" + "|".join(ops),
            "keras-gpu: the FLOP count of model %r leaves out the work of %s, which keras-gpu cannot count, so its "
            "FLOPs per sample, TFLOP/s and MFU are lower bounds; pass flops_per_sample= with the true training "
            "FLOPs per sample to log exact ones.",
            getattr(model, "name", "?"),
            ", ".join(ops),
        )


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
_uncounted = PerModel()  # the ops a count left out, per model and key; the last count's under _LAST
_LAST = "last count"


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
        _uncounted.put(model, _LAST, _uncounted.get(model, key, ()))
        return cached
    try:
        with preserved_random_state(model):  # seeds drawn while tracing or calling it must not reach training
            forward, left_out = counter(model, inputs)
    except _UncountedError:
        raise
    except Exception as exc:
        raise _UncountedError(f"running its forward pass to count them failed ({type(exc).__name__}: {exc})") from exc
    if forward <= 0:
        if left_out:
            raise _UncountedError(f"the matrix products of its forward pass are in ops keras-gpu cannot count "
                                  f"({', '.join(left_out)})")
        raise _UncountedError(_NONE_FOUND[current])
    _uncounted.put(model, key, left_out)
    _uncounted.put(model, _LAST, left_out)
    _counted.put(model, key, 3.0 * forward)
    return 3.0 * forward


_NONE_FOUND = {
    "jax": "its forward pass, traced by JAX, holds no matrix product or convolution (no `dot_general` or "
    "`conv_general_dilated` in its jaxpr)",
    "torch": "PyTorch's FLOP counter (`torch.utils.flop_counter.FlopCounterMode`) found no matrix product, "
    "convolution or attention op it counts in one forward pass of it",
}


def _counter(current: str) -> Callable[[Any, Any], tuple[float, tuple[str, ...]]]:
    """The forward-FLOP counter of backend `current`: forward FLOPs per sample, and the ops it left out."""
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
    left_out: set[str] = set()
    total = _jaxpr_flops(closed.jaxpr, depth=0, left_out=left_out)
    return total / _first(inputs).shape[0], tuple(sorted(left_out))


_HIDES_MATMULS = re.compile(r"attention|attn|flash|splash|matmul|gemm|(^|_)dot(_|$)")
"""Names of JAX primitives that, unknown to the counter, likely hide matrix products."""

_JAX_CALLBACKS = frozenset({"pure_callback", "io_callback"})
"""JAX primitives that run Python on the host and return values to the step: any work, unseen."""

_JAX_OWN_PRIMITIVES = frozenset({
    "random_seed", "random_bits", "random_split", "random_fold_in", "random_clone", "random_wrap",
    "random_unwrap", "threefry2x32", "debug_callback", "sharding_constraint", "mesh_cast", "reshard",
    "device_put", "optimization_barrier", "name",
})
"""JAX primitives outside `jax.lax` that do no hidden work (random bits, sharding, `jax.debug.print`)."""

_lax_primitives: frozenset[str] | None = None


def _known_jax_primitive(prim: str) -> bool:
    """Whether `prim` is one of JAX's own primitives (`jax.lax`'s, random, sharding): no work hidden from the count."""
    global _lax_primitives
    if _lax_primitives is None:
        import jax.lax

        names = (getattr(getattr(jax.lax, n), "name", None) for n in dir(jax.lax) if n.endswith("_p"))
        _lax_primitives = frozenset(name for name in names if isinstance(name, str))
    return prim in _lax_primitives or prim in _JAX_OWN_PRIMITIVES


def _jaxpr_flops(jaxpr: Any, depth: int, left_out: set[str]) -> int:
    """Matmul-like FLOPs of a jaxpr: `dot_general`, `conv_general_dilated` and cuDNN attention, sub-jaxprs included.

    Primitives that hide matrix products the counter cannot size are added to
    `left_out` (with the layer they were traced in) and count 0.
    """
    if depth > 30:
        raise _UncountedError("its forward pass nests functions too deeply to count")
    total = 0
    for eqn in jaxpr.eqns:
        prim = eqn.primitive.name
        if prim in jax_private.CUDNN_ATTENTION_FORWARD:
            try:
                batch, heads, length_q, length_k, depth_k, depth_v = jax_private.cudnn_attention_sizes(eqn)
            except (ValueError, KeyError, AttributeError, IndexError) as exc:
                logger.debug("keras-gpu: cuDNN attention %s not sized (%s)", prim, exc)
                left_out.add(_named(prim, eqn))
            else:  # scores Q·Kᵀ, then weighted values P·V; a mask skips nothing in this count
                total += 2 * batch * heads * length_q * length_k * (depth_k + depth_v)
        elif prim in jax_private.UNCOUNTABLE_PRIMITIVES:
            left_out.add(_named(prim, eqn))
        elif prim == "dot_general":
            (contract, _), _ = eqn.params["dimension_numbers"]
            lhs = eqn.invars[0].aval.shape
            total += 2 * _prod(eqn.outvars[0].aval.shape) * _prod(lhs[d] for d in contract)
        elif prim == "conv_general_dilated":
            total += _conv_flops(eqn)
        elif prim == "scan":
            total += _jaxpr_flops(eqn.params["jaxpr"].jaxpr, depth + 1, left_out) * int(eqn.params["length"])
        elif prim == "cond":
            costs = {_jaxpr_flops(b.jaxpr, depth + 1, left_out) for b in eqn.params["branches"]}
            if len(costs) > 1:
                raise _UncountedError(f"a conditional{_where(eqn)} has branches of different cost ({sorted(costs)})")
            total += costs.pop()
        elif prim == "while":
            if _jaxpr_flops(eqn.params["body_jaxpr"].jaxpr, depth + 1, left_out):
                raise _UncountedError(f"a loop{_where(eqn)} has no constant number of iterations")
        elif prim in _JAX_CALLBACKS:
            left_out.add(f"{prim} (a host callback){_where(eqn)}")
        else:  # calls (jit, custom gradients, remat): their bodies run once
            found = False
            for value in eqn.params.values():
                sub = getattr(value, "jaxpr", value)
                if hasattr(sub, "eqns"):
                    found = True
                    total += _jaxpr_flops(sub, depth + 1, left_out)
            if not found and _HIDES_MATMULS.search(prim):
                left_out.add(_named(prim, eqn))
            elif not found and not _known_jax_primitive(prim):
                left_out.add(f"{prim} (a primitive keras-gpu does not know){_where(eqn)}")
    return total


def _named(prim: str, eqn: Any) -> str:
    """`ffi_call 'target' in layer 'name'`: a primitive left out, with its foreign target and layer where known."""
    target = eqn.params.get("target_name")
    return f"{prim}{f' {target!r}' if isinstance(target, str) else ''}{_where(eqn)}"


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
    recorder = torch_private.op_recorder()  # inside the counter: it sees each operator first
    with torch.no_grad(), counter, recorder:
        model(x, training=False)
    left_out = _torch_uncounted(recorder.ops, counter.flop_registry)
    return float(counter.get_total_flops()) / _first(inputs).shape[0], left_out


_TORCH_PRODUCTS = re.compile(r"mm($|_)|matmul|conv|linear|(^|_)v?dot($|_)|(^|_)(add)?mv($|_)|attention|gemm|einsum")
"""Names of ATen operators that compute matrix products or convolutions."""


def _torch_uncounted(ops: list[tuple[Any, bool]], formulas: dict[Any, Any]) -> tuple[str, ...]:
    """The operators of a forward pass that may hide work the counter left out, each named once.

    A custom op (outside ATen and its primitives: `torch.library.custom_op`,
    a C++ extension's), a product on a sparse tensor, and a product operator
    the counter has no formula for.
    """
    found: list[str] = []
    for op, sparse in ops:
        packet = getattr(op, "overloadpacket", op)
        name = str(packet)
        if getattr(op, "namespace", "aten") not in ("aten", "prims"):
            named = f"{name} (a custom op)"
        elif op in formulas or packet in formulas or not _TORCH_PRODUCTS.search(name.rsplit(".", 1)[-1]):
            continue
        else:
            named = f"{name} (a sparse product)" if sparse else name
        named += " in its forward pass"
        if named not in found:
            found.append(named)
    return tuple(found)


def _torch_formulas(torch: Any) -> dict[Any, Callable[..., int]]:
    """FLOP formulas for matmul-like ATen ops that PyTorch's counter leaves out (torch 2.13).

    A matrix-vector or vector-vector product (`keras.ops.matmul` or `dot` with
    a vector) runs as `mv` or `dot`, and attention on the CPU as
    `_scaled_dot_product_flash_attention_for_cpu` (on other accelerators as
    `_scaled_dot_product_fused_attention_overrideable`); the counter knows
    none of them. Its own formulas cover the flash, memory-efficient and
    cuDNN attention of CUDA GPUs. Formulas receive shapes; multiply-add = 2.
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
    wanted = {
        "mv": mv,
        "addmv": addmv,
        "dot": dot,
        "vdot": dot,
        "_scaled_dot_product_flash_attention_for_cpu": attention,
        "_scaled_dot_product_fused_attention_overrideable": attention,
    }
    return {getattr(aten, name): f for name, f in wanted.items() if hasattr(aten, name)}
