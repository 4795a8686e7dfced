"""Human-readable units for log lines, Markdown tables and the terminal report."""

from __future__ import annotations

__all__ = ["format_bytes"]


def format_bytes(n: float) -> str:
    """`n` bytes in binary units: `512 B`, `1.5 KiB`, `275.5 MiB`, `1.2 GiB`, `2.0 TiB`."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"
