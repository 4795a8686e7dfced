"""One logging window of the throughput meter: :class:`Window`, and the rates over counts and seconds.

Plain Python, no TensorFlow. Rates measure wall-clock time. FLOPs:
multiply-add counts as 2 FLOPs; `flops_per_sample` is the *training* FLOPs per
sample (forward and backward). `tflops_per_sec` is the achieved model FLOP/s
of all replicas together, in units of 1e12 FLOP/s, and `mfu` divides it by
`peak_flops`, the summed peak FLOP/s of all replica devices.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Rates", "Window", "window_rates"]

#: `(steps_per_sec, samples_per_sec, samples_per_sec_per_replica, tflops_per_sec, mfu)`.
Rates = tuple[float, float | None, float | None, float | None, float | None]


@dataclass(frozen=True)
class Window:
    """One logging window: exact counts and the rates over it.

    Attributes:
        step: Global training step at the end of the window.
        steps: Training steps in the window.
        samples: Samples in the window (all replicas), or `None` if unknown.
        seconds: Wall time of the window, in seconds.
        steps_per_sec: Steps per second.
        samples_per_sec: Samples per second, all replicas on all workers.
        samples_per_sec_per_replica: `samples_per_sec` divided by the number
            of replicas (in synchronous data parallelism every replica
            processes the same share of each global batch).
        tflops_per_sec: Achieved model FLOP/s of all replicas, in TFLOP/s
            (1e12 FLOP/s), or `None` without `flops_per_sample`.
        mfu: Model FLOPs utilisation, 0..1: achieved FLOP/s over the summed
            peak FLOP/s of all replica devices, or `None` without a peak.
    """

    step: int
    steps: int
    samples: int | None
    seconds: float
    steps_per_sec: float
    samples_per_sec: float | None
    samples_per_sec_per_replica: float | None
    tflops_per_sec: float | None
    mfu: float | None


def window_rates(
    steps: int,
    samples: int | None,
    seconds: float,
    *,
    num_replicas: int,
    flops_per_sample: float | None = None,
    peak_flops: float | None = None,
) -> Rates:
    """The rates of `steps` and `samples` (`None`: not counted) over `seconds` of wall time.

    Returns:
        `(steps/s, samples/s, samples/s per replica, TFLOP/s, MFU)`: all
        `None` but steps/s without samples, TFLOP/s and MFU `None` without
        `flops_per_sample`, MFU `None` without `peak_flops`; steps/s is 0.0
        when no time passed.
    """
    if seconds <= 0:
        return 0.0, None, None, None, None
    steps_per_sec = steps / seconds
    if samples is None:
        return steps_per_sec, None, None, None, None
    samples_per_sec = samples / seconds
    per_replica = samples_per_sec / num_replicas
    if flops_per_sample is None:
        return steps_per_sec, samples_per_sec, per_replica, None, None
    flops = flops_per_sample * samples_per_sec
    mfu = flops / peak_flops if peak_flops is not None else None
    return steps_per_sec, samples_per_sec, per_replica, flops / 1e12, mfu
