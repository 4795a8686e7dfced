"""Fit corpus programs in this process, with `keras_gpu.callbacks()` or without, and print what each did.

Run as `python -m tests.corpus.runner VARIANT LOG_DIR NAME...` with
`KERAS_BACKEND` set; VARIANT is `plain` or `keras_gpu`. Each program starts
from `keras.utils.set_random_seed(SEED)` (Python, NumPy, the backend and
Keras' global seed generator), builds its model and data, and fits
`EPOCHS` epochs with `verbose=0`. A program that fails is reported with its
error and the next one runs. One `RESULT` JSON line maps each name to:

* `losses`: the epoch losses, as `float.hex` (bit-exact), and `weights`: a
  SHA-256 of the final weights' bytes;
* `trained`: the samples the model trained on, read from the model (a
  `TrainedSamples` metric inside the step, summed over the epochs), and
  `expected`: those the data holds, counted by hand;
* with keras-gpu: `samples` (`ThroughputLogger.summary`), `implied` (what
  the event file implies), `flops` (its training FLOPs per sample), and
  `hand_flops` (3 x the program's hand-counted forward FLOPs);
* `hints`: the hints of `keras-gpu report` on the run and the `Hint:`
  sentences of the end-of-fit lines; `messages`: every keras-gpu log line;
  `input_advice`: the input-bound hint keras-gpu would give for the input
  stage it measured, were the step input-bound (the advice depends on the
  stage's name alone, so it is checked whatever share the load makes);
* `tail_sec`: from the last `on_train_batch_end` of a callback placed first
  to `fit`'s return; `keras_gpu_tail_sec`: the part of it spent in
  keras-gpu's own hooks (its last batch end, last epoch end and train end,
  each timed between the callback placed first and one placed right after
  keras-gpu's); `fit_sec` and `summary_fit_sec`: `fit` by a stopwatch
  around the call, and as the end-of-fit line says.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import logging
import os
import re
import sys
import time
import traceback
from typing import Any

import keras
import numpy as np

from tests.corpus import CATALOG
from tests.corpus._common import EPOCHS, Program

__all__ = ["SEED", "main", "run_program"]

SEED = 1234


class _Marks(keras.callbacks.Callback):
    """`time.perf_counter()` at the last batch end, epoch end and train end it saw."""

    def __init__(self):
        super().__init__()
        self.batch_end = self.epoch_end = self.train_end = None

    def on_train_batch_end(self, batch, logs=None):
        self.batch_end = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.epoch_end = time.perf_counter()

    def on_train_end(self, logs=None):
        self.train_end = time.perf_counter()


class _Trained(keras.callbacks.Callback):
    """Sums the `TrainedSamples` metric over the epochs (Keras resets metrics at each epoch's start)."""

    def __init__(self):
        super().__init__()
        self.samples = 0.0

    def on_epoch_end(self, epoch, logs=None):
        (key,) = [k for k in logs if k.endswith("trained_samples")]
        self.samples += float(logs[key])


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def _program(name: str) -> Program:
    module = importlib.import_module(f"tests.corpus.{CATALOG[name][0]}")
    return next(p for p in module.PROGRAMS if p.name == name)


def _digest(model: keras.Model) -> str:
    h = hashlib.sha256()
    for w in model.weights:
        h.update(np.ascontiguousarray(keras.ops.convert_to_numpy(w)).tobytes())
    return h.hexdigest()


def _input_advice(step: Any) -> str | None:
    """The input-bound hint for the measured step's input stage, as if all of the step waited for input."""
    from keras_gpu.meters.step_hints import input_hint

    if step.input_stage is None:
        return None
    return input_hint(dataclasses.replace(step, input_sec=step.step_sec))


def run_program(name: str, variant: str, log_dir: str, collect: _Collect) -> dict[str, Any]:
    """Fit program `name` once (`variant`: "plain" or "keras_gpu") and return what it did."""
    program = _program(name)
    keras.utils.set_random_seed(SEED)
    if program.policy:
        keras.config.set_dtype_policy(program.policy)
    try:
        built = program.build()
        first, after, trained = _Marks(), _Marks(), _Trained()
        kg = []
        if variant == "keras_gpu":
            import keras_gpu

            # profile_every_s: these short fits are traced too, so the profiler is in what the corpus checks.
            kg = keras_gpu.callbacks(log_dir, profile_every_s=300)
        collect.messages.clear()
        start = time.perf_counter()
        history = built.model.fit(epochs=EPOCHS, verbose=0, callbacks=[first, *kg, after, trained], **built.fit)
        returned = time.perf_counter()
    finally:
        keras.config.set_dtype_policy("float32")
    result: dict[str, Any] = {
        "losses": [float(v).hex() for v in history.history["loss"]],
        "weights": _digest(built.model),
        "trained": trained.samples,
        "expected": built.samples,
        "input": built.input,
        "tail_sec": returned - first.batch_end,
        "fit_sec": returned - start,
        "messages": list(collect.messages),
    }
    if kg:
        import keras_gpu
        from keras_gpu.output.reader import read_report, summarize
        from tests._util import implied_samples

        throughput = next(c for c in kg if isinstance(c, keras_gpu.ThroughputLogger))
        summary = throughput.summary or {}
        hints = list(summarize(log_dir)["hints"])
        advice = [_input_advice(r.step_time.step) for r in read_report(log_dir).runs if r.step_time is not None]
        for message in result["messages"]:
            hints += [h.strip() for h in re.findall(r" Hint: (.*?)(?=\. Hint: |\.$)", message)]
        result.update(
            samples=summary.get("samples"),
            implied=implied_samples(os.path.join(log_dir, "train"))[0],
            flops=summary.get("flops_per_sample"),
            hand_flops=3 * program.forward_flops,
            summary_fit_sec=summary.get("fit_seconds"),
            hints=hints,
            input_advice=[a for a in advice if a is not None],
            keras_gpu_tail_sec=(after.batch_end - first.batch_end)
            + (after.epoch_end - first.epoch_end)
            + (after.train_end - first.train_end),
        )
    return result


def main(variant: str, log_dir: str, names: list[str]) -> None:
    """Fit each of `names` in turn; print one `RESULT` JSON line."""
    if variant not in ("plain", "keras_gpu"):
        raise ValueError(f"variant must be 'plain' or 'keras_gpu'. Received: variant={variant!r}")
    collect = _Collect()
    kg_logger = logging.getLogger("keras_gpu")
    kg_logger.setLevel(logging.INFO)
    kg_logger.addHandler(collect)
    results = {}
    for name in names:
        try:
            results[name] = run_program(name, variant, os.path.join(log_dir, name), collect)
        except Exception as exc:  # noqa: BLE001 - report it, and run the next program
            results[name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-3000:]}
    print("RESULT", json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
