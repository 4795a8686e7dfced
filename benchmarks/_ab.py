"""Wall-clock A/B of whole `fit` calls, with Keras' batch dispatch checked in both arms.

On backends whose `IS_THREAD_SAFE` is true (JAX, PyTorch), Keras runs
batch-end hooks on a thread pool (asynchronous dispatch) unless one callback
overrides `on_train_batch_end`/`on_batch_end` without `async_safe = True`;
then every step waits for its result on the training thread. A timing
callback in the bare arm would make that arm synchronous too and hide the
cost of the measured arm's switch. So these A/Bs time each whole `fit` with
`time.perf_counter()` outside it, with `verbose=0` (Keras' progress bar is
synchronous), and record for each arm whether Keras' `CallbackList` built
from its callbacks dispatches asynchronously.

`python -m benchmarks._ab OUT.json [--pairs N] [--steps N]` runs the default
`keras_gpu.callbacks()` against a bare arm on the backend `KERAS_BACKEND`
names, and writes :func:`dispatch_ab`'s result (used by
`python -m benchmarks.overhead --async-ab`).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks import _cli
from benchmarks._stats import describe, median

__all__ = ["async_dispatch", "dispatch_ab", "interleaved_pairs", "main", "mlp", "shuffled_rounds", "time_fit"]


def async_dispatch(callbacks: Sequence[Any], model: Any) -> bool:
    """Whether Keras dispatches batch-end hooks of `callbacks` asynchronously in a `fit` of `model`.

    The same `CallbackList` a `verbose=0` fit builds (plus its `History`,
    which is asynchronous-safe); always false on TensorFlow, whose backend is
    not thread-safe for it.
    """
    import keras

    return bool(keras.callbacks.CallbackList(list(callbacks), add_history=True, model=model)._async_train)


def time_fit(model: Any, x: Any, y: Any, *, batch_size: int, callbacks: Sequence[Any], epochs: int = 1) -> float:
    """Seconds of one `model.fit(..., verbose=0)`, by `time.perf_counter()` outside it."""
    t0 = time.perf_counter()
    model.fit(x, y, batch_size=batch_size, epochs=epochs, verbose=0, callbacks=list(callbacks))
    return time.perf_counter() - t0


def interleaved_pairs(arm_a: Callable[[], float], arm_b: Callable[[], float], pairs: int) -> dict[str, Any]:
    """Run `pairs` A/B pairs, the order alternating, and summarise them.

    Args:
        arm_a: Runs the measured arm once; returns its seconds.
        arm_b: Runs the reference (bare) arm once; returns its seconds.
        pairs: How many pairs.

    Returns:
        `{"a_s", "b_s"}` (the raw times), `"ratios"` (a / b - 1 per pair),
        `"slowdown"` (their `describe`: median, quartiles, range), and
        `"difference_of_medians_s"` (median(a) - median(b)).
    """
    if pairs < 1:
        raise ValueError(f"`pairs` must be at least 1. Received: pairs={pairs!r}")
    a_s, b_s = [], []
    for i in range(pairs):
        if i % 2 == 0:
            a_s.append(arm_a())
            b_s.append(arm_b())
        else:
            b_s.append(arm_b())
            a_s.append(arm_a())
    ratios = [a / b - 1.0 for a, b in zip(a_s, b_s)]
    return {
        "a_s": a_s,
        "b_s": b_s,
        "ratios": ratios,
        "slowdown": describe(ratios),
        "difference_of_medians_s": median(a_s) - median(b_s),
    }


def shuffled_rounds(
    variants: Sequence[str], run_one: Callable[[str, int], Any], rounds: int, seed: int = 0
) -> dict[str, list[Any]]:
    """Run every variant once per round, in a new random order each round (`random.Random(seed)`).

    Args:
        variants: The variants' names.
        run_one: Called as `run_one(variant, round)`; returns that run's measurement.
        rounds: How many rounds.
        seed: Seed of the orders.

    Returns:
        `{variant: [measurement of each round]}`, in round order.
    """
    import random

    if rounds < 1:
        raise ValueError(f"`rounds` must be at least 1. Received: rounds={rounds!r}")
    out: dict[str, list[Any]] = {v: [] for v in variants}
    order = list(variants)
    rng = random.Random(seed)
    for n in range(rounds):
        rng.shuffle(order)
        for variant in order:
            out[variant].append(run_one(variant, n))
    return out


def mlp(widths: Sequence[int], *, seed: int = 0, dropout: float = 0.0) -> Any:
    """A compiled ReLU MLP (SGD, MSE) of the given layer widths; `dropout` after each hidden layer where > 0."""
    import keras

    keras.utils.set_random_seed(seed)
    layers = [keras.Input((widths[0],))]
    for w in widths[1:-1]:
        layers.append(keras.layers.Dense(w, activation="relu"))
        if dropout > 0:
            layers.append(keras.layers.Dropout(dropout))
    layers += [keras.layers.Dense(widths[-1], dtype="float32")]
    model = keras.Sequential(layers)
    model.compile(keras.optimizers.SGD(1e-4), "mse")
    return model


def mlp_data(widths: Sequence[int], samples: int, *, seed: int = 0) -> tuple[Any, Any]:
    """Standard-normal `(x, y)` float32 arrays of `samples` rows for an :func:`mlp` of these widths."""
    import numpy as np

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((samples, widths[0]), dtype=np.float32)
    y = rng.standard_normal((samples, widths[-1]), dtype=np.float32)
    return x, y


def dispatch_ab(
    log_root: str,
    *,
    pairs: int,
    steps: int,
    widths: Sequence[int] = (32, 256, 256, 10),
    batch: int = 64,
    make_callbacks: Callable[[str], list[Any]] | None = None,
    fresh: bool = False,
) -> dict[str, Any]:
    """Interleaved whole-fit A/B: `make_callbacks(log_dir)` (default `keras_gpu.callbacks`) against no callback.

    Both arms fit the same compiled model for one epoch of `steps` steps,
    `verbose=0`, timed outside `fit`; one unmeasured fit of each arm comes
    first (compilation, first-use costs, the callbacks' first trace). The
    measured arm reuses the same callback instances in every fit (the
    steady cost), or with `fresh` gets new ones (a new log directory) every
    fit (each fit's one-off cost included). The bare arm has no callback at
    all, so its dispatch is Keras' own.

    Returns:
        :func:`interleaved_pairs`' result with `"a"` the callbacks' arm, plus
        `"async_dispatch": {"callbacks": bool, "bare": bool}`, `"fresh"`, `"backend"`,
        `"steps"`, `"batch"`, `"widths"` and `"step_ms_bare"` (the bare
        arm's median seconds per step, in ms).
    """
    import keras

    if make_callbacks is None:
        import keras_gpu

        make_callbacks = keras_gpu.callbacks
    model = mlp(widths)
    x, y = mlp_data(widths, batch * steps, seed=1)
    count = iter(range(1_000_000))
    dispatch: dict[str, bool] = {}
    reused = make_callbacks(os.path.join(log_root, "run"))

    def with_callbacks() -> float:
        callbacks = make_callbacks(os.path.join(log_root, f"fit{next(count)}")) if fresh else reused
        dispatch["callbacks"] = async_dispatch(callbacks, model)
        return time_fit(model, x, y, batch_size=batch, callbacks=callbacks)

    def bare() -> float:
        dispatch["bare"] = async_dispatch([], model)
        return time_fit(model, x, y, batch_size=batch, callbacks=[])

    bare()
    with_callbacks()
    result = interleaved_pairs(with_callbacks, bare, pairs)
    result.update(
        backend=keras.backend.backend(),
        fresh=fresh,
        async_dispatch=dict(dispatch),
        steps=steps,
        batch=batch,
        widths=list(widths),
        step_ms_bare=1e3 * median(result["b_s"]) / steps,
    )
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m benchmarks._ab OUT.json [--pairs N] [--steps N]`: the default set's dispatch A/B, as JSON."""
    parser = _cli.make_parser("python -m benchmarks._ab", main.__doc__, output=None, pairs=5)
    parser.add_argument("out", help="path of the JSON result")
    parser.add_argument("--steps", type=int, default=2000, help="steps per fit (default 2000)")
    args = parser.parse_args(argv)
    _cli.check_at_least(parser, args, pairs=1, steps=1)
    with tempfile.TemporaryDirectory(prefix="keras_gpu_ab_") as tmp:
        result = dispatch_ab(tmp, pairs=args.pairs, steps=args.steps)
    _cli.write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
