"""Why a row of a scaling study falls short of linear, named only where it is more than run-to-run noise.

The same configuration of the same script runs at different speeds from
one run to the next (other processes, clocks, caches): on a loaded machine
by tens of percent. So the study measures that spread on its baseline
(`keras_gpu.meters.run_spread.measured_spread`: the baseline run twice,
each window split into halves), and `explain_shortfall` names a part of the
step as the cause only where the one rule of `keras-gpu scale` and
`keras-gpu tune` (`keras_gpu.meters.run_spread.beyond_spread`) says it grew:

* every part of the row's step is compared with the baseline's part scaled
  by the work per replica (`keras_gpu.meters.scale_runs.work_factor`: the
  same global batch over `k` times the replicas should take `1/k` of the
  time in every part, a batch that grows with the replicas the same time);
* the part that grew most is the cause where its growth is more than the
  margin (the spread, at least `run_spread.MIN_MARGIN`) times the step at
  linear scaling, and the row's step itself grew by more than that in both
  halves of its window; otherwise the row is "within run-to-run spread";
* the communication part of a row whose replicas share hardware (logical
  CPUs on the same cores, several replicas on one device), at several times
  the same all-reduce measured alone, is contention: the replicas wait for
  each other, and more cores or devices per replica is the fix, not the
  interconnect;
* on a row of one replica the span from gradients ready to step done holds
  no all-reduce: it is the optimizer update (and the metrics);
* the `--cpu` row of a GPU machine is the CPU against the GPU, not a
  scaling step: "GPU vs CPU: Nx" with the CPU step's parts.

Examples:
    >>> from keras_gpu.meters.run_spread import measured_spread
    >>> from keras_gpu.meters.scale_runs import RunResult
    >>> base = RunResult(1, 1, 10, 0.10, 640, {"input": 0.002, "compute": 0.006,
    ...                  "communication": 0.001, "other": 0.001},
    ...                  halves=(0.0101, 0.0099))
    >>> spread = measured_spread([base])
    >>> round(spread, 3)
    0.02
    >>> row = RunResult(1, 2, 10, 0.051, 640, {"input": 0.001, "compute": 0.00305,
    ...                 "communication": 0.0005, "other": 0.0005})
    >>> explain_shortfall(base, row, spread)
    'within run-to-run spread (2.0%): the step did not grow by more than 5.0% of the step at linear scaling in both halves of the window, or no part of it did'
"""

from __future__ import annotations

from collections.abc import Mapping

from keras_gpu.core.units import format_bytes
from keras_gpu.meters.run_spread import beyond_spread, margin
from keras_gpu.meters.scale_runs import RunResult, work_factor

__all__ = ["CONTENTION_RATIO", "explain_shortfall"]

CONTENTION_RATIO = 3.0
"""In-step communication this many times the same all-reduce alone, on shared hardware, is contention."""

_PART_ORDER = ("input", "compute", "communication", "device", "other")


def explain_shortfall(baseline: RunResult, result: RunResult, spread: float | None) -> str:
    """Why `result` falls short of linear scaling against `baseline`, in words; see the module's text.

    Args:
        baseline: The study's first row.
        result: The row to explain.
        spread: The baseline's run-to-run spread (`measured_spread`), or
            `None` where it was not measured (the margin is then
            `run_spread.MIN_MARGIN`).

    Returns:
        One sentence: `"<part>: ..."` naming the cause with its numbers,
        `"within run-to-run spread (x%): ..."`, `"none: ..."` where every
        part is at or below linear, `"GPU vs CPU: Nx..."` for the CPU row of
        a GPU machine, or `"not measured: <why>"` without a breakdown.

    Raises:
        ValueError: `spread` is negative.
    """
    least = margin(spread)  # raises on a negative spread
    if result.versus_gpu:
        return _versus_gpu(baseline, result)
    if result.parts is None or baseline.parts is None:
        return f"not measured: {result.note or baseline.note or 'no step breakdown'}"
    factor = work_factor(baseline, result)
    names = [p for p in _PART_ORDER if result.parts.get(p) is not None and baseline.parts.get(p) is not None]
    if not names:
        return "not measured: the baseline and this row split the step into different parts"
    growth = {p: result.parts[p] - baseline.parts[p] * factor for p in names}
    part = max(names, key=lambda p: growth[p])
    if growth[part] <= 0:
        return "none: every part of the step is at or below linear scaling"
    linear_step = baseline.step_sec * factor
    halves = list(result.halves) if result.halves else [result.step_sec]
    grew = beyond_spread(result.parts[part], baseline.parts[part] * factor, spread, size=linear_step) == 1
    if not grew or beyond_spread(halves, linear_step, spread) != 1:
        measured = "not measured" if spread is None else f"{spread:.1%}"
        return (
            f"within run-to-run spread ({measured}): the step did not grow by more than {least:.1%} of the step at "
            "linear scaling in both halves of the window, or no part of it did"
        )
    return _named(part, baseline, result, result.parts[part] * 1e3, baseline.parts[part] * factor * 1e3)


def _named(part: str, first: RunResult, r: RunResult, ms: float, was: float) -> str:
    """The sentence for `part`, which grew from `was` (linear) to `ms` milliseconds per step."""
    if part == "communication":
        return _communication(first, r, ms, was)
    if part == "input":
        if r.workers > first.workers:
            return (
                f"input: waiting for the batch takes {ms:.3g} ms per step, against {was:.3g} ms at linear scaling "
                "(across workers this includes the distributed iterator's check that every worker has a batch)"
            )
        if r.global_batch > first.global_batch:
            return (
                f"input: the host pipeline's time per step grows with the global batch ({was:.3g} -> {ms:.3g} ms: "
                "reading the batch and splitting it over the replicas)"
            )
        return f"input: waiting for the input takes {ms:.3g} ms per step, against {was:.3g} ms at linear scaling"
    if part == "device":
        text = (
            f"device: the compiled step (compute and communication, one program on JAX) takes {ms:.3g} ms per "
            f"step, against {was:.3g} ms at linear scaling"
        )
        if r.shares:
            text += f" ({r.shares}: they share the hardware)"
        return text
    if part == "compute":
        text = f"compute: the forward and backward pass takes {ms:.3g} ms per step, against {was:.3g} ms at linear scaling"
        if r.shares:
            text += f" ({r.shares}: they share the hardware)"
        return text
    return f"other: host work between steps (Keras' loop, callbacks) takes {ms:.3g} ms per step, against {was:.3g} ms"


def _communication(first: RunResult, r: RunResult, ms: float, was: float) -> str:
    """Communication that grew: the all-reduce, contention on shared hardware, or (one replica) the update."""
    if r.total_replicas == 1:
        return (
            f"update: the optimizer update (gradients ready to step done, no all-reduce on one replica) takes "
            f"{ms:.3g} ms per step, against {was:.3g} ms at linear scaling"
        )
    base = "the optimizer update" if first.total_replicas == 1 else "the baseline's all-reduce and update"
    alone = r.allreduce
    if r.shares and alone is not None and ms >= CONTENTION_RATIO * alone.seconds * 1e3:
        return (
            f"contention: the replicas wait for each other on shared hardware ({r.shares}): the all-reduce in the "
            f"step (with the update) takes {ms:.3g} ms per step, the same all-reduce of "
            f"{format_bytes(r.grad_bytes)} alone {alone.seconds * 1e3:.3g} ms; more cores or devices per replica "
            "is the fix, not the interconnect"
        )
    text = (
        f"communication: the all-reduce of {format_bytes(r.grad_bytes)} of gradients with the update takes "
        f"{ms:.3g} ms per step, against {was:.3g} ms of {base} at linear scaling"
    )
    if alone is not None:
        text += f" (alone: {alone.seconds * 1e3:.3g} ms, bus bandwidth {alone.busbw / 1e9:.3g} GB/s)"
    return text


def _versus_gpu(gpu: RunResult, cpu: RunResult) -> str:
    """The CPU row of a GPU machine: how many times the GPU baseline's rate, with the CPU step's parts."""
    ratio = (gpu.samples / gpu.seconds) / (cpu.samples / cpu.seconds)
    text = f"GPU vs CPU: {ratio:.3g}x (the {gpu.device} baseline's samples/s over the CPU's; CPU step {cpu.step_sec * 1e3:.3g} ms"
    parts = _parts_text(cpu.parts, cpu.total_replicas)
    return text + (f": {parts})" if parts else ")")


def _parts_text(parts: Mapping[str, float | None] | None, replicas: int) -> str:
    if not parts:
        return ""
    names = {"communication": "update" if replicas == 1 else "communication"}
    return ", ".join(f"{names.get(p, p)} {v * 1e3:.3g} ms" for p, v in parts.items() if v is not None)
