"""`keras-gpu scale`: the speed-up table of the user's own model, with the reason each row falls short of linear.

```
keras-gpu scale --replicas 1,2 --workers 1,2 train.py --epochs 3
keras-gpu scale --replicas 1,2,4 --cpu --json -m mypackage.train
```

The script runs unchanged once per configuration (every worker count with
every replica count), on TensorFlow or JAX (`KERAS_BACKEND`; on PyTorch it
refuses with one line); see `keras_gpu.cli._study_run` for how a
configuration is run (the runner `keras-gpu tune` shares) and
`keras_gpu.hooks.scale_window` for what is measured in it,
`keras_gpu.meters.scale_table` for speed-up and efficiency,
`keras_gpu.meters.run_spread` for the run-to-run spread and the rule, and
`keras_gpu.meters.scale_cause` for the cause.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from keras_gpu.cli import UsageError
from keras_gpu.cli._study_run import Config, ScaleError, available_gpus, check_devices, run_config
from keras_gpu.meters.run_spread import measured_spread
from keras_gpu.meters.scale_table import RunResult, build_rows

__all__ = ["DEFAULT_STEPS", "DEFAULT_WARMUP", "add_parser", "count_option", "gpu_name", "parse_list", "render", "run"]

DEFAULT_WARMUP = 20
"""Training steps before the measured window, by default."""
DEFAULT_STEPS = 100
"""Training steps in the measured window, by default."""
DEFAULT_HANG_TIMEOUT_S = 300.0
"""Seconds without a finished batch after which a run is stopped, by default."""
_MAX_COUNT = 4096


def parse_list(text: str, name: str) -> list[int]:
    """`"1,2,4"` as `[1, 2, 4]`: positive integers, each once.

    Raises:
        argparse.ArgumentTypeError: Anything else, echoing `text`.
    """
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        values = []
    if not values or any(not 1 <= v <= _MAX_COUNT for v in values) or len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(
            f"must be a comma-separated list of distinct positive integers, e.g. 1,2,4. Received: {name} {text}"
        )
    return values


def count_option(name: str, minimum: int) -> Any:
    """An argparse `type` for the option `name`: an integer of at least `minimum`, refused naming the option."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be an integer >= {minimum}. Received: {name} {text}")
        return value

    return parse


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0. Received: --hang-timeout {text}")
    return value


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register `keras-gpu scale`."""
    parser = subparsers.add_parser(
        "scale",
        help="the speed-up table of a training script over replicas and workers, with the cause of each shortfall",
        usage=(
            "%(prog)s [--replicas 1,2,4] [--workers 1,2] [--cpu] [--warmup W] [--steps N] [--hang-timeout SECONDS] "
            "[--log-dir DIR] [--json] (SCRIPT | -m MODULE) [ARGS ...]"
        ),
        description=(
            "Run a training script unchanged once per configuration (each --workers count with each --replicas "
            "count), stop each run after W warm-up and N measured training steps, and print one row per "
            "configuration: samples/s over the measured steps, speed-up against the first row, efficiency, and the "
            "step's parts (input, compute, communication or, on one replica, the optimizer update, other; on JAX "
            "input, the compiled step as device, other), which add up to the step. The first configuration runs "
            "again at the end: its run-to-run spread decides the cause, the part that grew most where it grew by "
            "more than the spread. Rows with more than one replica also get the all-reduce of a gradient-sized "
            "buffer over the same devices, alone, as nccl-tests' bus bandwidth. The script must build its model "
            "under keras_gpu.make_strategy()."
        ),
        epilog=(
            "Replicas are the first GPUs (worker i gets GPUs i*k..i*k+k-1), or on a machine without a GPU k logical "
            "CPUs per worker as `keras-gpu launch --cpu-replicas` makes them; a pair that needs more devices than "
            "the machine has is left out. Workers are local processes on loopback, as `keras-gpu launch` starts them. The scripts' output goes to stderr. Exit status: 0 when "
            "every configuration was measured; 1 when one could not be (the rows measured so far are printed)."
        ),
    )
    parser.add_argument("--replicas", type=lambda t: parse_list(t, "--replicas"), default=[1], metavar="LIST",
                        help="replicas per worker, comma-separated (default: 1)")
    parser.add_argument("--workers", type=lambda t: parse_list(t, "--workers"), default=[1], metavar="LIST",
                        help="local worker processes, comma-separated (default: 1)")
    parser.add_argument("--cpu", action="store_true",
                        help="on a GPU machine, add a row of one worker with every GPU hidden (GPU vs CPU)")
    parser.add_argument("--warmup", type=count_option("--warmup", 0), default=DEFAULT_WARMUP, metavar="W",
                        help=f"training steps before the measured window (default: {DEFAULT_WARMUP})")
    parser.add_argument("--steps", type=count_option("--steps", 1), default=DEFAULT_STEPS, metavar="N",
                        help=f"training steps measured (default: {DEFAULT_STEPS}); the script must train W + N steps")
    parser.add_argument("--hang-timeout", type=_seconds, default=DEFAULT_HANG_TIMEOUT_S, metavar="SECONDS",
                        help=("stop a run whose workers inside fit/evaluate/predict finish no batch for this long, "
                              f"as `keras-gpu launch --hang-timeout` (default: {DEFAULT_HANG_TIMEOUT_S:g}; 0: off)"))
    parser.add_argument("--log-dir", default=None, metavar="DIR",
                        help="also write the study as a TensorBoard run, DIR/scale (`keras-gpu report DIR` shows it)")
    parser.add_argument("--json", action="store_true", help='print {"rows": [...]} as JSON instead of the table')
    parser.add_argument("-m", dest="module", nargs=argparse.REMAINDER, default=None, metavar="MODULE",
                        help="run a module as `python -m MODULE` instead of a script")
    parser.add_argument("target", nargs=argparse.REMAINDER, metavar="SCRIPT [ARGS]", help="the script and its arguments")


def run(args: argparse.Namespace) -> int:
    """Run the study and print its table; returns 0, or 1 when a configuration could not be measured."""
    target, is_module, script_args = _target(args)
    _check_backend()
    gpu_ids = available_gpus()
    try:
        pairs = check_devices(args.workers, args.replicas, len(gpu_ids), os.cpu_count() or 1)
    except ScaleError as exc:
        raise UsageError(str(exc)) from None
    skipped = [(w, r) for w in args.workers for r in args.replicas if (w, r) not in pairs]
    for w, r in skipped:
        sys.stderr.write(f"keras-gpu scale: leaving out {w} worker(s) x {r} replica(s): the machine has fewer "
                         "devices\n")
    gpus = bool(gpu_ids)
    configs = [Config(w, r, r if gpus else 0) for w, r in pairs]
    if args.cpu and gpus:
        configs.append(Config(1, 1, 0, hide_gpus=True))
    elif args.cpu:
        sys.stderr.write("keras-gpu scale: --cpu adds no row: this machine has no GPU to hide, so every row "
                         "already runs on the CPU\n")
    device = gpu_name(gpu_ids) if gpus else "CPU"
    # The baseline runs again after the other rows: its spread says how far a row may vary by chance.
    results, repeat, error = _measure([*configs, configs[0]], args, target, is_module, script_args, gpu_ids, device)
    # Both baseline runs and their halves; the first run's halves alone where the repeat did not run.
    spread = measured_spread([results[0], *([repeat] if repeat else [])]) if results else None
    rows = build_rows(results, spread)
    labels = [r.label for r in results]
    if args.log_dir and rows:
        from keras_gpu.output.scale_output import write_log_dir

        write_log_dir(args.log_dir, rows, labels, spread)
    if args.json:
        out: dict[str, Any] = {"rows": [r.as_dict() for r in rows], "baseline_spread": spread}
        if error:
            out["error"] = error
        print(json.dumps(out, indent=2))
    else:
        render([dict(r.as_dict(), devices=label) for r, label in zip(rows, labels)])
    if error:
        sys.stderr.write(f"keras-gpu scale: error: {error}\n")
        return 1
    return 0


def _measure(
    configs: list[Config], args: argparse.Namespace, target: str, is_module: bool, script_args: list[str],
    gpu_ids: list[str], device: str,
) -> tuple[list[RunResult], RunResult | None, str | None]:
    """Run each configuration (the last is the baseline's repeat); returns the rows, the repeat and an error."""
    results: list[RunResult] = []
    for n, config in enumerate(configs):
        again = n == len(configs) - 1
        sys.stderr.write(f"keras-gpu scale: measuring {config.workers} worker(s) x {config.replicas} replica(s) "
                         f"({config.label}){' again, for the run-to-run spread' if again else ''}\n")
        try:
            result = run_config(config, target, script_args, is_module, args.warmup, args.steps, gpu_ids,
                                args.hang_timeout, device).result
        except ScaleError as exc:
            return results, None, str(exc)
        if again:
            return results, result, None
        results.append(result)
    return results, None, None


def _check_backend() -> None:
    """Refuse Keras' PyTorch backend (and any but TensorFlow and JAX) with one line, before any run.

    Raises:
        UsageError: The backend the script will run on, with the fix.
    """
    from keras_gpu.core import backend

    chosen = backend.selected()
    if chosen not in ("tensorflow", "jax"):
        raise UsageError(
            f"the study needs Keras' TensorFlow or JAX backend (keras_gpu.make_strategy() spreads the model over "
            f"replicas there), not {chosen!r}: set KERAS_BACKEND=jax or KERAS_BACKEND=tensorflow (`keras-gpu tune` "
            f"measures the fixes on every backend). Received: KERAS_BACKEND={chosen}"
        )


def gpu_name(gpu_ids: list[str]) -> str:
    """NVML's name of the first GPU of `gpu_ids` (e.g. `"NVIDIA H200"`), or `"GPU"` where NVML does not say."""
    from keras_gpu.core import nvml_session

    if not gpu_ids or not gpu_ids[0].isdigit():
        return "GPU"
    handle = nvml_session.handle(int(gpu_ids[0]))
    name = None if handle is None else nvml_session.text(nvml_session.call("nvmlDeviceGetName", handle, quiet=True))
    return name or "GPU"


def _target(args: argparse.Namespace) -> tuple[str, bool, list[str]]:
    """`(script or module, is_module, arguments)`, checked as `keras-gpu launch` checks them."""
    from keras_gpu.cli import launch

    if args.module is None and not [t for t in args.target if t != "--"]:
        raise UsageError("no script given: use `keras-gpu scale [options] script.py [args...]` or `-m MODULE`.")
    return launch.resolve_target(args)


def render(rows: list[dict[str, Any]], console: Any = None, title: str = "keras-gpu scale") -> None:
    """Print rows (each with `devices` and the JSON row's keys) as two narrow tables and the causes below them.

    The first table has the rates (samples/s, speed-up, efficiency, step), the
    second the step's parts, so that both stay legible at 80 columns; numbers
    are never cut (a header wraps instead). `--json`, `keras-gpu report --json`
    and TensorBoard have every key.
    """
    from rich.console import Console

    from keras_gpu.output.scale_output import PART_HEADERS, RATE_HEADERS

    console = console or Console()
    if not rows:
        console.print(f"{title}: no configuration was measured")
        return
    console.print(_table(title, RATE_HEADERS, rows, console.width))
    parts = [(k, name) for k, name in PART_HEADERS if any(r.get(k) is not None for r in rows)]
    if parts:
        console.print(_table("the step's parts, ms per step (they add up to the step)", parts, rows, console.width))
    for i, row in enumerate(rows, 1):
        console.print(f"{i}. {row.get('cause', '-')}", highlight=False)


def _table(title: str, columns: Any, rows: list[dict[str, Any]], width: int) -> Any:
    """A rich table of `columns` (`(key, header)`) for `width` columns: numbered rows, whole numbers."""
    from rich.table import Table

    from keras_gpu.output.scale_output import format_cell

    def cell(key: str, row: dict[str, Any]) -> str:
        if key == "workers_x_replicas":
            return f"{row.get('workers')} x {row.get('replicas')}"
        return format_cell(key, row.get(key))

    cells = [[cell(key, row) for key, _ in columns] for row in rows]
    columns = [("#", "#"), *columns]
    cells = [[str(i), *c] for i, c in enumerate(cells, 1)]
    whole = [max(len(name), *(len(c[n]) for c in cells)) for n, (_, name) in enumerate(columns)]
    # Narrowest without cutting a number: a header wraps at its spaces, a devices label between its words.
    narrow = [
        max(*(len(w) for w in name.split()), *(len(w) for c in cells for w in (c[n].split() if key == "devices"
                                                                               else [c[n]])))
        for n, (key, name) in enumerate(columns)
    ]
    fits = sum(whole) + 3 * len(columns) + 1 <= width
    table = Table(title=title, title_justify="left")
    for n, (key, name) in enumerate(columns):
        table.add_column(name, justify="left" if key == "devices" else "right", overflow="fold",
                         width=None if fits else narrow[n])
    for row_cells in cells:
        table.add_row(*row_cells)
    return table
