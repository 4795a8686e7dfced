"""`keras-gpu launch --hang-timeout`: judging from the workers' progress files whether the job is stuck.

Each worker's bootstrap keeps a progress file up to date (see
`keras_gpu.hooks.progress`); `HangWatch` reads them from the
launcher's supervisor loop and names the workers that stopped progressing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from keras_gpu.core.log import logger
from keras_gpu.hooks.progress import Progress, read_progress

__all__ = ["EXIT_HANG", "HangWatch"]

EXIT_HANG = 124
"""The launcher's exit status when `--hang-timeout` ended the job (as `timeout(1)` uses)."""


class HangWatch:
    """Decides from the workers' progress files whether the job stopped making progress.

    A worker is judged while its file says it is active (inside `fit`,
    `evaluate` or `predict`) and its process runs. It has stalled when its
    batch count has not changed for `timeout` seconds of the launcher's own
    clock, counted from the first reading that showed it active with that
    count. Files are read at most every `min(0.5, timeout / 10)` seconds.
    When one worker has stalled, every judged worker idle for at least half
    the timeout is reported with it (the peers of a stuck worker wait in a
    collective), the likely cause first: fewest batches, then one inside its
    input pipeline, then one in Python before one waiting inside its runtime
    (TensorFlow, JAX), then the one whose last batch ended first.

    While no worker has been active for `quiet_after` seconds since the watch
    was made, it logs one warning saying that nothing is judged yet.

    Args:
        paths: One progress file per worker, by rank.
        timeout: The `--hang-timeout` in seconds.
        clock: The monotonic clock (seconds).
        quiet_after: Seconds without any active worker before the warning;
            default `max(2 * timeout, 10)`.
    """

    def __init__(
        self,
        paths: Sequence[str],
        timeout: float,
        clock: Callable[[], float] = time.monotonic,
        quiet_after: float | None = None,
    ) -> None:
        self._paths = list(paths)
        self._timeout = float(timeout)
        self._clock = clock
        self._started = clock()
        self._quiet_after = max(2 * self._timeout, 10.0) if quiet_after is None else float(quiet_after)
        self._since: list[tuple[int, float] | None] = [None] * len(self._paths)
        self._latest: list[Progress | None] = [None] * len(self._paths)
        self._next_read = 0.0
        self.seen_any = False
        """Whether any worker has written a progress file."""
        self.seen_active = False
        """Whether any worker has been inside `fit`, `evaluate` or `predict`."""
        self.warned_quiet = False
        """Whether the nothing-judged-yet warning was logged."""
        self.stalled: list[tuple[int, Progress]] = []
        """The stalled workers once `__call__` returned True, the likely cause first."""

    def __call__(self, codes: Sequence[int | None]) -> bool:
        """Read the files when due; True when an active, running worker has stalled."""
        now = self._clock()
        if now < self._next_read:
            return False
        self._next_read = now + min(0.5, self._timeout / 10)
        idle_for: dict[int, float] = {}
        for rank, path in enumerate(self._paths):
            progress = read_progress(path)
            if progress is None:
                continue
            self.seen_any = True
            self._latest[rank] = progress
            running = rank >= len(codes) or codes[rank] is None
            if not (progress.active and running):
                self._since[rank] = None
                continue
            self.seen_active = True
            since = self._since[rank]
            if since is None or since[0] != progress.steps:
                self._since[rank] = since = (progress.steps, now)
            idle_for[rank] = now - since[1]
        if not self.seen_active and not self.warned_quiet and now - self._started >= self._quiet_after:
            self.warned_quiet = True
            logger.warning(
                "--hang-timeout: %gs after the start no worker has entered fit, evaluate or predict, so none is "
                "judged yet (start-up, data loading and custom training loops are not watched; a worker waiting for "
                "its peers is bounded by make_strategy's startup_timeout)",
                self._quiet_after,
            )
        if not idle_for or max(idle_for.values()) < self._timeout:
            return False
        # Peers of a stuck worker stop within moments of it: report every worker idle for half the timeout.
        stalled = [(rank, self._latest[rank]) for rank, idle in idle_for.items() if idle >= self._timeout / 2]
        self.stalled = sorted(stalled, key=lambda item: _cause_first(*item))
        return True

    def describe(self) -> str:
        """The message naming the stalled workers and where each was, and the likely cause when one stands out."""
        parts = []
        for rank, p in self.stalled:
            position = p.position()
            stuck = f" stuck in {position}" if position else ""
            parts.append(f"worker {rank}{stuck} ({p.steps} batch(es) done; {p.waiting()})")
        ranks = ", ".join(str(rank) for rank, _ in self.stalled)
        text = f"no progress for {self._timeout:g}s (--hang-timeout) on worker(s) {ranks}: {'; '.join(parts)}"
        if len(self.stalled) == 1:
            return text + f". Worker {self.stalled[0][0]} stopped making progress"
        (first, p), (_, q) = self.stalled[0], self.stalled[1]
        if p.steps < q.steps:
            why = "the fewest batches"
        elif p.input_where and not q.input_where:
            why = f"in its input pipeline at {p.input_where}"
        elif _in_runtime(q) and not _in_runtime(p):
            why = f"in Python while the others wait inside {q.runtime or 'TensorFlow'}"
        elif p.last_batch_wall is not None and q.last_batch_wall is not None and p.last_batch_wall < q.last_batch_wall:
            why = f"its last batch ended first, {q.last_batch_wall - p.last_batch_wall:.3g}s before the next worker's"
        else:
            return text
        return text + f". Worker {first} stopped first ({why})"


def _in_runtime(p: Progress) -> bool:
    return bool(p.runtime) or p.in_tensorflow


def _cause_first(rank: int, p: Progress) -> tuple[int, bool, bool, float, int]:
    """The sort key that puts the worker most likely to have stopped first first."""
    ended = p.last_batch_wall if p.last_batch_wall is not None else float("inf")
    return (p.steps, not p.input_where, _in_runtime(p) and not p.input_where, ended, rank)
