"""The rows of a scaling study (`keras-gpu scale`): speed-up, efficiency, and why a row falls short of linear.

Plain Python over what each configuration's run measured (`RunResult`):
`build_rows` turns the runs into `ScaleRow` s, each compared with
the first one.

* **speed-up** is the row's samples/s over the first row's;
* **efficiency** is the speed-up over the row's replicas relative to the first
  row's (`workers * replicas`; with a first row of one replica, speed-up over
  the replica count);
* **the cause** is the part of the step (input, compute, communication,
  other) that grew most against the first row, after scaling the first row's
  part by the work per replica: a row that splits the same global batch over
  `k` times the replicas should take `1/k` of the first row's time in every
  part, and a row that grows the batch with the replicas the same time.

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

from keras_gpu.core.units import format_bytes

__all__ = [
    "PARTS",
    "ROW_KEYS",
    "AllReduce",
    "RunResult",
    "ScaleRow",
    "algorithm_bandwidth",
    "build_rows",
    "bus_bandwidth",
]

PARTS = ("input", "compute", "communication", "other")
"""The parts of a step, in the order the table shows them."""

ROW_KEYS = (
    "workers",
    "replicas",
    "global_batch",
    "per_replica_batch",
    "samples_per_sec",
    "speedup",
    "efficiency",
    "step_sec",
    "input_sec",
    "compute_sec",
    "communication_sec",
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
        label: A name for the row in the terminal table (e.g. `"CPU"`).
        note: Why the breakdown is missing, where it is.
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
        parts = r.parts or {}
        return {
            "workers": r.workers,
            "replicas": r.replicas,
            "global_batch": _int_if_whole(r.global_batch),
            "per_replica_batch": _int_if_whole(r.global_batch / r.total_replicas),
            "samples_per_sec": self.samples_per_sec,
            "speedup": self.speedup,
            "efficiency": self.efficiency,
            "step_sec": r.step_sec,
            **{f"{p}_sec": parts.get(p) for p in PARTS},
            "cause": self.cause,
            "allreduce_bus_gbps": None if r.allreduce is None else r.allreduce.busbw / 1e9,
        }


def build_rows(results: Sequence[RunResult]) -> list[ScaleRow]:
    """Rows for `results`, each compared with the first.

    Raises:
        ValueError: A result without measured steps or time.
    """
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
        rows.append(ScaleRow(r, rate, speedup, speedup / ideal, _cause(first, r)))
    return rows


def _work_factor(first: RunResult, r: RunResult) -> float:
    """How the per-replica work of a step in `r` compares with `first`: the ideal ratio of their step times."""
    return (r.global_batch / r.total_replicas) / (first.global_batch / first.total_replicas)


def _cause(first: RunResult, r: RunResult) -> str:
    """The part of `r`'s step that grew most against `first`'s (scaled by the work per replica), in words."""
    if r is first:
        return "baseline"
    if r.parts is None or first.parts is None:
        return f"not measured: {r.note or first.note or 'no step breakdown'}"
    factor = _work_factor(first, r)
    names = [p for p in (*PARTS, "device") if r.parts.get(p) is not None and first.parts.get(p) is not None]
    growth = {p: r.parts[p] - first.parts[p] * factor for p in names}
    part = max(names, key=lambda p: growth[p])
    if growth[part] <= 0:
        return "none: every part of the step is at or below linear scaling"
    ms, was = r.parts[part] * 1e3, first.parts[part] * factor * 1e3
    if part == "communication":
        text = f"communication: the all-reduce of {format_bytes(r.grad_bytes)} of gradients takes {ms:.3g} ms per step"
        if r.allreduce is not None:
            text += (
                f" (alone: {r.allreduce.seconds * 1e3:.3g} ms, bus bandwidth "
                f"{r.allreduce.busbw / 1e9:.3g} GB/s)"
            )
        return text
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
        return (
            f"device: the compiled step (compute and communication, one program on JAX) takes {ms:.3g} ms per step, "
            f"against {was:.3g} ms at linear scaling"
        )
    if part == "compute":
        return (
            f"compute: the forward and backward pass takes {ms:.3g} ms per step, against {was:.3g} ms at linear "
            "scaling (the replicas share or contend for the same hardware)"
        )
    return f"other: host work between steps (Keras' loop, callbacks) takes {ms:.3g} ms per step, against {was:.3g} ms"


def _int_if_whole(value: float) -> float | int:
    return round(value) if math.isclose(value, round(value), rel_tol=0, abs_tol=1e-6) else value
