"""What a step-time breakdown suggests: the bottleneck hints and the slow replica.

The slowest input stage as Markdown (the `step_time/input_stage` text
summary) is output: `keras_gpu.output.step_time_text`.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence

from keras_gpu.meters.step_record import ReplicaTime, StepTime

__all__ = [
    "BOUND_SHARE",
    "SLOW_REPLICA_RATIO",
    "SLOW_REPLICA_SHARE",
    "TUNE_POINTER",
    "host_hint",
    "input_hint",
    "slow_replica",
    "verdict",
]

#: A part of the step counts as the bottleneck from this share on.
BOUND_SHARE = 0.3
#: A replica is slow when its compute time is this much above the others' median...
SLOW_REPLICA_RATIO = 1.25
#: ...and the difference is at least this share of the step.
SLOW_REPLICA_SHARE = 0.1


def slow_replica(replicas: Sequence[ReplicaTime], step_sec: float) -> tuple[int, float] | None:
    """`(index, ratio)` of a replica whose compute time is clearly above the others' median, else `None`.

    Clearly: at least `SLOW_REPLICA_RATIO` times the median of the
    others, and longer by at least `SLOW_REPLICA_SHARE` of the step. The
    second condition keeps small, real differences quiet, such as the
    cross-replica work (summing gradients, aggregating metrics) that a
    mirrored strategy runs on its first device.
    """
    if len(replicas) < 2 or not step_sec > 0:
        return None
    compute = [r.compute_sec for r in replicas]
    slowest = max(range(len(compute)), key=compute.__getitem__)
    others = statistics.median(c for i, c in enumerate(compute) if i != slowest)
    if others <= 0 or (compute[slowest] - others) / step_sec < SLOW_REPLICA_SHARE:
        return None
    ratio = compute[slowest] / others
    return (slowest, ratio) if ratio >= SLOW_REPLICA_RATIO else None


#: What to try for the slowest input stage, by its name (first match; the last matches all). The Python
#: stages (`keras_gpu.meters.input_stages.PYTHON_STAGES`, JAX's traces) come first, by their whole
#: name; then tf.data's stages (TensorFlow's traces), where a `PyDataset` or a generator is the `Generator`
#: stage of `from_generator`.
_STAGE_ADVICE: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"^PyDataset workers$"),
        ("the training thread waits for the PyDataset's workers: raise its `workers`, set "
         "`use_multiprocessing=True` where `__getitem__` is CPU-bound Python, or make `__getitem__` cheaper"),
    ),
    (
        re.compile(r"^PyDataset\b"),
        ("it runs on the training thread, one batch at a time (a PyDataset with `workers=1` reads no batch ahead): "
         "set `workers` above 1 (and `use_multiprocessing=True` for CPU-bound Python) so batches are read ahead, "
         "or make it cheaper"),
    ),
    (
        re.compile(r"^generator$"),
        ("the generator runs on the training thread, one batch at a time: make it cheaper, or read the data in "
         "a PyDataset with `workers` above 1 so batches are read ahead"),
    ),
    (
        re.compile(r"^array slicing$"),
        "Keras slices and converts the arrays on the training thread: convert them to the model's input dtype once, before fit",
    ),
    (
        re.compile(r"^tf\.data iterator$"),
        "the tf.data pipeline, read as NumPy on the training thread: prefetch (`.prefetch(tf.data.AUTOTUNE)`), "
        "parallel map calls, or cache its output",
    ),
    (re.compile(r"^DataLoader$"), "raise the DataLoader's `num_workers` so batches are read ahead, or make its dataset cheaper"),
    (re.compile(r"^Grain$"), "raise the Grain loader's worker count, or make its transformations cheaper"),
    (
        re.compile(r"^Python input$"),
        "Keras' data iterator reads it in Python on the training thread: make the per-batch Python work cheaper",
    ),
    (
        re.compile(r"^Generator$"),
        ("Python code (a PyDataset or a generator, which the trace does not tell apart) feeds tf.data one batch "
         "at a time through from_generator: for a PyDataset, set `workers` above 1; for a generator, build the "
         "input from tf.data ops or read it in a PyDataset with workers"),
    ),
    (re.compile(r"Map"), "raise num_parallel_calls or cache its output"),
    (re.compile(r"Batch"), "batch in parallel (num_parallel_calls) or map after batching, over whole batches"),
    (
        re.compile(r"Interleave|Record|TextLine|FixedLength|FlatMap"),
        "read files in parallel (interleave with num_parallel_calls) or cache what it reads",
    ),
    (re.compile(r""), "cache its output or move its work out of the step's path (prefetch)"),
)


#: Appended to the bound hints: the command that measures their fixes on the user's script.
TUNE_POINTER = "`keras-gpu tune` measures the fixes"


def input_hint(step: StepTime) -> str:
    """The input-bound hint: the input share of the step, and what to try for the slowest stage where one is known."""
    share = f"input-bound: {step.share('input'):.0%} of each step waits for input"
    stage = step.input_stage
    if stage is None:
        return (
            f"{share}; make the input pipeline faster (more parallel map calls, caching, prefetching to the "
            f"device) or do less work per sample on the host; {TUNE_POINTER}"
        )
    advice = next(text for pattern, text in _STAGE_ADVICE if pattern.search(stage.name))
    where = f"{stage.path}, " if stage.path not in (stage.name, "") and "::" not in stage.path else ""
    return (
        f"{share}; the slowest stage is {stage.name} ({where}{1e3 * stage.sec_per_step:.3g} ms per batch): {advice}; "
        f"{TUNE_POINTER}"
    )


def host_hint(step: StepTime) -> str | None:
    """The host-bound hint where the host's time outside the step function is the step's largest part.

    Largest: at least `BOUND_SHARE` of the step and more than the input,
    compute and communication; else `None`.
    """
    share = step.share("host")
    if share < BOUND_SHARE or share <= max(step.share(p) for p in ("input", "compute", "communication")):
        return None
    return (
        f"host-bound: {share:.0%} of each step is host time outside the step function (Keras' loop, callbacks); "
        f"more steps per call (`steps_per_execution`) or a bigger batch spread it: {TUNE_POINTER}"
    )


def verdict(step: StepTime, replica_labels: Sequence[str] | None = None) -> list[str]:
    """Hints that follow from the measurement, each naming its number; empty when none does.

    An input-bound hint names the input stage with the most self time
    (`StepTime.input_stage`) and what to try for it; a
    communication-bound one says when host-device copies are most of it.
    """
    hints = []
    if step.share("input") >= BOUND_SHARE:
        hints.append(input_hint(step))
    host = host_hint(step)
    if host is not None:
        hints.append(host)
    if step.share("communication") >= BOUND_SHARE:
        copies = sum(d.transfer_sec for d in step.devices)
        if copies > step.communication_sec / 2:
            hints.append(
                f"communication-bound: {step.share('communication'):.0%} of each step is spent in reductions and "
                "transfers, mostly copies between host and device; keep tensors on the device and prefetch input "
                "to it"
            )
        else:
            hints.append(
                f"communication-bound: {step.share('communication'):.0%} of each step is spent in reductions and "
                "transfers (waiting for a slower worker included); if no worker is a straggler, a larger batch per "
                "replica, fewer replicas per host link, or a faster interconnect helps"
            )
    slow = slow_replica(step.replicas, step.step_sec)
    if slow is not None:
        index, ratio = slow
        label = replica_labels[index] if replica_labels and index < len(replica_labels) else f"replica {index}"
        hints.append(
            f"slow replica: {label} computes {ratio:.1f}x as long per step as the median of the others; "
            "every replica waits for it"
        )
    return hints
