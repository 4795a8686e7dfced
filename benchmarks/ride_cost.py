"""What the cluster view adds inside each multi-worker training step: an interleaved A/B without loopback gRPC.

Run from the repository root::

    python -m benchmarks.ride_cost                      # 15 rounds of 400 steps
    python -m benchmarks.ride_cost --rounds 9 --steps 200 --output ride.json

In a two-worker job the steps' wall time moves by several percent from one
fit to the next (the collectives cross loopback gRPC), which hides an
in-graph cost of microseconds. So this runs one process with TensorFlow's
`MirroredStrategy` over two logical CPUs (its gradients are all-reduced by
TensorFlow's collective ops, packed into one collective, as across
workers) on the 1 ms MLP of :mod:`benchmarks._workload` (batch 64), and
compares, in a new random order each round, each on its own model traced
before the rounds:

* `bare`: no callback;
* `probe`: the step probe alone (`tf.timestamp()` and the sums in every step);
* `ride`: the probe and the rows' ride on the gradient all-reduce
  (:mod:`keras_gpu.hooks.row_ride`), laid out as two workers of one replica
  each, which is what `StepTimeLogger` puts into a two-worker job's steps.

Each variant's round is one epoch of `--steps` steps, timed from the end of
its first batch to the end of its last. It reports the median seconds per
step and the medians (and quartiles) over rounds of the paired differences
`probe - bare` and `ride - probe`, in microseconds per step and as a share
of the bare step. It reports; it never fails because a budget is missed.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from typing import Any

BATCH = 64
VARIANTS = ("bare", "probe", "ride")


def _clock() -> Any:
    import keras

    class Clock(keras.callbacks.Callback):
        first: float | None = None
        last: float | None = None

        def on_epoch_begin(self, epoch, logs=None):
            self.first = self.last = None

        def on_train_batch_end(self, batch, logs=None):
            self.last = time.perf_counter()
            if self.first is None:
                self.first = self.last

    return Clock()


def run(rounds: int, steps: int, seed: int = 0) -> dict[str, Any]:
    """Interleaved rounds; seconds per steady step of each variant, per round."""
    from benchmarks._workload import build_model, make_data, setup_replicas

    strategy = setup_replicas(2)  # TensorFlow's MirroredStrategy: collective all-reduce over two logical CPUs
    from keras_gpu.core import backend
    from keras_gpu.core.tf_private import collective_cross_device_ops
    from keras_gpu.hooks import step_probe
    from keras_gpu.hooks.row_ride import install_ride
    from keras_gpu.meters.cluster_view import ROW_FIELDS

    if not collective_cross_device_ops(strategy):
        raise RuntimeError("the strategy does not all-reduce with TensorFlow's collective ops: nothing like a job's steps")
    x, y = make_data("mlp", steps * BATCH, seed)
    models, clock, ride = {}, _clock(), None
    for variant in VARIANTS:
        model = build_model("mlp", strategy, seed)
        if variant != "bare":
            devices = list(backend.replica_devices(model))
            step_probe.install(model, len(devices))
        if variant == "ride":
            ride = install_ride(model, len(devices), 0, len(ROW_FIELDS) + 1, 1, devices[0])
            ride.publish([0.001 * (i + 1) for i in range(len(ROW_FIELDS) + 1)])
        model.fit(x[: 8 * BATCH], y[: 8 * BATCH], batch_size=BATCH, epochs=1, verbose=0)  # trace
        models[variant] = model
    if ride is None or not ride.rode:
        raise RuntimeError("the ride variant's steps carried no rows: nothing to measure")
    per_step: dict[str, list[float]] = {v: [] for v in VARIANTS}
    rng = random.Random(seed)
    for _ in range(rounds):
        order = list(VARIANTS)
        rng.shuffle(order)
        for variant in order:
            models[variant].fit(x, y, batch_size=BATCH, epochs=1, verbose=0, shuffle=False, callbacks=[clock])
            per_step[variant].append((clock.last - clock.first) / (steps - 1))
    return {"rounds": rounds, "steps": steps, "replicas": 2, "per_step_sec": per_step}


def summarize(result: dict[str, Any]) -> dict[str, Any]:
    """Median step times, and the paired differences' median and quartiles (µs per step, share of bare)."""
    per_step = result["per_step_sec"]
    bare = statistics.median(per_step["bare"])
    out: dict[str, Any] = {"median_step_sec": {v: statistics.median(s) for v, s in per_step.items()}}
    for name, (a, b) in {"probe_minus_bare": ("probe", "bare"), "ride_minus_probe": ("ride", "probe")}.items():
        diffs = [p - q for p, q in zip(per_step[a], per_step[b])]
        q1, med, q3 = statistics.quantiles(diffs, n=4) if len(diffs) > 1 else (diffs[0],) * 3
        out[name] = {"us_per_step": [1e6 * q1, 1e6 * med, 1e6 * q3], "share_of_bare": [q1 / bare, med / bare, q3 / bare]}
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15, help="A/B rounds (default 15)")
    parser.add_argument("--steps", type=int, default=400, help="steps per variant and round (default 400)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", help="path of a JSON result")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.steps < 2:
        parser.error(f"--rounds must be at least 1 and --steps at least 2. Received: {args.rounds}, {args.steps}")
    result = run(args.rounds, args.steps, args.seed)
    result["summary"] = summary = summarize(result)
    for variant, sec in summary["median_step_sec"].items():
        print(f"{variant:>6}: {1e3 * sec:.3f} ms per step (median of {args.rounds} rounds)")
    for name in ("probe_minus_bare", "ride_minus_probe"):
        us, share = summary[name]["us_per_step"], summary[name]["share_of_bare"]
        print(
            f"{name}: {us[1]:+.1f} us per step ({100 * share[1]:+.2f}% of bare; "
            f"quartiles {us[0]:+.1f} to {us[2]:+.1f} us)"
        )
    if args.output:
        with open(args.output, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
