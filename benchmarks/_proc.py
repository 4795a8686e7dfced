"""Process and thread readings from `/proc`: thread CPU time, RSS, threads, open file descriptors.

Linux only; every reader returns `None` where `/proc` (or the field) is not
available, so the benchmark still runs elsewhere with those columns empty.
"""

from __future__ import annotations

import os

__all__ = ["THREAD_CPU_METHOD", "open_fd_count", "rss_bytes", "task_count", "thread_cpu_seconds"]

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

THREAD_CPU_METHOD = (
    "/proc/self/task/<tid>/schedstat (on-CPU nanoseconds), falling back to utime+stime of "
    "/proc/self/task/<tid>/stat (clock ticks)"
)
"""How :func:`thread_cpu_seconds` reads another thread's CPU time (recorded in the results)."""


def thread_cpu_seconds(native_id: int) -> float | None:
    """CPU seconds thread `native_id` of this process has used so far, or `None` once it is gone.

    Reads the scheduler's on-CPU time in nanoseconds (`schedstat`) where the
    kernel provides it, else `utime + stime` from `stat` in clock ticks
    (usually 10 ms resolution).
    """
    base = f"/proc/self/task/{int(native_id)}/"
    try:
        with open(base + "schedstat", "rb") as f:
            return int(f.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open(base + "stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may contain spaces.
    fields = data[data.rfind(b")") + 2 :].split()
    try:
        return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime: fields 14 and 15
    except (ValueError, IndexError):
        return None


def rss_bytes() -> int | None:
    """This process's resident set size in bytes (`/proc/self/statm`)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


def task_count() -> int | None:
    """Number of OS threads of this process, Python or not (`/proc/self/task`)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None


def open_fd_count() -> int | None:
    """Number of open file descriptors of this process (`/proc/self/fd`)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return None
