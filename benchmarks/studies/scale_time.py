"""Wall time of a whole `keras-gpu scale` study of a small MLP, and the table it gives.

```
python -m benchmarks.studies.scale_time                      # 1 and 2 logical CPUs (2 configurations)
python -m benchmarks.studies.scale_time --workers 1,2 --json scale_time.json
```

Runs `keras-gpu scale --replicas R --workers W --warmup 20 --steps 100 benchmarks/scale_mlp.py` in a
fresh process (the backend is `KERAS_BACKEND`'s) and reports the study's wall time from start to exit,
the number of configurations, and the rows. There is no timed test: this is the measure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks import _cli

REPO = Path(__file__).resolve().parents[2]
SCRIPT = str(REPO / "benchmarks" / "scale_mlp.py")


def study(replicas: str, workers: str, warmup: int, steps: int, script_steps: int) -> dict:
    """Run the study once; its wall time, exit status and rows."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    cmd = [sys.executable, "-m", "keras_gpu.cli", "scale", "--replicas", replicas, "--workers", workers,
           "--warmup", str(warmup), "--steps", str(steps), "--json", SCRIPT, "--steps", str(script_steps)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - start
    rows = json.loads(proc.stdout)["rows"] if proc.stdout.strip() else []
    return {"command": " ".join(["keras-gpu", *cmd[3:]]), "returncode": proc.returncode, "wall_sec": wall,
            "configurations": len(rows), "rows": rows, "stderr_tail": proc.stderr[-2000:] if proc.returncode else ""}


def main(argv: Sequence[str] | None = None) -> int:
    parser = _cli.make_parser(
        "python -m benchmarks.studies.scale_time", __doc__.split("\n\n", 1)[0], output="--json",
        output_help="also write the result to this file",
    )
    parser.add_argument("--replicas", default="1,2")
    parser.add_argument("--workers", default="1")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args(argv)
    result = study(args.replicas, args.workers, args.warmup, args.steps, args.warmup + args.steps + 20)
    from keras_gpu.output.scale_output import markdown_table

    print(f"{result['command']}\nwall time: {result['wall_sec']:.1f} s for {result['configurations']} "
          f"configuration(s), exit status {result['returncode']}\n")
    print(markdown_table([dict(r, devices=f"{r['replicas']}x{r['workers']}") for r in result["rows"]]))
    if result["returncode"]:
        print(result["stderr_tail"], file=sys.stderr)
    if args.json:
        _cli.write_json(args.json, result, indent=2)
    return 0 if result["returncode"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
