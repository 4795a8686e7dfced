"""`keras-gpu trace PATH [--json]`: the step-time breakdown of any profiler trace, without TensorFlow.

PATH is an `.xplane.pb` file, or a directory (a run, its `plugins/profile/`,
or a log dir) whose traces are each read, oldest first. Traces written by
keras-gpu's `StepTimeLogger` and traces a user captured with TensorFlow's or
JAX's profiler read alike (`keras_gpu.meters.step_time.analyze`): the step count
and mean step time, input, compute, communication (collectives), transfer
(host-device copies) and other per step, the host's part of other (outside
the compiled step) with the host activities the trace names, each GPU's (or
TPU core's) compute, communication and transfer time, the kernel view
(kernel time per step by class, and the top kernels), the slowest input
stage, notes (a trace without step markers says so, and how its window was
chosen), and the hints. A GPU job's trace without GPU activity says so, and
gives no device figure.

With `--json`, each trace is one JSON object on its own line: `path`,
`steps`, `step_sec`, `input_sec`, `compute_sec`, `communication_sec`,
`transfer_sec`, `other_sec`, `host_sec` (`null` where not measured),
`unmeasured` (the sentence of a trace without GPU activity, else `null`),
`host_work`, `kernels`, `kernel_classes`, `devices` (`{"GPU:4":
{"compute_sec", "communication_sec", "transfer_sec", "replicas"}}`),
`step_source`, `input_stage`, `notes` and `hints`, all times in seconds
per step.

A file that cannot be read (truncated, damaged, not a trace) gets one line
on stderr naming it, `keras-gpu trace: error: cannot read PATH: why`; the
other traces are still printed, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from keras_gpu.cli import UsageError

__all__ = ["add_parser", "analyze_path", "render", "run"]

_SUFFIX = ".xplane.pb"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "trace",
        help="the step-time breakdown of a profiler trace (.xplane.pb), any backend",
        description=(
            "Print where each training step's time goes in a profiler trace: steps and step time, input, compute, "
            "communication and other, each GPU's compute and transfer time, the slowest input stage, and hints. "
            "PATH is an .xplane.pb file or a directory holding them (a run's plugins/profile/)."
        ),
    )
    p.add_argument("path", metavar="PATH", help="an .xplane.pb file, or a directory of traces")
    p.add_argument("--json", action="store_true", help="print one JSON object per trace, one per line")
    p.add_argument(
        "--steps",
        type=int,
        default=None,
        help="training steps in the trace, where it has no step markers (default: executions of the step function)",
    )
    p.add_argument(
        "--gpus",
        default=None,
        metavar="I,J,...",
        help=(
            "the replicas' GPUs (or TPU cores) in replica order, as the trace numbers them "
            "(default: the devices that ran work)"
        ),
    )


def _paths(path: str) -> list[str]:
    from keras_gpu.meters import xspace

    if os.path.isfile(path):
        return [path]
    if os.path.isdir(path):
        found = xspace.find_traces(path)
        if found:
            return found
        raise UsageError(f"no {_SUFFIX} file under {path!r}. Received: PATH={path!r}")
    raise UsageError(f"PATH must be an {_SUFFIX} file or a directory of them. Received: PATH={path!r}")


def _gpus(value: str | None) -> dict[int, int] | None:
    if value is None:
        return None
    try:
        indices = [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        indices = []
    if not indices or any(i < 0 for i in indices):
        raise UsageError(f"--gpus must be GPU indices separated by commas, such as 4,6. Received: --gpus={value!r}")
    return {g: r for r, g in enumerate(indices)}


def analyze_path(path: str, steps: int | None = None, gpus: str | None = None) -> list[dict[str, Any]]:
    """The breakdown of each trace at `path` as a JSON-ready dict (with `path` and `hints`); a trace that
    cannot be read or analyzed is `{"path": ..., "error": "<one line>"}`."""
    from keras_gpu.meters import step_time as steptime
    from keras_gpu.meters import xspace

    if steps is not None and steps < 1:
        raise UsageError(f"--steps must be a positive integer. Received: --steps={steps!r}")
    mapping = _gpus(gpus)
    results: list[dict[str, Any]] = []
    for trace in _paths(path):
        try:
            space = xspace.load(trace)
            step = steptime.analyze(
                space, steps=steps, num_replicas=len(mapping) if mapping else 1 << 10, gpu_replicas=mapping
            )
        except (OSError, ValueError) as exc:
            message = str(exc) if trace in str(exc) else f"{trace}: {exc}"
            results.append({"path": trace, "error": " ".join(message.split())})
            continue
        out = step.as_dict()
        used = max((r for d in step.devices for r in d.replicas), default=-1) + 1
        out["replicas"] = out["replicas"][: max(used, 1) if mapping is None else len(mapping)]
        out["hints"] = steptime.verdict(step)
        out["path"] = trace
        results.append(out)
    return results


def run(args: argparse.Namespace) -> int:
    """Print each trace's breakdown; a trace that cannot be read gets one line on stderr, and the status is 1."""
    results = analyze_path(args.path, args.steps, args.gpus)
    for result in results:
        if "error" in result:
            print(f"keras-gpu trace: error: cannot read {result['error']}", file=sys.stderr)
        elif args.json:
            print(json.dumps(result, sort_keys=True))
        else:
            render(result)
    return 1 if any("error" in result for result in results) else 0


def _ms(seconds: float | None) -> str:
    return "not measured" if seconds is None else f"{1e3 * seconds:.3f} ms"


def render(result: dict[str, Any]) -> None:
    """Print one trace's breakdown (an `analyze_path` entry) as text."""
    step = result["step_sec"]
    share = (lambda s: "" if s is None else f"{100 * s / step:.0f}%") if step > 0 else (lambda s: "-")
    steps = result["steps"]
    print(result["path"])
    print(f"  {steps} step{'s' if steps != 1 else ''} ({result['step_source']}), {_ms(step)} per step")
    if result.get("unmeasured"):
        print(f"  {result['unmeasured']}: no compute, communication, transfer or other figure is measured")
    for part in ("input", "compute", "communication", "transfer", "other"):
        value = result[f"{part}_sec"]
        if value is not None:
            print(f"  {part:<14} {_ms(value):>12}  {share(value):>4}")
        if part == "other" and value is not None and result.get("host_sec"):
            host = result["host_sec"]
            print(f"    {'host':<12} {_ms(host):>12}  {share(host):>4}  outside the compiled step (Python, callbacks)")
            if result.get("host_work"):
                print("      on the training thread per step (activities can nest, and overlap the device's work):")
            for work in result.get("host_work", ()):
                print(f"      {_ms(work['sec_per_step']):>12}  {work['name']}")
    for name, device in result["devices"].items():
        replicas = ", ".join(str(r) for r in device["replicas"]) or "none"
        print(
            f"  {name:<8} compute {_ms(device['compute_sec'])}, communication {_ms(device['communication_sec'])}, "
            f"transfer {_ms(device['transfer_sec'])}; replica {replicas}"
        )
    _render_kernels(result)
    stage = result.get("input_stage")
    if stage:
        print(f"  slowest input stage: {stage['name']} ({_ms(stage['sec_per_step'])} per batch; {stage['path']})")
    for note in result["notes"]:
        print(f"  note: {note}")
    for hint in result["hints"]:
        if hint != result.get("unmeasured"):  # said above
            print(f"  hint: {hint}")


def _render_kernels(result: dict[str, Any]) -> None:
    """The kernel view: time per step by class, then the top kernels."""
    classes = result.get("kernel_classes") or {}
    if not classes:
        return
    total = sum(c["sec_per_step"] for c in classes.values())
    by_class = ", ".join(f"{k} {_ms(c['sec_per_step'])} ({c['share']:.0%})" for k, c in classes.items())
    print(f"  kernels     {_ms(total)} per step: {by_class}")
    for kernel in result.get("kernels", ()):
        print(f"    {_ms(kernel['sec_per_step']):>12}  {kernel['share']:>4.0%}  {kernel['kind']:<12} {kernel['name']}")
