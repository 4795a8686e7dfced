"""What the cluster view adds inside each multi-worker training step: an interleaved A/B without loopback gRPC.

Run from the repository root::

    python -m benchmarks.studies.ride_cost                      # 41 rounds of 400 steps
    python -m benchmarks.studies.ride_cost --rounds 9 --steps 200 --output ride.json

In a two-worker job the steps' wall time moves by several percent from one
fit to the next (the collectives cross loopback gRPC), which hides an
in-graph cost of microseconds. So this runs one process with keras-gpu's
multi-worker strategy as a job of one worker (one CPU replica; its gradients
go through TensorFlow's packed collective all-reduce, as in every worker of a
job, with no peer to wait for) on the 1 ms MLP of :mod:`benchmarks._workload` (batch 64), and
compares, in a new random order each round, each on its own model traced
before the rounds:

* `bare`: no callback;
* `probe`: the step probe alone (`tf.timestamp()` and the sums in every step);
* `ride`: the probe and the rows' ride on the gradient all-reduce
  (:mod:`keras_gpu.hooks.row_ride`), laid out as worker 0 of two: what
  `StepTimeLogger` puts into each step of a two-worker job.

Each variant's round is one epoch of `--steps` steps, timed from the end of
its first batch to the end of its last, by the wall clock and by the
process's CPU time (every core's work, whether on the step's critical path
or not: an upper bound on what the added ops cost). For each clock it
reports the median seconds per step and the medians (and quartiles) over
rounds of the paired differences `probe - bare` and `ride - probe`, in
microseconds per step and as a share of the bare step. It reports; it never fails because a budget is missed.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from benchmarks import _ab, _cli, _stats

BATCH = 64
VARIANTS = ("bare", "probe", "ride")



def run(rounds: int, steps: int, seed: int = 0) -> dict[str, Any]:
    """Interleaved rounds; seconds per steady step of each variant, per round."""
    from benchmarks._instrument import SteadyClock
    from benchmarks._workload import build_model, make_data
    from keras_gpu.core import backend
    from keras_gpu.hooks import step_probe
    from keras_gpu.hooks.row_ride import install_ride
    from keras_gpu.meters.cluster_view import ROW_FIELDS
    from keras_gpu.setup.keras_compat import KerasMultiWorkerMirroredStrategy

    # One worker of one CPU replica: every op of the step on the worker's own CPU, as in each process of a job.
    strategy = KerasMultiWorkerMirroredStrategy()
    x, y = make_data("mlp", steps * BATCH, seed)
    models, clock, ride = {}, SteadyClock(), None
    for variant in VARIANTS:
        model = build_model("mlp", strategy, seed)
        if variant != "bare":
            devices = list(backend.replica_devices(model))
            probe = step_probe.install(model, len(devices))
        if variant == "ride":
            # Laid out as worker 0 of two (the table two rows wide), as in a two-worker job.
            ride = probe.ride = install_ride(model, 2, 0, len(ROW_FIELDS) + 1, len(devices), devices[0])
            published = [0.001 * (i + 1) for i in range(len(ROW_FIELDS) + 1)]
            ride.publish(published)
        model.fit(x[: 8 * BATCH], y[: 8 * BATCH], batch_size=BATCH, epochs=1, verbose=0)  # trace
        models[variant] = model
    carried = ride.read()[0] if ride is not None and ride.rode else []
    if len(carried) != len(published) or not all(math.isclose(a, b, rel_tol=1e-12) for a, b in zip(carried, published)):
        raise RuntimeError("the ride variant's steps carried no rows: nothing to measure")

    def run_one(variant: str, _round: int) -> tuple[float, float]:
        models[variant].fit(x, y, batch_size=BATCH, epochs=1, verbose=0, shuffle=False, callbacks=[clock])
        return clock.seconds() / (steps - 1), clock.cpu_seconds() / (steps - 1)

    measured = _ab.shuffled_rounds(VARIANTS, run_one, rounds, seed)
    per_step = {v: [wall for wall, _ in m] for v, m in measured.items()}
    cpu_per_step = {v: [cpu for _, cpu in m] for v, m in measured.items()}
    return {"rounds": rounds, "steps": steps, "replicas": 1, "per_step_sec": per_step, "cpu_per_step_sec": cpu_per_step}


def summarize(per_step: dict[str, list[float]]) -> dict[str, Any]:
    """Median seconds per step, and the paired differences' median and quartiles (µs per step, share of bare)."""
    bare = _stats.median(per_step["bare"])
    out: dict[str, Any] = {"median_step_sec": {v: _stats.median(s) for v, s in per_step.items()}}
    for name, (a, b) in {"probe_minus_bare": ("probe", "bare"), "ride_minus_probe": ("ride", "probe")}.items():
        diffs = [p - q for p, q in zip(per_step[a], per_step[b])]
        q1, med, q3 = statistics.quantiles(diffs, n=4) if len(diffs) > 1 else (diffs[0],) * 3
        out[name] = {"us_per_step": [1e6 * q1, 1e6 * med, 1e6 * q3], "share_of_bare": [q1 / bare, med / bare, q3 / bare]}
    return out


def main(argv: list[str] | None = None) -> None:
    parser = _cli.make_parser("python -m benchmarks.studies.ride_cost", __doc__.split("\n\n")[0], rounds=41)
    parser.add_argument("--steps", type=int, default=400, help="steps per variant and round (default 400)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    _cli.check_at_least(parser, args, rounds=1, steps=2)
    result = run(args.rounds, args.steps, args.seed)
    for key, label in (("per_step_sec", "wall"), ("cpu_per_step_sec", "process CPU")):
        result[f"summary_{key}"] = summary = summarize(result[key])
        for variant, sec in summary["median_step_sec"].items():
            print(f"{label}: {variant:>6}: {1e3 * sec:.3f} ms per step (median of {args.rounds} rounds)")
        for name in ("probe_minus_bare", "ride_minus_probe"):
            us, share = summary[name]["us_per_step"], summary[name]["share_of_bare"]
            print(
                f"{label}: {name}: {us[1]:+.1f} us per step ({100 * share[1]:+.2f}% of bare; "
                f"quartiles {us[0]:+.1f} to {us[2]:+.1f} us)"
            )
    if args.output:
        _cli.write_json(args.output, result)


if __name__ == "__main__":
    main()
