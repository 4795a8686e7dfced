"""Rich tables of a benchmark result (see :mod:`benchmarks.overhead` for the columns)."""

from __future__ import annotations

from typing import Any

__all__ = ["ab_lines", "render"]


def _fmt(value: Any, spec: str = ".3f", scale: float = 1.0, suffix: str = "") -> str:
    if value is None:
        return "-"
    return f"{value * scale if scale != 1.0 else value:{spec}}{suffix}"


def _spread(d: dict[str, Any] | None, spec: str = ".3f", scale: float = 1.0, suffix: str = "") -> str:
    """`median (q1-q3)` of a :func:`benchmarks._stats.describe` dict."""
    if not d or d.get("median") is None:
        return "-"
    mid = _fmt(d["median"], spec, scale, suffix)
    if d.get("n", 0) < 2:
        return mid
    return f"{mid} ({_fmt(d['q1'], spec, scale)}-{_fmt(d['q3'], spec, scale)})"


def _config_table(name: str, s: dict[str, Any]):
    from rich import box
    from rich.table import Table

    cfg = s["config"]
    title = (
        f"{name}: {cfg['model'].upper()}, batch {cfg['batch_size']}, {cfg['replicas']} replica(s) "
        f"on {', '.join(s.get('devices') or [])}; {s['steps_per_epoch']} steps/epoch, fits of "
        f"{'+'.join(str(e) for e in s['epochs'])} epochs, {s['rounds']} round(s) of A/B pairs"
    )
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("variant", no_wrap=True)
    for column in ("steps/s", "vs bare", "direct %", "net %", "us/step", "ms/epoch", "1st fit s", "later fit s"):
        table.add_column(column, justify="right", no_wrap=True)
    bare = s["bare"]
    table.add_row(
        "bare fit", _fmt(bare["steps_per_s"]["median"], ".0f"), "1", "0", "0", "0", "0",
        f"({_fmt(bare['one_off_wall_s']['first_fit']['median'], '.2f')})",
        f"({_fmt(bare['one_off_wall_s']['later_fit']['median'], '.2f')})",
    )
    def both(one_off: dict[str, Any], key: str) -> str:
        if key not in one_off:
            return "-"
        return f"{_fmt(one_off[key]['direct_s']['median'], '.3f')} | {_fmt(one_off[key]['wall_extra_s']['median'], '.2f')}"

    for v in s["variants"].values():

        table.add_row(
            v["label"] + (" *" if v["interposed"] else ""),
            _fmt(v["steps_per_s"]["median"], ".0f"),
            _spread(v["ratio_to_bare"], ".3f"),
            _spread(v["direct_steady"], ".2f", 100.0),
            _fmt(v["direct_steady_net"]["median"], ".2f", 100.0),
            _fmt(v["batch_hook_us_per_step"]["median"], ".1f"),
            _fmt(v["epoch_cost_ms"]["median"], ".2f"),
            both(v["one_off"], "first_fit"),
            both(v["one_off"], "later_fit"),
        )
    for vname, why in s.get("skipped", {}).items():
        table.add_row(f"{vname} (skipped)", why, "", "", "", "", "", "", "")
    return table


def _accuracy_table(result: dict[str, Any]):
    from rich import box
    from rich.table import Table

    table = Table(title="ThroughputLogger accuracy: logged samples/s vs the benchmark's own timestamps",
                  title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("config", "settings", "steps/epoch", "windows", "median error", "max |error|", "overall error"):
        table.add_column(col, justify="left" if col in ("config", "settings") else "right")
    rows = 0
    for cname, config in result.get("configs", {}).items():
        for acc in (config.get("summary") or {}).get("accuracy", []):
            settings = ", ".join(f"{k}={v}" for k, v in acc.get("settings", {}).items()) or "defaults"
            if "skipped" in acc:
                table.add_row(cname, settings, acc["skipped"], "", "", "", "")
                continue
            table.add_row(cname, settings, str(acc["steps_per_epoch"]), str(acc["windows"]),
                          _fmt(acc["median_rel_error"], "+.3f", 100, "%"), _fmt(acc["max_abs_rel_error"], ".3f", 100, "%"),
                          _fmt(acc["overall_rel_error"], "+.3f", 100, "%"))
            rows += 1
    return table if rows else None


def _checks_table(checks: list[dict[str, Any]]):
    from rich import box
    from rich.table import Table

    table = Table(title="Budgets (reported, not enforced)", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("check", "where", "value", "budget", "met"):
        table.add_column(col, justify="right" if col in ("value", "budget") else "left")
    for c in checks:
        where = " ".join(str(c[k]) for k in ("config", "variant") if c.get(k))
        if c.get("settings") is not None:
            where += " " + (",".join(f"{k}={v}" for k, v in c["settings"].items()) or "defaults")
        value = c["value"]
        text = _fmt(value, ".4g") if isinstance(value, float) else ("-" if value is None else str(value))
        if c.get("net") is not None:
            text += f" (net {c['net']:.4g})"
        met = {True: "yes", False: "NO", None: "-"}[c["ok"]]
        table.add_row(c["check"], where, text, f"{c['budget']:g}", met)
    return table


def ab_lines(async_ab: dict[str, Any]) -> list[str]:
    """One line per backend of the asynchronous-dispatch A/B (`python -m benchmarks.overhead --async-ab`)."""
    lines = []
    for backend, r in async_ab.items():
        if "error" in r:
            lines.append(f"Dispatch A/B, {backend}: FAILED: {r['error']}")
            continue
        s, d = r["slowdown"], r["async_dispatch"]
        lines.append(
            f"Dispatch A/B, {backend} (whole fits of {r['steps']} steps, verbose=0, {s['n']} interleaved pairs, bare step "
            f"{r['step_ms_bare']:.3g} ms): keras_gpu.callbacks() vs no callback {s['median']:+.2%} median "
            f"(IQR {s['q1']:+.2%} to {s['q3']:+.2%}, range {s['min']:+.2%} to {s['max']:+.2%}); batch dispatch: "
            f"bare {'asynchronous' if d.get('bare') else 'synchronous'}, "
            f"with the callbacks {'asynchronous' if d.get('callbacks') else 'synchronous'}"
        )
    return lines


def render(result: dict[str, Any], console: Any) -> None:
    """Print `result` (the JSON of :func:`benchmarks.overhead.run_benchmark`) as tables on `console`."""
    m = result.get("machine", {})
    gpus = ", ".join(g["name"] for g in m.get("nvml", {}).get("gpus", [])) or "none"
    console.print(
        f"Machine: {m.get('cpu_model')} ({m.get('usable_cpus')} usable of {m.get('cpu_count')} CPUs), GPUs: {gpus}; "
        f"TensorFlow {m.get('tensorflow', {}).get('version')}, Keras {m.get('keras')}, keras-gpu {m.get('keras_gpu')}; "
        f"load average {m.get('load_average')} at start, {result.get('load_average_end')} at end",
        soft_wrap=True,
    )
    for cname, config in result.get("configs", {}).items():
        if "error" in config:
            console.print(f"{cname}: FAILED: {config['error']}", soft_wrap=True)
            continue
        summary = config["summary"]
        console.print(_config_table(cname, summary))
        for warning in summary.get("warnings", []):
            console.print(f"  warning: {warning}", soft_wrap=True)
        check = summary.get("self_check")
        if check and check.get("timer_floor_us_per_call") is not None:
            console.print(
                f"  timer floor: {check['timer_floor_us_per_call']:.2f} us per hook call (an empty hook, timed in this "
                "process); it is in `direct %` and `us/step`, and subtracted per batch-hook call in `net %`",
                soft_wrap=True,
            )
        if check:
            console.print(
                f"  self-check: busy hook (self-timed {_fmt(check['busy_hook_self_timed_us'], '.1f')} us/call) measured "
                f"{_fmt(check['busy_hook_rel_error'], '+.2f', 100, '%')} off its own timing (calls match: "
                f"{check['busy_hook_calls_match']}); empty hook {_fmt(check['timer_floor_us_per_call'], '.2f')} us/call "
                f"(the timer's floor); 0.2 s CPU thread measured {_fmt(check['spin_thread_rel_error'], '+.2f', 100, '%')} "
                f"off its own thread_time (attributed: {check['spin_thread_attributed']})",
                soft_wrap=True,
            )
    console.print(
        "Medians over runs, (first-third quartile). One-off columns: direct | wall-clock extra over bare, in seconds; "
        "the bare row shows its own one-off wall time. * interposes on the training function (its first-call work is "
        "in the one-off columns).",
        soft_wrap=True,
    )
    acc = _accuracy_table(result)
    if acc is not None:
        console.print(acc)
    imp = result.get("import", {}).get("summary")
    if imp:
        console.print(
            f"Import: `import keras_gpu` after `import keras`: {_spread(imp['import_keras_gpu_s'], '.2f', 1e3, ' ms')} "
            f"over {imp['processes']} fresh processes; device initialised: {', '.join(imp['device_initialised_after_import'])}; "
            f"`import keras_gpu.hooks.factory`: {_spread(imp['import_keras_gpu_loggers_s'], '.0f', 1e3, ' ms')} "
            f"(device initialised: {', '.join(imp['device_initialised_after_loggers_import'])})",
            soft_wrap=True,
        )
    leak = result.get("leak", {}).get("summary")
    if leak:
        for name, r in leak.items():
            if name == "default_vs_bare":
                continue
            if "rss_growth_bytes" not in r:
                console.print(f"Leak, {name}: {r}", soft_wrap=True)
                continue
            console.print(
                f"Leak, {name}: {r['steps']} steps: RSS {_fmt(r['rss_growth_bytes'], '+.1f', 2**-20, ' MiB')} "
                f"(second half {_fmt(r['rss_growth_second_half_bytes'], '+.1f', 2**-20, ' MiB')}); left after fit: "
                f"Python threads {r['python_threads_left'] or 'none'}, OS threads {_fmt(r['os_threads_left'], '+d')}, "
                f"fds {_fmt(r['fds_left'], '+d')}",
                soft_wrap=True,
            )
    for line in ab_lines(result.get("async_ab", {})):
        console.print(line, soft_wrap=True)
    checks = result.get("checks")
    if checks:
        console.print(_checks_table(checks))
