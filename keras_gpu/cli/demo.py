"""`keras-gpu demo`: train a small CNN on synthetic data with the strategy factory and the callbacks.

Needs no download. It shows the whole path a user takes: configure devices,
pick a strategy, add `keras_gpu.callbacks(...)` to `fit`, read the result
(the same summary as `keras-gpu report`) and open TensorBoard.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys

from keras_gpu.cli import UsageError

__all__ = ["add_parser", "build_model", "make_dataset", "run"]

_KINDS = ("auto", "default", "one_device", "mirrored", "multiworker")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "demo",
        help="train a small CNN on synthetic data with keras-gpu's strategy and callbacks",
        description=(
            "Train a small CNN on synthetic images (no download) with make_strategy() and "
            "keras_gpu.callbacks(), print a summary and the tensorboard command to run next."
        ),
    )
    p.add_argument("--strategy", default="auto", choices=_KINDS, help="strategy kind for make_strategy (default: auto)")
    p.add_argument(
        "--cpu-replicas", type=int, default=None, metavar="K",
        help="split the CPU into K logical devices, to try several replicas without a GPU",
    )
    p.add_argument("--workers", type=int, default=1, metavar="N", help="run N workers on this machine through `keras-gpu launch`")
    p.add_argument("--epochs", type=int, default=3, help="epochs to train (default: 3)")
    p.add_argument("--samples", type=int, default=6144, help="synthetic training samples (default: 6144)")
    p.add_argument("--batch-size", type=int, default=64, help="global batch size (default: 64)")
    p.add_argument("--log-dir", default=os.path.join("runs", "demo"), help="TensorBoard log directory (default: runs/demo)")
    p.add_argument(
        "--profile-every-s", type=float, default=None, metavar="S",
        help="seconds between step-time traces (default: 300, set, so that even the demo's short fit is traced; "
        "0: none)",
    )


def _positive(flag: str, value: int | None) -> None:
    if value is not None and value < 1:
        raise UsageError(f"{flag} must be >= 1. Received: {flag} {value}")


def run(args: argparse.Namespace) -> int:
    for flag, value in (("--cpu-replicas", args.cpu_replicas), ("--workers", args.workers), ("--epochs", args.epochs),
                        ("--samples", args.samples), ("--batch-size", args.batch_size)):
        _positive(flag, value)
    if args.profile_every_s is not None and not args.profile_every_s >= 0:
        raise UsageError(f"--profile-every-s must be >= 0. Received: --profile-every-s {args.profile_every_s}")
    if args.workers > 1 and "TF_CONFIG" not in os.environ:
        return _run_through_launch(args)
    return _train(args)


def _run_through_launch(args: argparse.Namespace) -> int:
    cmd = [sys.executable, "-m", "keras_gpu.cli", "launch", "-n", str(args.workers)]
    if args.cpu_replicas:
        cmd += ["--cpu-replicas", str(args.cpu_replicas)]
    cmd += [
        "-m", "keras_gpu.cli", "demo",
        "--strategy", args.strategy, "--epochs", str(args.epochs), "--samples", str(args.samples),
        "--batch-size", str(args.batch_size), "--log-dir", args.log_dir, "--workers", str(args.workers),
    ]
    if args.profile_every_s is not None:
        cmd += ["--profile-every-s", str(args.profile_every_s)]
    print(f"Launching {args.workers} workers: {shlex.join(cmd)}", flush=True)
    code = subprocess.call(cmd)
    if code == 0:
        _print_summary(args.log_dir)
        _print_next_steps(args.log_dir)
    return code


def make_dataset(samples: int, batch_size: int, seed: int = 0):
    """Synthetic 32x32 RGB images: each of 10 classes is a fixed pattern plus noise."""
    import numpy as np

    rng = np.random.default_rng(seed)
    templates = rng.normal(0.0, 1.0, size=(10, 32, 32, 3)).astype("float32")
    y = rng.integers(0, 10, size=samples).astype("int32")
    x = templates[y] + rng.normal(0.0, 2.0, size=(samples, 32, 32, 3)).astype("float32")
    return x, y


def build_model():
    """A small CNN (about 30k parameters)."""
    import keras

    return keras.Sequential(
        [
            keras.Input((32, 32, 3)),
            keras.layers.Conv2D(16, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(64, 3, activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(10),
        ],
        name="keras_gpu_demo_cnn",
    )


def _train(args: argparse.Namespace) -> int:
    import keras_gpu

    if args.cpu_replicas and args.workers == 1:
        keras_gpu.configure_devices(cpu_devices=args.cpu_replicas)
    import keras

    strategy = keras_gpu.make_strategy(args.strategy)
    x, y = make_dataset(args.samples, args.batch_size)
    with strategy.scope():
        model = build_model()
        model.compile(
            optimizer=keras.optimizers.Adam(1e-3),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
    chief = keras_gpu.is_chief(strategy)
    print(
        f"Training a small CNN on {args.samples} synthetic images with {type(strategy).__name__} "
        f"({strategy.num_replicas_in_sync} replica(s)); logs in {args.log_dir}",
        flush=True,
    )
    history = model.fit(
        x, y,
        batch_size=args.batch_size,
        epochs=args.epochs,
        # The demo shows every tag: it traces its short fit, which keras_gpu.callbacks() alone would not.
        callbacks=keras_gpu.callbacks(args.log_dir, profile_every_s=300.0 if args.profile_every_s is None
                                      else args.profile_every_s),
        verbose=1 if chief else 2,
    )
    losses = history.history["loss"]
    print(f"loss: {losses[0]:.4f} -> {losses[-1]:.4f}", flush=True)
    if chief and args.workers == 1:
        _print_summary(args.log_dir)
        _print_next_steps(args.log_dir)
    return 0


def _print_summary(log_dir: str) -> None:
    from keras_gpu.cli import report

    print()
    report.print_report(log_dir)


def _print_next_steps(log_dir: str) -> None:
    print("\nOpen the run in TensorBoard:\n")
    print(f"    tensorboard --logdir {shlex.quote(log_dir)}\n", flush=True)
