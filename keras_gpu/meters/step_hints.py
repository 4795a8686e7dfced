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
    "HOST_BOUND_BUSY",
    "HOST_EXPLAINS",
    "HOST_FIXES",
    "SLOW_REPLICA_RATIO",
    "SLOW_REPLICA_SHARE",
    "TUNE_POINTER",
    "host_hint",
    "host_work_text",
    "idle_hint",
    "input_hint",
    "slow_replica",
    "verdict",
]

#: A part of the step counts as the bottleneck from this share on.
BOUND_SHARE = 0.3
#: A step is host-bound where its devices are busy (computing, communicating, copying) less than this share
#: of it...
HOST_BOUND_BUSY = 0.5
#: ...and the host's time outside the compiled step is at least this share of the rest. On an H200 a small
#: MLP (`tests/data/h200_jax_small_mlp.xplane.pb`) kept the GPU busy 1.8% of a 1.92 ms step, and the host
#: spent 1.50 ms of the 1.81 ms rest outside the compiled step (83%): host-bound. A transformer
#: (`h200_jax_transformer_bf16.xplane.pb`) kept it busy 61% of an 8.47 ms step: not host-bound, its idle
#: share explained by `idle_hint`.
HOST_EXPLAINS = 0.5
#: What to try for a host-bound step.
#: Appended to the bound hints: the command that measures their fixes on the user's script.
TUNE_POINTER = "`keras-gpu tune` measures the fixes"
HOST_FIXES = (
    "Fixes: more steps per call (`model.compile(..., steps_per_execution=N)`), a bigger batch, fewer synchronous "
    "callbacks (on JAX and PyTorch a callback that overrides a batch-end hook without `async_safe = True` makes "
    f"every step wait), `jit_compile=True`; {TUNE_POINTER} on your script"
)
#: A host activity is named in a hint from this share of the step on.
_HOST_WORK_SHARE = 0.05

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


def host_work_text(step: StepTime, least: float = 0.0) -> str:
    """The host activities of `step` (`StepTime.host_work`) from `least` of the step on, as a phrase; empty if none."""
    named = []
    for work in step.host_work:
        if work.sec_per_step < least * step.step_sec:
            continue
        wait = (
            f" ({1e3 * work.wait_sec_per_step:.2f} ms of it waiting for the step's result)"
            if work.wait_sec_per_step >= 0.5 * work.sec_per_step else ""
        )
        named.append(f"{work.name} {1e3 * work.sec_per_step:.2f} ms{wait}")
    return ", ".join(named)


def _on_device(step: StepTime) -> bool:
    """Whether the breakdown read device timelines (a report's, where its traces had kernels)."""
    return step.source in ("gpu", "tpu") or (step.source == "report" and bool(step.kernel_classes))


def _device(step: StepTime) -> str:
    """"the GPU", "the GPUs", "the TPU cores": the devices of a breakdown, for sentences."""
    kind = step.source.upper() if step.source in ("gpu", "tpu") else "GPU" if step.kernel_classes else "device"
    many = len(step.devices) > 1
    return f"the {kind} cores" if kind == "TPU" and many else f"the {kind}{'s' if many else ''}"


def host_hint(step: StepTime) -> str | None:
    """The host-bound verdict, with its numbers and the fixes; `None` unless the step is host-bound.

    Host-bound, on a trace with device planes: the devices are busy less than
    `HOST_BOUND_BUSY` of the step and the host's time outside the compiled
    step (`StepTime.host_sec`) is at least `HOST_EXPLAINS` of the rest. On a
    host-only trace (a CPU job): the host's time is at least `BOUND_SHARE` of
    the step and more than its input, compute and communication.
    """
    if not _on_device(step):
        share = step.share("host")
        if share < BOUND_SHARE or share <= max(step.share(p) for p in ("input", "compute", "communication")):
            return None
        return (
            f"host-bound: {share:.0%} of each step is host time outside the step function (Keras' loop, "
            f"callbacks); more steps per call (`steps_per_execution`) or a bigger batch spread it: {TUNE_POINTER}"
        )
    busy, rest = step.device_busy_sec, step.step_sec - step.device_busy_sec
    if not step.step_sec > 0 or not busy < HOST_BOUND_BUSY * step.step_sec:
        return None
    if not (rest > 0 and step.host_sec >= HOST_EXPLAINS * rest):
        return None
    work = host_work_text(step, _HOST_WORK_SHARE)
    return (
        f"host-bound: {_device(step)} compute{'' if len(step.devices) > 1 else 's'} {_ms(step.compute_sec)} of a {_ms(step.step_sec)} step "
        f"({step.share('compute'):.1%}); the host spends {_ms(step.host_sec)} per step outside the compiled step"
        f"{f' (on the training thread: {work})' if work else ''}. {HOST_FIXES}"
    )


def idle_hint(step: StepTime) -> str | None:
    """Where the time goes while the devices idle `BOUND_SHARE` or more of a step that is not host-bound; else `None`.

    The idle time is the step less the devices' busy time; the host's share
    of it is `StepTime.host_sec`, with the activities the trace names.
    """
    idle = step.step_sec - step.device_busy_sec
    if not _on_device(step) or not step.step_sec > 0 or not idle >= BOUND_SHARE * step.step_sec:
        return None
    work = host_work_text(step, _HOST_WORK_SHARE)
    waits = any(w.wait_sec_per_step >= _HOST_WORK_SHARE * step.step_sec for w in step.host_work)
    why = (
        "; the training thread waits for each step's result before it dispatches the next, so the device waits "
        "for the host in between: a callback that reads each step's logs on the training thread (on JAX and "
        "PyTorch, one that overrides a batch-end hook without `async_safe = True`) makes every step wait, and "
        "`steps_per_execution=N` dispatches N steps at once"
        if waits else ""
    )
    waiting = f", input {_ms(step.input_sec)}" if step.input_sec > 0 else ""
    return (
        f"{_device(step)} {'are' if len(step.devices) > 1 else 'is'} idle {_ms(idle)} of each {_ms(step.step_sec)} "
        f"step ({idle / step.step_sec:.0%}): the host spends {_ms(step.host_sec)} per step outside the compiled "
        f"step{f' (on the training thread: {work})' if work else ''}{waiting}{why}"
    )


def _ms(seconds: float) -> str:
    """Milliseconds with three significant digits (three decimals below 0.1 ms)."""
    ms = 1e3 * seconds
    return f"{ms:.3f} ms" if ms < 0.1 else f"{ms:#.3g} ms".replace(". ms", " ms")


def verdict(step: StepTime, replica_labels: Sequence[str] | None = None) -> list[str]:
    """Hints that follow from the measurement, each naming its number; empty when none does.

    A trace of a GPU job without GPU activity says so first (and no device
    hint follows). An input-bound hint names the input stage with the most self time
    (`StepTime.input_stage`) and what to try for it; a
    communication-bound one names the collectives; a host-bound one
    (`host_hint`) names the host's work and the fixes, and a step whose
    devices idle for another reason gets `idle_hint`.
    """
    if step.unmeasured:
        return [step.unmeasured] + ([input_hint(step)] if step.share("input") >= BOUND_SHARE else [])
    hints = []
    if step.share("input") >= BOUND_SHARE:
        hints.append(input_hint(step))
    if step.share("communication") >= BOUND_SHARE:
        hints.append(
            f"communication-bound: {step.share('communication'):.0%} of each step is spent in collectives "
            "(reductions and exchanges between devices or workers, waiting for a slower worker included); if no "
            "worker is a straggler, a larger batch per replica, fewer replicas per host link, or a faster "
            "interconnect helps"
        )
    if step.share("transfer") >= BOUND_SHARE:
        hints.append(
            f"transfer-bound: {step.share('transfer'):.0%} of each step copies between host and device while the "
            "device computes nothing; keep tensors on the device and prefetch input to it"
        )
    host = host_hint(step)
    hints.extend([host] if host else [h for h in (idle_hint(step),) if h])
    slow = slow_replica(step.replicas, step.step_sec)
    if slow is not None:
        index, ratio = slow
        label = replica_labels[index] if replica_labels and index < len(replica_labels) else f"replica {index}"
        hints.append(
            f"slow replica: {label} computes {ratio:.1f}x as long per step as the median of the others; "
            "every replica waits for it"
        )
    return hints
