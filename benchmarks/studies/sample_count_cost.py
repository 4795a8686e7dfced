"""What counting samples costs where the input does not say its batch size: an interleaved A/B on the 1 ms MLP.

Run from the repository root (one backend per run; `KERAS_BACKEND` picks it)::

    python -m benchmarks.studies.sample_count_cost                # 9 rounds of 3 variants, 400 steps each
    python -m benchmarks.studies.sample_count_cost --rounds 5 --steps 200 --output cost.json

The model and batch are `mlp-1` of :mod:`benchmarks._workload` (batch 64).
The input has no static batch size: on TensorFlow a `tf.data` pipeline
batched with `.batch(64)` (a dynamic batch dimension), on JAX and PyTorch a
generator. Three variants train in every round, in a new random order each
round, each on its own model (traced once, before the rounds):

* `none`: no callback;
* `given`: `ThroughputLogger(batch_size=64)`: the batch size from the user,
  nothing counted;
* `counted`: `ThroughputLogger()`: the samples counted (TensorFlow: Keras'
  own count, read from its loss tracker once per window; JAX and PyTorch:
  the batches counted on the host).

On TensorFlow two more variants compare the ways to count inside the step
(`--variants` picks any subset):

* `probe`: `ThroughputLogger()` made to use the counting step probe (one
  integer add of (1, batch size) per replica, what a model with its own
  `train_step` gets);
* `scatter`: the same probe with the scatter of float64 values into its
  per-replica rows that it used before (kept here as the reference).

Each variant's round is one epoch of `--steps` steps; its steady time runs
from the end of the first batch to the end of the last (a timestamp
callback placed last). The counting's direct cost is the median over rounds
of `counted - given` (the same logger, with and without the count) as a share
of the median `given` epoch, and likewise for `probe` and `scatter`;
`given - none` is the logger's own cost. The process CPU time over the same
interval is compared the same way: on a machine shared with other work it
moves less than the wall time (waiting for a core is not counted). It
reports; it never fails because a budget is missed. On a machine shared with
other work the spread across rounds is printed beside the medians.
"""

from __future__ import annotations

import tempfile
from typing import Any

from benchmarks import _ab, _cli, _stats

BATCH = 64
VARIANTS = ("none", "given", "counted")
TF_VARIANTS = (*VARIANTS, "probe", "scatter")
COUNTING = ("counted", "probe", "scatter")



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


def _scatter_step(probe: Any, original: Any, data: Any) -> Any:
    """The counting probe's step as it was: a scatter of (1.0, batch size) as float64 into this replica's row."""
    import tensorflow as tf

    from keras_gpu.hooks import step_probe as sp

    r = sp._local_replica(probe.local_replicas)
    values = tf.stack([tf.constant(1.0, tf.float64), tf.cast(sp._batch_size(data), tf.float64)])
    indices = tf.stack([tf.fill([2], r), tf.constant([sp._F["steps"], sp._F["samples"]], tf.int32)], axis=1)
    probe._sums.scatter_nd_add(indices, values)
    return original(data)


def probe_only_logger_class() -> type:
    """`ThroughputLogger` counting with the step probe only, never Keras' own count (what `probe` and `scatter` run).

    It installs the probe itself (`install_probe(model, probe_only=True)`)
    and asks for the probe's counter (`choose_counter(..., probe_only=True)`):
    a model with its own `train_step` gets this count from the package.
    """
    from keras_gpu.hooks import throughput_setup
    from keras_gpu.hooks.factory import ThroughputLogger

    class ProbeOnlyThroughputLogger(ThroughputLogger):
        def set_model(self, model):
            super(ThroughputLogger, self).set_model(model)  # the base's, without ThroughputLogger's own choice
            if self.batch_size is None:
                throughput_setup.install_probe(model, probe_only=True)

        def _counter(self, data=None):
            task = self._task
            workers = max(1, task.num_workers) if task is not None else 1
            return throughput_setup.choose_counter(self.model, data, workers=workers, probe_only=True)

    return ProbeOnlyThroughputLogger


def run(rounds: int, steps: int, seed: int = 0, variants: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Interleaved rounds of the variants; seconds of each variant's steady epoch, per round."""
    import functools

    import keras

    from benchmarks._instrument import SteadyClock
    from benchmarks._workload import build_model, setup_replicas
    from keras_gpu.hooks import step_probe
    from keras_gpu.hooks.factory import ThroughputLogger

    tf_backend = keras.backend.backend() == "tensorflow"
    variants = tuple(variants or (TF_VARIANTS if tf_backend else VARIANTS))
    unknown = [v for v in variants if v not in (TF_VARIANTS if tf_backend else VARIANTS)]
    if unknown or "given" not in variants:
        raise ValueError(
            f"`variants` must include 'given' and name only {TF_VARIANTS if tf_backend else VARIANTS}. "
            f"Received: variants={variants!r}"
        )
    probe_only = probe_only_logger_class()
    strategy = setup_replicas(1) if tf_backend else None
    data = _data(steps, seed)
    log_root = tempfile.mkdtemp(prefix="keras-gpu-count-cost-")

    def callbacks(variant: str, n: int) -> list[Any]:
        if variant == "none":
            return []
        size = {"batch_size": BATCH} if variant == "given" else {}
        cls = probe_only if variant in ("probe", "scatter") else ThroughputLogger
        return [cls(f"{log_root}/{variant}_{n}", **size)]

    models: dict[str, Any] = {}
    for variant in variants:  # trace each model's train function once, outside the rounds
        models[variant] = model = _model(build_model, strategy, seed)
        if variant == "scatter":
            probe = step_probe.install(model, 1, timing=False)
            probe._counted_step = functools.partial(_scatter_step, probe)
            probe._timed = True  # its counts are in the per-replica rows
        model.fit(epochs=1, verbose=0, callbacks=callbacks(variant, -1), **data())

    def run_one(variant: str, n: int) -> tuple[float, float]:
        clock = SteadyClock()
        models[variant].fit(epochs=1, verbose=0, callbacks=[*callbacks(variant, n), clock], **data())
        return clock.seconds(), clock.cpu_seconds()

    measured = _ab.shuffled_rounds(variants, run_one, rounds, seed)
    times = {v: [wall for wall, _ in m] for v, m in measured.items()}
    cpu = {v: [c for _, c in m] for v, m in measured.items()}
    med = {v: _stats.median(t) for v, t in times.items()}
    cpu_med = {v: _stats.median(t) for v, t in cpu.items()}
    cost: dict[str, Any] = {}
    for variant in (v for v in COUNTING if v in variants):
        paired = [c - g for c, g in zip(times[variant], times["given"])]
        cpu_paired = [c - g for c, g in zip(cpu[variant], cpu["given"])]
        cost[variant] = {
            "share": _stats.median(paired) / med["given"],
            "spread": [min(paired) / med["given"], max(paired) / med["given"]],
            "us_per_step": 1e6 * _stats.median(paired) / max(1, steps - 1),
            "cpu_share": _stats.median(cpu_paired) / cpu_med["given"],
            "cpu_us_per_step": 1e6 * _stats.median(cpu_paired) / max(1, steps - 1),
        }
    out = {
        "backend": keras.backend.backend(),
        "rounds": rounds,
        "steps": steps,
        "seconds": times,
        "cpu_seconds": cpu,
        "median_sec": med,
        "median_cpu_sec": cpu_med,
        "step_ms": {v: 1e3 * s / max(1, steps - 1) for v, s in med.items()},
        "cost": cost,
        "logger_cost_share": (med["given"] - med["none"]) / med["none"] if "none" in med else None,
    }
    if "counted" in cost:
        out["count_cost_share"] = cost["counted"]["share"]
        out["count_cost_share_spread"] = cost["counted"]["spread"]
    return out


def _model(build_model: Any, strategy: Any, seed: int) -> Any:
    if strategy is not None:
        return build_model("mlp", strategy, seed)
    import contextlib

    class _Scope:
        def scope(self) -> Any:
            return contextlib.nullcontext()

    return build_model("mlp", _Scope(), seed)


def main(argv: list[str] | None = None) -> int:
    parser = _cli.make_parser("python -m benchmarks.studies.sample_count_cost", __doc__.splitlines()[0], rounds=9)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument(
        "--variants", default=None, help="comma-separated subset (must include given); default: all of this backend"
    )
    args = parser.parse_args(argv)
    _cli.check_at_least(parser, args, rounds=1, steps=2)
    variants = tuple(args.variants.split(",")) if args.variants else None
    result = run(args.rounds, args.steps, variants=variants)
    ms = result["step_ms"]
    steps = ", ".join(f"{v} {t:.3f} ms" for v, t in ms.items())
    print(f"{result['backend']}: {result['rounds']} rounds of {result['steps']} steps; median step {steps}")
    for variant, c in result["cost"].items():
        lo, hi = c["spread"]
        print(
            f"  {variant}: counting costs {100 * c['share']:+.2f}% of the epoch ({c['us_per_step']:+.1f} us/step; "
            f"paired rounds {100 * lo:+.2f}% .. {100 * hi:+.2f}%), {100 * c['cpu_share']:+.2f}% of its process CPU "
            f"time ({c['cpu_us_per_step']:+.1f} us/step)"
        )
    if result["logger_cost_share"] is not None:
        print(f"  the logger itself (given - none): {100 * result['logger_cost_share']:+.2f}%")
    if args.output:
        _cli.write_json(args.output, result, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
