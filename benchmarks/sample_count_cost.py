"""What counting samples costs where the input does not say its batch size: an interleaved A/B on the 1 ms MLP.

Run from the repository root (one backend per run; `KERAS_BACKEND` picks it)::

    python -m benchmarks.sample_count_cost                # 9 rounds of 3 variants, 400 steps each
    python -m benchmarks.sample_count_cost --rounds 5 --steps 200 --output cost.json

The model and batch are `mlp-1` of :mod:`benchmarks._workload` (batch 64).
The input has no static batch size: on TensorFlow a `tf.data` pipeline
batched with `.batch(64)` (a dynamic batch dimension), on JAX and PyTorch a
generator. Three variants train in every round, in a new random order each
round, each on its own model (traced once, before the rounds):

* `none`: no callback;
* `given`: `ThroughputLogger(batch_size=64)`: the batch size from the user,
  nothing counted;
* `counted`: `ThroughputLogger()`: the samples counted (TensorFlow: the
  counting step probe; JAX and PyTorch: the batches counted on the host).

Each variant's round is one epoch of `--steps` steps; its steady time runs
from the end of the first batch to the end of the last (a timestamp
callback placed last). The counting's direct cost is the median over rounds
of `counted - given` (the same logger, with and without the count) as a share
of the median `given` epoch; `given - none` is the logger's own cost. It
reports; it never fails because a budget is missed. On a machine shared with
other work the spread across rounds is printed beside the medians.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from typing import Any

BATCH = 64
VARIANTS = ("none", "given", "counted")


def _clock() -> Any:
    """A callback holding the seconds from the first batch end to the last one of the epoch (`seconds()`)."""
    import keras

    class Clock(keras.callbacks.Callback):
        first: float | None = None
        last: float | None = None

        def on_epoch_begin(self, epoch, logs=None):
            self.first = self.last = None

        def on_train_batch_end(self, batch, logs=None):
            t = time.perf_counter()
            if self.first is None:
                self.first = t
            self.last = t

        def seconds(self) -> float:
            return (self.last or 0.0) - (self.first or 0.0)

    return Clock()


def _data(steps: int, seed: int) -> Any:
    import keras

    from benchmarks._workload import make_data

    x, y = make_data("mlp", steps * BATCH, seed)
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        return lambda: {"x": tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)}

    def batches():
        for i in range(0, len(x), BATCH):
            yield x[i : i + BATCH], y[i : i + BATCH]

    return lambda: {"x": batches()}


def run(rounds: int, steps: int, seed: int = 0) -> dict[str, Any]:
    """Interleaved rounds of the three variants; seconds of each variant's steady epoch, per round."""
    import keras

    from benchmarks._workload import build_model, setup_replicas
    from keras_gpu.hooks.factory import ThroughputLogger

    strategy = setup_replicas(1) if keras.backend.backend() == "tensorflow" else None
    data = _data(steps, seed)
    log_root = tempfile.mkdtemp(prefix="keras-gpu-count-cost-")

    def callbacks(variant: str, n: int) -> list[Any]:
        if variant == "none":
            return []
        size = {"batch_size": BATCH} if variant == "given" else {}
        return [ThroughputLogger(f"{log_root}/{variant}_{n}", **size)]

    models: dict[str, Any] = {}
    for variant in VARIANTS:  # trace each model's train function once, outside the rounds
        models[variant] = _model(build_model, strategy, seed)
        models[variant].fit(epochs=1, verbose=0, callbacks=callbacks(variant, -1), **data())
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    order = list(VARIANTS)
    rng = random.Random(seed)
    for n in range(rounds):
        rng.shuffle(order)
        for variant in order:
            clock = _clock()
            models[variant].fit(epochs=1, verbose=0, callbacks=[*callbacks(variant, n), clock], **data())
            times[variant].append(clock.seconds())
    med = {v: statistics.median(t) for v, t in times.items()}
    paired = [c - g for c, g in zip(times["counted"], times["given"])]
    return {
        "backend": keras.backend.backend(),
        "rounds": rounds,
        "steps": steps,
        "seconds": times,
        "median_sec": med,
        "step_ms": {v: 1e3 * s / max(1, steps - 1) for v, s in med.items()},
        "count_cost_share": statistics.median(paired) / med["given"],
        "count_cost_share_spread": [min(paired) / med["given"], max(paired) / med["given"]],
        "logger_cost_share": (med["given"] - med["none"]) / med["none"],
    }


def _model(build_model: Any, strategy: Any, seed: int) -> Any:
    if strategy is not None:
        return build_model("mlp", strategy, seed)
    import contextlib

    class _Scope:
        def scope(self) -> Any:
            return contextlib.nullcontext()

    return build_model("mlp", _Scope(), seed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--output", default=None, help="write the result as JSON here")
    args = parser.parse_args(argv)
    result = run(args.rounds, args.steps)
    ms = result["step_ms"]
    lo, hi = result["count_cost_share_spread"]
    print(
        f"{result['backend']}: {result['rounds']} rounds of {result['steps']} steps; median step "
        f"none {ms['none']:.3f} ms, given {ms['given']:.3f} ms, counted {ms['counted']:.3f} ms; "
        f"counting costs {100 * result['count_cost_share']:+.2f}% of the epoch (paired rounds "
        f"{100 * lo:+.2f}% .. {100 * hi:+.2f}%); the logger itself {100 * result['logger_cost_share']:+.2f}%"
    )
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
