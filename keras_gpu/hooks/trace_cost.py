"""Whether a fit may trace: what a trace costs the fit, measured per process, against the fit's length.

`StepTimeLogger` traces only where a trace costs at most `MAX_SHARE` (0.5%)
of the fit, unless the user set `profile_every_s` (then it always traces).
The cost of one trace is what the fit lost to the traces this process ran
before on the same backend and device kind (`trace_costs`), or, before any,
the prior in `PRIOR_COST_S`. `TraceGate` is the one place that says "may
this fit trace?".

What a trace costs the fit: the profiler's start, on the training thread,
and the steps slowed while its stop runs on a thread of its own
(`StopLoss`): the training thread's time from the stop's start to its
first batch end after the stop ended, less those steps at the steady pace
measured right after. A machine with a free core runs the stop beside the
training (about nothing lost); a starved one slows every step meanwhile. A
stop on the training thread (`stop_inline`) is lost whole.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from keras_gpu.core import topology
from keras_gpu.core.log import log_once, logger

__all__ = [
    "MAX_PACE_STEPS",
    "MAX_SHARE",
    "MIN_PACE_STEPS",
    "PRIOR_COST_S",
    "StopLoss",
    "TraceCost",
    "TraceGate",
    "device_kind",
    "record_cost",
    "trace_costs",
]

#: The largest share of a fit that the profiler's start and stop may cost (where `profile_every_s` is not set).
MAX_SHARE = 0.005

#: Steps timed after a stop ended, at the least, for the steady pace the steps during it are held against (as
#: many as ran during the stop, up to `MAX_PACE_STEPS`).
MIN_PACE_STEPS = 5
MAX_PACE_STEPS = 20

#: What a trace costs a fit, in seconds, per `(backend, device kind)`, before this process measured one;
#: with where the figure comes from (said in the log line that names it). The CPU figures are the start plus
#: the whole stop, an upper bound of what the fit loses.
PRIOR_COST_S: dict[tuple[str, str], tuple[float, str]] = {
    # +0.29 s per 1,500-step fit of 0.7 ms steps with the default callbacks against +0.015 s without
    # StepTimeLogger: one NVIDIA H200, Keras 3.15.1 on JAX 0.11.2 (DESIGN.md, fifth round).
    ("jax", "gpu"): (0.30, "measured on an NVIDIA H200"),
    # Not measured: TensorFlow was not installed on the H200; the JAX figure stands in.
    ("tensorflow", "gpu"): (0.30, "not measured for TensorFlow on a GPU; JAX's H200 figure"),
    # `python -m benchmarks.studies.profiler_cost` on a shared 2-core x86 CPU (2026-11-27; TensorFlow 2.21, JAX 0.10.2):
    # the mean start plus stop of 3 forced traces of 20 steps (JAX: stops 0.066-0.19 s, starts 0.1 ms;
    # TensorFlow: stops 0.009-0.022 s, starts 0.1 ms; docs/performance.md).
    ("jax", "cpu"): (0.11, "measured on a 2-core CPU"),
    ("tensorflow", "cpu"): (0.015, "measured on a 2-core CPU"),
}


@dataclass(frozen=True)
class TraceCost:
    """What the profiler's traces in this process cost, for one backend and device kind.

    Attributes:
        backend: The Keras backend (`"jax"`, `"tensorflow"`).
        device_kind: `"gpu"`, `"cpu"`, ... (`device_kind`).
        traces: Traces measured (each one start and one stop).
        start_sec: Mean seconds of a start (on the training thread).
        stop_sec: Mean seconds of a stop (on a thread of its own, unless
            stopped inline).
        last_start_sec: The last trace's start.
        last_stop_sec: The last trace's stop.
        lost_sec: Mean seconds the training thread lost while a stop ran
            (`StopLoss`), over the traces where that was measured; `None`
            where it never was (the epoch or the fit ended first).
        last_lost_sec: The last trace's, where measured.
    """

    backend: str
    device_kind: str
    traces: int
    start_sec: float
    stop_sec: float
    last_start_sec: float
    last_stop_sec: float
    lost_sec: float | None = None
    last_lost_sec: float | None = None
    lost_measured: int = 0

    @property
    def per_trace_sec(self) -> float:
        """Mean seconds one trace costs the fit: its start, and what its stop slowed (the whole stop, unmeasured)."""
        return self.start_sec + (self.stop_sec if self.lost_sec is None else self.lost_sec)


_lock = threading.Lock()
_costs: dict[tuple[str, str], TraceCost] = {}


def record_cost(
    backend: str, kind: str, start_sec: float, stop_sec: float, lost_sec: float | None = None
) -> TraceCost:
    """Add one trace's measured start, stop and loss to this process's record; the updated record.

    Args:
        backend: The Keras backend.
        kind: The device kind (`device_kind`).
        start_sec: The profiler's start.
        stop_sec: Its stop.
        lost_sec: What the training thread lost while it stopped (`StopLoss`);
            `None` where not measured.

    Examples:
        >>> from keras_gpu.hooks import trace_cost
        >>> cost = trace_cost.record_cost("example", "cpu", 0.25, 0.75)
        >>> cost.traces, cost.per_trace_sec  # the loss unmeasured: the whole stop
        (1, 1.0)
        >>> trace_cost.record_cost("example", "cpu", 0.25, 0.75, lost_sec=0.05).per_trace_sec
        0.3
    """
    with _lock:
        old = _costs.get((backend, kind)) or TraceCost(backend, kind, 0, 0.0, 0.0, 0.0, 0.0)
        n = old.traces + 1
        lost, measured = old.lost_sec, old.lost_measured
        if lost_sec is not None:
            measured += 1
            lost = lost_sec if lost is None else lost + (lost_sec - lost) / measured
        cost = TraceCost(
            backend,
            kind,
            n,
            old.start_sec + (start_sec - old.start_sec) / n,
            old.stop_sec + (stop_sec - old.stop_sec) / n,
            start_sec,
            stop_sec,
            lost,
            lost_sec,
            measured,
        )
        _costs[(backend, kind)] = cost
    logger.debug(
        "keras-gpu: the profiler's start took %.3f s and its stop %.3f s, which slowed the training by %s (%s on "
        "%s); %.3f s per trace over the %d trace(s) of this process.",
        start_sec, stop_sec, "an unmeasured time" if lost_sec is None else f"{lost_sec:.3f} s", backend, kind,
        cost.per_trace_sec, cost.traces,
    )
    return cost


class StopLoss:
    """What the training thread loses while the profiler's stop runs on a thread of its own; recorded once known.

    From the stop's start (`t0`, `step0` steps done), the training thread
    times its steps (`step`, at its batch ends or begins): up to the first
    one after the stop ended, then as many again (at least `MIN_PACE_STEPS`,
    at most `MAX_PACE_STEPS`) for the steady pace. The loss is the time from the stop's start to that
    first step, less its steps at the steady pace (never below 0). The stop's
    thread says when it ended (`stopped`). Once both are known, or the
    training thread gives up (`abandon`: the epoch ended; the loss is then
    not measured), the trace's cost is recorded (`record_cost`), once.

    Args:
        backend: The Keras backend.
        kind: The device kind.
        start_sec: The profiler's start.
        t0: When the stop started (`clock`).
        step0: Steps done then.
        clock: Seconds, monotonic.

    Examples:
        >>> from keras_gpu.hooks.trace_cost import StopLoss
        >>> times = iter([0.3, 0.35, 0.4, 0.45, 0.5, 0.55])
        >>> loss = StopLoss(
        ...     "example-loss", "cpu", 0.01, t0=0.0, step0=10, clock=lambda: next(times)
        ... )
        >>> loss.stopped(0.25)  # the stop took 0.25 s on its thread
        >>> [loss.step(n) for n in range(12, 18)]  # 2 steps in 0.3 s, then 5 at 0.05 s
        [True, True, True, True, True, False]
        >>> round(loss.lost_sec, 3)  # 0.3 s for 2 steps of 0.05 s
        0.2
    """

    def __init__(
        self, backend: str, kind: str, start_sec: float, *, t0: float, step0: int, clock: Callable[[], float]
    ) -> None:
        self.backend, self.kind, self.start_sec = backend, kind, start_sec
        self.t0, self.step0, self.clock = t0, step0, clock
        self.stop_sec: float | None = None
        self.lost_sec: float | None = None
        self._after: tuple[int, float] | None = None  # (steps, time) of the first step after the stop ended
        self._lock = threading.Lock()
        self._done = False
        self._given_up = False

    def stopped(self, seconds: float) -> None:
        """On the stop's thread: the stop ended, after `seconds`."""
        with self._lock:
            self.stop_sec = seconds
            finish = self._given_up
        if finish:
            self._record()

    def step(self, steps: int) -> bool:
        """On the training thread, `steps` steps done: whether it wants the next step too."""
        t = self.clock()
        with self._lock:
            if self._done or self._given_up:
                return False
            if self.stop_sec is None:
                return True
            if self._after is None:
                self._after = (steps, t)
                return True
            after_steps, after_t = self._after
            during = after_steps - self.step0
            paced = steps - after_steps
            if paced < max(MIN_PACE_STEPS, min(during, MAX_PACE_STEPS)) or t <= after_t:
                return True
            self.lost_sec = max(0.0, (after_t - self.t0) - during * (t - after_t) / paced)
        self._record()
        return False

    def abandon(self) -> None:
        """The training thread times no more steps (its epoch ended): the cost is recorded without the loss."""
        with self._lock:
            if self._done:
                return
            self._given_up = True
            finish = self.stop_sec is not None and self.lost_sec is None
        if finish:
            self._record()

    def _record(self) -> None:
        with self._lock:
            if self._done:
                return
            self._done = True
        record_cost(self.backend, self.kind, self.start_sec, self.stop_sec or 0.0, self.lost_sec)


def trace_costs() -> dict[tuple[str, str], TraceCost]:
    """This process's measured trace costs, per `(backend, device kind)`."""
    with _lock:
        return dict(_costs)


def device_kind(devices: Iterable[str]) -> str:
    """`"gpu"` where any device is a GPU, else the first device's kind in lower case (`"cpu"`, `"tpu"`).

    Examples:
        >>> from keras_gpu.hooks.trace_cost import device_kind
        >>> device_kind(["/device:CPU:0"]), device_kind(["/device:CPU:0", "/device:GPU:1"])
        ('cpu', 'gpu')
    """
    kinds = []
    for device in devices:
        parsed = topology.parse_device(device)
        if parsed is not None and parsed.device_type:
            kinds.append(parsed.device_type.lower())
    return "gpu" if "gpu" in kinds else (kinds[0] if kinds else "unknown")


class TraceGate:
    """May this fit trace? The profiler's cost against the fit's expected length, decided at each trace's start.

    A trace may start where `(traces started in this fit + 1) x cost` is at
    most `MAX_SHARE` of the fit's expected length: the time since
    `on_train_begin`, plus the steps left (steps per epoch x epochs, where
    known) at the pace since the first step ended (compilation left out).
    Where the fit's length is not known yet, the time so far is its lower
    bound. `forced` (the user set `profile_every_s`) always traces, and so
    does a backend and device kind with no measured cost and no prior.

    Args:
        backend: The Keras backend.
        kind: The device kind (`device_kind`).
        forced: Trace whatever it costs.
        clock: Seconds, monotonic (`time.perf_counter`).
    """

    def __init__(self, backend: str, kind: str, *, forced: bool, clock: Callable[[], float] = time.perf_counter):
        self.backend, self.kind, self.forced = backend, kind, forced
        self.clock = clock
        self.t0 = clock()
        self.first: tuple[float, int] | None = None  # (when, steps done) at the end of the fit's first step
        self.reason: str | None = None  # why this fit does not trace, once decided

    def note_first_step(self, steps: int) -> None:
        """The fit's first step ended, `steps` steps done (its pace is measured from here)."""
        if self.first is None and steps > 0:
            self.first = (self.clock(), steps)

    def cost(self) -> tuple[float, str] | None:
        """One trace's start plus stop in seconds, and where the figure comes from; `None` where unknown."""
        measured = trace_costs().get((self.backend, self.kind))
        if measured is not None:
            return measured.per_trace_sec, f"measured over {measured.traces} trace(s) in this process"
        return PRIOR_COST_S.get((self.backend, self.kind))

    def expected_sec(self, steps: int, total_steps: int | None) -> tuple[float, bool]:
        """The fit's expected length in seconds after `steps` steps, and whether it is only a lower bound."""
        now = self.clock()
        elapsed = now - self.t0
        if total_steps is None:
            return elapsed, True
        first = self.first
        if first is not None and steps > first[1] and now > first[0]:
            pace = (now - first[0]) / (steps - first[1])
        else:
            pace = elapsed / max(steps, 1)
        return elapsed + max(total_steps - steps, 0) * pace, False

    def allow(self, steps: int, total_steps: int | None, traces: int, last_chance: bool) -> bool | None:
        """Whether a trace may start now, after `steps` steps of `total_steps` and `traces` traces of this fit.

        `None`: not yet (the fit's length is unknown and the time so far is
        too short; ask again once it is known). Where `last_chance` (no later
        point knows more), `None` becomes `False`. A `False` logs why once per
        process (INFO), and every time at DEBUG.
        """
        if self.forced or self.reason is not None:
            return self.reason is None
        cost = self.cost()
        if cost is None:
            return True
        seconds, source = cost
        fit_sec, lower_bound = self.expected_sec(steps, total_steps)
        if (traces + 1) * seconds <= MAX_SHARE * fit_sec:
            return True
        if lower_bound and not last_chance:
            return None
        fit_words = f"this fit of at least {fit_sec:.3g} s" if lower_bound else f"this ~{fit_sec:.3g} s fit"
        share = f"{100 * MAX_SHARE:g}%"
        self.reason = (
            f"its start and stop cost ~{seconds:.2f} s ({source}), more than {share} of {fit_words}"
            if traces == 0
            else f"{traces + 1} traces at ~{seconds:.2f} s each ({source}) cost more than {share} of {fit_words}"
        )
        message = "keras-gpu: StepTimeLogger: no trace: %s; pass profile_every_s=... to trace anyway."
        if not log_once(logging.INFO, f"step_time:trace-cost:{self.backend}:{self.kind}", message, self.reason):
            logger.debug(message, self.reason)
        return False
