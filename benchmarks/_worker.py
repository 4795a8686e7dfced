"""One benchmark job in a fresh process: `python -m benchmarks._worker JOB.json RESULT.json`.

Jobs (the `job` key of the input):

* `overhead`: one configuration (model, replicas), all its variants in
  interleaved A/B pairs with bare `fit`, plus the throughput-accuracy and
  self-check runs. Device set-up needs a fresh process, hence one process per
  configuration.
* `leak`: many steps of one variant; RSS, threads and file descriptors.
* `import`: the cost of `import keras_gpu` after `import keras`, and whether
  it initialises a device.

The result is raw measurements; :mod:`benchmarks._analysis` summarises them.
Nothing at module level imports TensorFlow, so the `import` job measures a
clean import.
"""

from __future__ import annotations

import gc
import importlib
import json
import math
import os
import random
import shutil
import sys
import tempfile
import time
from typing import Any

__all__ = ["main"]


# --------------------------------------------------------------------------- import


def _import_job(spec: dict[str, Any]) -> dict[str, Any]:
    t0 = time.perf_counter()
    import keras

    t1 = time.perf_counter()
    import keras_gpu

    t2 = time.perf_counter()
    after_import = _device_initialised()
    t3 = time.perf_counter()
    try:
        importlib.import_module("keras_gpu.hooks.factory")
        loggers_error = None
    except Exception as exc:  # noqa: BLE001 - report, don't fail the benchmark
        loggers_error = f"{type(exc).__name__}: {exc}"
    t4 = time.perf_counter()
    return {
        "import_keras_s": t1 - t0,
        "import_keras_gpu_s": t2 - t1,
        "device_initialised_after_import": after_import,
        "import_keras_gpu_loggers_s": t4 - t3,
        "device_initialised_after_loggers_import": _device_initialised(),
        "loggers_import_error": loggers_error,
        "tensorflow_imported_by_keras": "tensorflow" in sys.modules,
        "versions": {"keras": keras.__version__, "keras_gpu": keras_gpu.__version__},
    }


def _device_initialised() -> bool | None:
    """Whether TensorFlow's eager context (and with it the devices) has been initialised."""
    try:
        from keras_gpu.core.tf_private import runtime_initialized

        return runtime_initialized()
    except Exception:  # noqa: BLE001 - a TensorFlow without this attribute: unknown
        return None


# --------------------------------------------------------------------------- overhead


class _Runner:
    """Runs fresh-model `fit`s of one configuration with a variant's callbacks, instrumented."""

    def __init__(self, spec: dict[str, Any]) -> None:
        from benchmarks._workload import make_data, setup_replicas, workload

        self.workload = workload(spec["config"])
        self.strategy = setup_replicas(self.workload.replicas, self.workload.workers)
        scale = float(spec.get("scale", 1.0))
        self.steps = max(2, round(self.workload.steps_per_epoch * scale))
        self.batch = self.workload.batch_size
        self.seed = int(spec.get("seed", 0))
        self._data = {self.steps: make_data(self.workload.model, self.steps * self.batch, self.seed)}
        self.tmp = tempfile.mkdtemp(prefix="keras_gpu_bench_")

    def close(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    def run(
        self, name: str, epochs: list[int], *, steps: int | None = None, extra: Any = None, make: Any = None
    ) -> dict[str, Any]:
        """One run: a fresh model, then one `fit` per entry of `epochs` with the same callbacks.

        Args:
            name: The variant.
            epochs: Epochs of each successive `fit` on the model.
            steps: Steps per epoch, if not the configuration's.
            extra: Uninstrumented callbacks to put before the measured ones.
            make: A factory `(Context) -> callbacks` replacing the variant's.
        """
        import keras

        from benchmarks._instrument import EpochClock, HookTimer
        from benchmarks._variants import Context, Variant, make_callbacks, variant
        from benchmarks._workload import build_model, fit_input, make_data

        started = time.perf_counter()
        keras.backend.clear_session()
        gc.collect()
        log_dir = tempfile.mkdtemp(prefix="run_", dir=self.tmp)
        v = variant(name) if make is None else Variant(name, name, make, "custom")
        callbacks, skipped = make_callbacks(v, Context(log_dir=log_dir, batch_size=self.batch))
        if skipped:
            shutil.rmtree(log_dir, ignore_errors=True)
            return {"variant": name, "skipped": skipped}
        timer = HookTimer(callbacks).install() if callbacks else None
        clock = EpochClock(timer)
        steps_per_epoch = self.steps if steps is None else steps
        if steps_per_epoch not in self._data:
            self._data[steps_per_epoch] = make_data(self.workload.model, steps_per_epoch * self.batch, self.seed)
        data = fit_input(self.workload, *self._data[steps_per_epoch])
        model = build_model(self.workload.model, self.strategy, self.seed)
        measured = [*callbacks] if extra is None else [*extra, *callbacks]
        fits = []
        for n_epochs in epochs:
            t0 = time.perf_counter()
            model.fit(**data, epochs=n_epochs, verbose=0, callbacks=clock.wrap(measured))
            wall = time.perf_counter() - t0
            record = clock.record.as_dict(wall, steps_per_epoch)
            record["threads_alive_after"] = timer.alive_threads() if timer else []
            fits.append(record)
        result = {
            "variant": name,
            "fits": fits,
            "threads": timer.threads if timer else [],
            "log_dir": log_dir,
            "callbacks": [type(c).__name__ for c in callbacks],
            "run_wall_s": time.perf_counter() - started,
            "_callbacks": callbacks,
        }
        del model
        return result

    def finish(self, result: dict[str, Any]) -> dict[str, Any]:
        """Drop the live objects and the log directory of a run's result."""
        result.pop("_callbacks", None)
        log_dir = result.pop("log_dir", None)
        if log_dir:
            shutil.rmtree(log_dir, ignore_errors=True)
        return result


def _overhead_job(spec: dict[str, Any]) -> dict[str, Any]:
    from benchmarks._instrument import wrapper_overhead_s

    runner = _Runner(spec)
    try:
        return _overhead(spec, runner, wrapper_overhead_s())
    finally:
        runner.close()


def _overhead(spec: dict[str, Any], runner: _Runner, wrapper_s: float) -> dict[str, Any]:
    epochs = [int(e) for e in spec.get("epochs", [3, 2])]
    variants = list(spec.get("variants", []))
    rounds = int(spec.get("rounds", 1))
    out: dict[str, Any] = {
        "config": runner.workload.as_dict(),
        "steps_per_epoch": runner.steps,
        "epochs": epochs,
        "rounds": rounds,
        "variants": variants,
        "wrapper_overhead_s": wrapper_s,
        "devices": _devices(runner.strategy),
        "jax_clock_s_per_call": _jax_clock_s_per_call(),
        "skipped": {},
        "warmup": [],
        "pairs": [],
    }
    _log(f"[{runner.workload.name}] warm-up")
    available = []
    warmup_steps = max(2, runner.steps // 10)
    for name in ["bare", *variants]:
        result = runner.finish(runner.run(name, [1], steps=warmup_steps))
        if "skipped" in result:
            out["skipped"][name] = result["skipped"]
            continue
        out["warmup"].append(result)
        if name != "bare":
            available.append(name)
    for r in range(rounds):
        order = available[:]
        random.Random(runner.seed * 1000 + r).shuffle(order)
        _log(f"[{runner.workload.name}] round {r + 1}/{rounds}: {len(order)} pairs")
        for i, name in enumerate(order):
            sequence = ["bare", name] if (r + i) % 2 == 0 else [name, "bare"]
            runs = {n: runner.finish(runner.run(n, epochs)) for n in sequence}
            out["pairs"].append({"round": r, "variant": name, "order": sequence, "bare": runs["bare"], "run": runs[name]})
    if spec.get("accuracy") and "kg-throughput" in available:
        _log(f"[{runner.workload.name}] throughput accuracy")
        factor = _accuracy_factor(out["pairs"], runner.steps, float(spec.get("accuracy_epoch_s", 1.5)))
        out["accuracy"] = [
            _accuracy(runner, settings, int(spec.get("accuracy_epochs", 3)), factor)
            for settings in spec.get("accuracy_settings", [{}])
        ]
    if spec.get("self_check"):
        _log(f"[{runner.workload.name}] self-check")
        out["self_check"] = _self_check(runner, epochs)
    return out


def _devices(strategy: Any) -> list[str]:
    import keras

    if keras.backend.backend() == "jax":
        import jax

        return list(getattr(strategy, "devices", ())) or [str(d) for d in jax.local_devices()]
    try:
        return [str(d) for d in strategy.extended.worker_devices]
    except Exception:  # noqa: BLE001 - the default strategy
        import tensorflow as tf

        gpus = tf.config.list_logical_devices("GPU")
        return [gpus[0].name if gpus else "/device:CPU:0"]


def _jax_clock_s_per_call(calls: int = 20000) -> float | None:
    """On JAX, what the cluster view's clock adds to one call of the train function (`None` elsewhere).

    The clock wraps the train function outside every hook, so the hook timers
    do not see it. Here an empty train function that takes one batch is
    called `calls` times bare and `calls` times wrapped by a `StepClock`
    (interleaved in 10 blocks); the median block difference per call is the
    clock's own cost (its reads, sums and the iterator's wrapper; the wait
    for the logs is nothing on values already computed).
    """
    import keras

    if keras.backend.backend() != "jax":
        return None
    from benchmarks._stats import median
    from keras_gpu.hooks.step_time_cluster_jax import StepClock

    def empty(state: Any, iterator: Any) -> Any:
        return next(iterator), state

    clock = StepClock()
    wrapped = clock.wrap(empty)
    batches = iter(range(1 << 62))
    block = calls // 10
    diffs = []
    for _ in range(10):
        t0 = time.perf_counter()
        for _ in range(block):
            empty(None, batches)
        t1 = time.perf_counter()
        for _ in range(block):
            wrapped(None, batches)
        t2 = time.perf_counter()
        diffs.append(((t2 - t1) - (t1 - t0)) / block)
    return median(diffs)


def _accuracy_factor(pairs: list[dict[str, Any]], steps: int, epoch_s: float) -> int:
    """Epoch length for the accuracy runs, as a multiple of `steps`: about `epoch_s` seconds at bare speed (1 to 8)."""
    from benchmarks._analysis import run_metrics
    from benchmarks._stats import median

    rate = median(run_metrics(p["bare"])["steps_per_s"] for p in pairs)
    if rate is None:
        return 4
    return max(1, min(8, math.ceil(epoch_s * rate / steps)))


def _accuracy(runner: _Runner, settings: dict[str, Any], n_epochs: int, factor: int) -> dict[str, Any]:
    """ThroughputLogger's logged samples/s against the benchmark's own timestamps at the same batches.

    Args:
        runner: The configuration's runner.
        settings: Keyword arguments for `ThroughputLogger` (`{}`: its defaults).
        n_epochs: Epochs of the one `fit`.
        factor: Steps per epoch, as a multiple of the configuration's.
    """
    from benchmarks._instrument import BatchClock
    from benchmarks._variants import keras_gpu_object

    def make(ctx: Any) -> list:
        return [keras_gpu_object("ThroughputLogger")(ctx.log_dir, **settings)]

    clock = BatchClock()
    steps = runner.steps * factor
    result = runner.run("kg-throughput", [n_epochs], steps=steps, extra=[clock], make=make)
    try:
        if "skipped" in result:
            return {"settings": settings, "skipped": result["skipped"]}
        logger_cb = result["_callbacks"][0]
        points = _read_scalars(result["log_dir"], ("throughput/samples_per_sec",))
        return {
            "settings": settings,
            "epochs": n_epochs,
            "steps_per_epoch": steps,
            "batch_size": runner.batch,
            "every_s": getattr(logger_cb, "every_s", None),
            "every_n_steps": getattr(logger_cb, "every_n_steps", None),
            "windows": _accuracy_windows(points, clock.stamps, steps, runner.batch, clock.epoch_starts),
        }
    finally:
        runner.finish(result)


def _accuracy_windows(
    points: dict[str, list[tuple[int, float]]],
    stamps: dict[int, float],
    steps_per_epoch: int,
    batch: int,
    epoch_starts: dict[int, float] | None = None,
) -> list[dict[str, Any]]:
    """Each logged window with the truth over the same global steps.

    Within an epoch, windows are contiguous and the first opens at the
    epoch's start (wall-clock rates include the first execution); a window
    logged at global step `s` covers the steps after the previous boundary up
    to `s`, and its truth is the benchmark's own clock at those boundaries.
    """
    if not stamps:
        return []
    starts = dict(epoch_starts or {})
    first_step = min(stamps) - 1  # global step before the first batch of the fit
    by_epoch: dict[int, list[tuple[int, float]]] = {}
    for step, value in points.get("throughput/samples_per_sec", []):
        by_epoch.setdefault((step - first_step - 1) // steps_per_epoch, []).append((step, value))
    windows = []
    for epoch, logged in sorted(by_epoch.items()):
        prev = first_step + epoch * steps_per_epoch  # the global step before the epoch's first batch
        clock = {**stamps, prev: starts[prev]} if prev in starts else stamps
        for step, value in sorted(logged):
            if prev not in clock or step not in clock or step <= prev:
                prev = step
                continue
            truth = (step - prev) * batch / (clock[step] - clock[prev])
            windows.append(
                {"epoch": epoch, "from_step": prev, "to_step": step, "logged": value, "truth": truth,
                 "rel_error": value / truth - 1.0}
            )
            prev = step
    return windows


def _read_scalars(log_dir: str, tags: tuple[str, ...]) -> dict[str, list[tuple[int, float]]]:
    """`{tag: [(step, value), ...]}` from every event file under `log_dir`."""
    import tensorflow as tf

    found: dict[str, list[tuple[int, float]]] = {tag: [] for tag in tags}
    for root, _, files in os.walk(log_dir):
        for name in files:
            if "tfevents" not in name:
                continue
            for record in tf.data.TFRecordDataset(os.path.join(root, name)):
                event = tf.compat.v1.Event.FromString(record.numpy())
                for value in event.summary.value:
                    if value.tag in found:
                        number = float(tf.make_ndarray(value.tensor)) if value.HasField("tensor") else value.simple_value
                        found[value.tag].append((int(event.step), number))
    return found


def _self_check(runner: _Runner, epochs: list[int]) -> dict[str, Any]:
    """The probes, whose cost is known, measured like any variant."""
    hooks_run = runner.run("probe-hooks", epochs)
    spin = runner.run("probe-spin-thread", epochs)
    try:
        empty, busy = hooks_run["_callbacks"]

        def total(key: str) -> tuple[int, float]:
            found = [fit["hooks"].get(key, {}) for fit in hooks_run["fits"]]
            return sum(h.get("calls", 0) for h in found), sum(h.get("seconds", 0.0) for h in found)

        busy_calls, busy_s = total("BusyHookProbe.on_train_batch_end")
        empty = [fit["hooks"].get("EmptyHookProbe.on_train_batch_end", {}) for fit in hooks_run["fits"]]
        empty_calls = sum(h.get("calls", 0) - h.get("slow_calls", 0) for h in empty)
        empty_s = sum(h.get("seconds", 0.0) - h.get("slow_seconds", 0.0) for h in empty)
        spinner = spin["_callbacks"][0]
        return {
            "busy_hook": {
                "nominal_s_per_call": busy.seconds,
                "self_timed_s": busy.self_timed_s,
                "measured_s": busy_s,
                "calls": busy_calls,
                "expected_calls": busy.calls,
            },
            # Typical calls only: a call preempted for more than SLOW_CALL_S says nothing about the timer.
            "empty_hook": {"calls": empty_calls, "measured_s_per_call": empty_s / empty_calls if empty_calls else None},
            "spin_thread": {
                "fits": len(spin["fits"]),
                "expected_cpu_s_last_fit": spinner.burned_s,
                "measured_cpu_s_last_fit": spin["fits"][-1]["total_thread_cpu_s"],
                "measured_cpu_s_all_fits": sum(fit["total_thread_cpu_s"] for fit in spin["fits"]),
                "threads": spin["threads"],
            },
        }
    finally:
        runner.finish(hooks_run)
        runner.finish(spin)


# --------------------------------------------------------------------------- leak


def _leak_job(spec: dict[str, Any]) -> dict[str, Any]:
    import keras

    from benchmarks._instrument import HookTimer
    from benchmarks._proc import open_fd_count, rss_bytes, task_count
    from benchmarks._variants import Context, make_callbacks, variant
    from benchmarks._workload import build_model, make_data, setup_replicas, workload

    w = workload(spec.get("config", "mlp-1"))
    strategy = setup_replicas(w.replicas)
    epoch_steps = int(spec.get("epoch_steps", 1000))
    total_steps = int(spec.get("steps", 20000))
    n_epochs = max(1, total_steps // epoch_steps)
    x, y = make_data(w.model, epoch_steps * w.batch_size)
    tmp = tempfile.mkdtemp(prefix="keras_gpu_bench_leak_")
    try:
        model = build_model(w.model, strategy)
        model.fit(x[: 50 * w.batch_size], y[: 50 * w.batch_size], batch_size=w.batch_size, epochs=1, verbose=0)

        def counts() -> dict[str, Any]:
            gc.collect()
            return {"rss_bytes": rss_bytes(), "tasks": task_count(), "fds": open_fd_count(), "fd_targets": _fd_targets(),
                    "python_threads": _python_threads()}

        baseline = counts()  # TensorFlow's own pools and caches exist by now
        callbacks, skipped = make_callbacks(variant(spec["variant"]), Context(log_dir=tmp, batch_size=w.batch_size))
        if skipped:
            return {"variant": spec["variant"], "skipped": skipped}
        timer = HookTimer(callbacks).install() if callbacks else None

        class _Rss(keras.callbacks.Callback):
            def __init__(self) -> None:
                super().__init__()
                self.samples: list[int | None] = []

            def on_epoch_end(self, epoch, logs=None):
                self.samples.append(rss_bytes())

        model.fit(x, y, batch_size=w.batch_size, epochs=1, verbose=0, callbacks=callbacks)  # warm-up with callbacks
        after_warmup = counts()
        rss = _Rss()
        t0 = time.perf_counter()
        model.fit(x, y, batch_size=w.batch_size, epochs=n_epochs, verbose=0, callbacks=[*callbacks, rss])
        wall = time.perf_counter() - t0
        after = counts()
        return {
            "variant": spec["variant"],
            "config": w.name,
            "steps": n_epochs * epoch_steps,
            "epoch_steps": epoch_steps,
            "wall_s": wall,
            "baseline": baseline,
            "after_warmup": after_warmup,
            "after": after,
            "rss_per_epoch": rss.samples,
            "callback_threads_alive": timer.alive_threads() if timer else [],
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _python_threads() -> list[str]:
    import threading

    return sorted(t.name for t in threading.enumerate())


def _fd_targets() -> list[str]:
    targets = []
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return targets
    for name in names:
        try:
            targets.append(os.readlink(f"/proc/self/fd/{name}"))
        except OSError:
            continue
    return sorted(targets)


# --------------------------------------------------------------------------- entry point


def _log(message: str) -> None:
    sys.stderr.write(f"keras-gpu bench: {message}\n")
    sys.stderr.flush()


_JOBS = {"import": _import_job, "overhead": _overhead_job, "leak": _leak_job}


def main(argv: list[str] | None = None) -> int:
    """Run the job described by the JSON file `argv[0]` and write the result to `argv[1]`."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        sys.stderr.write("usage: python -m benchmarks._worker JOB.json RESULT.json\n")
        return 2
    with open(argv[0], encoding="utf-8") as f:
        spec = json.load(f)
    job = _JOBS.get(spec.get("job"))
    if job is None:
        sys.stderr.write(f"unknown job {spec.get('job')!r}; expected one of {sorted(_JOBS)}\n")
        return 2
    started = time.perf_counter()
    result = job(spec)
    result["job"] = spec["job"]
    result["worker_wall_s"] = time.perf_counter() - started
    from benchmarks._cli import write_json

    write_json(argv[1], result, indent=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
