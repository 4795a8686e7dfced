"""The rows and the verdict of `keras-gpu tune`: each candidate's measured rate against the baseline's.

Plain Python over what each run measured and recorded
(`keras_gpu.cli._study_run.Measured`: the window's
`keras_gpu.meters.scale_runs.RunResult`, stopwatch-true samples and seconds
and the step's parts; the run's record, `keras_gpu.hooks.study`: losses by
step, peak memory, what applied).

* **status**: `measured`; `failed` (the run failed: `error` says why); or
  `not applied`, where a part of the change could not apply to the script
  (`not_applied` says why): such a row has no rate, since it would be the
  unchanged script's;
* **speed-up** is the row's samples/s over the mean of the baseline's two runs;
* **helps** is the one rule, `keras_gpu.meters.run_spread.beyond_spread`,
  with the baseline's run-to-run spread (`measured_spread` over both runs'
  window halves): `1` where both halves of the row's window are faster
  beyond it, `-1` slower, `0` otherwise;
* **moved** is the part of the step (input, compute, communication, other;
  on JAX device) that changed most against the mean of the baseline's two
  runs, per baseline batch of samples;
* **losses** compares the logged losses at the steps both runs logged:
  "same" where they are equal, else the largest relative difference; for a
  bigger batch (other steps, other samples) the loss at the end of the
  window against the baseline's.

The verdict names the fastest change that keeps the results (the same
losses) beyond the spread first, then the fastest that changes the training
(a bigger batch, mixed precision, XLA), with its caveat.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from keras_gpu.core.units import format_bytes
from keras_gpu.meters.run_spread import beyond_spread, margin, measured_spread
from keras_gpu.meters.scale_table import PARTS, RunResult

__all__ = ["ROW_KEYS", "TuneRun", "baseline_spread", "build_rows", "compare_losses", "verdict"]

ROW_KEYS = (
    "change", "run", "line", "keeps_results", "status", "samples_per_sec", "halves_samples_per_sec", "speedup",
    "helps", "step_sec",
    "input_sec", "compute_sec", "communication_sec", "other_sec", "device_sec", "moved", "peak_memory_bytes",
    "memory_kind", "losses", "loss_max_rel_diff", "note", "caveat", "error", "not_applied",
)
"""The keys of each row of `keras-gpu tune --json`, in order."""

_ALL_PARTS = (*PARTS, "device")


@dataclass(frozen=True)
class TuneRun:
    """One run of the script: the baseline or a candidate.

    Attributes:
        name: The row's name (`baseline`, a candidate's name).
        line: The code the user writes for it (empty for the baseline).
        keeps_results: Whether its losses must equal the baseline's.
        result: What the window measured, or `None` where the run failed.
        record: The run's record (losses, memory, what applied), or `None`.
        error: Why the run failed, or empty.
        caveat: What the change costs the training, or empty.
        order: When it ran in the study (1: first; 0: unknown).
    """

    name: str
    line: str = ""
    keeps_results: bool = True
    result: RunResult | None = None
    record: Mapping[str, Any] | None = None
    error: str = ""
    caveat: str = ""
    order: int = 0

    @property
    def rate(self) -> float | None:
        """Samples per second over the window, or `None` where not measured."""
        r = self.result
        return None if r is None or not r.seconds > 0 else r.samples / r.seconds

    @property
    def half_rates(self) -> list[float]:
        """Samples per second over each half of the window (the whole window's where halves were not measured)."""
        r = self.result
        if r is None or not r.seconds > 0:
            return []
        if not r.halves:
            return [r.samples / r.seconds]
        return [r.samples / r.steps / h for h in r.halves]

    @property
    def not_applied(self) -> str:
        """Why a part of the change did not apply (`key: why; ...`), or empty."""
        missed = (self.record or {}).get("not_applied") or {}
        return "; ".join(f"{key}: {why}" for key, why in missed.items())


def baseline_spread(baselines: Sequence[TuneRun]) -> float | None:
    """The run-to-run spread of the baseline's measured runs (`run_spread.measured_spread`)."""
    return measured_spread([b.result for b in baselines if b.result is not None])


def compare_losses(base: Mapping[str, Any] | None, run: Mapping[str, Any] | None,
                   same_steps: bool = True) -> tuple[str, float | None]:
    """`(text, largest relative difference)` of two runs' losses at the steps both logged.

    With `same_steps=False` (a bigger batch: a step holds other samples) the
    last logged losses are compared instead.
    """
    if not base or not run or not base.get("losses") or not run.get("losses"):
        return "not compared: a run logged no loss", None
    if not same_steps:
        (s0, l0), (s1, l1) = base["losses"][-1], run["losses"][-1]
        diff = (l1 - l0) / abs(l0) if l0 else None
        return f"loss {l1:.4g} at step {s1} (baseline {l0:.4g} at step {s0})", diff
    ours = {int(s): v for s, v in run["losses"]}
    pairs = [(v, ours[int(s)]) for s, v in base["losses"] if int(s) in ours]
    if not pairs:
        return "not compared: no step logged by both runs", None
    worst = max(abs(b - a) / abs(a) if a else abs(b - a) for a, b in pairs)
    steps = f"{len(pairs)} step{'s' if len(pairs) != 1 else ''}"
    if worst == 0:
        return f"same ({steps})", 0.0
    return f"differ by up to {worst:.2g} ({steps})", worst


def _moved(base: RunResult, r: RunResult) -> str:
    """The part that changed most per baseline batch of samples, in words."""
    if base.parts is None or r.parts is None:
        return "not measured"
    scale = base.global_batch / r.global_batch if r.global_batch else 1.0
    names = [p for p in _ALL_PARTS if base.parts.get(p) is not None and r.parts.get(p) is not None]
    if not names:
        return "not measured: no part in both runs"
    part = max(names, key=lambda p: abs(r.parts[p] * scale - base.parts[p]))
    return f"{part} {base.parts[part] * 1e3:.2g} -> {r.parts[part] * scale * 1e3:.2g} ms"


def _mean_parts(a: RunResult, b: RunResult) -> RunResult:
    """`a` with each part of the step the mean of `a`'s and `b`'s (both baseline runs), where both have it."""
    if a.parts is None or b.parts is None:
        return a
    parts = {p: None if a.parts.get(p) is None or b.parts.get(p) is None else (a.parts[p] + b.parts[p]) / 2
             for p in _ALL_PARTS}
    return dataclasses.replace(a, parts=parts)


def build_rows(baselines: Sequence[TuneRun], runs: Sequence[TuneRun]) -> list[dict[str, Any]]:
    """One row (`ROW_KEYS`) per baseline run and per candidate, each against the baseline's mean rate.

    Raises:
        ValueError: Fewer than two measured baseline runs.
    """
    rates = [b.rate for b in baselines if b.rate is not None]
    if len(rates) < 2:
        raise ValueError(f"`baselines` must hold two measured runs. Received: {len(rates)} measured")
    mean = sum(rates) / len(rates)
    spread = baseline_spread(baselines)
    first = baselines[0]
    reference = _mean_parts(baselines[0].result, baselines[1].result)
    rows = []
    for run in [*baselines, *runs]:
        row: dict[str, Any] = dict.fromkeys(ROW_KEYS)
        row.update(change=run.name, run=run.order or None, line=run.line, keeps_results=run.keeps_results,
                   note=(run.result.note if run.result is not None else "") or None, caveat=run.caveat or None,
                   error=run.error or None, not_applied=run.not_applied or None)
        if run.not_applied:
            row["status"] = "not applied"
        elif run.result is None or run.rate is None:
            row["status"] = "failed"
        else:
            row["status"] = "measured"
        if row["status"] != "measured":
            rows.append(row)
            continue
        r = run.result
        row.update(samples_per_sec=run.rate, halves_samples_per_sec=run.half_rates, speedup=run.rate / mean,
                   helps=0 if run in baselines else beyond_spread(run.half_rates, mean, spread), step_sec=r.step_sec)
        for p in _ALL_PARTS:
            row[f"{p}_sec"] = (r.parts or {}).get(p)
        row["moved"] = "-" if run in baselines else _moved(reference, r)
        if run.record:
            row["peak_memory_bytes"] = run.record.get("peak_memory_bytes")
            row["memory_kind"] = run.record.get("memory_kind")
        same_steps = not (run.record or {}).get("change", {}).get("batch_factor")
        row["losses"], row["loss_max_rel_diff"] = (
            ("-", None) if run is first else compare_losses(first.record, run.record, same_steps)
        )
        rows.append(row)
    return rows


def verdict(rows: Sequence[Mapping[str, Any]], spread: float | None) -> str:
    """What to change, in words, numbers measured: the best change that keeps the results, then the best that does not.

    In each group the winner is the fastest row beyond the spread
    (`beyond_spread` against the baseline); changes tried together win only
    where they are faster than the group's best single change beyond the
    spread (else that change, one line, wins).
    """
    measured = [r for r in rows if r["status"] == "measured" and r["line"]]
    least = margin(spread)
    spread_text = (f"the baseline's two runs vary by {spread:.1%}; a change counts beyond {least:.1%}"
                   if spread is not None else f"a change counts beyond {least:.1%}")
    keeps = _winner([r for r in measured if r["keeps_results"]], spread)
    changes = _winner([r for r in measured if not r["keeps_results"]], spread)
    if keeps is None and changes is None:
        best = max(measured, key=lambda r: r["samples_per_sec"], default=None)
        tail = f"; the fastest, {best['change']}, gives {best['speedup']:.2f}x" if best else ""
        return f"Nothing helps beyond the run-to-run spread ({spread_text}){tail}."
    parts = []
    if keeps is not None:
        parts.append(f"Keeps the results: {_said(keeps, rows)}.")
    else:
        parts.append("Keeps the results: nothing helps beyond the run-to-run spread.")
    if changes is not None:
        parts.append(f"Changes the training: {_said(changes, rows)}; {changes['caveat'] or 'check the losses'}.")
    return " ".join(parts) + f" {spread_text[0].upper()}{spread_text[1:]}."


def _winner(rows: Sequence[Mapping[str, Any]], spread: float | None) -> Mapping[str, Any] | None:
    """The fastest of `rows` that helps; a combination only beyond the best single change's rate."""
    helping = [r for r in rows if r["helps"] == 1]
    if not helping:
        return None
    win = max(helping, key=lambda r: r["samples_per_sec"])
    singles = [r for r in helping if " + " not in r["change"]]
    if " + " in win["change"] and singles:
        best = max(singles, key=lambda r: r["samples_per_sec"])
        if beyond_spread(win["halves_samples_per_sec"] or win["samples_per_sec"], best["samples_per_sec"], spread) != 1:
            win = best
    return win


def _said(win: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> str:
    mem = ""
    if win.get("peak_memory_bytes") and rows[0].get("peak_memory_bytes"):
        mem = f", peak memory {format_bytes(win['peak_memory_bytes'])} (baseline {format_bytes(rows[0]['peak_memory_bytes'])})"
    losses = str(win["losses"] or "not compared")
    losses = losses if losses.startswith("loss ") else f"losses {losses}"
    return f"{win['change']}: `{win['line']}`: {win['speedup']:.2f}x samples/s, {losses}{mem}"
