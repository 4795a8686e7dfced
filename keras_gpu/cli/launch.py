"""`keras-gpu launch`: run N local copies of a script as one multi-worker job (TensorFlow or JAX).

```
keras-gpu launch -n 2 train.py --epochs 3
keras-gpu launch -n 2 --cpu-replicas 2 -m mypackage.train --epochs 3
```

Each worker is `python train.py ...` (or `python -m module ...`) in its own
process group, with these environment variables set:

- `TF_CONFIG`: `{"cluster": {"worker": ["127.0.0.1:p0", ...]}, "task":
  {"type": "worker", "index": i}}` on free loopback ports, which
  `keras_gpu.make_strategy()` and `tf.distribute.MultiWorkerMirroredStrategy`
  read;
- `KERAS_DISTRIBUTION_JOB_ADDRESSES` (the same addresses, comma-separated),
  `KERAS_DISTRIBUTION_NUM_PROCESSES` (`N`) and `KERAS_DISTRIBUTION_PROCESS_ID`
  (`i`), which `keras.distribution.initialize()` reads when called without
  arguments: on Keras' JAX backend, worker 0 is the coordinator of
  `jax.distributed` (`keras_gpu.make_strategy()` reads TF_CONFIG to the same
  effect);
- `KERAS_GPU_WORKER_INDEX`: the worker's rank `i` (0 is the chief);
- `KERAS_GPU_NUM_WORKERS`: the number of workers `N`;
- `KERAS_GPU_RESTART_COUNT`: how many times the job was restarted before this
  attempt (0 on the first one), and `KERAS_GPU_MAX_RESTARTS`: `--max-restarts`;
- `PYTHONUNBUFFERED=1` (unless already set), so output arrives line by line.

Every line a worker writes to stdout or stderr is echoed to the launcher's
stdout or stderr with a `[worker i] ` prefix; lines are never mixed.

The job fails as a whole: when one worker exits non-zero or is killed, the
others get SIGTERM, then SIGKILL after `--grace-period` seconds, and the
launcher exits with that worker's status (`128 + signal` for a signal). Each
stopped worker's end is logged too. TensorFlow's coordination service (and
JAX's preemption service) catches SIGTERM in a multi-worker process, so a
worker blocked in a collective on a dead peer is ended by that SIGKILL: a
failed job always ends within about `--grace-period` seconds. A worker whose
script raised is not left waiting in JAX's exit-time `jax.distributed`
shutdown for its blocked peers: the bootstrap ends it half a
`--grace-period` after the failure, with the script's exit status.

With `--max-restarts R` a failed job is restarted as a whole, up to `R` times
(like `torchrun --max-restarts`): every worker is stopped, then all `N` are
started again on new free ports with `KERAS_GPU_RESTART_COUNT` raised by one.
Training resumes where the script makes it (e.g. with
`keras_gpu.BackupAndRestore`, which one worker writes; Keras' own races
when several workers write it); the launcher exits 0 as soon as one
attempt succeeds, and with the last failure's status when none did. A
SIGINT, SIGTERM or SIGHUP to the launcher is forwarded to every worker's
process group with the same escalation, and the launcher exits with
`128 + signal`. Processes a worker started in its process group are stopped
with it, and any still running when the job ends are killed. On Linux each
worker also gets SIGKILL when the launcher dies, even by SIGKILL, so no worker
outlives it (processes the worker started are then its own business).

Every worker starts through the bootstrap `keras_gpu.cli._worker`, which
splits its CPU (`--cpu-replicas`), runs the script as `__main__`, and stays
behind as a small supervisor process: TensorFlow's coordination service
catches and ignores SIGTERM in a multi-worker process (and holds Python's
interpreter lock while it waits for peers), so the supervisor ends a worker
that is still running half a `--grace-period` after the signal, and ends by
that signal itself. A worker that ignores the signal (SIG_IGN) is left to the
SIGKILL after `--grace-period`.

With `--hang-timeout SECONDS` (off by default), a job whose workers stop
making progress is ended too. Each worker gets `KERAS_GPU_PROGRESS_FILE`, a
file of its own, and the bootstrap adds a `keras_gpu.Heartbeat` to every
`fit`, `evaluate` and `predict` of the script, whatever callbacks it passes
(see `keras_gpu.hooks.progress`): a daemon thread keeps the file up to date with
the number of finished batches and the call, epoch and batch the worker is
in. When a worker inside `fit`, `evaluate` or `predict` finishes no batch for
SECONDS, the launcher logs which workers stopped progressing and where each
was (e.g. `worker 1 stuck in fit, epoch 2, after batch 17`, then its main
thread's frame), stops every worker (SIGTERM, SIGKILL after
`--grace-period`) and exits with 124, or restarts the job when
`--max-restarts` allows. A worker stuck in Python, in its input pipeline, in
a native call (a profiler stop that never returns) or in a collective waiting
for such a peer is caught this way, where TensorFlow's coordination service
only notices a process that stopped answering altogether. While no worker
has entered `fit`, `evaluate` or `predict` (start-up, data loading, a custom
training loop) nothing is judged, and the launcher says so while the job
runs, `max(2 * SECONDS, 10)` seconds after the start.

`WorkerGroup` holds the process management on its own, so that the restart
loop starts a fresh group for every attempt. This module parses and checks
the command line; the workers' command and environment, the process group,
the hang watch and the supervisor loop live in the private
`keras_gpu.cli._launch_*` modules, and their public names are importable from
here.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable
from pathlib import Path

from keras_gpu.cli import UsageError
from keras_gpu.cli._launch_env import (
    ENV_MAX_RESTARTS,
    ENV_NUM_WORKERS,
    ENV_RESTART_COUNT,
    ENV_WORKER_INDEX,
    free_loopback_ports,
    worker_command,
    worker_env,
)
from keras_gpu.cli._launch_hang import EXIT_HANG, HangWatch
from keras_gpu.cli._launch_supervisor import supervise
from keras_gpu.cli._launch_workers import WorkerExit, WorkerGroup
from keras_gpu.core.backend import require_tensorflow
from keras_gpu.core.log import logger

__all__ = [
    "ENV_MAX_RESTARTS",
    "ENV_NUM_WORKERS",
    "ENV_RESTART_COUNT",
    "ENV_WORKER_INDEX",
    "EXIT_HANG",
    "HangWatch",
    "WorkerExit",
    "WorkerGroup",
    "add_parser",
    "free_loopback_ports",
    "resolve_target",
    "run",
    "worker_command",
    "worker_env",
]

_MAX_WORKERS = 1024  # one machine; more would exhaust its processes and loopback ports
_MAX_CPU_REPLICAS = 4096  # configure_devices' bound on logical devices
_MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


# --------------------------------------------------------------------------- CLI


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register `keras-gpu launch`."""
    parser = subparsers.add_parser(
        "launch",
        help="run N local workers of a script as one multi-worker job",
        usage=(
            "%(prog)s -n N [--cpu-replicas K] [--grace-period SECONDS] [--max-restarts R] [--hang-timeout SECONDS] "
            "(SCRIPT | -m MODULE) [ARGS ...]"
        ),
        description=(
            "Start N worker processes of a Python script (or `-m module`) on this machine, each with its "
            "own TF_CONFIG on free 127.0.0.1 ports, and stop all of them when one fails (restarting them all "
            f"up to --max-restarts times). Workers also get {ENV_WORKER_INDEX} (their rank), {ENV_NUM_WORKERS} "
            f"(N), {ENV_RESTART_COUNT} (restarts so far) and {ENV_MAX_RESTARTS} in their environment."
        ),
        epilog=(
            "Everything after the script (or the module name) is passed to the workers unchanged. "
            "Each worker's output lines are prefixed with `[worker i]`. When a worker fails the others are "
            "stopped and the exit status is that worker's (128 + signal if a signal killed it), unless restarts "
            "are left; SIGINT or SIGTERM to the launcher is forwarded to all workers, never restarts them, and "
            f"gives 128 + signal; {EXIT_HANG} means --hang-timeout ended the job; 0 means every worker of one "
            "attempt exited 0."
        ),
    )
    parser.add_argument(
        "-n",
        "--nproc",
        type=_int_at_least(1, "-n", _MAX_WORKERS),
        required=True,
        metavar="N",
        help=f"number of workers (1 to {_MAX_WORKERS})",
    )
    parser.add_argument(
        "--cpu-replicas",
        type=_int_at_least(1, "--cpu-replicas", _MAX_CPU_REPLICAS),
        default=None,
        metavar="K",
        help="split each worker's CPU into K logical devices before the script runs",
    )
    parser.add_argument(
        "--grace-period",
        type=_float_at_least(0.0, "--grace-period"),
        default=5.0,
        metavar="SECONDS",
        help="how long stopped workers get after SIGTERM (or the forwarded signal) before SIGKILL (default: 5)",
    )
    parser.add_argument(
        "--max-restarts",
        type=_int_at_least(0, "--max-restarts"),
        default=0,
        metavar="R",
        help=(
            "when a worker fails, stop every worker and start all of them again on new ports, at most R times "
            f"(default: 0); workers read the attempt number from {ENV_RESTART_COUNT} and resume from their own "
            "checkpoints, e.g. keras_gpu.BackupAndRestore (Keras' own races in multi-worker jobs)"
        ),
    )
    parser.add_argument(
        "--hang-timeout",
        type=_float_at_least(0.0, "--hang-timeout"),
        default=0.0,
        metavar="SECONDS",
        help=(
            "end the job when a worker inside fit/evaluate/predict finishes no batch for this long, naming it "
            f"(exit status {EXIT_HANG}; restarts count it as a failure); every fit, evaluate and predict of the "
            "workers reports its batches, whatever callbacks the script passes. Default: 0, off. Make it longer "
            "than the slowest step plus any epoch-end work (validation, checkpoints)"
        ),
    )
    parser.add_argument(
        "-m",
        dest="module",
        nargs=argparse.REMAINDER,
        default=None,
        metavar="MODULE",
        help="run a module as `python -m MODULE` instead of a script",
    )
    parser.add_argument("target", nargs=argparse.REMAINDER, metavar="SCRIPT [ARGS]", help="the script and its arguments")


def run(args: argparse.Namespace) -> int:
    """Run `keras-gpu launch` and return its exit status."""
    if os.environ.get("KERAS_BACKEND", "tensorflow").strip() in ("", "tensorflow"):  # JAX workers need no TensorFlow
        require_tensorflow("keras-gpu launch", also_on_jax=True)
    target, is_module, script_args = resolve_target(args)
    n = args.nproc
    max_restarts = getattr(args, "max_restarts", 0)
    hang_timeout = getattr(args, "hang_timeout", 0.0) or None
    command = worker_command(target, script_args, module=is_module, cpu_replicas=args.cpu_replicas)
    if os.environ.get("TF_CONFIG", "").strip():
        logger.warning("TF_CONFIG is set in the environment; each worker gets its own TF_CONFIG instead.")
    return supervise(command, n, max_restarts, args.grace_period, hang_timeout)


def resolve_target(args: argparse.Namespace) -> tuple[str, bool, list[str]]:
    """Return `(script or module, is_module, arguments)` from the parsed command line (`launch` and `scale`)."""
    target = list(args.target)
    if target and target[0] == "--":
        target = target[1:]
    if args.module is not None:  # `-m` takes the rest of the command line, so `target` is empty here
        if not args.module:
            raise UsageError("`-m` needs a module name, e.g. `keras-gpu launch -n 2 -m mypackage.train`.")
        name, *rest = args.module
        if not _MODULE_NAME.match(name):
            raise UsageError(f"`-m` needs a dotted module name like `mypackage.train`. Received: -m {name!r}")
        return name, True, rest
    if not target:
        raise UsageError("no script given: use `keras-gpu launch -n N script.py [args...]` or `-m MODULE`.")
    script, *rest = target
    if script.startswith("-"):
        raise UsageError(f"unknown option {script!r}; options go before the script. Received: {script!r}")
    if not Path(script).exists():
        raise UsageError(f"the script does not exist (looked in {os.getcwd()}). Received: script={script!r}")
    return script, False, rest


def _int_at_least(minimum: int, name: str, maximum: int | None = None) -> Callable[[str], int]:
    bounds = f">= {minimum}" if maximum is None else f"from {minimum} to {maximum}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer {bounds}. Received: {name}={text}") from None
        if value < minimum or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"must be an integer {bounds}. Received: {name}={text}")
        return value

    return parse


def _float_at_least(minimum: float, name: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not value >= minimum or value == float("inf"):
            raise argparse.ArgumentTypeError(f"must be a finite number >= {minimum:g}. Received: {name}={text}")
        return value

    return parse
