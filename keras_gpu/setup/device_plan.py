"""The plan of one `configure_devices()` call: the request resolved against the machine, `make_plan`.

Step 2 of `configure_devices`: from the request and the snapshot alone, the
GPU memory planner resolves visible GPUs, memory growth, memory limits and
logical devices per physical GPU, and the GPU thread environment variables;
the CPU split and the simple settings are compared with what is in force.
Every error is raised here, before anything changes: a GPU that does not
exist, a fraction of a card whose memory NVML cannot report, a split that
leaves less than 1 MB, or a change TensorFlow no longer allows because its
runtime has started.

Pure: nothing here reads the machine or imports TensorFlow.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from keras_gpu.setup.device_args import show
from keras_gpu.setup.device_request import GPU_ARGS, Request
from keras_gpu.setup.device_settings import (
    ENV_FORCE_GROWTH,
    ENV_THREAD_COUNT,
    ENV_THREAD_MODE,
    FIX_LATE,
    INIT_ONLY,
    ORDER,
    SIMPLE,
    Change,
    Plan,
)
from keras_gpu.setup.device_snapshot import Snapshot

__all__ = ["make_plan"]

# TensorFlow's "MB" for GPU memory limits is 2**20 bytes.
_MIB = 1 << 20

_Candidates = list[tuple[Change, bool]]  # [(change, already_in_force)]


def make_plan(req: Request, snap: Snapshot) -> Plan:
    """Build the complete plan. Pure: it reads only `req` and `snap`, and raises on anything impossible.

    Raises:
        ValueError: The request contradicts the machine.
        RuntimeError: TensorFlow's runtime has started and a setting that can
            only change before that would change; or `memory_fraction` needs a
            card's memory that NVML could not report.
    """
    candidates, skipped = _gpu_changes(req, snap)

    if req.cpu_devices is not None:
        now = snap.cpu_logical_devices
        count = now if now is not None else snap.cpu_count
        change = Change("cpu_devices", req.cpu_devices, count, req.cpu_devices, now)
        candidates.append((change, count == req.cpu_devices))
    for setting in SIMPLE:
        wanted = getattr(req, setting.name)
        if wanted is not None:
            now = getattr(snap, setting.name)
            candidates.append((Change(setting.name, wanted, now, wanted, now), now == wanted))

    candidates.sort(key=lambda item: ORDER.index(item[0].setting))
    changes = tuple(c for c, in_force in candidates if not in_force)
    in_force = {c.setting: c.value for c, f in candidates if f}

    if snap.initialized:
        late = [c for c in changes if c.setting in INIT_ONLY]
        if late:
            detail = "; ".join(f"{c.setting} (in force: {show(c.current)}, asked: {show(c.value)})" for c in late)
            raise RuntimeError(
                "TensorFlow has already initialised its devices, so these settings can no longer change: "
                f"{detail}. Nothing was changed. {FIX_LATE}"
            )
    return Plan(changes, in_force, skipped)


def _gpu_changes(req: Request, snap: Snapshot) -> tuple[_Candidates, dict[str, str]]:
    """Plan the GPU arguments; returns `[(change, already_in_force)]` and the skipped arguments."""
    given = req.given(GPU_ARGS)
    if not given:
        return [], {}
    if snap.gpu_count == 0:
        return [], dict.fromkeys(given, "no GPU visible to TensorFlow")

    out: _Candidates = []
    visible = _resolve_visible(req, snap)
    if req.visible_gpus is not None:
        change = Change("visible_gpus", visible, snap.visible_gpus, visible, snap.visible_gpus)
        out.append((change, visible == snap.visible_gpus))
    rest = [n for n in given if n != "visible_gpus"]
    if not visible:
        reason = (
            "`visible_gpus=[]` hides every GPU"
            if req.visible_gpus is not None
            else "every GPU was hidden earlier with `tf.config.set_visible_devices`"
        )
        return out, dict.fromkeys(rest, reason)

    limits = _resolve_limits(req, snap, visible)
    if limits:
        current = {g: snap.gpu_logical_mb[g] for g in limits}
        out.append(
            (
                Change("gpu_memory_limits_mb", limits, current, limits, current),
                all(current[g] is not None and tuple(current[g]) == limits[g] for g in limits),
            )
        )
    if req.memory_growth is not None:
        out.append(_growth_change(req.memory_growth, snap, visible, limits))
    out.extend(_thread_changes(req, snap))
    return out, {}


def _resolve_visible(req: Request, snap: Snapshot) -> tuple[int, ...]:
    if req.visible_gpus is None:
        return snap.visible_gpus
    if req.visible_gpus == "all":
        return tuple(range(snap.gpu_count))
    missing = [i for i in req.visible_gpus if i >= snap.gpu_count]
    if missing:
        raise ValueError(
            f"`visible_gpus` names GPU {missing[0]}, but TensorFlow sees {snap.gpu_count} GPU(s) "
            f"(indices 0..{snap.gpu_count - 1}). Received: visible_gpus={list(req.visible_gpus)!r}."
        )
    return req.visible_gpus


def _memory_mb(req: Request, snap: Snapshot, gpu: int) -> int | None:
    """The memory limit asked for `gpu` through `memory_limit_mb` / `memory_fraction`, in whole MB."""
    for name in ("memory_limit_mb", "memory_fraction"):
        value = getattr(req, name)
        if isinstance(value, Mapping):
            value = value.get(gpu)
        if value is None:
            continue
        if name == "memory_limit_mb":
            return int(value)
        total = snap.gpu_memory_bytes.get(gpu)
        if total is None:
            raise RuntimeError(
                f"`memory_fraction` needs the total memory of GPU {gpu}, which NVML could not report on this "
                f"machine. Pass `memory_limit_mb` instead. Received: memory_fraction={value!r}."
            )
        mb = int(value * total // _MIB)
        if mb < 1:
            raise ValueError(
                f"`memory_fraction={value!r}` of GPU {gpu} ({total} bytes) is less than 1 MB. Pass a larger value."
            )
        return mb
    return None


def _resolve_limits(req: Request, snap: Snapshot, visible: tuple[int, ...]) -> dict[int, tuple[int, ...]]:
    """`{gpu: (mb, ...)}`: the logical-device sizes asked for each visible GPU."""
    for name in ("memory_limit_mb", "memory_fraction", "logical_gpus"):
        value = getattr(req, name)
        if isinstance(value, Mapping):
            hidden = [g for g in value if g not in visible]
            if hidden:
                raise ValueError(
                    f"`{name}` configures GPU {hidden[0]}, which is not visible (visible GPUs: {list(visible)}). "
                    f"Configure only visible GPUs, or add it to `visible_gpus`. Received: {name}={dict(value)!r}."
                )
    limits: dict[int, tuple[int, ...]] = {}
    for gpu in visible:
        total = _memory_mb(req, snap, gpu)
        split = req.logical_gpus.get(gpu) if isinstance(req.logical_gpus, Mapping) else req.logical_gpus
        if isinstance(split, tuple):
            limits[gpu] = tuple(int(mb) for mb in split)
        elif isinstance(split, int):
            limits[gpu] = _split_sizes(req, gpu, total, split)
        elif total is not None:
            limits[gpu] = (total,)
    return limits


def _split_sizes(req: Request, gpu: int, total: int | None, split: int) -> tuple[int, ...]:
    """`logical_gpus=split` for `gpu`: `total` MB in `split` equal whole-MB parts."""
    if total is None:
        raise ValueError(
            f"`logical_gpus={split}` for GPU {gpu} needs a memory size to split: add GPU {gpu} to "
            "`memory_limit_mb` or `memory_fraction`, or give a list of MB sizes. "
            f"Received: logical_gpus={show(req.logical_gpus)}, memory_limit_mb={show(req.memory_limit_mb)}, "
            f"memory_fraction={show(req.memory_fraction)}."
        )
    share = total // split
    if share < 1:
        raise ValueError(
            f"Splitting {total} MB of GPU {gpu} into logical_gpus={split} leaves less than 1 MB each. "
            f"Use fewer logical GPUs or a larger limit. Received: logical_gpus={show(req.logical_gpus)}."
        )
    return (share,) * split


def _effective_growth(snap: Snapshot, gpu: int) -> bool:
    if any(snap.gpu_logical_mb[g] for g in snap.visible_gpus):
        return False  # TensorFlow ignores growth once any GPU has logical devices
    raw = snap.memory_growth[gpu]
    return raw if raw is not None else snap.env.get(ENV_FORCE_GROWTH) == "true"


def _growth_change(
    growth: bool, snap: Snapshot, visible: tuple[int, ...], limits: Mapping[int, tuple[int, ...]]
) -> tuple[Change, bool]:
    """Memory growth for every visible GPU without logical devices, once `limits` are applied."""
    final = {g: limits.get(g, snap.gpu_logical_mb[g]) for g in visible}
    configured = [g for g in visible if final[g]]
    if growth and configured:
        raise ValueError(
            f"`memory_growth=True` cannot be used while GPU {configured[0]} has a memory limit or logical split "
            f"(set earlier: {show(final[configured[0]])} MB); TensorFlow then turns memory growth off on every "
            "GPU. Set it in a fresh process without the limit."
        )
    current = {g: _effective_growth(snap, g) for g in visible}
    # Every visible GPU without logical devices gets the same value: TensorFlow
    # refuses to start when growth differs between GPUs.
    targets = {g: growth for g in visible if not final[g]}
    change = Change("memory_growth", growth, current, targets, {g: snap.memory_growth[g] for g in targets})
    return change, all(v == growth for v in current.values())


def _thread_changes(req: Request, snap: Snapshot) -> _Candidates:
    """The GPU thread mode and count, as environment variables TensorFlow reads when it starts."""
    out: _Candidates = []
    env: Mapping[str, Any] = snap.env
    if req.gpu_thread_mode is not None:
        now = env.get(ENV_THREAD_MODE)
        in_force = (now or "global") == req.gpu_thread_mode
        change = Change("gpu_thread_mode", req.gpu_thread_mode, now or "global", req.gpu_thread_mode, now)
        out.append((change, in_force))
    if req.gpu_thread_count is not None:
        now = env.get(ENV_THREAD_COUNT)
        wanted = str(req.gpu_thread_count)
        out.append((Change("gpu_thread_count", req.gpu_thread_count, now, wanted, now), now == wanted))
    return out
