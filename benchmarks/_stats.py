"""Small robust statistics: median, quartiles and range of a list of numbers."""

from __future__ import annotations

import math
from collections.abc import Iterable

__all__ = ["describe", "median", "quantile"]


def quantile(values: Iterable[float], q: float) -> float | None:
    """The `q`-quantile (0..1) of `values` with linear interpolation, or `None` if empty.

    Non-finite values and `None` are ignored.
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"`q` must be within [0, 1]. Received: q={q!r}")
    data = sorted(float(v) for v in values if v is not None and math.isfinite(v))
    if not data:
        return None
    pos = q * (len(data) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def median(values: Iterable[float]) -> float | None:
    """The median of `values`, or `None` if empty."""
    return quantile(values, 0.5)


def describe(values: Iterable[float]) -> dict[str, float | int | None]:
    """`{"n", "median", "q1", "q3", "min", "max"}` of the finite values in `values`."""
    data = [float(v) for v in values if v is not None and math.isfinite(v)]
    return {
        "n": len(data),
        "median": quantile(data, 0.5),
        "q1": quantile(data, 0.25),
        "q3": quantile(data, 0.75),
        "min": min(data) if data else None,
        "max": max(data) if data else None,
    }
