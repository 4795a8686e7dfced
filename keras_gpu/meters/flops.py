"""Model FLOPs from the traced graph, and the peak FLOP/s of common NVIDIA GPUs.

Counting convention (the one MFU is usually quoted with):

* Only matrix-multiply-like ops are counted: `MatMul`, `BatchMatMul*`,
  `Einsum`, `Conv2D`/`Conv3D`/`Conv`, `DepthwiseConv2dNative` and the
  transposed convolutions (`Conv2DBackpropInput`, `Conv3DBackpropInputV2`).
  Element-wise ops, reductions, normalisation and activations are not: they
  are a small share of the work and do not run on the matrix units.
* A multiply-add counts as 2 FLOPs, so a `Dense(out)` layer on `in` features
  costs `2 * in * out` FLOPs per sample, and a convolution
  `2 * output_elements * kernel_volume * input_channels_per_group`.
* Attention (`keras.ops.dot_product_attention`, `MultiHeadAttention`) reaches
  the graph as `Einsum`/`BatchMatMul` ops and counts as its two products,
  2·H·Lq·Lk·(Dk + Dv) per sample, whatever the mask.
* Ops that may hide work the counter cannot size count 0 and are named by
  `uncounted_ops` (the count is then a lower bound): ops that hold matrix
  products (`XlaCallModule`, `XlaDot`, sparse products, fused and cuDNN RNN
  kernels: any op type named for a product, a convolution or an RNN that the
  counter does not count), Python callbacks (`tf.numpy_function`,
  `tf.py_function`) and custom ops (an op type outside `tf.raw_ops`,
  loaded with `tf.load_op_library`).
* Training FLOPs per sample are 3 x the forward FLOPs (the backward pass costs
  about twice the forward one: gradients with respect to activations and to
  weights).
* Loops count their body `maximum_iterations` times when that is a constant
  (RNN layers over a fixed number of time steps); a loop without a constant
  bound, or a conditional whose branches differ, makes the count unknown
  (`None`) rather than wrong. Pass `flops_per_sample` to the callback then.

The model is traced once, forward only, with `training=False`, for one sample
(or the model's static batch size), and the result is cached per model and
input signature, so a later `fit` on the same model does not trace again.
The input signature is the training data's, else the model's symbolic inputs,
else the shapes a subclassed model was built with. Where no count is possible,
`failure` says why. The count on the JAX and PyTorch backends, with the
same convention, and the peak FLOP/s of the GPUs a model trains on are in
`keras_gpu.meters.model_flops`.
"""

from __future__ import annotations

import re
from typing import Any

from keras_gpu.core import backend, keras_private
from keras_gpu.core.log import logger
from keras_gpu.core.rng_private import preserved_random_state
from keras_gpu.core.tf_private import constant_value, function_body_graph
from keras_gpu.meters.per_model import PerModel

__all__ = [
    "DTYPES",
    "compute_dtype",
    "failure",
    "forward_flops",
    "known_gpus",
    "peak_flops",
    "random_ops",
    "training_flops_per_sample",
    "uncounted_ops",
]

DTYPES = ("float32", "tf32", "float16", "bfloat16")
"""Compute dtypes the peak table knows: IEEE float32 on the CUDA cores, TF32
on the tensor cores (float32 matmuls with TF32 execution enabled), and
float16/bfloat16 on the tensor cores with float32 accumulation."""

# -----------------------------------------------------------------------------
# Peak FLOP/s table
# -----------------------------------------------------------------------------

# Dense (no structured sparsity) peak throughput in TFLOP/s, from NVIDIA's
# datasheets and architecture whitepapers (A10G: AWS's A10G datasheet).
# float16/bfloat16 are tensor-core rates with float32 accumulation, which is
# what mixed precision uses (GeForce cards run those at half their float16-
# accumulate rate). None: the GPU has no fast path for that dtype (bfloat16
# before Ampere). "tf32" on a GPU without TF32 (before Ampere) falls back to
# its float32 rate, because TensorFlow then computes in float32.
_T = dict[str, float | None]


def _row(fp32: float, tf32: float | None, fp16: float, bf16: float | None) -> _T:
    return {"float32": fp32, "tf32": tf32, "float16": fp16, "bfloat16": bf16}


_PEAK_TFLOPS: dict[str, _T] = {
    "V100 SXM2": _row(15.7, None, 125.0, None),
    "V100 PCIe": _row(14.0, None, 112.0, None),
    "V100S PCIe": _row(16.4, None, 130.0, None),
    "T4": _row(8.1, None, 65.0, None),
    "A100": _row(19.5, 156.0, 312.0, 312.0),
    "A10": _row(31.2, 62.5, 125.0, 125.0),
    "A10G": _row(31.2, 62.5, 125.0, 125.0),
    "A30": _row(10.3, 82.0, 165.0, 165.0),
    "A40": _row(37.4, 74.8, 149.7, 149.7),
    "RTX A6000": _row(38.7, 77.4, 154.8, 154.8),
    "RTX 3090": _row(35.6, 35.6, 71.0, 71.0),
    "RTX 4090": _row(82.6, 82.6, 165.2, 165.2),
    "L4": _row(30.3, 60.0, 121.0, 121.0),
    "L40": _row(90.5, 90.5, 181.0, 181.0),
    "L40S": _row(91.6, 183.0, 362.0, 362.0),
    "H100 SXM": _row(67.0, 494.5, 989.5, 989.5),
    "H100 PCIe": _row(51.2, 378.0, 756.5, 756.5),
    "H100 NVL": _row(60.0, 417.5, 835.5, 835.5),
    "H200 SXM": _row(67.0, 494.5, 989.5, 989.5),
    "H200 NVL": _row(60.0, 417.5, 835.5, 835.5),
    "GH200": _row(67.0, 494.5, 989.5, 989.5),
}

# (pattern on the normalised name, table key); first match wins, so the more
# specific names come first.
_NAME_RULES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p), key)
    for p, key in (
        (r"\bgh200\b", "GH200"),
        (r"\bh200\b.*\bnvl\b", "H200 NVL"),
        (r"\bh200\b", "H200 SXM"),
        (r"\bh100\b.*\bnvl\b", "H100 NVL"),
        (r"\bh100\b.*\bpcie\b", "H100 PCIe"),
        (r"\bh100\b", "H100 SXM"),
        (r"\ba100\b", "A100"),
        (r"\ba10g\b", "A10G"),
        (r"\ba10\b", "A10"),
        (r"\ba30\b", "A30"),
        (r"\ba40\b", "A40"),
        (r"\brtx a6000\b", "RTX A6000"),
        (r"\brtx 3090\b(?! ?ti)", "RTX 3090"),
        (r"\brtx 4090\b(?! ?(d|laptop|mobile)\b)", "RTX 4090"),
        (r"\bl40s\b", "L40S"),
        (r"\bl40\b", "L40"),
        (r"\bl4\b", "L4"),
        (r"\bv100s\b", "V100S PCIe"),
        (r"\bv100\b.*\bpcie\b", "V100 PCIe"),
        (r"\bv100\b", "V100 SXM2"),
        (r"\bt4\b", "T4"),
    )
)


def _normalise(name: str) -> str:
    s = name.lower().replace("_", " ").replace("-", " ")
    s = re.sub(r"\b(nvidia|tesla|geforce|quadro)\b", " ", s)
    return " ".join(s.split())


def known_gpus() -> tuple[str, ...]:
    """The GPU models the peak table knows, by their table names."""
    return tuple(_PEAK_TFLOPS)


def _table_key(device_name: str) -> str | None:
    norm = _normalise(device_name)
    if re.search(r"\bmig\b", norm):
        return None  # a MIG slice has a fraction of the GPU's compute
    for pattern, key in _NAME_RULES:
        if pattern.search(norm):
            return key
    return None


def peak_flops(device_name: str, dtype: str = "float32") -> float | None:
    """Dense peak FLOP/s of one GPU for a compute dtype, or `None` if unknown.

    Args:
        device_name: The GPU's name as NVML, `nvidia-smi` or TensorFlow report
            it, e.g. `"NVIDIA H100 80GB HBM3"`, `"Tesla V100-SXM2-16GB"`,
            `"NVIDIA A100-SXM4-80GB"`. Matching ignores case, vendor words and
            punctuation. MIG slices return `None` (pass the slice's peak
            yourself).
        dtype: One of `DTYPES`.

    Returns:
        FLOP/s (not TFLOP/s), or `None` for an unknown GPU or a dtype the GPU
        has no fast path for.

    Raises:
        TypeError: `device_name` is not a string.
        ValueError: `dtype` is not one of `DTYPES`.
    """
    if not isinstance(device_name, str):
        raise TypeError(f"`device_name` must be a string. Received: device_name={device_name!r}")
    if dtype not in DTYPES:
        raise ValueError(f"`dtype` must be one of {DTYPES}. Received: dtype={dtype!r}")
    key = _table_key(device_name)
    if key is None:
        return None
    row = _PEAK_TFLOPS[key]
    value = row[dtype]
    if value is None and dtype == "tf32":
        value = row["float32"]
    return None if value is None else value * 1e12


def compute_dtype(model: Any) -> str:
    """The dtype a model's matmuls run in, as a key of the peak table (see `keras_gpu.core.backend.compute_dtype`)."""
    return backend.compute_dtype(model)


# -----------------------------------------------------------------------------
# FLOP counting
# -----------------------------------------------------------------------------

_NOT_COUNTED = object()
_counted = PerModel()  # forward FLOPs per model and input signature (None: uncountable)
_uncounted = PerModel()  # the op types a count left out, per model and signature; the last count's under _LAST
_LAST = "last count"

_HIDDEN_MATMULS = frozenset({
    "XlaCallModule",  # a serialized JAX/StableHLO module (jax2tf)
    "XlaDot",
    "XlaDotV2",
    "XlaConv",
    "XlaConvV2",
    "XlaEinsum",
    "XlaRaggedDot",
    "SparseMatMul",
    "SparseTensorDenseMatMul",
    "SparseMatrixMatMul",
    "_FusedMatMul",
    "_FusedBatchMatMulV2",
    "_FusedConv2D",
    "_FusedConv3D",
    "FusedPadConv2D",
    "FusedResizeAndPadConv2D",
})
"""TensorFlow op types that hold matrix products the counter does not size."""

_CALLBACKS = frozenset({"PyFunc", "PyFuncStateless", "EagerPyFunc"})
"""Op types that run Python on the host (`tf.numpy_function`, `tf.py_function`): any work, unseen."""

_PRODUCT_NAMES = re.compile(r"MatMul|Matmul|Conv(\d?D|$|olution)|Einsum|Dot|RNN|LSTM|GRU|Attention|Gemm")
"""Op type names that say a matrix product, a convolution or an RNN: uncounted unless `_op_flops` knows them."""

_COUNTED = frozenset({
    "MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "Einsum", "Conv2D", "Conv3D", "Conv",
    "DepthwiseConv2dNative", "Conv2DBackpropInput", "Conv3DBackpropInputV2",
})
"""The op types `_op_flops` counts."""


def _hidden_work(kind: str) -> str | None:
    """How an op of type `kind` is named where it may hide work the count leaves out, or `None`.

    The op type alone where it says a product; else with why
    (`"PyFunc (a Python callback)"`).
    """
    if kind in _COUNTED:
        return None
    if kind in _CALLBACKS:
        return f"{kind} (a Python callback)"
    if kind in _HIDDEN_MATMULS or _PRODUCT_NAMES.search(kind):
        return kind
    if not kind.startswith("_") and not _builtin_op(kind):
        return f"{kind} (a custom op)"
    return None


def _builtin_op(kind: str) -> bool:
    """Whether TensorFlow itself defines the op type (`tf.raw_ops`), rather than a library loaded at run time."""
    import tensorflow as tf

    return hasattr(tf.raw_ops, kind)


def uncounted_ops(model: Any) -> tuple[str, ...]:
    """The ops (`"XlaDotV2 in layer 'model/dense'"`) whose matrix products the last count of `model` left out.

    Empty when it left none out; otherwise `forward_flops` returned a lower bound.
    """
    return _uncounted.get(model, _LAST, ())


def failure(model: Any) -> str:
    """Why `forward_flops` last returned None for `model`, in a few words."""
    return _counted.failure(model)


def _fail(model: Any, reason: str) -> None:
    logger.debug("keras-gpu: FLOPs of %s not counted: %s", getattr(model, "name", model), reason)
    _counted.fail(model, reason)


class _UncountableError(Exception):
    """The graph holds work whose amount cannot be known statically."""


def training_flops_per_sample(model: Any, input_spec: Any = None) -> float | None:
    """Training FLOPs per sample: 3 x `forward_flops`; `None` when uncountable."""
    forward = forward_flops(model, input_spec)
    return None if forward is None else 3.0 * forward


def forward_flops(model: Any, input_spec: Any = None) -> int | None:
    """Forward-pass FLOPs for one sample, counted once from the traced graph and cached.

    Args:
        model: A built Keras model.
        input_spec: The model's input as a (nested) structure of
            `tf.TensorSpec`, e.g. the element spec of the training data's `x`.
            Its batch dimension is ignored. Default: the model's own symbolic
            inputs (functional and sequential models).

    Returns:
        FLOPs (multiply-add = 2) for one sample, or `None` when the input
        shape is not fully known or the graph holds work that cannot be
        counted statically. Never raises for a model it cannot trace.
    """
    try:
        signature, batch = _signature(model, input_spec)
    except _UncountableError as exc:
        _fail(model, str(exc))
        return None
    except Exception as exc:  # noqa: BLE001 - an odd input spec must not break training
        _fail(model, f"its input's shape could not be read ({type(exc).__name__}: {exc})")
        return None
    key = _spec_key(signature)
    cached = _counted.get(model, key, _NOT_COUNTED)
    if cached is not _NOT_COUNTED:
        _uncounted.put(model, _LAST, _uncounted.get(model, key, ()))
        return cached
    left_out: set[str] = set()
    try:
        graph = _trace_forward_graph(model, signature)
        total = _count_graph(graph, depth=0, left_out=left_out)
        result: int | None = round(total / batch)
        if not total and left_out:
            raise _UncountableError(
                f"the matrix products of its forward pass are in ops keras-gpu cannot count ({', '.join(sorted(left_out))})"
            )
    except _UncountableError as exc:
        _fail(model, str(exc))
        result = None
    except Exception as exc:  # noqa: BLE001 - a model we cannot trace must not break training
        _fail(model, f"tracing its forward pass failed ({type(exc).__name__}: {exc})")
        result = None
    ops = tuple(sorted(left_out)) if result is not None else ()
    _uncounted.put(model, key, ops)
    _uncounted.put(model, _LAST, ops)
    _counted.put(model, key, result)
    return result


def _signature(model: Any, input_spec: Any) -> tuple[Any, int]:
    """The (nested) TensorSpec to trace with, and the batch size it uses."""
    import tensorflow as tf

    names: list[str] = []  # the model's own input names, where its symbolic inputs give the spec
    if input_spec is None:
        struct = keras_private.inputs_struct(model)
        if struct is None:
            try:
                struct = model.inputs
            except (AttributeError, ValueError):
                struct = None
        if struct is None or (isinstance(struct, (list, tuple, dict)) and not struct):
            input_spec = _built_spec(model)  # a subclassed model: the shapes it was built with
        else:
            if isinstance(struct, list) and len(struct) == 1:
                struct = struct[0]
            input_spec = tf.nest.map_structure(lambda t: tf.TensorSpec(tuple(t.shape), tf.as_dtype(t.dtype)), struct)
            names = [str(getattr(t, "name", "")) for t in tf.nest.flatten(struct)]
    leaves = tf.nest.flatten(input_spec)
    if not leaves:
        raise _UncountableError("empty input spec")
    batches = set()
    for i, leaf in enumerate(leaves):
        name = names[i] if i < len(names) and not names[i].startswith("keras_tensor") else ""
        what = f"its input {name!r}" if name else "its input" if names else "the training data's x"
        if not isinstance(leaf, tf.TensorSpec):
            raise _UncountableError(f"{what} ({leaf!r}) is not a dense tensor")
        shape = leaf.shape
        if shape.rank is None or shape.rank == 0:
            raise _UncountableError(f"{what} (shape {shape}) has no batch dimension")
        if any(d is None for d in shape.as_list()[1:]):
            raise _UncountableError(
                f"{what} has shape {tuple(shape.as_list())}: a dimension besides the batch is known only from the "
                "data (a sequence length, say), and the data's shapes cannot be read before training (only array "
                "and tf.data data's can)"
            )
        batches.add(shape.as_list()[0])
    static = {b for b in batches if b is not None}
    batch = static.pop() if len(static) == 1 else 1
    if len(static) > 1:
        raise _UncountableError(f"inputs disagree on the batch size: {sorted(batches)}")

    def fix(leaf):
        return tf.TensorSpec([batch, *leaf.shape.as_list()[1:]], leaf.dtype)

    return tf.nest.map_structure(fix, input_spec), batch


def _built_spec(model: Any) -> Any:
    """The `tf.TensorSpec` structure of the input shapes a (subclassed) model was built with."""
    import keras
    import tensorflow as tf

    config = model.get_build_config() if getattr(model, "built", False) else None
    shapes = (config or {}).get("input_shape")
    if shapes is None:
        raise _UncountableError("it has no symbolic inputs and was not built with an input shape")
    return keras.tree.map_shape_structure(lambda shape: tf.TensorSpec(tuple(shape), keras.config.floatx()), shapes)


def _spec_key(signature: Any) -> Any:
    import tensorflow as tf

    return (*tuple((tuple(s.shape.as_list()), s.dtype.name) for s in tf.nest.flatten(signature)), repr(tf.nest.map_structure(lambda _: 0, signature)))


def random_ops(model: Any, input_spec: Any = None) -> list[str] | None:
    """The random ops of the model's training forward pass (`training=True`), by op type; None if it cannot be traced.

    A retrace of a training step that holds any makes new random streams (a
    stateful op restarts its stream, a seed drawn while tracing is drawn
    anew), so training would differ from a run without the retrace. Random
    state the trace itself advances is put back.

    Args:
        model: A built Keras model.
        input_spec: As for `forward_flops`.
    """
    try:
        signature, _ = _signature(model, input_spec)
        graph = _trace_forward_graph(model, signature, training=True)
        found: set[str] = set()
        _collect_random_ops(graph, found, depth=0)
    except Exception as exc:  # noqa: BLE001 - the answer is optional
        logger.debug("keras-gpu: could not list the random ops of %s (%s: %s)", getattr(model, "name", model),
                     type(exc).__name__, exc)
        return None
    return sorted(found)


_RANDOM_OP = re.compile(r"Random|TruncatedNormal|Multinomial")


def _collect_random_ops(graph: Any, found: set[str], depth: int) -> None:
    if depth > 20:
        raise _UncountableError("function calls nested too deeply")
    for op in graph.get_operations():
        if _RANDOM_OP.search(op.type):
            found.add(op.type)
        for attr in ("f", "then_branch", "else_branch", "body", "cond"):
            fn = _attr(op, attr)
            if fn is not None and hasattr(fn, "name"):
                _collect_random_ops(_function_graph(graph, fn.name), found, depth + 1)
        for fn in _attr(op, "branches", None) or ():
            _collect_random_ops(_function_graph(graph, fn.name), found, depth + 1)


def _trace_forward_graph(model: Any, signature: Any, training: bool = False) -> Any:
    """Trace `model(x, training=training)` for `signature` and return its graph.

    Every random state the trace may advance (seeds drawn while tracing) is
    put back, so that training draws the same noise as without keras-gpu.
    """
    import tensorflow as tf

    strategy = getattr(model, "distribute_strategy", None)
    fn = tf.function(lambda x: model(x, training=training), autograph=False)
    with preserved_random_state(model):
        if strategy is not None and not tf.distribute.has_strategy():
            with strategy.scope():
                return fn.get_concrete_function(signature).graph
        return fn.get_concrete_function(signature).graph


def _dims(tensor: Any) -> list[int]:
    dims = tensor.shape.as_list() if tensor.shape.rank is not None else None
    if dims is None or any(d is None for d in dims):
        raise _UncountableError(f"{tensor.name} has an unknown shape {tensor.shape}")
    return dims


def _prod(values: list[int]) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out


def _attr(op: Any, name: str, default: Any = None) -> Any:
    try:
        return op.get_attr(name)
    except ValueError:
        return default


def _einsum_flops(op: Any) -> int:
    if len(op.inputs) != 2:
        return 0
    equation = _attr(op, "equation", b"")
    equation = equation.decode() if isinstance(equation, bytes) else str(equation)
    equation = equation.replace(" ", "")
    if "->" not in equation:
        raise _UncountableError(f"implicit einsum output in {equation!r}")
    lhs, out_labels = equation.split("->")
    in_terms = lhs.split(",")
    sizes: dict[str, int] = {}
    for term, tensor in zip(in_terms, op.inputs):
        dims = _dims(tensor)
        labels = term.replace("...", "")
        if "..." in term:
            n_ell = len(dims) - len(labels)
            head = term.split("...")[0]
            dims = dims[: len(head)] + dims[len(head) + n_ell :]
        if len(labels) != len(dims):
            raise _UncountableError(f"einsum {equation!r} does not match shapes")
        for label, size in zip(labels, dims):
            sizes[label] = max(sizes.get(label, 1), size)
    contracted = [sizes[c] for c in set("".join(in_terms).replace(".", "")) if c not in out_labels]
    out_elems = _prod(_dims(op.outputs[0]))
    if not contracted:
        return out_elems  # products only, no sums
    return 2 * out_elems * _prod(contracted)


def _op_flops(op: Any) -> int:
    kind = op.type
    if kind == "MatMul":
        a = _dims(op.inputs[0])
        k = a[0] if _attr(op, "transpose_a", False) else a[1]
        return 2 * _prod(_dims(op.outputs[0])) * k
    if kind in ("BatchMatMul", "BatchMatMulV2", "BatchMatMulV3"):
        a = _dims(op.inputs[0])
        k = a[-2] if _attr(op, "adj_x", False) else a[-1]
        return 2 * _prod(_dims(op.outputs[0])) * k
    if kind == "Einsum":
        return _einsum_flops(op)
    if kind in ("Conv2D", "Conv3D", "Conv"):
        f = _dims(op.inputs[1])  # [*spatial, in_per_group, out]
        return 2 * _prod(_dims(op.outputs[0])) * _prod(f[:-1])
    if kind == "DepthwiseConv2dNative":
        f = _dims(op.inputs[1])  # [kh, kw, in, multiplier]
        return 2 * _prod(_dims(op.outputs[0])) * _prod(f[:-2])
    if kind in ("Conv2DBackpropInput", "Conv3DBackpropInputV2"):
        f = _dims(op.inputs[1])  # [*spatial, out_channels, in_channels]
        return 2 * _prod(_dims(op.inputs[2])) * _prod(f[:-1])
    return 0


def _function_graph(graph: Any, name: str) -> Any:
    body = function_body_graph(graph, name)
    if body is not None:
        return body
    raise _UncountableError(f"cannot find the body of function {name!r}")


def _count_graph(graph: Any, depth: int, left_out: set[str]) -> int:
    if depth > 20:
        raise _UncountableError("function calls nested too deeply")
    total = 0
    live = _live_ops(graph)
    for op in graph.get_operations():
        if op not in live:
            continue
        kind = op.type
        if kind in ("PartitionedCall", "StatefulPartitionedCall"):
            total += _count_graph(_function_graph(graph, _attr(op, "f").name), depth + 1, left_out)
        elif kind in ("If", "StatelessIf"):
            branches = [
                _count_graph(_function_graph(graph, _attr(op, b).name), depth + 1, left_out) for b in ("then_branch", "else_branch")
            ]
            total += _same(branches, op)
        elif kind in ("Case", "StatelessCase"):
            branches = [_count_graph(_function_graph(graph, f.name), depth + 1, left_out) for f in _attr(op, "branches", [])]
            total += _same(branches, op) if branches else 0
        elif kind in ("While", "StatelessWhile"):
            body = _count_graph(_function_graph(graph, _attr(op, "body").name), depth + 1, left_out)
            if body:
                total += body * _trip_count(op)
        elif (named := _hidden_work(kind)) is not None:
            left_out.add(f"{named} in {_scope(op)}")
        else:
            total += _op_flops(op)
    return total


def _live_ops(graph: Any) -> set[Any]:
    """Ops the graph's outputs depend on; dead ops never run (Grappler prunes them)."""
    stack = [t.op for t in getattr(graph, "outputs", ()) if t is not None]
    stack += list(getattr(graph, "control_outputs", ()))
    if not stack:  # no declared outputs: assume everything runs
        return set(graph.get_operations())
    live: set[Any] = set()
    while stack:
        op = stack.pop()
        if op in live:
            continue
        live.add(op)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return live


def _same(branches: list[int], op: Any) -> int:
    if len(set(branches)) > 1:
        raise _UncountableError(f"a conditional in {_scope(op)} has branches of different cost {branches}")
    return branches[0]


def _scope(op: Any) -> str:
    """`layer 'model/layer'`: the Keras name scopes (layers) an op was traced in, from its name."""
    scope = op.name.rpartition("/")[0]
    return f"layer {scope!r}" if scope else f"op {op.name!r}"


def _trip_count(op: Any) -> int:
    """The constant `maximum_iterations` of a TF2 `While` (its second loop variable)."""
    if len(op.inputs) < 2:
        raise _UncountableError(f"a loop in {_scope(op)} has no iteration bound")
    bound = _static_value(op.inputs[1], depth=0)
    if bound is None or getattr(bound, "ndim", 1) != 0 or int(bound) < 0:
        raise _UncountableError(f"a loop in {_scope(op)} has no constant number of iterations")
    return int(bound)


def _static_value(tensor: Any, depth: int) -> Any:
    """`tensor`'s value when it follows from constants, else None.

    TensorFlow's own folding plus the reductions Keras puts on RNN lengths.
    """
    import numpy as np

    value = constant_value(tensor)
    if value is not None or depth > 8:
        return value
    op = tensor.op
    if op.type in ("Max", "Min", "Identity"):
        args = [_static_value(t, depth + 1) for t in op.inputs]
        if any(a is None for a in args):
            return None
        if op.type == "Identity":
            return args[0]
        axis = tuple(int(a) for a in np.atleast_1d(args[1]))
        reduce = np.max if op.type == "Max" else np.min
        return reduce(args[0], axis=axis, keepdims=bool(_attr(op, "keep_dims", False)))
    return None
