"""The rows of a scaling study (`keras-gpu scale`): speed-up, efficiency, and why a row falls short of linear.

Plain Python over what each configuration's run measured (`RunResult`):
`build_rows` turns the runs into `ScaleRow` s, each compared with
the first one.

* **speed-up** is the row's samples/s over the first row's;
* **efficiency** is the speed-up over the row's replicas relative to the first
  row's (`workers * replicas`; with a first row of one replica, speed-up over
  the replica count);
* **the cause** is named by `keras_gpu.meters.scale_cause.explain_shortfall`:
  the part of the step that grew most against the first row, after scaling
  the first row's part by the work per replica, where it grew by more than
  the baseline's run-to-run spread.

The parts of a row add up to its step: `input`, `compute`,
`communication` (gradients ready to step done: the all-reduce, the wait in it
for other replicas, the optimizer update and the metrics), `other` on
TensorFlow, where a row of one replica has no all-reduce and the same span is
`update` (the optimizer update and the metrics); `input`, `device` (the
compiled step: compute and communication in one program) and `other` on JAX.

Bandwidth of an all-reduce, as nccl-tests defines it (its
`doc/PERFORMANCE.md`): the *algorithm bandwidth* is the buffer's bytes over
the time, and the *bus bandwidth* is that times `2 (n - 1) / n` for `n`
ranks, the share of the data every link carries in an optimal ring, so it
can be compared with the hardware's link speed whatever `n` is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "ALL_PARTS",
    "PARTS",
    "ROW_KEYS",
    "AllReduce",
    "RunResult",
    "ScaleRow",
    "algorithm_bandwidth",
    "build_rows",
    "bus_bandwidth",
    "work_factor",
]

PARTS = ("input", "compute", "communication", "other")
"""The parts of a step that `RunResult.parts` holds on TensorFlow (JAX: `input`, `device`, `other`)."""
ALL_PARTS = ("input", "compute", "communication", "update", "device", "other")
"""The parts of a step as a row shows them (`<part>_sec`), in order; `None` where a part does not apply."""

ROW_KEYS = (
    "workers",
    "replicas",
    "device",
    "global_batch",
    "per_replica_batch",
    "samples_per_sec",
    "speedup",
    "efficiency",
    "step_sec",
    "input_sec",
    "compute_sec",
    "communication_sec",
    "update_sec",
    "device_sec",
    "other_sec",
    "cause",
    "allreduce_bus_gbps",
)
"""The keys of each row of `keras-gpu scale --json`, in order."""


def algorithm_bandwidth(nbytes: float, seconds: float) -> float:
    """Bytes per second of an all-reduce of `nbytes` that took `seconds` (nccl-tests' `algbw`)."""
    if not seconds > 0:
        raise ValueError(f"`seconds` must be > 0. Received: seconds={seconds!r}")
    return nbytes / seconds


def bus_bandwidth(algbw: float, ranks: int) -> float:
    """nccl-tests' bus bandwidth of an all-reduce over `ranks`: `algbw * 2 (ranks - 1) / ranks`."""
    if ranks < 1:
        raise ValueError(f"`ranks` must be >= 1. Received: ranks={ranks!r}")
    return algbw * 2 * (ranks - 1) / ranks


@dataclass(frozen=True)
class AllReduce:
    """The all-reduce of one gradient-sized buffer over a row's devices, measured alone.

    Attributes:
        nbytes: Bytes of the buffer (the model's trainable weights).
        seconds: Median time of one all-reduce.
        ranks: Replicas taking part (all workers).
    """

    nbytes: int
    seconds: float
    ranks: int

    @property
    def algbw(self) -> float:
        """Algorithm bandwidth, bytes/s."""
        return algorithm_bandwidth(self.nbytes, self.seconds)

    @property
    def busbw(self) -> float:
        """Bus bandwidth, bytes/s."""
        return bus_bandwidth(self.algbw, self.ranks)


@dataclass(frozen=True)
class RunResult:
    """What one configuration's run measured over its window (every worker together).

    Attributes:
        workers: Worker processes.
        replicas: Replicas per worker.
        steps: Measured training steps.
        seconds: Wall time of the measured steps (the chief's).
        samples: Samples of the measured steps, all workers.
        parts: Seconds per step of `input`, `compute`, `communication`,
            `other` (the chief's), or `None` where not measured; a part may
            be `None` too, and JAX's compiled step, where compute and
            communication are one program, is `device`.
        grad_bytes: Bytes of the model's trainable weights (its gradients).
        allreduce: The all-reduce measured alone, or `None`.
        label: A name for the row in the terminal table (e.g. `"2 CPU"`).
        note: Why the breakdown is missing, where it is.
        halves: Seconds per step of the window's first and second half, or
            `None` where not measured (a part of the run-to-run spread).
        device: What the replicas are: `"CPU"` or the GPU's name.
        shares: Where the replicas share hardware (logical CPUs on the same
            cores, several replicas on one device), how, in words (e.g.
            `"2 logical CPUs on 2 CPU cores"`); empty where each has its own.
        versus_gpu: The `--cpu` row of a GPU machine: the CPU against the GPU
            baseline, not a scaling step.
    """

    workers: int
    replicas: int
    steps: int
    seconds: float
    samples: float
    parts: Mapping[str, float | None] | None
    grad_bytes: int = 0
    allreduce: AllReduce | None = None
    label: str = ""
    note: str = ""
    halves: tuple[float, float] | None = None
    device: str = "CPU"
    shares: str = ""
    versus_gpu: bool = False

    @property
    def total_replicas(self) -> int:
        """Replicas over all workers."""
        return self.workers * self.replicas

    @property
    def step_sec(self) -> float:
        """Wall seconds per measured step."""
        return self.seconds / self.steps

    @property
    def global_batch(self) -> float:
        """Samples per step, all workers."""
        return self.samples / self.steps


@dataclass(frozen=True)
class ScaleRow:
    """One row of the table; `as_dict` gives exactly `ROW_KEYS`."""

    result: RunResult
    samples_per_sec: float
    speedup: float
    efficiency: float
    cause: str

    def as_dict(self) -> dict[str, object]:
        """The row with the keys of `ROW_KEYS` (seconds per step; `None` where not measured)."""
        r = self.result
        parts = dict(r.parts or {})
        if r.total_replicas == 1 and "communication" in parts:  # no all-reduce: the span is the update
            parts["update"] = parts.pop("communication")
        return {
            "workers": r.workers,
            "replicas": r.replicas,
            "device": r.device,
            "global_batch": _int_if_whole(r.global_batch),
            "per_replica_batch": _int_if_whole(r.global_batch / r.total_replicas),
            "samples_per_sec": self.samples_per_sec,
            "speedup": self.speedup,
            "efficiency": self.efficiency,
            "step_sec": r.step_sec,
            **{f"{p}_sec": parts.get(p) for p in ALL_PARTS},
            "cause": self.cause,
            "allreduce_bus_gbps": None if r.allreduce is None else r.allreduce.busbw / 1e9,
        }


def build_rows(results: Sequence[RunResult], spread: float | None = None) -> list[ScaleRow]:
    """Rows for `results`, each compared with the first.

    Args:
        results: The runs, the baseline first.
        spread: The baseline's run-to-run spread
            (`keras_gpu.meters.scale_cause.measured_spread`), or `None`
            where it was not measured.

    Returns:
        One `ScaleRow` per result, in order.

    Raises:
        ValueError: A result without measured steps or time.
    """
    from keras_gpu.meters.scale_cause import explain_shortfall

    rows: list[ScaleRow] = []
    for r in results:
        if r.steps <= 0 or not r.seconds > 0:
            raise ValueError(f"A run needs measured steps and time. Received: steps={r.steps}, seconds={r.seconds}")
    if not results:
        return rows
    first = results[0]
    base_rate = first.samples / first.seconds
    for r in results:
        rate = r.samples / r.seconds
        speedup = rate / base_rate
        ideal = r.total_replicas / first.total_replicas
        cause = "baseline" + _spread_words(spread) if r is first else explain_shortfall(first, r, spread)
        rows.append(ScaleRow(r, rate, speedup, speedup / ideal, cause))
    return rows


def work_factor(first: RunResult, r: RunResult) -> float:
    """How the per-replica work of a step in `r` compares with `first`: the ideal ratio of their step times."""
    return (r.global_batch / r.total_replicas) / (first.global_batch / first.total_replicas)


def _spread_words(spread: float | None) -> str:
    if spread is None:
        return " (run-to-run spread not measured)"
    return f" (run-to-run spread ±{spread * 50:.2g}%)"


def _int_if_whole(value: float) -> float | int:
    return round(value) if math.isclose(value, round(value), rel_tol=0, abs_tol=1e-6) else value
