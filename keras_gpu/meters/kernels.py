"""The kernel view of a GPU trace: each kernel's time per step, and its class (attention, matmul, ...).

`KERNEL_CLASSES` is the one table that says what a kernel is, by its
name: the first pattern that matches wins, and `elementwise` (fusions and
the rest) matches all. Copies on the streams (`MemcpyH2D`, a command
buffer's `memcpy32_post`, memsets) are in the view too, as `copy`, so the
shares add up to the device's time on its streams.

On JAX, every kernel's op name is only `XlaModule:`: the kernel's own name
is what tells cuDNN's flash attention (`sdpa_sm90_flash_fprop`, `..._bprop`,
and its helpers `compute_dot_do_o`, `convert_dq`) from a matmul.

Examples:
    >>> from keras_gpu.meters.kernels import kernel_class, short_name
    >>> (kernel_class("nvjet_sm90_tst_128x160_64x5_2x1_v_bz_NNT"),
    ...  kernel_class("loop_convert_fusion"))
    ('matmul', 'elementwise')
    >>> short_name("void cudnn::fusion::convert_dq_to_16bits<true>(void const*, void*)")
    'cudnn::fusion::convert_dq_to_16bits'
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from keras_gpu.meters._spans import Span, clip

__all__ = ["KERNEL_CLASSES", "TOP_KERNELS", "KernelTime", "class_times", "kernel_class", "kernel_times", "short_name"]

#: `(class, pattern, meaning)`, read in order; the first match wins, the last matches every kernel.
KERNEL_CLASSES: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("copy", re.compile(r"(?i)^memcpy|^memset|memcpy\d*_|^Copy(HostToDevice|DeviceToHost|DeviceToDevice)"),
     "a copy or memset: host-device copies, copies within device memory"),
    ("collective", re.compile(r"(?i)nccl|rccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|collective"),
     "a collective (NCCL) kernel: a reduction or exchange between devices"),
    ("attention", re.compile(r"(?i)sdpa|flash|fmha|attention|dot_do_o|convert_dq"),
     "fused attention: cuDNN's flash attention (`sdpa_*_flash_fprop`/`bprop`) and its helpers"),
    ("convolution", re.compile(r"(?i)conv(?!ert|ersion)|implicit_gemm|dgrad|wgrad|winograd"),
     "a convolution (cuDNN's implicit GEMM, data and weight gradients)"),
    ("matmul", re.compile(r"(?i)gemm|cutlass|cublas|nvjet|matmul|dot"),
     "a matrix multiplication (cuBLAS, cuBLASLt's nvjet, CUTLASS, XLA's GEMM fusions)"),
    ("elementwise", re.compile(r""), "fusions and the rest: elementwise ops, reductions, layout changes"),
)
#: How many kernels `kernel_times` keeps (the rest still count in the shares).
TOP_KERNELS = 10

_TEMPLATE_OR_ARGS = re.compile(r"[<(]")
_SHORT_CHARS = 60


class KernelTime(NamedTuple):
    """One kernel's (or one class's) device time.

    Attributes:
        name: The kernel's short name (`short_name`), or the class.
        kind: Its class in `KERNEL_CLASSES`.
        sec_per_step: Seconds per step it ran (summed over its launches, which can overlap on several streams).
        share: Its share of all kernel and copy time on the streams, 0..1.
    """

    name: str
    kind: str
    sec_per_step: float
    share: float


def kernel_class(name: str) -> str:
    """The class of a kernel (or a copy) by its name (best its `short_name`: template arguments name types such as
    `TensorConversionOp`): the first `KERNEL_CLASSES` pattern that matches."""
    return next(kind for kind, pattern, _ in KERNEL_CLASSES if pattern.search(name))


def short_name(name: str) -> str:
    """A kernel's name without `void`, template arguments and parameters, at most 60 characters."""
    name = name.strip()
    if name.startswith("void "):
        name = name[5:]
    match = _TEMPLATE_OR_ARGS.search(name)
    if match and match.start() > 0:
        name = name[: match.start()]
    return name if len(name) <= _SHORT_CHARS else name[: _SHORT_CHARS - 1] + "…"


def kernel_times(
    kernels: Iterable[tuple[str, Span]], windows: Sequence[Span] | None, steps: int, top: int = TOP_KERNELS
) -> tuple[tuple[KernelTime, ...], float]:
    """`(the top kernels by time, all kernel seconds per step)` of the kernels inside `windows`.

    Kernels are grouped by `short_name`; their time is summed per launch
    (clipped to the windows), so the shares are of the launches' summed time.

    Args:
        kernels: `(name, (start_ps, end_ps))` of each kernel and copy on the streams.
        windows: The steps' windows (`None`: all of the trace).
        steps: Steps in the windows.
        top: Kernels to keep.
    """
    by_name: dict[str, list[Span]] = {}
    for name, span in kernels:
        by_name.setdefault(short_name(name), []).append(span)
    totals = {name: sum(e - s for s, e in clip(spans, windows)) / 1e12 / steps for name, spans in by_name.items()}
    total = sum(totals.values())
    ranked = sorted(((t, n) for n, t in totals.items() if t > 0), reverse=True)[:top]
    return tuple(KernelTime(n, kernel_class(n), t, t / total) for t, n in ranked), total


def class_times(kernels: Iterable[tuple[str, Span]], windows: Sequence[Span] | None, steps: int) -> tuple[KernelTime, ...]:
    """Each class's summed kernel time per step and share, largest first (classes with no time left out)."""
    spans: dict[str, list[Span]] = {}
    for name, span in kernels:
        spans.setdefault(kernel_class(short_name(name)), []).append(span)
    totals = {k: sum(e - s for s, e in clip(v, windows)) / 1e12 / steps for k, v in spans.items()}
    total = sum(totals.values())
    ranked = sorted(((t, k) for k, t in totals.items() if t > 0), reverse=True)
    return tuple(KernelTime(k, k, t, t / total) for t, k in ranked)

