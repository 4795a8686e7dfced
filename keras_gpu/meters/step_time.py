"""Where a training step's time goes, measured from a profiler trace.

Plain Python over an XSpace (see `keras_gpu.meters.xspace`), as TensorFlow's and
JAX's profilers write it. `analyze` takes the trace of a few training
steps and splits each step's time into five parts that add up to it:

* **input**: the step waited for the input pipeline (`tf.data` `GetNext`
  calls, `IteratorGetNext` ops, and on JAX the `next()` of Keras' data
  iterator, `keras_gpu.meters.python_input`) while no device computed,
  communicated or copied;
* **compute**: at least one replica device ran a model op, a kernel, or a
  compiled (XLA) program;
* **communication**: a collective, a cross-replica or cross-worker
  reduction or exchange, ran (`_Send`/`_Recv`, collective ops, NCCL
  kernels, peer-to-peer copies between GPUs) while no device computed; a
  multi-worker collective counts from its start to its end, so the time a
  worker waits for a slower peer is here;
* **transfer**: a copy between host and device (or within one device's
  memory) ran while no device computed or communicated: a single GPU's
  input copies are transfers, never communication;
* **other**: the rest: host-side overhead (Python, callbacks, launching
  work) and idle time; `StepTime.host_sec` is its part outside the
  backend's step function.

Each instant of the traced window counts once, in the first of compute,
communication, transfer, input that is active then, so the parts never add
up to more than the step.

**What a trace cannot show.** A GPU job's trace without GPU activity (the
GPU profiler did not start: host planes only, while the trace's
`/host:metadata` names a GPU, or the caller says the job ran on GPUs)
measures no device part: `StepTime.unmeasured` says so, and compute,
communication, transfer, other and host are NaN (`no_device_activity`).

**The kernel view and the host's work.** `StepTime.kernels` and
`StepTime.kernel_classes` sum each kernel's time per step inside the
devices' windows, classed by `keras_gpu.meters.kernels`;
`StepTime.host_work` names what the training thread did per step
(`keras_gpu.meters.host_work`), where the Python tracer was on.

**The window and the step count.** Where the trace marks its steps, the
breakdown uses the marks and says so (`StepTime.step_source`): host
step markers (events named `STEP_MARKER` with a `step_num` stat, on
any host thread, as `tf.profiler.experimental.Trace("train", step_num=n,
_r=1)` and JAX's `StepTraceAnnotation` write them) bound the window from the
first marked step's start to the last one's end, and nothing outside it
counts; a GPU plane's `Steps` line gives each device its own window per
step, and a step lasts as long as its slowest device's window. Without
marks, the caller's `steps` and `wall_sec` hold, else the step function's
executions or the trace's whole span, and a note says "no step markers"
and how the window was chosen. `StepTimeLogger` marks each
traced step from one batch end to the next, so its window holds exactly the
traced steps: the time after an epoch's last batch end (Keras' epoch-end
work, stopping a `PyDataset`'s workers, epoch-end callbacks) is never in it.

**GPU planes** are read line by line (`keras_gpu.meters.gpu_lines`): kernels on
the streams are compute, NCCL kernels and peer-to-peer copies are
communication, host-device copies and copies within a device are
transfers, and derived lines (`Steps`, `TensorFlow Ops`, `TensorFlow Name
Scope`, `XLA Ops`, ...) add nothing.
**TPU planes** (`/device:TPU:k`, in a trace without GPU planes) are read
from their `XLA Ops` line: HLO ops are compute, collectives communication,
asynchronous copies (`copy-start`, `copy-done`) transfers.

**Per replica**, compute and communication are the busy time of that
replica's work, attributed by where it really ran: on GPUs by the device's
own timeline, mapped to replicas by `gpu_replicas` (see
`keras_gpu.core.topology.trace_gpu_replicas`); on CPU devices by the
replica's name scope (`replica_k/`, and `update_k/` for the variable updates
a mirrored strategy runs on replica k). Ops outside any replica scope, and
compiled programs, whose ops carry no scope, count for replica 0. A GPU that
did work but maps to no replica is named in `StepTime.notes`.

The work is split by concept: the record (`keras_gpu.meters.step_record`),
reading the trace (`keras_gpu.meters.step_trace`), the input stage
(`keras_gpu.meters.input_stages`) and the hints
(`keras_gpu.meters.step_hints`); their public names are importable from
here too. The slowest input stage as Markdown is output
(`keras_gpu.output.step_time_text`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from keras_gpu.meters import xspace
from keras_gpu.meters._spans import Span, clip, union_length
from keras_gpu.meters.host_work import host_work
from keras_gpu.meters.input_stages import input_stage
from keras_gpu.meters.kernels import class_times, kernel_times
from keras_gpu.meters.step_hints import (
    BOUND_SHARE,
    SLOW_REPLICA_RATIO,
    SLOW_REPLICA_SHARE,
    slow_replica,
    verdict,
)
from keras_gpu.meters.step_record import DeviceTime, InputStage, ReplicaTime, StepTime
from keras_gpu.meters.step_trace import (
    COMMUNICATION_OPS,
    HOST_PLANE,
    INPUT_OPS,
    METADATA_PLANE,
    STEP_MARKER,
    GpuEvents,
    HostEvents,
    TraceSteps,
    classify_op,
    read_gpus,
    read_host,
    step_marker,
    steps_from,
    trace_steps,
)

__all__ = [
    "BOUND_SHARE",
    "COMMUNICATION_OPS",
    "INPUT_OPS",
    "SLOW_REPLICA_RATIO",
    "SLOW_REPLICA_SHARE",
    "STEP_MARKER",
    "DeviceTime",
    "InputStage",
    "ReplicaTime",
    "StepTime",
    "TraceSteps",
    "analyze",
    "classify_op",
    "input_stage",
    "no_device_activity",
    "slow_replica",
    "step_marker",
    "trace_steps",
    "unmeasured",
    "verdict",
]


def analyze(
    space: Any,
    *,
    steps: int | None = None,
    wall_sec: float | None = None,
    num_replicas: int = 1,
    gpu_replicas: Mapping[int, int | Sequence[int]] | None = None,
    steps_per_mark: int = 1,
    expect_device: str | None = None,
) -> StepTime:
    """The step-time breakdown of a trace of `steps` training steps that took `wall_sec`.

    Where the trace marks its steps (`trace_steps`), the marks give the
    step count and the window instead, and `StepTime.step_source` says
    so: nothing outside the marked steps counts.

    Args:
        space: An XSpace message (`keras_gpu.meters.xspace.load`).
        steps: Training steps the trace covers; `None`: the executions of the
            step function in the trace, else 1.
        wall_sec: Their wall time, measured by the caller around the trace;
            `None`: from the first to the last step function (or event) in the trace.
        num_replicas: This worker's replicas.
        gpu_replicas: For GPU traces, `{GPU index in the trace: local replica
            index, or several for logical GPUs sharing one device}`
            (`keras_gpu.core.topology.trace_gpu_replicas`); by default the
            GPUs that ran kernels, in index order, run replicas 0, 1, ...
        steps_per_mark: Training steps in each marked step: Keras'
            `steps_per_execution`, where each mark holds one call of the
            train function.
        expect_device: `"GPU"` where the caller knows the job ran on GPUs
            (its replicas' devices): a trace without GPU activity then says
            so (`StepTime.unmeasured`) instead of reading as a host-only
            trace. A trace whose `/host:metadata` names a GPU
            (`gpu_version`) says so too.

    Raises:
        ValueError: For `steps < 1`, `wall_sec <= 0`, `steps_per_mark < 1`,
            or a trace with neither a host plane nor a device plane that did work.
    """
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise ValueError(f"`steps` must be a positive integer. Received: steps={steps!r}")
    if isinstance(steps_per_mark, bool) or not isinstance(steps_per_mark, int) or steps_per_mark < 1:
        raise ValueError(
            "`steps_per_mark` must be a positive integer (the steps_per_execution of the traced fit). "
            f"Received: steps_per_mark={steps_per_mark!r}"
        )
    if wall_sec is not None and not wall_sec > 0:
        raise ValueError(f"`wall_sec` must be a positive number of seconds. Received: wall_sec={wall_sec!r}")
    by_name = xspace.planes(space)
    num_replicas = max(1, num_replicas)
    gpus = read_gpus(by_name)
    on_gpu = any(gpu.has_kernels or gpu.parts["transfer"] for gpu in gpus.values())
    if HOST_PLANE not in by_name and not on_gpu:
        raise ValueError(
            f"The trace has no {HOST_PLANE} plane and no GPU or TPU plane that did work. Received planes: {sorted(by_name)}"
        )
    host = read_host(by_name.get(HOST_PLANE), on_gpu, num_replicas)
    marked = steps_from(host.markers, gpus)
    notes: list[str] = []
    if marked is not None:
        if marked.source == "host markers" and steps_per_mark > 1:
            marked = marked._replace(steps=marked.steps * steps_per_mark)
        if steps is not None and steps != marked.steps:
            notes.append(f"the trace marks {marked.steps} steps where the caller counted {steps}; the marks are used")
        steps, wall_sec, source = marked.steps, sum(e - s for s, e in marked.windows) / 1e12, marked.source
    else:
        steps, wall_sec, source = _unmarked_window(host, gpus, steps, wall_sec)
        notes.append(_UNMARKED[source].format(steps=steps, s="s" if steps != 1 else "", wall_ms=1e3 * wall_sec))
    worked = {g for g, gpu in gpus.items() if any(clip(p, _device_windows(marked, g)) for p in gpu.parts.values())}
    mapping, mapping_notes = _replica_map(gpus, gpu_replicas, num_replicas, worked)
    windows = marked.windows if marked is not None else None
    parts = {k: clip(v, windows) for k, v in host.parts.items()}
    replicas = [{k: clip(v, windows) for k, v in r.items()} for r in host.replicas]
    parts["transfer"] = []
    for g, gpu in gpus.items():
        own = _device_windows(marked, g)
        for kind in ("compute", "communication", "transfer"):
            busy = clip(gpu.parts[kind], own)
            parts[kind].extend(clip(busy, windows))
            for r in mapping.get(g, ()) if kind != "transfer" else ():
                replicas[r][kind].extend(busy)
    result = _result(
        parts, replicas, host, gpus, mapping, marked,
        steps=steps, wall_sec=wall_sec, source=source, notes=tuple(notes + mapping_notes), on_gpu=on_gpu,
    )
    missing = None if on_gpu else no_device_activity(by_name, expect_device)
    return result if missing is None else unmeasured(result, missing)


#: The note of a trace without step markers, by where its window and step count came from.
_UNMARKED = {
    "caller": "no step markers: the window is the caller's, {steps} step{s} in {wall_ms:.6g} ms",
    "step function": (
        "no step markers: the window runs from the first execution of the step function to the end of the last, "
        "and each of its {steps} execution{s} counts as a step"
    ),
    "trace": (
        "no step markers: the window is the whole trace, from its first timed event to the end of its last "
        "({wall_ms:.6g} ms), counted as {steps} step{s}"
    ),
}


def _unmarked_window(
    host: HostEvents, gpus: Mapping[int, GpuEvents], steps: int | None, wall_sec: float | None
) -> tuple[int, float, str]:
    """`(steps, wall_sec, step_source)` of a trace without step marks: the caller's, else the trace's own."""
    if steps is not None and wall_sec is not None:
        return steps, wall_sec, "caller"
    spans = host.functions or [s for p in host.parts.values() for s in p] + [
        s for gpu in gpus.values() for p in gpu.parts.values() for s in p
    ]
    if wall_sec is None:
        if not spans:
            raise ValueError("The trace holds no step function and no timed work, so `wall_sec` is needed. Received: wall_sec=None")
        wall_sec = (max(e for _, e in spans) - min(s for s, _ in spans)) / 1e12
    source = "step function" if host.functions else "trace"
    return (steps if steps is not None else max(1, len(host.functions))), wall_sec, source


def _result(
    parts: dict[str, list[Span]],
    replicas: list[dict[str, list[Span]]],
    host: HostEvents,
    gpus: Mapping[int, GpuEvents],
    mapping: Mapping[int, tuple[int, ...]],
    marked: TraceSteps | None,
    *,
    steps: int,
    wall_sec: float,
    source: str,
    notes: tuple[str, ...],
    on_gpu: bool,
) -> StepTime:
    """Assemble the `StepTime` from the intervals of each part, per step."""
    # Each instant counts once, in the first part active then: compute, communication, transfer, input.
    covered, shares, active = 0, [], []
    for part in ("compute", "communication", "transfer", "input"):
        active.extend(parts.get(part, ()))
        union = union_length(active)
        shares.append((union - covered) / 1e12)
        covered = union
    if sum(shares) > wall_sec:  # the trace ran a little past the caller's window
        shares = [p * wall_sec / sum(shares) for p in shares]
    compute_s, comm_s, transfer_s, input_s = shares
    per_step = 1.0 / steps
    other_s = max(0.0, wall_sec - compute_s - comm_s - transfer_s - input_s)
    functions = clip(host.functions, marked.windows if marked is not None else None)
    host_s = other_s if not functions else min(other_s, max(0.0, wall_sec - union_length(functions) / 1e12))
    devices = []
    for g in sorted(gpus):
        own = _device_windows(marked, g)
        times = [union_length(clip(gpus[g].parts[k], own)) / 1e12 * per_step for k in ("compute", "communication", "transfer")]
        if any(times):
            devices.append(DeviceTime(gpus[g].name, *times, replicas=mapping.get(g, ())))
    return StepTime(
        steps=steps,
        step_sec=wall_sec * per_step,
        input_sec=input_s * per_step,
        compute_sec=compute_s * per_step,
        communication_sec=comm_s * per_step,
        other_sec=other_s * per_step,
        replicas=tuple(
            ReplicaTime(
                min(wall_sec, union_length(r["compute"]) / 1e12) * per_step,
                min(wall_sec, union_length(r["communication"]) / 1e12) * per_step,
            )
            for r in replicas
        ),
        source=next((gpu.device.lower() for gpu in gpus.values()), "gpu") if on_gpu else "host",
        host_sec=host_s * per_step,
        transfer_sec=transfer_s * per_step,
        host_work=host_work(host.python, marked.windows if marked is not None else None, steps),
        **_kernel_view(gpus, marked, steps),
        step_source=source,
        devices=tuple(devices),
        input_stage=input_stage(
            [e for e in host.iterators if _starts_in(e.start_ps, marked)],
            steps,
            [r for r in host.python_input if _starts_in(r.span[0], marked)],
        ),
        notes=notes,
    )


def _kernel_view(gpus: Mapping[int, GpuEvents], marked: TraceSteps | None, steps: int) -> dict[str, Any]:
    """`kernels` and `kernel_classes` of a `StepTime`: every device's kernels inside its own windows."""
    found: list[tuple[str, Span]] = []
    for g, gpu in gpus.items():
        own = _device_windows(marked, g)
        found.extend((name, span) for name, span in gpu.kernels for span in clip([span], own))
    top, _total = kernel_times(found, None, steps)
    return {"kernels": top, "kernel_classes": class_times(found, None, steps)}


def no_device_activity(by_name: Mapping[str, Any], expect_device: str | None = None) -> str | None:
    """The sentence for a trace of a GPU job without GPU activity; `None` where the job is not known to use a GPU.

    A GPU job is one whose caller says so (`expect_device="GPU"`), or whose
    trace's `/host:metadata` plane names a GPU (`gpu_version`, as JAX's
    profiler writes it), or that has a GPU plane at all.
    """
    meta = by_name.get(METADATA_PLANE)
    gpu_version = str(xspace.plane_stats(meta).get("gpu_version") or "") if meta is not None else ""
    has_plane = any(name.startswith("/device:GPU:") for name in by_name)
    if not (gpu_version or has_plane or (expect_device or "").upper() == "GPU"):
        return None
    why = f" (the trace's metadata names GPU {gpu_version})" if gpu_version else ""
    return f"no GPU activity in this trace: the GPU profiler did not start{why}"


def unmeasured(step: StepTime, sentence: str) -> StepTime:
    """`step` with its device parts not measured (NaN) and `sentence` saying why (`StepTime.unmeasured`)."""
    nan = float("nan")
    return dataclasses.replace(
        step, compute_sec=nan, communication_sec=nan, transfer_sec=nan, other_sec=nan, host_sec=nan,
        replicas=tuple(ReplicaTime(nan, nan) for _ in step.replicas), devices=(), kernels=(), kernel_classes=(),
        unmeasured=sentence,
    )


def _replica_map(
    gpus: Mapping[int, GpuEvents], gpu_replicas: Mapping[int, Any] | None, num_replicas: int, worked: set[int]
) -> tuple[dict[int, tuple[int, ...]], list[str]]:
    """`{GPU index: local replicas}` in range, and notes on GPUs that worked (`worked`) but no replica
    claims, and on GPUs whose kernels' replica scopes disagree with the mapping."""
    if gpu_replicas is None:  # the GPUs that ran kernels, in index order, as a strategy over them places replicas
        working = [g for g in sorted(gpus) if gpus[g].has_kernels]
        mapping = {g: (i,) for i, g in enumerate(working[:num_replicas])}
    else:
        mapping = {}
        for g, value in gpu_replicas.items():
            found = (value,) if isinstance(value, int) else tuple(value)
            mapping[int(g)] = tuple(r for r in found if 0 <= r < num_replicas)
    notes = []
    for g in sorted(gpus):
        gpu = gpus[g]
        if g in worked and not mapping.get(g):
            notes.append(f"{gpu.name} did work in the trace but maps to no replica; its time counts for no replica")
        scoped = [(k, n) for k, n in gpu.scopes.items() if k is not None]
        if mapping.get(g) and scoped:
            scope, count = max(scoped, key=lambda kn: kn[1])
            if 2 * count > sum(gpu.scopes.values()) and scope not in mapping[g]:
                replicas = ", ".join(str(r) for r in mapping[g])
                notes.append(f"{gpu.name}'s kernels come from replica_{scope}/ ops, but it is mapped to replica {replicas}")
        notes.extend(f"{gpu.name}: line {line!r} is not a known {gpu.device} line kind; not counted" for line in sorted(gpu.unknown_lines))
    return mapping, notes


def _starts_in(start_ps: int, steps: TraceSteps | None) -> bool:
    """Whether an event starting at `start_ps` starts inside the marked steps' windows (always, unmarked)."""
    return bool(clip([(start_ps, start_ps + 1)], steps.windows if steps is not None else None))


def _device_windows(steps: TraceSteps | None, g: int) -> Sequence[Span] | None:
    if steps is None:
        return None
    return steps.per_device.get(g, steps.windows)
