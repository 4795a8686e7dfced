"""A fit fed by a generator whose batches change shape, timed by a stopwatch: the truth for the steady rate.

Run in a child with `KERAS_BACKEND` set; :func:`main` prints `RESULT` and a
JSON object per case: each epoch's steady samples/s as `ThroughputLogger`
logged it (Keras' `History`), and each execution's samples and stopwatch time
(a callback after the logger timestamps every batch end), the backend's own
count of compiles per execution (JAX's `jax.monitoring` events on the
training thread; TensorFlow's tracing count of the train function), and the
logged `first_step_sec`.
"""

from __future__ import annotations

import json
import sys
import tempfile
import threading
import time

import numpy as np

FEATURES = 256
BATCH = 64


def _sizes(case: str) -> list[int]:
    """The batch sizes of one epoch: 40 full batches and, per case, a new size at the end or in the middle."""
    sizes = [BATCH] * 40
    if case in ("short_last", "short_last_dense"):
        sizes.append(8)
    elif case == "new_in_middle":
        sizes[20] = 16
    return sizes


def _generator(sizes: list[int], epochs: int):
    rng = np.random.default_rng(0)
    for _ in range(epochs):
        for n in sizes:
            yield rng.random((n, FEATURES), "float32"), rng.random((n, 1), "float32")


class _Compiles:
    """The backend's own compile count of the training thread, read at each batch end (a test's truth)."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.events = 0
        self.thread = threading.get_ident()
        if backend == "jax":
            import jax.monitoring

            def listen(name, *_args, **_kwargs):
                if name.startswith("/jax/core/compile/backend_compile") and threading.get_ident() == self.thread:
                    self.events += 1

            jax.monitoring.register_event_duration_secs_listener(listen)

    def read(self, model) -> int:
        if self.backend == "tensorflow":  # the tf.functions Keras' train function closes over
            return sum(
                cell.cell_contents.experimental_get_tracing_count()
                for cell in model.train_function.__closure__ or ()
                if hasattr(cell.cell_contents, "experimental_get_tracing_count")
            )
        return self.events


def _stopwatch(compiles: _Compiles | None):
    """A callback that timestamps every batch begin and end (and, given `compiles`, reads the backend's compiles)."""
    import keras

    class Stopwatch(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = [{"t": time.perf_counter(), "compiles": compiles.read(self.model) if compiles else 0}]
            self.epochs.append(self.epoch)
            self.begins = []
            self.begin_epochs.append(self.begins)

        def on_train_batch_begin(self, batch, logs=None):
            self.begins.append(time.perf_counter())

        def on_train_batch_end(self, batch, logs=None):
            t = time.perf_counter()
            self.epoch.append({"batch": batch, "t": t, "compiles": compiles.read(self.model) if compiles else 0})

    watch = Stopwatch()
    watch.epochs = []
    watch.begin_epochs = []
    return watch


def run_case(case: str, backend: str) -> dict:
    import keras

    import keras_gpu

    sizes = _sizes(case)
    epochs = 1 if case == "short_last_dense" else 2
    model = keras.Sequential(
        [keras.Input((FEATURES,)), keras.layers.Dense(512, activation="relu"), keras.layers.Dense(512), keras.layers.Dense(1)]
    )
    model.compile(optimizer="sgd", loss="mse")
    compiles = _Compiles(backend)
    before, after = _stopwatch(None), _stopwatch(compiles)  # the logger reads its clock between the two
    with tempfile.TemporaryDirectory() as log_dir:
        logger = keras_gpu.ThroughputLogger(log_dir)
        steps = None if case == "short_last_dense" else len(sizes)  # None: Keras learns the length at the end
        history = model.fit(
            _generator(sizes, epochs),
            epochs=epochs,
            steps_per_epoch=steps,
            callbacks=[before, logger, after],
            verbose=0,
        )
    steady = history.history.get("throughput/steady_samples_per_sec", [])
    out = []
    for e, (early, late) in enumerate(zip(before.epochs, after.epochs)):
        # Where the logger reads its clock at the end of an execution: at its batch end or the next batch begin
        # (the training thread's clock), between the first stopwatch's batch end and the second's next begin.
        late_begins = [*after.begin_epochs[e][1:], late[-1]["t"]]
        executions = [
            {
                "samples": sizes[m["batch"]],
                "sec": m["t"] - p["t"],
                "compiles": m["compiles"] - p["compiles"],
                "end": [a["t"], nxt],
            }
            for p, m, a, nxt in zip(late, late[1:], early[1:], late_begins)
        ]
        out.append({"steady": steady[e] if e < len(steady) else None, "executions": executions})
    return {"epochs": out, "first_step_sec": list(logger.summary["first_step_sec"])}


def main(cases: list[str]) -> None:
    import keras

    backend = keras.backend.backend()
    result = {case: run_case(case, backend) for case in cases}
    sys.stdout.write("RESULT" + json.dumps(result) + "\n")


def steady_bounds(executions: list[dict], left_out: set[int]) -> tuple[float, float]:
    """The steady samples/s a logger that leaves out execution 0 and `left_out` can log: `(lowest, highest)`.

    The logger reads its clock where each execution ends, between the two
    stopwatches (`end`: from the first one's batch end to the second one's
    next batch begin, or its batch end for the epoch's last), so the time
    of the executions it keeps is bounded by theirs: the bounds hold
    whatever the load, and are as tight as the logger's own hooks.
    """
    kept = [i for i in range(1, len(executions)) if i not in left_out]
    coef: dict[int, int] = {}
    for i in kept:
        coef[i] = coef.get(i, 0) + 1
        coef[i - 1] = coef.get(i - 1, 0) - 1
    low = sum(c * executions[i]["end"][0 if c > 0 else 1] for i, c in coef.items())
    high = sum(c * executions[i]["end"][1 if c > 0 else 0] for i, c in coef.items())
    samples = sum(executions[i]["samples"] for i in kept)
    return samples / high, samples / low
