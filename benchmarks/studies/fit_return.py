"""How long `fit` takes to return after its last batch when a large trace is still to be parsed.

Run from the repository root:

```
python -m benchmarks.studies.fit_return                    # an LSTM over timeseries_dataset_from_array, 20 traced steps
python -m benchmarks.studies.fit_return --timesteps 60 --rounds 3
```

Each round trains a fresh LSTM (`--timesteps` steps of 8 features, 32 units)
on `keras.utils.timeseries_dataset_from_array` for one epoch of 40 batches,
with `keras_gpu.callbacks(log_dir)` whose StepTimeLogger traces the last 20
steps, so the trace stops at the last batch end and is parsed while `fit`
ends. It measures, by `time.perf_counter`:

* `return_s`: from the last batch end (a callback placed first, before
  keras-gpu's, records it) to `fit` returning: keras-gpu's own last batch
  end, epoch end and train end, and Keras' end of `fit`;
  `after_callbacks_s`: the part of it after the last callback's
  `on_train_end` (Keras' own end of `fit`);
* `profiler_stop_s`: the backend profiler's `stop()`, and
  `stop_on_training_thread`: whether it ran on the thread that called `fit`;
* `parse_s`: reading and analysing the kept trace (`xspace.load` and
  `step_time.analyze`), as the parser thread does, timed apart after `fit`;
* `written_s`: from `fit` returning to the trace's points being written
  (`StepTimeLogger.wait()`);
* `trace_mb`: the size of the `.xplane.pb` file;
* `fit_s` (a stopwatch around `fit`) and `line_fit_s` (the end-of-fit line's "s of fit").

It prints one JSON line per round and the medians (`--output` also writes them as JSON). It reports; it never fails
because a budget is missed.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from typing import Any

from benchmarks import _cli, _stats

__all__ = ["main", "run"]


def run(timesteps: int, log_dir: str) -> dict[str, Any]:
    """One fit whose last 20 steps are traced; the measured delays (see the module docstring)."""
    import keras
    import numpy as np

    import keras_gpu
    from keras_gpu.hooks import step_time_trace
    from keras_gpu.hooks.step_time_logger import StepTimeLogger
    from keras_gpu.meters import step_time, xspace

    batches, batch_size, traced = 40, 32, 20
    rng = np.random.default_rng(0)
    series = rng.random((batches * batch_size + timesteps, 8), dtype=np.float32)
    data = keras.utils.timeseries_dataset_from_array(
        series[:-timesteps], series[timesteps:, :1], sequence_length=timesteps, batch_size=batch_size
    )
    model = keras.Sequential([keras.Input((timesteps, 8)), keras.layers.LSTM(32), keras.layers.Dense(1)])
    model.compile("adam", "mse")

    class FirstAtBatchEnd(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            self.t = time.perf_counter()

    class LastAtTrainEnd(keras.callbacks.Callback):
        def on_train_end(self, logs=None):
            self.t_end = time.perf_counter()

    stops: list[float] = []
    stop_threads: list[bool] = []
    profiler = step_time_trace.backend_profiler()
    real_stop = profiler.stop

    def timed_stop() -> None:
        t = time.perf_counter()
        real_stop()
        stops.append(time.perf_counter() - t)
        stop_threads.append(threading.current_thread() is threading.main_thread())

    profiler.stop = timed_stop
    original = step_time_trace.backend_profiler
    step_time_trace.backend_profiler = lambda: profiler
    import keras_gpu.hooks.step_time_logger as stl

    stl.backend_profiler = step_time_trace.backend_profiler
    try:
        callbacks = keras_gpu.callbacks(log_dir)
        for cb in callbacks:
            if isinstance(cb, StepTimeLogger):
                cb.warmup_steps, cb.profile_steps = batches - traced, traced
                step_logger = cb
        first, last = FirstAtBatchEnd(), LastAtTrainEnd()
        lines: list[str] = []

        class Lines(__import__("logging").Handler):
            def emit(self, record):
                lines.append(record.getMessage())

        handler = Lines()
        keras_gpu_logger = __import__("logging").getLogger("keras_gpu")
        keras_gpu_logger.addHandler(handler)
        keras_gpu_logger.setLevel("INFO")
        t0 = time.perf_counter()
        model.fit(data, epochs=1, verbose=0, callbacks=[first, *callbacks, last])
        t_return = time.perf_counter()
        getattr(step_logger, "wait", lambda: None)()  # where fit does not wait for the parse itself
        t_written = time.perf_counter()
        keras_gpu_logger.removeHandler(handler)
    finally:
        step_time_trace.backend_profiler = original
        stl.backend_profiler = original
    (path,) = xspace.find_traces(os.path.join(log_dir, "train", "plugins", "profile"))
    t = time.perf_counter()
    space = xspace.load(path)
    step_time.analyze(space, steps=traced, wall_sec=1.0, num_replicas=1)
    parse = time.perf_counter() - t
    line = next((m for m in lines if "s of fit" in m), "")
    line_fit = float(line.split(" s of fit")[0].rsplit(" ", 1)[1]) if line else float("nan")
    return {
        "return_s": round(t_return - first.t, 4),
        "after_callbacks_s": round(t_return - last.t_end, 4),
        "profiler_stop_s": round(stops[-1], 4) if stops else None,
        "stop_on_training_thread": stop_threads[-1] if stop_threads else None,
        "parse_s": round(parse, 3),
        "written_s": round(t_written - t_return, 3),
        "trace_mb": round(os.path.getsize(path) / 2**20, 2),
        "fit_s": round(t_return - t0, 3),
        "line_fit_s": line_fit,
    }


def main(argv: list[str] | None = None) -> int:
    parser = _cli.make_parser("python -m benchmarks.studies.fit_return", __doc__.split("\n\n")[0], rounds=3)
    parser.add_argument("--timesteps", type=int, default=120, help="LSTM time steps per sample (trace size)")
    args = parser.parse_args(argv)
    _cli.check_at_least(parser, args, rounds=1, timesteps=1)
    rows = []
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory() as log_dir:
            row = run(args.timesteps, log_dir)
        print(json.dumps(row), flush=True)
        rows.append(row)
    medians = {
        k: _stats.median(r[k] for r in rows if r[k] is not None)
        for k in rows[0]
        if not isinstance(rows[0][k], bool)
    }
    print("median", json.dumps(medians))
    if args.output:
        _cli.write_json(args.output, {"timesteps": args.timesteps, "rounds": rows, "median": medians})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
