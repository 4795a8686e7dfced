"""The run-to-run spread of a measurement, and whether another differs from it by more: `scale`'s and `tune`'s rule.

`spread` is how far repeated measurements of one configuration lie apart,
relative to their mean: `keras-gpu scale` names a cause only beyond it
(`keras_gpu.meters.scale_cause`), and `keras-gpu tune` calls a change a
help only beyond it (`beyond_spread`). The baseline runs twice; the spread is how far its two rates lie apart. A
change helps (or hurts) only when its rate lies beyond the baseline's range
by more than that spread, and by at least `MIN_MARGIN` of the baseline's
mean rate: on a shared machine two runs of the same script can land close
together by chance, and a two-run spread alone would then call a few percent
of noise a win.

Examples:
    >>> beyond_spread(130.0, [100.0, 104.0])
    1
    >>> beyond_spread(108.0, [100.0, 104.0])
    0
    >>> beyond_spread(80.0, [100.0, 104.0])
    -1
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["MIN_MARGIN", "beyond_spread", "spread"]

MIN_MARGIN = 0.05
"""The least relative difference from the baseline that counts, whatever the measured spread."""


def spread(rates: Sequence[float]) -> float:
    """The baseline's run-to-run spread: `(max - min) / mean` of its rates.

    Raises:
        ValueError: Fewer than two rates, or a rate that is not positive.
    """
    if len(rates) < 2 or any(not r > 0 for r in rates):
        raise ValueError(f"`rates` must hold at least two positive rates. Received: rates={list(rates)!r}")
    return (max(rates) - min(rates)) / (sum(rates) / len(rates))


def beyond_spread(rate: float, baseline_rates: Sequence[float]) -> int:
    """`1` where `rate` is faster than every baseline run by more than the margin, `-1` slower, else `0`.

    The margin is the larger of the baseline's spread (`max - min` of its
    rates) and `MIN_MARGIN` of its mean rate.

    Raises:
        ValueError: As `spread`.
    """
    mean = sum(baseline_rates) / len(baseline_rates)
    margin = max(spread(baseline_rates), MIN_MARGIN) * mean
    if rate > max(baseline_rates) + margin:
        return 1
    if rate < min(baseline_rates) - margin:
        return -1
    return 0
