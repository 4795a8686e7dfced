"""The run-to-run spread, and the one rule of `keras-gpu scale` and `keras-gpu tune`: a difference counts beyond it.

The same configuration of the same script runs at different speeds from one
run to the next (other processes, clocks, caches; on a loaded machine by
tens of percent, and a run the machine's other jobs hit by several times).
Both commands run their baseline twice, the second time after every other
configuration (so that the machine's drift over the study counts), and split
each window into halves:

* `measured_spread(runs)`: how much slower the slowest of the four
  half-window steps of the baseline's two runs is than the fastest (`spread`:
  `max / min - 1`; 0.25: 1.25 times);
* `beyond_spread(value, reference, spread, size)`, **the rule**: a
  difference counts where the larger of the two is more than `1 + margin`
  times the smaller, the margin being the measured spread, and at least
  `MIN_MARGIN` (two runs of a shared machine can land close together by
  chance). Where the value was measured over a window's halves, both
  halves must lie beyond, on the same side: a burst of the machine's other
  work in one half is not a change. A difference in a part of the step is
  judged on the whole step: the step with it against the step without
  (`size`). It is the only rule:

    * `keras-gpu tune`: a change helps (`1`) or hurts (`-1`) where the
      samples/s of both halves of its window lie beyond the mean of the
      baseline's two runs; changes tried together beat the best single
      change only beyond that change's samples/s;
    * `keras-gpu scale`: a part of the step is the cause where it grew
      beyond its share at linear scaling, `size` being the step at linear
      scaling.

The rule is a ratio, so a run twice as fast and a run half as fast are as
far from the baseline. How often it calls a difference where there is none
(the same configuration, run again, taken for a candidate) is measured by
`python -m benchmarks.studies.spread_rule` (`docs/tune.md`, `docs/scale.md`).

Examples:
    >>> round(spread([100.0, 104.0]), 3)
    0.04
    >>> beyond_spread(130.0, 102.0, 0.04)  # 1.27 times: beyond the 5% floor
    1
    >>> beyond_spread(106.0, 102.0, 0.04)
    0
    >>> beyond_spread(80.0, 102.0, 0.04)
    -1
    >>> beyond_spread([131.0, 106.0], 102.0, 0.04)  # one half within: no change
    0
    >>> beyond_spread(1.4, 1.0, 0.02, size=10.0)  # 10.4 ms against a 10 ms step
    0
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["MIN_MARGIN", "beyond_spread", "margin", "measured_spread", "spread"]

MIN_MARGIN = 0.05
"""The least relative difference that counts, whatever the measured spread."""


def spread(values: Sequence[float]) -> float:
    """The run-to-run spread of repeated measurements of one configuration: `max / min - 1`.

    Raises:
        ValueError: Fewer than two values, or a value that is not positive.
    """
    if len(values) < 2 or any(not v > 0 for v in values):
        raise ValueError(f"`values` must hold at least two positive values. Received: values={list(values)!r}")
    return max(values) / min(values) - 1


def measured_spread(runs: Sequence[Any]) -> float | None:
    """The run-to-run spread of one configuration's runs: `spread` of their seconds per step.

    Every window counts with its two halves where they were measured
    (`RunResult.halves`), else whole (`RunResult.step_sec`).

    Args:
        runs: Runs of the same configuration (the study's baseline, run twice).

    Returns:
        The spread (0.1: the slowest step took 1.1 times the fastest), or
        `None` with fewer than two measurements.
    """
    steps: list[float] = []
    for run in runs:
        steps.extend(run.halves if run.halves else (run.step_sec,))
    if len(steps) < 2 or any(not s > 0 for s in steps):
        return None
    return spread(steps)


def margin(spread: float | None) -> float:
    """The relative difference that counts: the measured `spread`, at least `MIN_MARGIN` (`None`: the floor).

    Raises:
        ValueError: `spread` is negative.
    """
    if spread is not None and not spread >= 0:
        raise ValueError(f"`spread` must be a fraction >= 0 or None. Received: spread={spread!r}")
    return max(spread or 0.0, MIN_MARGIN)


def beyond_spread(
    value: float | Sequence[float], reference: float, spread: float | None, size: float | None = None
) -> int:
    """`1` where `value` is more than `1 + margin(spread)` times `reference`, `-1` where less than its inverse, else `0`.

    Args:
        value: The measurement (a candidate's samples/s, a row's part of the step), or its values over the
            halves of its window, which must all lie beyond, on the same side.
        reference: What it is compared with (the baseline's mean samples/s, the part at linear scaling).
        spread: The baseline's run-to-run spread (`measured_spread`), or `None` where not measured.
        size: The whole that `value` and `reference` are parts of (a part of the step: the step at linear
            scaling): the whole with `value` is compared with the whole with `reference`.

    Raises:
        ValueError: `spread` is negative, or a compared value is not positive.
    """
    least = 1 + margin(spread)
    values = [float(value)] if isinstance(value, (int, float)) else [float(v) for v in value]
    if size is not None:
        values, reference = [size + v - reference for v in values], size
    if not values or not all(v > 0 for v in values) or not reference > 0:
        raise ValueError(f"The rule compares positive values. Received: value={value!r}, reference={reference!r}")
    if min(values) > least * reference:
        return 1
    if reference > least * max(values):
        return -1
    return 0
