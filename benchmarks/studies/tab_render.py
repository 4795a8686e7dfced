"""How long the keras-gpu tab takes to draw a log dir of 256 and of 1,024 workers in TensorBoard, in headless Chromium.

Run from the repository root (needs `tensorboard`, keras-gpu installed so that
TensorBoard finds the tab's entry point, and Chromium; no TensorFlow, no GPU):

```
python -m benchmarks.studies.tab_render                          # 256 and 1,024 workers, as keras_gpu.callbacks() logs them
python -m benchmarks.studies.tab_render --every-worker-minutes 10  # and every worker writing its own run (256)
```

Each log dir is what `benchmarks.studies.cluster_scale` writes for one hour
of a job of each of `--workers` workers of `--gpus-per-worker` GPUs at the
callbacks' defaults (only the chief writes a run above 16 workers), with the
chief's gathers judged from simulated rows where one worker is 20% slower in
compute (`benchmarks.studies.straggler_scale.judged_gathers`: the verdict,
the scores against the threshold, each gather's table of the slowest
workers). With `--every-worker-minutes M` a log dir of each size up to 256
workers has every worker's run (`per_worker_runs=True`) over M minutes, the
case that fills the tab's workers x gathers matrix. For each, it starts a real `tensorboard` on
127.0.0.1, waits until the tab is listed and TensorBoard has loaded every
run (so that its own loading does not share the CPU with the tab's read),
then loads the tab's page
(`/data/plugin_entry.html?name=keras_gpu`) in headless Chromium `--loads`
times and reports the milliseconds from navigation to the tab drawn (every
chart and table in the page; the page's own clock): the first load reads the
event files, later ones find them unchanged and are served from the plugin's
cache. It prints a table and writes JSON with `--output`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any

from benchmarks import _cli
from benchmarks.studies.cluster_scale import _free_port, simulate, stop

__all__ = ["main", "measure"]

_DRAWN = (
    "({ready: ['drawn', 'error'].includes(document.body.dataset.state), state: document.body.dataset.state, "
    "drawn_ms: window.kerasGpuDrawnAt, elements: document.querySelectorAll('*').length, "
    "svg: document.querySelectorAll('svg.chart').length})"
)


def _tensorboard(log_dir: str, timeout: float) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tensorboard.main", "--logdir", log_dir, "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"{base}/data/plugins_listing", timeout=30) as r:
                listing = json.loads(r.read())
            if "keras_gpu" not in listing:
                stop(proc)
                raise RuntimeError("TensorBoard lists no keras_gpu plugin: install keras-gpu (pip install -e .)")
            if listing["keras_gpu"]["enabled"]:
                return proc, base
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            stop(proc)
            raise RuntimeError(f"tensorboard did not list the keras-gpu tab within {timeout:.0f} s")
        time.sleep(0.2)


def _loaded(base: str, runs: int, timeout: float) -> None:
    """Wait until TensorBoard's scalars plugin lists `runs` runs."""
    deadline = time.monotonic() + timeout
    while True:
        with urllib.request.urlopen(f"{base}/data/plugin/scalars/tags", timeout=30) as r:
            if len(json.loads(r.read())) >= runs:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"tensorboard did not load {runs} runs within {timeout:.0f} s")
        time.sleep(0.5)


def measure(log_dir: str, runs: int, loads: int, chromium: str, timeout: float) -> dict[str, Any]:
    """Milliseconds from navigation to the tab drawn, for each of `loads` loads of the tab's page, and the
    load average (1 minute) before and after."""
    from tools.chromium import Browser

    proc, base = _tensorboard(log_dir, timeout)
    try:
        _loaded(base, runs, timeout)
        load_before = os.getloadavg()[0]
        with tempfile.TemporaryDirectory() as profile, Browser(chromium, profile, width=840, height=1200) as browser:
            times, state = [], {}
            for _ in range(loads):
                browser.open(f"{base}/data/plugin_entry.html?name=keras_gpu", timeout)
                state = browser.wait_until(_DRAWN, timeout, "the keras-gpu tab", settle=0.0, interval=0.05)
                if state["state"] != "drawn":
                    raise RuntimeError(f"the tab did not draw: {state}")
                times.append(state["drawn_ms"])
        return {"drawn_ms": times, "elements": state["elements"], "charts": state["svg"],
                "load_average": [load_before, os.getloadavg()[0]]}
    finally:
        stop(proc)


#: The largest job whose every-worker case is measured: TensorBoard holds about 250 runs.
EVERY_WORKER_MAX = 256


def main(argv: list[str] | None = None) -> int:
    parser = _cli.make_parser("python -m benchmarks.studies.tab_render", __doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[256, 1024], help="job sizes, in workers")
    parser.add_argument("--gpus-per-worker", type=int, default=8)
    parser.add_argument("--every-worker-minutes", type=float, default=0.0,
                        help=f"also a log dir with every worker's run over this many minutes, for each size up to "
                        f"{EVERY_WORKER_MAX} workers (0: not)")
    parser.add_argument("--loads", type=int, default=3, help="loads of the tab per log dir (the first reads the files)")
    parser.add_argument("--chromium", help="the Chromium executable (default: chromium on PATH)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for TensorBoard and the tab")
    args = parser.parse_args(argv)
    _cli.check_at_least(parser, args, loads=1)
    if min(args.workers) < 2:
        parser.error(f"--workers must be at least 2. Received: --workers {min(args.workers)}")
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    from tools.chromium import find_chromium

    chromium = find_chromium(args.chromium)
    cases = []
    for n in args.workers:
        default = "chief only, 1 hour" if n > 16 else "every worker, 1 hour"  # the callbacks' default
        cases.append((n, default, lambda d, n=n: simulate(d, n, args.gpus_per_worker, all_runs=False, straggler=n // 2 + 1)))
    if args.every_worker_minutes > 0:
        seconds = int(60 * args.every_worker_minutes)
        cases += [(n, f"every worker, {args.every_worker_minutes:g} min",
                   lambda d, n=n: simulate(d, n, 1, all_runs=True, seconds=seconds, straggler=n // 2 + 1))
                  for n in args.workers if 16 < n <= EVERY_WORKER_MAX]
    results = []
    for workers, name, write in cases:
        log_dir = tempfile.mkdtemp(prefix="keras-gpu-tab-")
        try:
            written = write(os.path.join(log_dir, "job"))
            measured = measure(log_dir, len(written["runs"]), args.loads, chromium, args.timeout)
        finally:
            shutil.rmtree(log_dir, ignore_errors=True)
        row = {"case": name, "workers": workers, "runs": len(written["runs"]), "points": written["points"],
               "bytes": written["bytes"], **measured}
        results.append(row)
        first, rest = measured["drawn_ms"][0], measured["drawn_ms"][1:]
        print(
            f"{workers:5,} workers, {name:>22}: {row['runs']:4d} run(s), {row['points']:>10,} points, "
            f"{row['bytes'] / 2**20:7.1f} MiB: tab drawn in {first:,.0f} ms (files read)"
            + (f", then {', '.join(f'{t:,.0f}' for t in rest)} ms (cached)" if rest else "")
            + f"; {measured['charts']} charts, {measured['elements']:,} elements; load average "
            + " -> ".join(f"{v:.1f}" for v in measured["load_average"]),
            flush=True,
        )
    if args.output:
        _cli.write_json(args.output, {"workers": args.workers, "gpus_per_worker": args.gpus_per_worker,
                                      "results": results}, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
