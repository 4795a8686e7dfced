"""What StepTimeLogger's profiler costs on this machine's backend: a trace's start, stop and parse, and a fit that does not trace.

Run from the repository root, once per backend:

```
KERAS_BACKEND=tensorflow python -m benchmarks.studies.profiler_cost
KERAS_BACKEND=jax python -m benchmarks.studies.profiler_cost --fits 5
```

It trains a small MLP on the CPU (or the default device) in one process and prints JSON:

* `start_sec`, `stop_sec`: each forced trace's profiler start and stop
  (`StepTimeLogger(profile_every_s=300)`, 20 steps), as the callback measured
  them (`StepTimeLogger.profiler_cost`), the first trace of the process first;
* `lost_sec`: what the training thread lost while each stop ran on its own
  thread (`keras_gpu.hooks.trace_cost.StopLoss`; `null` where the epoch
  ended before it was measured): with `start_sec`, what the trace cost the
  fit, the figure `TraceGate` holds against 0.5% of a fit;
* `parse_sec`: the parser thread's reading of each trace;
* `untraced`: fits that the default `StepTimeLogger` does not trace (too
  short for the profiler's cost), against the same fits without it:
  `on_train_begin_sec` (perf_counter around the hook), and the wall time of
  `fit` (perf_counter around it) with and without the callback, in
  alternating pairs, with the median difference.

It reports; it never fails because a figure is large.
"""

from __future__ import annotations

import json
import tempfile
import time
from typing import Any

from benchmarks import _cli, _stats

__all__ = ["main", "run"]


def run(fits: int, steps: int) -> dict[str, Any]:
    """Measure `fits` forced traces and `fits` pairs of untraced fits of `steps` steps."""
    import keras
    import numpy as np

    from keras_gpu.core import backend
    from keras_gpu.hooks import step_time_logger
    from keras_gpu.hooks.step_time_logger import StepTimeLogger

    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x, y = np.ones((32 * steps, 32), "float32"), np.ones((32 * steps, 1), "float32")
    model.fit(x, y, batch_size=32, epochs=1, verbose=0)  # compile outside every measurement

    parse: list[float] = []
    read = step_time_logger.read_trace

    def timed_read(*args: Any, **kwargs: Any) -> None:
        t = time.perf_counter()
        try:
            read(*args, **kwargs)
        finally:
            parse.append(time.perf_counter() - t)

    step_time_logger.read_trace = timed_read
    starts, stops, losses = [], [], []
    try:
        for _ in range(fits):
            with tempfile.TemporaryDirectory() as log_dir:
                cb = StepTimeLogger(log_dir, profile_every_s=300, warmup_steps=5, profile_steps=20)
                model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[cb])
                cb.wait()
                cost = cb.profiler_cost
                if cost is not None:
                    starts.append(cost.last_start_sec)
                    stops.append(cost.last_stop_sec)
                    losses.append(cost.last_lost_sec)
    finally:
        step_time_logger.read_trace = read

    begin: list[float] = []
    with_cb: list[float] = []
    without: list[float] = []
    traced_by_default = 0
    for _ in range(fits):
        with tempfile.TemporaryDirectory() as log_dir:
            cb = StepTimeLogger(log_dir)
            hook = cb.on_train_begin

            def timed_begin(logs: Any = None, hook: Any = hook) -> None:
                t = time.perf_counter()
                hook(logs)
                begin.append(time.perf_counter() - t)

            cb.on_train_begin = timed_begin
            t = time.perf_counter()
            model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[cb])
            with_cb.append(time.perf_counter() - t)
            cb.wait()
            traced_by_default += len(cb.traces)
        t = time.perf_counter()
        model.fit(x, y, batch_size=32, epochs=1, verbose=0)
        without.append(time.perf_counter() - t)
    return {
        "backend": backend.name(),
        "steps_per_fit": steps,
        "start_sec": starts,
        "stop_sec": stops,
        "lost_sec": losses,
        "parse_sec": parse,
        "untraced": {
            "traced_fits": traced_by_default,
            "on_train_begin_sec": begin,
            "fit_sec_with": with_cb,
            "fit_sec_without": without,
            "median_difference_sec": _stats.median([a - b for a, b in zip(with_cb, without)]),
        },
    }


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, measure, print JSON."""
    parser = _cli.make_parser("python -m benchmarks.studies.profiler_cost", __doc__.splitlines()[0])
    parser.add_argument("--fits", type=int, default=3, help="forced traces, and pairs of untraced fits (default 3)")
    parser.add_argument("--steps", type=int, default=200, help="steps per fit (default 200)")
    args = parser.parse_args(argv)
    _cli.check_at_least(parser, args, fits=1, steps=30)
    result = run(args.fits, args.steps)
    print(json.dumps(result, indent=1))
    if args.output:
        _cli.write_json(args.output, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
