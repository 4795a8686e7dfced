"""The arguments of one `configure_devices()` call, checked on their own: `parse_request`.

Step 1 of `configure_devices`: each argument is checked and normalised
(`keras_gpu.setup.device_args`, and the simple settings' own checks in
`keras_gpu.setup.device_settings.SIMPLE`), then the combinations that are
wrong on any machine are refused. Nothing here reads the machine; the GPU
memory planner (`keras_gpu.setup.device_plan`) resolves the request against it.

Importing this module imports neither TensorFlow nor Keras.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, make_dataclass
from typing import Any, Literal

from keras_gpu.core.checks import check_bool, check_choice
from keras_gpu.setup.device_args import (
    GPU_THREAD_MODES,
    PerGpu,
    check_count,
    check_fraction,
    check_mb,
    check_split,
    check_visible,
    per_gpu,
)
from keras_gpu.setup.device_settings import SIMPLE

__all__ = ["GPU_ARGS", "DeviceArguments", "PlannedRequest", "Request", "parse_request"]

GPU_ARGS = (
    "visible_gpus",
    "memory_growth",
    "memory_limit_mb",
    "memory_fraction",
    "logical_gpus",
    "gpu_thread_mode",
    "gpu_thread_count",
)
"""The arguments that only mean something when TensorFlow sees a GPU."""


@dataclass(frozen=True)
class DeviceArguments:
    """The keyword arguments of `keras_gpu.configure_devices`, as given: declared once, here.

    `configure_devices` takes `**arguments` and its `__signature__` lists
    these fields, with their types and defaults; every one defaults to
    `None`, "leave as is". What each means: `keras_gpu.configure_devices`.
    `parse_request` checks them.
    """

    visible_gpus: Sequence[int] | Literal["all"] | None = None
    memory_growth: bool | None = None
    memory_limit_mb: float | Mapping[int, float] | None = None
    memory_fraction: float | Mapping[int, float] | None = None
    logical_gpus: int | Sequence[float] | Mapping[int, int | Sequence[float]] | None = None
    cpu_devices: int | None = None
    soft_placement: bool | None = None
    log_placement: bool | None = None
    mixed_precision: str | None = None
    xla: bool | None = None
    tf32: bool | None = None
    intra_op_threads: int | None = None
    inter_op_threads: int | None = None
    gpu_thread_mode: str | None = None
    gpu_thread_count: int | None = None


@dataclass(frozen=True)
class PlannedRequest:
    """The arguments the planner resolves against the machine (GPU memory, devices, GPU threads)."""

    visible_gpus: tuple[int, ...] | Literal["all"] | None = None
    memory_growth: bool | None = None
    memory_limit_mb: PerGpu = None
    memory_fraction: PerGpu = None
    logical_gpus: PerGpu = None
    cpu_devices: int | None = None
    gpu_thread_mode: str | None = None
    gpu_thread_count: int | None = None

    def given(self, names: Sequence[str]) -> list[str]:
        """The names among `names` whose argument was given (is not None), in that order."""
        return [n for n in names if getattr(self, n) is not None]


Request = make_dataclass(
    "Request",
    [(s.name, Any, field(default=None)) for s in SIMPLE],
    bases=(PlannedRequest,),
    frozen=True,
)
Request.__module__ = __name__
Request.__doc__ = "The arguments of one call, type-checked and normalised: one field per argument."


def parse_request(arguments: DeviceArguments) -> Request:
    """Check each argument and the combinations that are wrong on any machine.

    Args:
        arguments: The arguments of `configure_devices`.

    Returns:
        The normalised `Request`.

    Raises:
        TypeError: An argument has the wrong type.
        ValueError: An argument is out of range, or arguments contradict each other.
    """
    req = Request(
        visible_gpus=check_visible(arguments.visible_gpus),
        memory_growth=check_bool("memory_growth", arguments.memory_growth, allow_none=True),
        memory_limit_mb=per_gpu("memory_limit_mb", arguments.memory_limit_mb, check_mb),
        memory_fraction=per_gpu("memory_fraction", arguments.memory_fraction, check_fraction),
        logical_gpus=per_gpu("logical_gpus", arguments.logical_gpus, check_split),
        cpu_devices=check_count("cpu_devices", arguments.cpu_devices, 1),
        **{s.name: s.check(s.name, getattr(arguments, s.name)) for s in SIMPLE},
        gpu_thread_mode=check_choice("gpu_thread_mode", arguments.gpu_thread_mode, GPU_THREAD_MODES, allow_none=True),
        gpu_thread_count=check_count("gpu_thread_count", arguments.gpu_thread_count, 1),
    )
    _check_memory(req, arguments)
    if req.logical_gpus is not None:
        _check_split_sizes(req, arguments)
    if req.gpu_thread_count is not None and req.gpu_thread_mode not in ("gpu_private", "gpu_shared"):
        raise ValueError(
            '`gpu_thread_count` only applies with gpu_thread_mode="gpu_private" or "gpu_shared"; pass one of them '
            f"in the same call. Received: gpu_thread_count={req.gpu_thread_count!r}, "
            f"gpu_thread_mode={req.gpu_thread_mode!r}."
        )
    return req


def _covers(value: PerGpu) -> set[int] | Literal["all"]:
    if value is None:
        return set()
    return set(value) if isinstance(value, Mapping) else "all"


def _overlap(a: set[int] | str, b: set[int] | str) -> bool:
    if not a or not b:
        return False
    return a == "all" or b == "all" or bool(a & b)  # type: ignore[operator]


def _check_memory(req: Request, arguments: DeviceArguments) -> None:
    """Memory growth with a limit, and two limits for one GPU."""
    limit_args = req.given(("memory_limit_mb", "memory_fraction", "logical_gpus"))
    if req.memory_growth and limit_args:
        # TensorFlow drops memory growth on every GPU as soon as any GPU has a
        # logical-device configuration (context._compute_device_options).
        shown = ", ".join(f"{n}={getattr(arguments, n)!r}" for n in limit_args)
        raise ValueError(
            f"`memory_growth=True` cannot be combined with `{limit_args[0]}`: TensorFlow turns memory growth off "
            "on every GPU once any GPU has a memory limit or a logical split. Pass either memory_growth=True "
            f"or a memory limit. Received: memory_growth=True, {shown}."
        )
    if _overlap(_covers(req.memory_limit_mb), _covers(req.memory_fraction)):
        raise ValueError(
            "`memory_limit_mb` and `memory_fraction` both set a limit for the same GPU; give one of them per GPU. "
            f"Received: memory_limit_mb={arguments.memory_limit_mb!r}, memory_fraction={arguments.memory_fraction!r}."
        )


def _check_split_sizes(req: Request, arguments: DeviceArguments) -> None:
    """`logical_gpus`: a list of sizes for a GPU that also has a limit, or a count for a GPU without one."""
    split = req.logical_gpus
    limit_cover, fraction_cover = _covers(req.memory_limit_mb), _covers(req.memory_fraction)
    sized: set[int] | str = (
        "all" if "all" in (limit_cover, fraction_cover) else limit_cover | fraction_cover  # type: ignore[operator]
    )
    lists = (
        {g for g, v in split.items() if isinstance(v, tuple)}
        if isinstance(split, Mapping)
        else ("all" if isinstance(split, tuple) else set())
    )
    if _overlap(lists, sized):
        raise ValueError(
            "`logical_gpus` as a list of MB sizes already sets the memory of that GPU; do not also pass "
            "`memory_limit_mb`/`memory_fraction` for it (or pass logical_gpus=N to split that limit N ways). "
            f"Received: logical_gpus={arguments.logical_gpus!r}, memory_limit_mb={arguments.memory_limit_mb!r}, "
            f"memory_fraction={arguments.memory_fraction!r}."
        )
    counts = (
        {g for g, v in split.items() if isinstance(v, int)}
        if isinstance(split, Mapping)
        else ("all" if isinstance(split, int) else set())
    )
    if counts and not sized:
        raise ValueError(
            "`logical_gpus=N` splits a memory limit N ways, so it needs `memory_limit_mb` or `memory_fraction` "
            "(or give `logical_gpus` a list of MB sizes, one per logical GPU). "
            f"Received: logical_gpus={arguments.logical_gpus!r} and no memory limit."
        )
    unsized = sorted(counts - sized) if isinstance(counts, set) and isinstance(sized, set) else []
    if unsized:
        raise ValueError(
            f"`logical_gpus` splits GPU {unsized[0]} N ways but no memory limit is given for it: add GPU "
            f"{unsized[0]} to `memory_limit_mb` or `memory_fraction`, or give it a list of MB sizes. "
            f"Received: logical_gpus={arguments.logical_gpus!r}, memory_limit_mb={arguments.memory_limit_mb!r}, "
            f"memory_fraction={arguments.memory_fraction!r}."
        )
