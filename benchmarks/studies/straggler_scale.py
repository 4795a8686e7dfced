"""How the straggler rule holds from 2 to 4,096 workers: false alarms and detections on simulated fits.

Run from the repository root (numpy, and tensorboard for the report's part; no GPU)::

    python -m benchmarks.studies.straggler_scale --output docs/benchmarks/straggler-scale-cpu-2core.json
    python -m benchmarks.studies.straggler_scale --quick            # sizes up to 1,024, fewer fits
    python -m benchmarks.studies.straggler_scale --measured /tmp/straggler_rule   # noise from your own jobs

Each simulated fit has 8 gathers of every worker's row (`ROW_FIELDS`), judged
by keras-gpu's own code: `summarize_rows` per gather and `verdict_over` per
fit, exactly as the chief judges a real job, and, beside it, by the rule
this one replaced (the slowest worker, an imbalance above 10% and an excess
of twice the others' range, in most gathers). The noise models
(`noise_models`):

* `reference`: 10 ms of busy time per step (compute 70%, input 10%, host
  20%), 3% normal noise per window, busy 80% of the step;
* `cpu-loopback`: measured on this repository's 2-core machine, from
  balanced two-worker jobs on loopback (`python -m
  benchmarks.studies.straggler_rule`'s `measure` jobs: 3 jobs, 18
  gathers): each worker's busy time per window deviates from the gather's
  median by 3.7% (standard deviation), its parts and its share of the step
  are those jobs' medians (`--measured DIR` derives them again from your
  own jobs);
* `gpu-trace`: the recorded multi-GPU trace
  (`tests/data/gpu_multi_worker.xplane.pb`, read by keras-gpu's own trace
  reader): the parts of its one step (input, compute, host), and the noise
  between devices from its two GPUs' compute (14.83 and 14.87 ms: 0.19%
  per device);
* `slower-nodes`: `reference` where each worker's node is also persistently
  2% faster or slower (normal), as in a cluster of unequal machines.

Every model adds transient hiccups: each worker, in each gather, with chance
0.5%, spends 20-100% more of its busy time on the host (a pause, a noisy
neighbour) for that window only. A straggler is one worker (at random)
with 10%, 20% or 50% more busy time in one part in every gather; an
intermittent one has 50% more compute in 3 or 5 of the 8 gathers. A
detection counts where the verdict names that worker with that part.

It prints, per model and job size, the balanced fits that named anyone
(false alarms), the gathers where any worker stood out, the detections, and
the smallest straggler found in 90% of fits (the rule's limit at that
size); it times `summarize_rows` on one gather, and `keras-gpu report` on a
log directory of a simulated 1,024-worker fit (the chief's run, and with
`--report-runs` one run per worker too). `--output` writes it all as JSON.
It reports; it never fails.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import statistics
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from benchmarks import _cli
from keras_gpu.meters import cluster_view

__all__ = ["NoiseModel", "judged_gathers", "main", "noise_models", "simulate_fit", "write_log_dir"]

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPU_TRACE = os.path.join(REPO, "tests", "data", "gpu_multi_worker.xplane.pb")
SIZES = (2, 4, 8, 16, 64, 256, 1024, 4096)
GATHERS = 8
EXTRAS = (0.1, 0.2, 0.3, 0.5)
#: Gathers of 8 an intermittent straggler is slow in: fewer than half, and more.
INTERMITTENT = (3, 5)
HICCUP_RATE, HICCUP = 0.005, (0.2, 1.0)
#: A detection rate the limits count as found.
FOUND = 0.9
_P = {part: i for i, part in enumerate(cluster_view.PARTS)}


@dataclass(frozen=True)
class NoiseModel:
    """How balanced workers' rows vary, and where the figures come from.

    Attributes:
        name: The model's name.
        busy_sec: A worker's busy time per step.
        shares: The busy time's parts, in `cluster_view.PARTS` order (they sum to 1).
        noise: Relative standard deviation of a worker's busy time per window.
        busy_over_step: Busy time over the step time of a balanced job (the rest is the wait in the collectives).
        nodes: Relative standard deviation of each worker's persistent offset.
        source: Where the figures come from.
    """

    name: str
    busy_sec: float
    shares: tuple[float, float, float]
    noise: float
    busy_over_step: float
    nodes: float = 0.0
    source: str = ""


# Measured on this repository's 2-core machine (2026-11-28): 3 balanced two-worker loopback jobs of
# `python -m benchmarks.studies.straggler_rule` (18 gathers, 36 rows).
_CPU_LOOPBACK = NoiseModel(
    "cpu-loopback", 0.0094, (0.449, 0.231, 0.320), 0.037, 0.479,
    source="balanced two-worker loopback jobs on a shared 2-core machine (straggler_rule's measure jobs: 3 jobs, "
    "18 gathers): the rows' relative deviation from each gather's median, their parts and busy share (medians)",
)


def _gpu_trace_model() -> NoiseModel:
    """The parts and the device-to-device noise of the recorded multi-GPU trace, read by keras-gpu's trace reader."""
    from keras_gpu.meters import step_time, xspace

    space = xspace.load(GPU_TRACE)
    st = step_time.analyze(space, steps=1, wall_sec=0.02131, num_replicas=2, gpu_replicas={4: 0, 6: 1})
    compute = [d.compute_sec for d in st.devices]
    parts = (st.compute_sec, st.input_sec, st.host_sec)
    busy = sum(parts)
    return NoiseModel(
        "gpu-trace", busy, tuple(p / busy for p in parts), abs(compute[0] - compute[1]) / math.sqrt(2) / statistics.mean(compute),
        min(1.0, busy / st.step_sec),
        source=f"tests/data/gpu_multi_worker.xplane.pb: one BERT step of {1e3 * st.step_sec:.2f} ms, compute of its two GPUs "
        f"{', '.join(f'{1e3 * c:.2f}' for c in compute)} ms (their difference over sqrt(2): the noise per device), "
        f"input {1e3 * st.input_sec:.2f} ms and host {1e3 * st.host_sec:.2f} ms",
    )


def measured_model(directory: str) -> NoiseModel:
    """`cpu-loopback` from your own balanced two-worker jobs (`straggler_rule --dir DIR`: its `n2-*/w0.json`)."""
    import json

    deviations, parts, shares = [], [], []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name, "w0.json")
        if not (name.startswith("n2-") and os.path.exists(path)):
            continue
        with open(path) as f:
            for view in json.load(f)["cluster"]:
                rows = list((view or {}).get("rows", {}).values())
                busy = np.array([r["busy_sec"] for r in rows])
                if len(busy) < 2:
                    continue
                deviations += list(busy / np.median(busy) - 1)
                parts += [[r["compute_sec"], r["input_sec"], r["other_sec"]] for r in rows]
                shares += [r["busy_sec"] / r["step_sec"] for r in rows]
    if not deviations:
        raise SystemExit(f"--measured: no balanced two-worker job (n2-*/w0.json) under {directory!r}")
    mean_parts = np.nanmedian(np.array(parts), axis=0)
    return replace(
        _CPU_LOOPBACK, busy_sec=float(np.sum(mean_parts)), shares=tuple(mean_parts / mean_parts.sum()),
        noise=float(np.std(deviations)), busy_over_step=float(np.median(shares)),
        source=f"balanced two-worker jobs under {directory} ({len(deviations)} rows)",
    )


def noise_models(measured: str | None = None) -> list[NoiseModel]:
    """The models of the module's docstring (`cpu-loopback` from `measured` jobs where given)."""
    reference = NoiseModel(
        "reference", 0.010, (0.7, 0.1, 0.2), 0.03, 0.8, source="10 ms busy, 3% normal noise per window (synthetic)",
    )
    try:
        gpu = _gpu_trace_model()
    except Exception as exc:  # noqa: BLE001 - a study without the trace still runs its other models
        print(f"gpu-trace model left out: {type(exc).__name__}: {exc}")
        gpu = None
    models = [reference, measured_model(measured) if measured else _CPU_LOOPBACK]
    models += [gpu] if gpu is not None else []
    models.append(replace(reference, name="slower-nodes", nodes=0.02, source="reference, each node 2% faster or "
                          "slower for the whole fit (normal, synthetic)"))
    return models


def simulate_fit(
    rng: np.random.Generator,
    model: NoiseModel,
    workers: int,
    gathers: int = GATHERS,
    straggler: tuple[int, float, str, frozenset[int] | None] | None = None,
) -> list[np.ndarray]:
    """One fit's gathers: per gather, every worker's row (`ROW_FIELDS`) as an `(workers, 9)` array.

    Args:
        rng: The random stream.
        model: The balanced workers' noise.
        workers: Workers in the job.
        gathers: Gathers in the fit.
        straggler: `(worker, extra share of its busy time, part, gathers it is slow in or None for all)`.
    """
    base = model.busy_sec * np.asarray(model.shares)
    node = 1.0 + model.nodes * rng.standard_normal(workers)
    wait = model.busy_sec * (1.0 / model.busy_over_step - 1.0)
    out = []
    for g in range(gathers):
        parts = base[None, :] * (node * (1.0 + model.noise * rng.standard_normal(workers)))[:, None]
        hiccup = np.flatnonzero(rng.random(workers) < HICCUP_RATE)
        parts[hiccup, _P["host"]] += model.busy_sec * rng.uniform(*HICCUP, hiccup.size)
        if straggler is not None and (straggler[3] is None or g in straggler[3]):
            worker, extra, part, _ = straggler
            parts[worker, _P[part]] += extra * model.busy_sec
        parts = np.maximum(parts, 0.0)
        busy = parts.sum(axis=1)
        step = busy.max() + wait  # everyone waits for the slowest
        rows = np.empty((workers, len(cluster_view.ROW_FIELDS)))
        rows[:, 0], rows[:, 1] = 1.0, step
        rows[:, 2], rows[:, 3], rows[:, 5] = parts[:, _P["input"]], parts[:, _P["compute"]], parts[:, _P["host"]]
        rows[:, 4], rows[:, 6], rows[:, 7], rows[:, 8] = step - busy, busy, 100.0, 1000.0
        out.append(rows)
    return out


def _judge(fit: list[np.ndarray]) -> tuple[cluster_view.Verdict, int]:
    """keras-gpu's verdict over the fit, and the gathers where some worker stood out."""
    best: dict[int, float] = {}
    gathers = [cluster_view.summarize_rows(rows, best) for rows in fit]
    return cluster_view.verdict_over(gathers), sum(bool(g.outliers) for g in gathers)


def _old_rule(fit: list[np.ndarray]) -> tuple[int | None, str | None]:
    """The rule this one replaced: the slowest worker, imbalance > 10% and excess > 2x the others' range, in most gathers."""
    clear = []
    for rows in fit:
        busy = rows[:, 6]
        k = int(np.argmax(busy))
        others = np.delete(np.arange(len(busy)), k)
        if not others.size:
            continue
        excess = busy[k] - np.median(busy[others])
        spread = np.ptp(busy[others])
        if excess / rows[k, 1] > 0.1 and excess > 2.0 * spread:
            cols = rows[:, [3, 2, 5]]
            part = cluster_view.PARTS[int(np.argmax(cols[k] - np.median(cols[others], axis=0)))]
            clear.append((k, part))
    if not clear:
        return None, None
    k, count = Counter(w for w, _ in clear).most_common(1)[0]
    if count * 2 <= len(fit):
        return None, None
    return k, Counter(p for w, p in clear if w == k).most_common(1)[0][0]


def _cell(rng: np.random.Generator, model: NoiseModel, workers: int, fits: int, slow: tuple | None) -> dict[str, Any]:
    """`fits` fits of one case: how often the verdict named the straggler with its part, or anyone."""
    named = right = out_gathers = old_named = old_right = 0
    for _ in range(fits):
        straggler = None
        if slow is not None:
            extra, part, during = slow
            worker = int(rng.integers(workers))
            active = None if during is None else frozenset(rng.choice(GATHERS, during, replace=False).tolist())
            straggler = (worker, extra, part, active)
        fit = simulate_fit(rng, model, workers, straggler=straggler)
        verdict, outs = _judge(fit)
        out_gathers += outs
        named += verdict.straggler is not None
        old = _old_rule(fit)
        old_named += old[0] is not None
        if straggler is not None:
            right += (verdict.straggler, verdict.part) == (straggler[0], straggler[2])
            old_right += old == (straggler[0], straggler[2])
    return {"fits": fits, "named": named, "right": right, "gathers_out": out_gathers, "gathers": fits * GATHERS,
            "old_named": old_named, "old_right": old_right}


def _fits_at(fits: int, workers: int) -> int:
    """Fewer fits for the largest jobs (each gather there judges thousands of rows)."""
    return max(20, min(fits, fits * 256 // workers))


def study(models: list[NoiseModel], sizes: tuple[int, ...], fits: int, seed: int) -> list[dict[str, Any]]:
    """Every model, size and case: balanced, each straggler, the intermittent ones."""
    results = []
    for model in models:
        for workers in sizes:
            rng = np.random.default_rng([seed, workers, sum(map(ord, model.name))])
            n = _fits_at(fits, workers)
            entry: dict[str, Any] = {"model": model.name, "workers": workers,
                                     "balanced": _cell(rng, model, workers, 2 * n, None), "stragglers": {}}
            for extra in EXTRAS:
                for part in cluster_view.PARTS:
                    entry["stragglers"][f"{part}+{extra:.0%}"] = _cell(rng, model, workers, n, (extra, part, None))
            for during in INTERMITTENT:
                entry["stragglers"][f"compute+50% in {during} of {GATHERS}"] = _cell(
                    rng, model, workers, n, (0.5, "compute", during))
            results.append(entry)
            _print_row(entry)
    return results


def _rate(cell: dict[str, Any], key: str = "right") -> float:
    return cell[key] / cell["fits"]


def _print_header(model: NoiseModel) -> None:
    shares = ", ".join(f"{p} {s:.0%}" for p, s in zip(cluster_view.PARTS, model.shares))
    print(f"\n{model.name}: busy {1e3 * model.busy_sec:.1f} ms per step ({shares}), {model.noise:.2%} noise per window, "
          f"busy {model.busy_over_step:.0%} of the step" + (f", nodes +-{model.nodes:.0%}" if model.nodes else ""))
    print(f"  source: {model.source}")
    print("  workers  fits  false alarms  gathers out   compute/input/host found: +10%        +20%         +50%"
          "      intermittent 3/8, 5/8 | old rule: false alarms, compute +20%")


def _print_row(entry: dict[str, Any]) -> None:
    b, s = entry["balanced"], entry["stragglers"]

    def three(extra: float) -> str:
        return "/".join(f"{_rate(s[f'{p}+{extra:.0%}']):.0%}" for p in cluster_view.PARTS)

    inter = ", ".join(f"{_rate(s[f'compute+50% in {d} of {GATHERS}'], 'named'):.0%}" for d in INTERMITTENT)
    print(f"  {entry['workers']:>7}  {b['fits']:>4}  {b['named']:>5} ({_rate(b, 'named'):>4.0%})  "
          f"{b['gathers_out'] / b['gathers']:>8.1%}    {three(0.1):>13}  {three(0.2):>13}  {three(0.5):>13}  "
          f"{inter:>10} | {b['old_named']}, {_rate(s['compute+20%'], 'old_right'):.0%}", flush=True)


def limits(results: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """Per model and size: the smallest straggler found with its part in `FOUND` of fits, in every part."""
    out: dict[str, dict[str, str]] = {}
    for entry in results:
        found = next((f"+{e:.0%}" for e in EXTRAS if all(
            _rate(entry["stragglers"][f"{p}+{e:.0%}"]) >= FOUND for p in cluster_view.PARTS)), f"> +{EXTRAS[-1]:.0%}")
        out.setdefault(entry["model"], {})[str(entry["workers"])] = found
    return out


def markdown(result: dict[str, Any], model: str = "reference") -> str:
    """The docs' tables of a result (`--output`'s JSON): one model's false alarms and detections per size (the
    worst part; an intermittent straggler slow in 5 of 8 gathers; the old rule's +20% in compute), then the
    smallest straggler found per model and size."""
    rows = [r for r in result["results"] if r["model"] == model]
    extras = sorted({float(k.split("+")[1].rstrip("%")) / 100 for r in rows for k in r["stragglers"] if " in " not in k})
    head = ["workers", "false alarms"] + [f"+{e:.0%}" for e in extras]
    head += [f"slow in {INTERMITTENT[-1]} of {GATHERS}", "old rule: +20%"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        b, s = r["balanced"], r["stragglers"]
        found = [min(_rate(s[f"{p}+{e:.0%}"]) for p in cluster_view.PARTS) for e in extras]
        inter = _rate(s[f"compute+50% in {INTERMITTENT[-1]} of {GATHERS}"], "named")
        cells = [f"{r['workers']:,}", f"{b['named']} of {b['fits']}", *(f"{f:.0%}" for f in found), f"{inter:.0%}",
                 f"{_rate(s['compute+20%'], 'old_right'):.0%}"]
        lines.append("| " + " | ".join(cells) + " |")
    sizes = sorted({r["workers"] for r in result["results"]})
    lines += ["", "| model | " + " | ".join(f"{n:,}" for n in sizes) + " |", "|---|" + "---|" * len(sizes)]
    for name, per_size in result["limits"].items():
        lines.append(f"| {name} | " + " | ".join(per_size.get(str(n), "-") for n in sizes) + " |")
    return "\n".join(lines)


def time_judge(sizes: tuple[int, ...], repeats: int = 30) -> dict[str, dict[str, float]]:
    """Milliseconds to judge one gather (`summarize_rows` on rows as an all-gather returns them: lists), and
    `verdict_over` a fit of 120 gathers (an hour at one gather every 30 s): medians of `repeats`."""
    rng = np.random.default_rng(0)
    model = noise_models()[0]
    out = {}
    for workers in sizes:
        fit = simulate_fit(rng, model, workers, gathers=1)
        rows = fit[0].tolist()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            gather = cluster_view.summarize_rows(rows, {})
            times.append(time.perf_counter() - start)
        gathers = [gather] * 120
        verdict = []
        for _ in range(repeats):
            start = time.perf_counter()
            cluster_view.verdict_over(gathers)
            verdict.append(time.perf_counter() - start)
        out[str(workers)] = {"summarize_rows_ms": 1e3 * statistics.median(times), "min_ms": 1e3 * min(times),
                             "verdict_over_120_gathers_ms": 1e3 * statistics.median(verdict)}
        print(f"  {workers:>5} workers: summarize_rows {out[str(workers)]['summarize_rows_ms']:.2f} ms "
              f"(fastest {out[str(workers)]['min_ms']:.2f} ms); verdict_over of 120 gathers "
              f"{out[str(workers)]['verdict_over_120_gathers_ms']:.2f} ms", flush=True)
    return out


def judged_gathers(workers: int, straggler: int, gathers: int = GATHERS, seed: int = 0) -> tuple[list[dict[str, Any]], str]:
    """The chief's view of each gather of a simulated `workers`-worker fit, as `StepTimeLogger` logs it.

    The `reference` model with a +20% compute straggler on worker `straggler`,
    judged by `summarize_rows` and `verdict_over` as the chief judges it.

    Returns:
        Per gather, `{"scalars": its cluster/* scalars, "table": its
        cluster/slowest_workers Markdown}`; and the fit's verdict sentence.
    """
    from keras_gpu.output.cluster_text import slowest_markdown
    from keras_gpu.output.step_time_tags import cluster_values

    rng = np.random.default_rng(seed)
    fit = simulate_fit(rng, noise_models()[0], workers, gathers, straggler=(straggler, 0.2, "compute", None))
    best: dict[int, float] = {}
    summaries, out = [], []
    for rows in fit:
        summaries.append(cluster_view.summarize_rows(rows, best))
        out.append({"scalars": cluster_values(summaries[-1], cluster_view.verdict_over(summaries)),
                    "table": slowest_markdown(summaries[-1].slowest)})
    return out, cluster_view.verdict_over(summaries).sentence


def write_log_dir(log_dir: str, workers: int, straggler: int, gathers: int = GATHERS, worker_runs: bool = False,
                  seed: int = 0) -> None:
    """What the chief (and, with `worker_runs`, every worker) of a `workers`-worker fit logs, its gathers simulated.

    The `reference` model with a +20% compute straggler on worker `straggler`
    (`judged_gathers`); the chief's run holds the `cluster/*` tags, the slowest
    workers' tables and the verdict as `StepTimeLogger` writes them, and each
    run a throughput series.
    """
    from keras_gpu.output import tags
    from keras_gpu.output import writer as _writer

    judged, sentence = judged_gathers(workers, straggler, gathers, seed)
    chief = _writer.SummaryWriter(os.path.join(log_dir, "train"))
    for g, gather in enumerate(judged):
        step = 100 * (g + 1)
        chief.scalars({**gather["scalars"], tags.SAMPLES_PER_SEC.name(): 6400.0, tags.STEPS_PER_SEC.name(): 50.0}, step)
        chief.text(tags.CLUSTER_SLOWEST_WORKERS.name(), gather["table"], step)
    chief.text(tags.CLUSTER_VERDICT.name(), sentence, 100 * gathers)
    chief.close()
    if worker_runs:
        for k in range(1, workers):
            w = _writer.SummaryWriter(os.path.join(log_dir, f"worker_{k}", "train"))
            for g in range(gathers):
                w.scalars({tags.SAMPLES_PER_SEC.name(): 6400.0, tags.STEPS_PER_SEC.name(): 50.0}, 100 * (g + 1))
            w.close()


def time_report(workers: int, worker_runs: bool) -> dict[str, Any]:
    """Seconds for `keras-gpu report` (read and render) on a simulated `workers`-worker log directory, and its lines."""
    from keras_gpu.cli.report import render
    from keras_gpu.output.reader import read_report

    with tempfile.TemporaryDirectory() as log_dir:
        start = time.perf_counter()
        write_log_dir(log_dir, workers, straggler=workers // 2 + 1, worker_runs=worker_runs)
        written = time.perf_counter() - start
        start = time.perf_counter()
        report = read_report(log_dir)
        read = time.perf_counter() - start
        from rich.console import Console

        buffer = io.StringIO()
        start = time.perf_counter()
        with contextlib.redirect_stdout(buffer):
            render(report, Console(file=buffer, width=140))
        rendered = time.perf_counter() - start
    text = buffer.getvalue()
    result = {"workers": workers, "worker_runs": worker_runs, "write_s": written, "read_s": read, "render_s": rendered,
              "lines": len(text.splitlines()), "names_straggler": f"worker {workers // 2 + 1} is the straggler" in text}
    print(f"  report of a {workers}-worker log dir ({'every worker a run' if worker_runs else 'the chief only'}): "
          f"read {read:.2f} s, rendered {rendered:.2f} s, {result['lines']} lines, straggler named: "
          f"{result['names_straggler']}", flush=True)
    return result


def main(argv: list[str] | None = None) -> None:
    parser = _cli.make_parser(
        "python -m benchmarks.studies.straggler_scale", __doc__.splitlines()[0],
        quick="sizes up to 1,024 and 20 fits per case",
    )
    parser.add_argument("--fits", type=int, default=100, help="fits per straggler case (balanced: twice; fewer above "
                        "256 workers)")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="job sizes, in workers")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--measured", default=None, help="derive cpu-loopback from these straggler_rule jobs")
    parser.add_argument("--report-runs", action="store_true", help="also time the report with one run per worker")
    parser.add_argument("--markdown", metavar="JSON", default=None,
                        help="print the docs' tables of a result written by --output, and run nothing")
    args = parser.parse_args(argv)
    _cli.check_at_least(parser, args, fits=1)
    if args.markdown:
        import json

        with open(args.markdown, encoding="utf-8") as f:
            print(markdown(json.load(f)))
        return
    sizes = tuple(s for s in args.sizes if not args.quick or s <= 1024)
    fits = 20 if args.quick else args.fits
    if min(sizes) < 2:
        parser.error(f"--sizes must be at least 2 workers. Received: --sizes={min(sizes)}")
    models = noise_models(args.measured)
    print(f"{GATHERS} gathers per fit; hiccups: {HICCUP_RATE:.1%} of windows, +{HICCUP[0]:.0%} to +{HICCUP[1]:.0%}; "
          f"found = the straggler named with its part; thresholds: "
          + ", ".join(f"{n}: {cluster_view.score_threshold(n):.2f}" for n in sizes))
    results = []
    for model in models:
        _print_header(model)
        results += study([model], sizes, fits, args.seed)
    found = limits(results)
    print(f"\nsmallest straggler found in {FOUND:.0%} of fits, in every part:")
    for model, per_size in found.items():
        print(f"  {model}: " + ", ".join(f"{n}: {v}" for n, v in per_size.items()))
    print("\njudging one gather:")
    timing = time_judge(sizes)
    print("\nkeras-gpu report:")
    reports = [time_report(1024, False)] + ([time_report(1024, True)] if args.report_runs else [])
    if args.output:
        _cli.write_json(args.output, {
            "gathers_per_fit": GATHERS, "hiccups": {"rate": HICCUP_RATE, "extra": HICCUP}, "seed": args.seed,
            "rule": {k: getattr(cluster_view, k) for k in (
                "STRAGGLER_IMBALANCE", "FALSE_ALARM", "NOISE_FLOOR", "PRIOR_NOISE", "PRIOR_WORKERS", "SLOWEST_KEPT")},
            "models": [asdict(m) for m in models], "results": results, "limits": found, "timing": timing,
            "report": reports,
        })


if __name__ == "__main__":
    main()
