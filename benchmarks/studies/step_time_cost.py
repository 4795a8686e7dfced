"""What the sampled step-time breakdown costs a long run: the default callbacks over at least 5 minutes.

Run from the repository root (nothing else should run on the machine meanwhile):

```
python -m benchmarks.studies.step_time_cost                 # 6 minutes of training, the default trace period (300 s)
python -m benchmarks.studies.step_time_cost --minutes 1 --profile-every-s 30   # shorter, same ratio of traces to time
```

One process trains the 1 ms MLP (`mlp-1` of :mod:`benchmarks._workload`) with
`keras_gpu.callbacks(log_dir)` for `--minutes` of wall time, in epochs of
about 10 s. It measures, with instruments of its own:

* the time inside every keras-gpu hook on the training thread (profiler
  start and stop included), and the CPU time of the callbacks' threads (the
  trace parser, read on its own thread around each trace it parses; the
  memory sampler), as in :mod:`benchmarks.overhead`;
* the traced steps' slowdown: a timestamp callback placed first records every
  batch end; for each trace (the batch range StepTimeLogger traced) the
  excess of the traced steps' time over the median untraced step time;
* the total wall time of the training phases.

It prints, and writes as JSON (`--output`), the cost split into those parts
as a share of the run's training time, next to the trace count. It reports;
it never fails because a budget is missed.
"""

from __future__ import annotations

import sys
import tempfile
import time
from typing import Any

from benchmarks import _cli, _stats

__all__ = ["main", "run"]


def run(minutes: float, profile_every_s: float | None, log_dir: str) -> dict[str, Any]:
    """Train for `minutes` with the default callbacks and return the measured costs."""
    import keras
    import numpy as np

    import keras_gpu
    from benchmarks._instrument import HookTimer
    from benchmarks._workload import build_model, make_data, setup_replicas, workload
    from keras_gpu.hooks.factory import StepTimeLogger
    from keras_gpu.hooks.step_time_trace import TraceSchedule

    w = workload("mlp-1")
    strategy = setup_replicas(1)
    model = build_model(w.model, strategy)
    x, y = make_data(w.model, w.batch_size * w.steps_per_epoch)

    # Epochs of about 10 s: calibrate the step time first (untimed; the second
    # fit, so that tracing and warm-up are not in it).
    model.fit(x, y, batch_size=w.batch_size, epochs=1, verbose=0)
    t0 = time.perf_counter()
    model.fit(x, y, batch_size=w.batch_size, epochs=1, verbose=0)
    step_s = (time.perf_counter() - t0) / w.steps_per_epoch
    reps = max(1, round(10.0 / (step_s * w.steps_per_epoch)))
    epochs = max(2, round(minutes * 60 / 10.0))
    xs, ys = np.concatenate([x] * reps), np.concatenate([y] * reps)

    kwargs = {} if profile_every_s is None else {"profile_every_s": profile_every_s}
    callbacks = keras_gpu.callbacks(log_dir, **kwargs)
    step_logger = next(cb for cb in callbacks if isinstance(cb, StepTimeLogger))
    traces: list[tuple[int, int, int]] = []  # (epoch, first traced batch, last traced batch)
    # Each trace's batch range, from the fit's trace schedule (its start at a batch end, its stop at the last
    # traced batch end); the methods are wrapped for this fit only.
    real_start, real_stop = TraceSchedule.start, TraceSchedule.stop

    def start(fit: Any, batch: int) -> None:
        real_start(fit, batch)
        if fit.tracing:
            traces.append((clock.epoch, batch, batch))

    def stop(fit: Any) -> Any:
        if traces and fit.tracing:
            traces[-1] = (traces[-1][0], traces[-1][1], fit.last_batch)
        return real_stop(fit)

    class Clock(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.epoch = 0
            self.ends: list[list[float]] = []
            self.train_s = 0.0

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch
            self.ends.append([time.perf_counter()])

        def on_train_batch_end(self, batch, logs=None):
            self.ends[-1].append(time.perf_counter())

        def on_epoch_end(self, epoch, logs=None):
            self.train_s += self.ends[-1][-1] - self.ends[-1][0]

    clock = Clock()
    timer = HookTimer(callbacks).install()
    t0 = time.perf_counter()
    # The trace parser's thread lives only while a trace is pending, so the hook timer rarely sees it: its
    # CPU time is read on that thread itself, around each trace it handles.
    parser_cpu_s = [0.0]
    handle = step_logger._parser._handle

    def timed_handle(job: Any) -> None:
        c0 = time.thread_time()
        try:
            handle(job)
        finally:
            parser_cpu_s[0] += time.thread_time() - c0

    step_logger._parser._handle = timed_handle
    TraceSchedule.start, TraceSchedule.stop = start, stop
    try:
        model.fit(xs, ys, batch_size=w.batch_size, epochs=epochs, verbose=0, callbacks=[clock, *callbacks])
    finally:
        TraceSchedule.start, TraceSchedule.stop = real_start, real_stop
    fit_s = time.perf_counter() - t0
    timer.sample_threads()
    hooks = timer.snapshot_slots()
    step_logger.wait()  # the last trace's parse, which `fit` does not wait for, is part of the run's cost
    parser_cpu = parser_cpu_s[0]
    other_threads_cpu = sum(t["cpu_s"] for t in timer.threads if t["name"] != "keras-gpu-step-time")
    thread_cpu = other_threads_cpu + parser_cpu

    # Step times: consecutive batch ends; a step's index is its batch.
    traced: set[tuple[int, int]] = {(e, b) for e, first, last in traces for b in range(first + 1, last + 1)}
    untraced, traced_dt = [], []
    for epoch, ends in enumerate(clock.ends):
        for batch in range(1, len(ends) - 1):  # ends[0] is the epoch start, ends[1] the first execution
            dt = ends[batch + 1] - ends[batch]
            (traced_dt if (epoch, batch) in traced else untraced).append(dt)
    median = _stats.median(untraced)
    slowdown = sum(dt - median for dt in traced_dt)
    hook_s = sum(v[0] for v in hooks.values())
    step_hooks = sum(v[0] for k, v in hooks.items() if k.startswith("StepTimeLogger."))
    train_s = clock.train_s
    return {
        "minutes": minutes,
        "epochs": epochs,
        "steps": sum(len(e) - 1 for e in clock.ends),
        "median_step_ms": 1e3 * median,
        "fit_s": fit_s,
        "train_s": train_s,
        "traces": len(traces),
        "traced_steps": len(traced_dt),
        "profile_every_s": step_logger.profile_every_s,
        "cost_s": {
            "all_hooks": hook_s,
            "step_time_hooks": step_hooks,
            "callback_threads_cpu": thread_cpu,
            "parser_cpu": parser_cpu,
            "traced_steps_slowdown": slowdown,
        },
        "cost_pct_of_training": {
            "default_set_total": 100 * (hook_s + thread_cpu + slowdown) / train_s,
            "step_time_total": 100 * (step_hooks + parser_cpu + slowdown) / train_s,
        },
        "last_breakdown": None if step_logger.last is None else step_logger.last.as_dict(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = _cli.make_parser("python -m benchmarks.studies.step_time_cost", __doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=6.0, help="training time (default 6)")
    parser.add_argument("--profile-every-s", type=float, default=None, help="trace period (default: the callbacks')")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as log_dir:
        result = run(args.minutes, args.profile_every_s, log_dir)
    cost = result["cost_pct_of_training"]
    print(
        f"{result['steps']} steps of {result['median_step_ms']:.3f} ms in {result['train_s']:.0f} s of training, "
        f"{result['traces']} trace(s) of {result['traced_steps']} steps (every {result['profile_every_s']:g} s)"
    )
    for key, seconds in result["cost_s"].items():
        print(f"  {key:>24}: {seconds:8.4f} s  ({100 * seconds / result['train_s']:.4f}% of training)")
    print(f"  default set, all costs: {cost['default_set_total']:.3f}%;  step-time breakdown alone: {cost['step_time_total']:.4f}%")
    if args.output:
        _cli.write_json(args.output, result, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
