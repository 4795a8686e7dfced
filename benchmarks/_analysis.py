"""From raw worker measurements to summaries and budget checks.

Definitions (all per run, i.e. one fresh model with its `fit`s):

* **steady epochs**: every epoch of a `fit` but its first.
* **steps/s**: steps per epoch over the median steady epoch cycle time.
* **direct steady cost**: (hook time + callback-thread CPU) in the steady
  epochs over their wall time. The `_net` variant subtracts the hook timer's
  own cost per batch-hook call, measured in the same process by the
  self-check's empty hook.
* **ratio to bare**: steps/s of the variant run over steps/s of the bare run it
  is paired with (the two run back to back, in alternating order).
* **one-off, wall**: a `fit`'s wall time minus its epochs times the run's
  median steady cycle, minus the same for the paired bare run.
* **one-off, direct**: the `fit`'s hook time and thread CPU minus its epochs
  times the run's median steady epoch cost; for a callback that interposes on
  the training function, plus the time it spent around the first call (see
  :mod:`benchmarks._instrument`).

Across runs, each figure is summarised by median, quartiles and range.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from benchmarks._stats import describe, median

__all__ = [
    "BUDGETS",
    "budget_checks",
    "run_metrics",
    "summarise_accuracy",
    "summarise_config",
    "summarise_import",
    "summarise_leak",
]

BUDGETS: dict[str, float] = {
    "steady_direct": 0.01,
    "steady_ratio": 0.99,
    "one_off_first_fit_s": 2.0,
    "one_off_later_fit_s": 0.1,
    "throughput_rel_error": 0.01,
    "placement_first_fit_s": 2.0,
    "import_s": 0.05,
    "leak_bytes": 5 * 2**20,
    "callback_direct_attention": 0.005,
}
"""The targets the results are reported against (reported, never asserted)."""


# --------------------------------------------------------------------------- one run


def run_metrics(run: dict[str, Any], floor_s: float = 0.0) -> dict[str, Any]:
    """The per-run figures of one instrumented run (see the module docstring).

    Args:
        run: One run of the worker's output.
        floor_s: The hook timer's own cost per call (from the self-check's
            empty hook), subtracted per batch-hook call for the `_net` figures.
    """
    fits = run["fits"]
    steps = fits[0]["steps_per_epoch"]
    steady = [e for fit in fits for e in fit["epochs"][1:]]
    if not steady:
        raise ValueError("A run needs at least one `fit` of two or more epochs to have a steady state.")
    cycles = [e["cycle_s"] for e in steady]
    cycle = median(cycles)
    total_time = sum(cycles)
    costs = [e["hook_s"] + e["thread_cpu_s"] for e in steady]
    batch_hook = sum(e.get("batch_hook_s", 0.0) for e in steady)
    batch_calls = sum(h[0] for e in steady for key, h in e.get("hooks", {}).items() if "batch" in key)
    floor_total = floor_s * batch_calls
    thread = sum(e["thread_cpu_s"] for e in steady)
    epoch_cost = median(costs)
    out_fits = []
    for fit in fits:
        n = len(fit["epochs"])
        out_fits.append(
            {
                "oneoff_wall_s": fit["wall_s"] - n * cycle,
                "oneoff_direct_s": fit["total_hook_s"] + fit["total_thread_cpu_s"] - n * epoch_cost,
                "first_call_s": fit.get("first_call_s"),
                "interposer_s": _interposer_s(fit),
                "interposed": bool(fit.get("interposed")),
                "train_begin_hook_s": fit["train_begin"]["hook_s"],
                "train_end_hook_s": fit["train_end"]["hook_s"],
            }
        )
    return {
        "steps_per_s": steps / cycle,
        "direct_steady": sum(costs) / total_time,
        "direct_steady_net": max(0.0, sum(costs) - floor_total) / total_time,
        "thread_fraction": thread / total_time,
        "batch_hook_us_per_step": batch_hook / (len(steady) * steps) * 1e6,
        "batch_hook_us_per_step_net": max(0.0, batch_hook - floor_total) / (len(steady) * steps) * 1e6,
        "epoch_cost_ms": (sum(costs) - batch_hook) / len(steady) * 1e3,
        "fits": out_fits,
    }


def _interposer_s(fit: dict[str, Any]) -> float:
    """Time a callback that interposes on the training function spent around its first call (0 if none)."""
    outer, inner = fit.get("first_call_s"), fit.get("inner_first_call_s")
    if not fit.get("interposed") or outer is None or inner is None:
        return 0.0
    return outer - inner


def _steady_hooks(runs: Iterable[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per hook over the steady epochs of `runs`: calls per step, microseconds per call and per step.

    `typical_us_per_call` leaves out the slow calls (over
    :data:`benchmarks._instrument.SLOW_CALL_S`), which are counted per epoch
    with their mean duration.
    """
    totals: dict[str, list] = {}
    steps = epochs = 0
    for run in runs:
        for fit in run["fits"]:
            for epoch in fit["epochs"][1:]:
                steps += fit["steps_per_epoch"]
                epochs += 1
                for key, h in epoch.get("hooks", {}).items():
                    t = totals.setdefault(key, [0, 0.0, 0, 0.0])
                    for i, x in enumerate(h):
                        t[i] += x
    out = {}
    for key in sorted(totals, key=lambda k: -totals[k][1]):
        calls, seconds, slow, slow_s = totals[key]
        fast = calls - slow
        out[key] = {
            "calls_per_step": calls / steps if steps else None,
            "us_per_call": seconds / calls * 1e6,
            "us_per_step": seconds / steps * 1e6 if steps else None,
            "typical_us_per_call": (seconds - slow_s) / fast * 1e6 if fast else None,
            "slow_calls_per_epoch": slow / epochs if epochs else None,
            "ms_per_slow_call": slow_s / slow * 1e3 if slow else None,
        }
    return out


def _fit_hooks(runs: Iterable[dict[str, Any]], index: int) -> dict[str, dict[str, float]]:
    """Per hook over `fit` number `index` of each run: mean calls and mean seconds per `fit`."""
    calls: dict[str, int] = {}
    seconds: dict[str, float] = {}
    n = 0
    for run in runs:
        if index >= len(run["fits"]):
            continue
        n += 1
        for key, h in run["fits"][index]["hooks"].items():
            calls[key] = calls.get(key, 0) + h["calls"]
            seconds[key] = seconds.get(key, 0.0) + h["seconds"]
    return {
        key: {"calls_per_fit": calls[key] / n, "ms_per_fit": seconds[key] / n * 1e3}
        for key in sorted(calls, key=lambda k: -seconds[k])
    }


# --------------------------------------------------------------------------- one configuration


def summarise_config(raw: dict[str, Any], labels: dict[str, tuple[str, str]] | None = None) -> dict[str, Any]:
    """Summary of one configuration's worker output: bare, each variant, accuracy and self-check.

    Args:
        raw: The `overhead` job's result.
        labels: `{variant: (label, group)}` for the table.
    """
    labels = labels or {}
    bare_runs = [p["bare"] for p in raw["pairs"]]
    bare_metrics = [run_metrics(r) for r in bare_runs]
    by_variant: dict[str, list[dict[str, Any]]] = {name: [] for name in raw.get("variants", [])}
    for pair in raw["pairs"]:
        by_variant.setdefault(pair["variant"], []).append(pair)
    by_variant = {name: pairs for name, pairs in by_variant.items() if pairs}  # in the order asked for
    self_check = _summarise_self_check(raw["self_check"]) if "self_check" in raw else None
    floor_s = (self_check or {}).get("timer_floor_us_per_call") or 0.0
    floor_s *= 1e-6
    variants = {}
    for name, pairs in by_variant.items():
        variants[name] = _summarise_variant(name, pairs, labels.get(name, (name, "custom")), floor_s)
    warnings = []
    stray = sorted({t["name"] for r in bare_runs for t in r.get("threads", [])})
    if stray:
        warnings.append(f"bare runs saw new Python threads {stray}: thread CPU attribution may include them")
    summary = {
        "config": raw["config"],
        "steps_per_epoch": raw["steps_per_epoch"],
        "epochs": raw["epochs"],
        "rounds": raw["rounds"],
        "devices": raw.get("devices"),
        "wrapper_overhead_us": raw.get("wrapper_overhead_s", 0.0) * 1e6,
        "bare": {
            "runs": len(bare_metrics),
            "steps_per_s": describe(m["steps_per_s"] for m in bare_metrics),
            "one_off_wall_s": {
                "first_fit": describe(m["fits"][0]["oneoff_wall_s"] for m in bare_metrics),
                "later_fit": describe(m["fits"][-1]["oneoff_wall_s"] for m in bare_metrics if len(m["fits"]) > 1),
            },
        },
        "variants": variants,
        "skipped": raw.get("skipped", {}),
        "cold_first_fit": _cold(raw.get("warmup", [])),
        "warnings": warnings,
    }
    if "accuracy" in raw:
        summary["accuracy"] = [summarise_accuracy(a) for a in raw["accuracy"]]
    if self_check is not None:
        summary["self_check"] = self_check
    return summary


def _summarise_variant(
    name: str, pairs: list[dict[str, Any]], label: tuple[str, str], floor_s: float = 0.0
) -> dict[str, Any]:
    runs = [p["run"] for p in pairs]
    metrics = [run_metrics(p["run"], floor_s) for p in pairs]
    bare = [run_metrics(p["bare"]) for p in pairs]
    n_fits = min(len(m["fits"]) for m in metrics)
    one_off = {}
    for index, key in ((0, "first_fit"), (n_fits - 1, "later_fit")):
        if key == "later_fit" and n_fits < 2:
            continue
        direct, wall = [], []
        for m, b in zip(metrics, bare):
            fit, bfit = m["fits"][index], b["fits"][index]
            direct.append(fit["oneoff_direct_s"] + fit["interposer_s"])
            wall.append(fit["oneoff_wall_s"] - bfit["oneoff_wall_s"])
        one_off[key] = {"direct_s": describe(direct), "wall_extra_s": describe(wall)}
    threads = sorted({(t["name"], t["owner"]) for r in runs for t in r.get("threads", [])})
    left = sorted({name for r in runs for fit in r["fits"] for name in fit.get("threads_alive_after", [])})
    return {
        "label": label[0],
        "group": label[1],
        "pairs": len(pairs),
        "steps_per_s": describe(m["steps_per_s"] for m in metrics),
        "ratio_to_bare": describe(m["steps_per_s"] / b["steps_per_s"] for m, b in zip(metrics, bare)),
        "direct_steady": describe(m["direct_steady"] for m in metrics),
        "direct_steady_net": describe(m["direct_steady_net"] for m in metrics),
        "thread_fraction": describe(m["thread_fraction"] for m in metrics),
        "batch_hook_us_per_step": describe(m["batch_hook_us_per_step"] for m in metrics),
        "batch_hook_us_per_step_net": describe(m["batch_hook_us_per_step_net"] for m in metrics),
        "epoch_cost_ms": describe(m["epoch_cost_ms"] for m in metrics),
        "one_off": one_off,
        "interposed": any(f["interposed"] for m in metrics for f in m["fits"]),
        "steady_hooks": _steady_hooks(runs),
        "first_fit_hooks": _fit_hooks(runs, 0),
        "later_fit_hooks": _fit_hooks(runs, n_fits - 1) if n_fits > 1 else {},
        "threads": [{"name": n, "owner": o} for n, o in threads],
        "threads_left_after_fit": left,
    }


def _cold(warmup: list[dict[str, Any]]) -> dict[str, Any]:
    """The first `fit` of each variant in the worker process (imports and first-use costs included)."""
    out = {}
    for run in warmup:
        fit = run["fits"][0]
        out[run["variant"]] = {
            "hook_s": fit["total_hook_s"],
            "thread_cpu_s": fit["total_thread_cpu_s"],
            "wall_s": fit["wall_s"],
            "first_call_s": fit.get("first_call_s"),
        }
    return out


def summarise_accuracy(raw: dict[str, Any]) -> dict[str, Any]:
    """Relative errors of `ThroughputLogger`'s samples/s over its windows."""
    if "skipped" in raw:
        return {"settings": raw.get("settings", {}), "skipped": raw["skipped"]}
    windows = raw["windows"]
    errors = [w["rel_error"] for w in windows]
    samples = [(w["to_step"] - w["from_step"]) * raw["batch_size"] for w in windows]
    truth_time = sum(n / w["truth"] for n, w in zip(samples, windows))
    logged_time = sum(n / w["logged"] for n, w in zip(samples, windows))
    return {
        "settings": raw.get("settings", {}),
        "windows": len(windows),
        "steps_per_epoch": raw["steps_per_epoch"],
        "median_rel_error": median(errors),
        "max_abs_rel_error": max((abs(e) for e in errors), default=None),
        "overall_rel_error": (truth_time / logged_time - 1.0) if windows and logged_time > 0 else None,
    }


def _summarise_self_check(raw: dict[str, Any]) -> dict[str, Any]:
    """How far the instruments are from the probes' own ground truth."""
    busy, empty, spin = raw["busy_hook"], raw["empty_hook"], raw["spin_thread"]
    expected_cpu = spin["expected_cpu_s_last_fit"]
    return {
        "busy_hook_rel_error": (busy["measured_s"] / busy["self_timed_s"] - 1.0) if busy["self_timed_s"] else None,
        "busy_hook_nominal_us": busy["nominal_s_per_call"] * 1e6,
        "busy_hook_self_timed_us": busy["self_timed_s"] / busy["calls"] * 1e6 if busy["calls"] else None,
        "busy_hook_calls_match": busy["calls"] == busy["expected_calls"],
        "timer_floor_us_per_call": empty["measured_s_per_call"] * 1e6 if empty["measured_s_per_call"] else None,
        "spin_thread_rel_error": (spin["measured_cpu_s_last_fit"] / expected_cpu - 1.0) if expected_cpu else None,
        "spin_thread_attributed": all(t["owner"] == "SpinThreadProbe" for t in spin["threads"]) and bool(spin["threads"]),
    }


# --------------------------------------------------------------------------- import and leak


def summarise_import(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median import times over fresh processes, and whether any initialised a device."""
    return {
        "processes": len(runs),
        "import_keras_gpu_s": describe(r["import_keras_gpu_s"] for r in runs),
        "import_keras_gpu_loggers_s": describe(r["import_keras_gpu_loggers_s"] for r in runs),
        "import_keras_s": describe(r["import_keras_s"] for r in runs),
        "device_initialised_after_import": sorted({str(r["device_initialised_after_import"]) for r in runs}),
        "device_initialised_after_loggers_import": sorted({str(r["device_initialised_after_loggers_import"]) for r in runs}),
        "loggers_import_errors": sorted({r["loggers_import_error"] for r in runs if r.get("loggers_import_error")}),
    }


def summarise_leak(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """RSS growth, threads and file descriptors left, per variant, and the default set against bare."""
    out: dict[str, Any] = {}
    for name, r in results.items():
        if "skipped" in r or "error" in r:
            out[name] = {k: r[k] for k in ("skipped", "error") if k in r}
            continue
        base, warm, after = r["baseline"], r["after_warmup"], r["after"]
        per_epoch = [x for x in r.get("rss_per_epoch", []) if x is not None]
        half = per_epoch[len(per_epoch) // 2 :]
        out[name] = {
            "steps": r["steps"],
            "wall_s": r["wall_s"],
            "rss_growth_bytes": _sub(after["rss_bytes"], warm["rss_bytes"]),
            "rss_growth_second_half_bytes": (half[-1] - half[0]) if len(half) > 1 else None,
            "rss_after_bytes": after["rss_bytes"],
            # Left by the measured fit, beyond what the first fit with the same
            # callbacks left: the run's event file and its writer thread stay
            # open for the process's later fits by design (one file per run
            # directory per process), and are listed apart.
            "python_threads_left": sorted(set(after["python_threads"]) - set(warm["python_threads"])),
            "os_threads_left": _sub(after["tasks"], warm["tasks"]),
            "fds_left": _sub(after["fds"], warm["fds"]),
            "fd_targets_left": sorted(set(after["fd_targets"]) - set(warm["fd_targets"])),
            "kept_open_by_first_fit": {
                "python_threads": sorted(set(warm["python_threads"]) - set(base["python_threads"])),
                "fds": _sub(warm["fds"], base["fds"]),
            },
            "callback_threads_alive": r.get("callback_threads_alive", []),
        }
    bare, default = out.get("bare"), out.get("kg-default")
    if bare and default and "rss_growth_bytes" in bare and "rss_growth_bytes" in default:
        out["default_vs_bare"] = {
            "rss_growth_bytes": _sub(default["rss_growth_bytes"], bare["rss_growth_bytes"]),
            "os_threads_left": _sub(default["os_threads_left"], bare["os_threads_left"]),
            "fds_left": _sub(default["fds_left"], bare["fds_left"]),
        }
    return out


def _sub(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


# --------------------------------------------------------------------------- budgets


def _check(name: str, value: Any, budget: float, ok: bool | None, **where: Any) -> dict[str, Any]:
    if isinstance(value, float) and not math.isfinite(value):
        value = None
    return {"check": name, **where, "value": value, "budget": budget, "ok": None if value is None else ok}


def _with_net(check: dict[str, Any], net: float | None) -> dict[str, Any]:
    check["net"] = net
    return check


def budget_checks(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Every budget, with the measured value and whether it is met (`None`: not measured)."""
    b = BUDGETS
    checks = []
    for cname, config in result.get("configs", {}).items():
        summary = config.get("summary")
        if not summary:
            continue
        for vname, v in summary["variants"].items():
            if v["group"] != "keras_gpu":
                continue
            where = {"config": cname, "variant": vname}
            direct = v["direct_steady"]["median"]
            ratio = v["ratio_to_bare"]
            net = v["direct_steady_net"]["median"]
            checks.append(_with_net(_check("steady direct cost (fraction of fit time)", direct, b["steady_direct"],
                                           direct is not None and direct <= b["steady_direct"], **where), net))
            ok_ratio = None if ratio["median"] is None else (
                ratio["median"] >= b["steady_ratio"] or (ratio["q3"] is not None and ratio["q3"] >= b["steady_ratio"])
            )
            checks.append(_check("steady A/B ratio to bare (median; met within noise if Q3 reaches it)",
                                 ratio["median"], b["steady_ratio"], ok_ratio, **where))
            for key, budget in (("first_fit", b["one_off_first_fit_s"]), ("later_fit", b["one_off_later_fit_s"])):
                if key not in v["one_off"]:
                    continue
                for method in ("direct_s", "wall_extra_s"):
                    value = v["one_off"][key][method]["median"]
                    checks.append(_check(f"one-off {key.replace('_', ' ')} ({method.split('_s')[0].replace('_', ' ')}, s)",
                                         value, budget, value is not None and value <= budget, **where))
            if cname == "mlp-1" and vname != "kg-default":
                checks.append(_with_net(_check("single callback direct cost on the 1 ms MLP (attention above)", direct,
                                               b["callback_direct_attention"],
                                               direct is not None and direct <= b["callback_direct_attention"], **where),
                                        net))
            if cname == "cnn-1" and vname == "kg-placement":
                for key, budget in (("first_fit", b["placement_first_fit_s"]), ("later_fit", b["one_off_later_fit_s"])):
                    if key in v["one_off"]:
                        value = v["one_off"][key]["direct_s"]["median"]
                        checks.append(_check(f"placement one-off, {key.replace('_', ' ')} (direct, s)", value, budget,
                                             value is not None and value <= budget, **where))
        for acc in summary.get("accuracy", []):
            if "skipped" in acc:
                continue
            value = acc["max_abs_rel_error"]
            checks.append(_check("throughput samples/s max |relative error|", value, b["throughput_rel_error"],
                                 value is not None and value <= b["throughput_rel_error"], config=cname,
                                 variant="kg-throughput", settings=acc["settings"]))
    imp = result.get("import", {}).get("summary")
    if imp:
        value = imp["import_keras_gpu_s"]["median"]
        checks.append(_check("`import keras_gpu` after `import keras` (median, s)", value, b["import_s"],
                             value is not None and value < b["import_s"]))
        init = imp["device_initialised_after_import"]
        checks.append(_check("`import keras_gpu` initialises no device", ",".join(init), 0, init == ["False"]))
    leak = result.get("leak", {}).get("summary", {})
    dvb = leak.get("default_vs_bare")
    if dvb:
        value = dvb["rss_growth_bytes"]
        checks.append(_check("RSS growth, default callbacks minus bare (bytes)", value, b["leak_bytes"],
                             value is not None and value < b["leak_bytes"], variant="kg-default"))
        default = leak["kg-default"]
        checks.append(_check("Python threads left after fit", len(default["python_threads_left"]), 0,
                             not default["python_threads_left"], variant="kg-default"))
        checks.append(_check("open file descriptors left after fit, minus bare", dvb["fds_left"], 0,
                             dvb["fds_left"] is not None and dvb["fds_left"] <= 0, variant="kg-default"))
    return checks
