"""This process's resident memory on the host: now and its peak, in bytes, from the kernel's own counters."""

from __future__ import annotations

import os
import sys

__all__ = ["host_memory", "rusage_peak_rss_bytes", "statm_rss_bytes"]


def host_memory() -> tuple[int | None, int | None]:
    """`(resident set size, peak resident set size)` of this process, in bytes; `None` where unknown.

    Both come from one read of `/proc/self/status` (`VmRSS`, `VmHWM`): the
    kernel computes them together, so the peak is never below the RSS. Where
    that file is missing, `/proc/self/statm` and `resource.getrusage`, read
    one after the other (the caller keeps the peak at or above the RSS).
    """
    try:
        with open("/proc/self/status", "rb") as f:
            fields = dict(line.split(b":", 1) for line in f.read().splitlines() if b":" in line)
        rss, peak = (_kib(fields.get(key)) for key in (b"VmRSS", b"VmHWM"))
        if rss is not None and peak is not None:
            return rss, peak
    except OSError:
        pass
    return statm_rss_bytes(), rusage_peak_rss_bytes()


def _kib(field: bytes | None) -> int | None:
    """`b"   1234 kB"` -> 1234 * 1024."""
    if field is None:
        return None
    parts = field.split()
    if len(parts) != 2 or parts[1] != b"kB" or not parts[0].isdigit():
        return None
    return int(parts[0]) * 1024


def statm_rss_bytes() -> int | None:
    """The resident set size from `/proc/self/statm`, in bytes; `None` where that file cannot be read."""
    try:
        with open("/proc/self/statm", "rb") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def rusage_peak_rss_bytes() -> int | None:
    """The peak resident set size from `resource.getrusage`, in bytes; `None` where there is none (Windows)."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024  # bytes on macOS, KiB elsewhere
