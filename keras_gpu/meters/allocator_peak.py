"""An allocator's peak per window, from reads of it, without resetting the process's peak counter.

The backends keep one peak counter per allocator for the whole process
(`torch.cuda.max_memory_allocated`, TensorFlow's `get_memory_info(...)["peak"]`,
JAX's `peak_bytes_in_use`): the most it held at once since the process
started or since the counter's last reset. Resetting it would change what
the user's own readers see, so `MemoryLogger` leaves it alone by default and
`WindowPeak` builds each window's peak from what it reads:

* every bytes-in-use read taken in the window (the largest of them), and
* the peak counter, where it moved since the read before: a counter that
  rose since then rose in this window, so its value is this window's peak;
  one that went down was reset by someone in this window, and its value is
  the peak since that reset, also within this window.

So a window's peak is exact whenever the window set a new high of the
counter; otherwise it is the largest read, and a spike that came and went
between two reads without raising the counter is missed (it stayed below an
earlier high). After a reset of the counter (`MemoryLogger(reset_peaks=True)`)
every value of the counter counts, as it holds this window's time only.

Plain Python, no backend: fed by the caller with `(current, peak)` pairs.
"""

from __future__ import annotations

__all__ = ["WindowPeak"]


class WindowPeak:
    """One allocator's peak over the current window, from `(bytes in use, peak counter)` reads.

    Args:
        counter: The peak counter read before the window began, or `None`
            where it holds nothing from before (never read, or just reset):
            then its first read counts.

    Examples:
        >>> window = WindowPeak(counter=5_000)  # a high from before the fit
        >>> window.add(current=1_000, counter=5_000)
        >>> window.add(current=2_000, counter=5_000)
        >>> window.close()  # the counter did not move: the largest read
        2000
        >>> window.add(current=1_500, counter=6_000)  # a new high between reads
        >>> window.close()
        6000
    """

    def __init__(self, counter: int | None) -> None:
        self._counter = counter
        self._peak: int | None = None

    def add(self, current: int, counter: int) -> None:
        """Take one read: the bytes in use now and the peak counter now."""
        value = current if counter == self._counter else max(current, counter)
        # The peak first, then the counter: a reader between the two counts the new high twice, never not at all.
        self._peak = value if self._peak is None else max(self._peak, value)
        self._counter = counter

    def so_far(self, current: int, counter: int) -> int:
        """The window's peak with one more read, without taking it (for a reader on another thread)."""
        value = current if counter == self._counter else max(current, counter)
        peak = self._peak
        return value if peak is None else max(peak, value)

    def close(self, *, counter_reset: bool = False) -> int | None:
        """End the window: its peak (`None` without a read), and start the next.

        Args:
            counter_reset: The caller has just reset the peak counter, so the
                next window counts its first read of it.
        """
        peak, self._peak = self._peak, None
        if counter_reset:
            self._counter = None
        return peak
