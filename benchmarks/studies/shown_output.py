"""The command outputs the documentation shows, run again and written where the pages include them.

Run from the repository root, in the environment of the output's backend::

    python -m benchmarks.studies.shown_output scale-tensorflow     # docs/outputs/scale-tensorflow.txt
    python -m benchmarks.studies.shown_output scale-jax            # with JAX installed (KERAS_BACKEND=jax is set)
    python -m benchmarks.studies.shown_output --list
    python -m benchmarks.studies.shown_output scale-tensorflow --output /tmp/fresh   # elsewhere, to compare

Each output is a command of keras-gpu run on this machine as a user runs it, at 80 columns (`COLUMNS=80`), its
standard output written whole to `docs/outputs/<name>.txt`, which the pages include (`--8<--`). Nothing is edited
by hand: a page that shows an output shows the file this script wrote. The command, its wall time and the machine
are in `docs/outputs/<name>.json`.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time

from benchmarks import _cli

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUTPUTS = os.path.join(REPO, "docs", "outputs")

#: Each shown output: the keras-gpu command's arguments (after `keras-gpu`), and the environment it runs in.
SHOWN = {
    "scale-tensorflow": (
        ["scale", "--replicas", "1,2", "--workers", "1,2", "benchmarks/scale_mlp.py", "--steps", "300"],
        {"KERAS_BACKEND": "tensorflow"},
    ),
    "scale-jax": (
        ["scale", "--replicas", "1,2", "--workers", "1,2", "benchmarks/scale_mlp.py", "--steps", "300"],
        {"KERAS_BACKEND": "jax"},
    ),
}


def capture(name: str, folder: str = OUTPUTS) -> dict:
    """Run the output `name`'s command and write its files to `folder` (see the module's text); returns what ran."""
    args, extra = SHOWN[name]
    env = dict(os.environ, COLUMNS="80", PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2", **extra)
    env.pop("TF_CONFIG", None)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "keras_gpu.cli", *args], capture_output=True, text=True, env=env,
                          cwd=REPO, check=False)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"`keras-gpu {' '.join(args)}` exited with {proc.returncode}:\n{proc.stderr[-3000:]}")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"{name}.txt"), "w", encoding="utf-8") as f:
        f.write(proc.stdout)
    about = {
        "command": " ".join(["COLUMNS=80", *(f"{k}={v}" for k, v in extra.items()), "keras-gpu", *args]),
        "wall_seconds": round(wall, 1),
        "machine": {"cores": os.cpu_count(), "load_average": [round(v, 1) for v in os.getloadavg()],
                    "python": platform.python_version()},
        "captured": time.strftime("%Y-%m-%d"),
    }
    _cli.write_json(os.path.join(folder, f"{name}.json"), about)
    return about


def main(argv: list[str] | None = None) -> None:
    """Capture the outputs named on the command line."""
    parser = _cli.make_parser("python -m benchmarks.studies.shown_output", __doc__.splitlines()[0],
                              output_help="the folder to write the outputs in (default: docs/outputs)")
    parser.add_argument("names", nargs="*", help=f"outputs to capture: {', '.join(SHOWN)}")
    parser.add_argument("--list", action="store_true", help="list the outputs and their commands")
    args = parser.parse_args(argv)
    if args.list or not args.names:
        for name, (command, extra) in SHOWN.items():
            print(f"{name}: {' '.join(f'{k}={v}' for k, v in extra.items())} keras-gpu {' '.join(command)}")
        return
    unknown = [n for n in args.names if n not in SHOWN]
    if unknown:
        parser.error(f"no shown output {unknown[0]!r}: use one of {', '.join(SHOWN)}. Received: {unknown[0]}")
    for name in args.names:
        print(json.dumps({name: capture(name, args.output or OUTPUTS)}, indent=1))


if __name__ == "__main__":
    main()
