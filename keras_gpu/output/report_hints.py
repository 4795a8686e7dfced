"""The hints of `keras-gpu report`: sentences that follow from a run's records, each naming its measurement."""

from __future__ import annotations

from collections.abc import Sequence

from keras_gpu.meters.step_hints import verdict
from keras_gpu.output.report_records import ClusterReport, EpochTimes, RunSummary

__all__ = ["FIRST_STEP_SHARE", "GPU_BUSY_PERCENT", "report_hints", "run_hints"]

#: The first execution of each epoch is worth a hint from this share of the training time on.
FIRST_STEP_SHARE = 0.2
#: A GPU is worth a hint when NVML saw it busy less than this share of the time.
GPU_BUSY_PERCENT = 50.0


def run_hints(r: RunSummary) -> list[str]:
    """One run's hints: the step-time verdict, slow first executions, idle GPUs, CPU fallbacks."""
    hints = []
    step = r.step_time
    if step is not None:
        for hint in verdict(step.step, step.replica_names):
            where = "in" if hint == step.step.unmeasured else "measured on"
            hints.append(f"{r.label}: {hint} ({where} {step.step.steps} traced steps).")
    times = r.time
    if times and times.train_sec > 0 and times.first_step_sec / times.train_sec >= FIRST_STEP_SHARE:
        hints.append(_first_execution_hint(r.label, times))
    for gpu, metrics in r.memory.gpus.items():
        util = metrics.get("utilization_percent")
        if util and util.mean < GPU_BUSY_PERCENT:
            where = " See step_time/ for where the rest of the step goes." if step is None else ""
            hints.append(
                f"{r.label}: NVML saw GPU {gpu} running a kernel only {util.mean:.0f}% of the time on "
                f"average.{where}"
            )
    placement = r.placement
    if placement and placement.cpu_fallback_ops:
        top = ", ".join(f"{t} x{n}" for t, n in placement.top_fallbacks[:3])
        hints.append(
            f"{r.label}: {placement.cpu_fallback_ops} op(s) of the training step ran on the CPU while the "
            f"replicas sit on GPUs ({top}); see placement/cpu_fallbacks in TensorBoard."
        )
    return hints


def _first_execution_hint(label: str, times: EpochTimes) -> str:
    """Where the first executions' time went: once (the first epoch: tracing, compiling) or at every epoch.

    Later epochs count as paying it too where their first executions took, on
    average, at least half of the first epoch's.
    """
    total, first = times.first_step_sec, times.first_epoch_first_step_sec
    head = (
        f"{label}: the first execution of each epoch took {total:.1f} s in all, "
        f"{total / times.train_sec:.0%} of the training time (time/first_step_sec)"
    )
    later = (total - first) / (times.epochs - 1) if times.epochs > 1 else 0.0
    if times.epochs > 1 and later >= 0.5 * first:
        return (
            f"{head}: {first:.1f} s in the first epoch and {later:.1f} s in each later one on average: tracing, "
            "warm-up and starting the input iterator at every epoch."
        )
    rest = f", {first:.1f} s of it in the first epoch" if times.epochs > 1 else ""
    return f"{head}{rest}: tracing and compiling the training step and warm-up, paid once in this run."


def report_hints(runs: Sequence[RunSummary], cluster: ClusterReport | None) -> list[str]:
    """Every hint of a report: the cluster's straggler sentence first, then each run's in order."""
    hints = [hint for r in runs for hint in run_hints(r)]
    if cluster is not None:
        hints.insert(0, f"cluster: {cluster.sentence} (from {cluster.gathers} gather(s) of every worker's breakdown).")
    return hints
