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

What one configuration's run measured (`RunResult`, `AllReduce`) is in
`keras_gpu.meters.scale_runs`; the names are also here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from keras_gpu.meters.scale_cause import explain_shortfall
from keras_gpu.meters.scale_runs import AllReduce, RunResult, algorithm_bandwidth, bus_bandwidth, work_factor

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
    rows: list[ScaleRow] = []
    for r in results:
        if r.steps <= 0 or not r.seconds > 0 or not r.samples > 0:
            raise ValueError(
                "A run needs measured steps, time and samples. "
                f"Received: steps={r.steps}, seconds={r.seconds}, samples={r.samples}"
            )
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


def _spread_words(spread: float | None) -> str:
    if spread is None:
        return " (run-to-run spread not measured)"
    return f" (run-to-run spread {spread:.1%})"


def _int_if_whole(value: float) -> float | int:
    return round(value) if math.isclose(value, round(value), rel_tol=0, abs_tol=1e-6) else value
