"""Every TensorBoard tag keras-gpu writes: its name, unit, meaning and chart, in one table.

The callbacks build tag names with `Tag.name`, the custom-scalars
layout groups them into charts with `charts`, and `keras-gpu report`
recognises them with `match`. A tag with fields (`{device}`,
`{replica}`, `{gpu}`) stands for one series per device, replica or GPU.

Field values:

* `device`: a device label such as `GPU_0` or `CPU_0` (see
  `keras_gpu.core.topology.device_label`);
* `replica`: `<global replica index>_<device label>`, e.g. `1_GPU_1`;
* `gpu`: a TensorFlow-style GPU index (`0`, `1`, ...).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from keras_gpu.meters import cluster_view as _rule

__all__ = ["TAGS", "Tag", "by_name", "charts", "match", "rates"]

_FIELD = re.compile(r"\{(\w+)\}")
_FIELD_REGEX = {"device": r"[A-Za-z]+_\d+", "replica": r"\d+_[A-Za-z]+_\d+", "gpu": r"\d+"}

_EVERY_BACKEND = ("tensorflow", "jax", "torch")
# The backends each writer of tags runs on: step time needs a profiler (none on PyTorch), the cluster view is
# multi-worker TensorFlow and multi-process JAX, placement reads TensorFlow's placed graphs.
_BACKENDS: dict[str, tuple[str, ...]] = {
    "ThroughputLogger": _EVERY_BACKEND,
    "MemoryLogger": _EVERY_BACKEND,
    "MemoryLogger (NVML)": _EVERY_BACKEND,
    "StepTimeLogger": ("tensorflow", "jax"),
    "StepTimeLogger (chief)": ("tensorflow", "jax"),
    "StepTimeLogger (chief, TensorFlow)": ("tensorflow",),
    "PlacementLogger": ("tensorflow",),
    "keras-gpu scale": ("tensorflow", "jax"),
    "keras-gpu tune": _EVERY_BACKEND,
}

# Chart categories, in the order TensorBoard's Custom Scalars tab shows them.
_THROUGHPUT = "keras-gpu: throughput"
_TIME = "keras-gpu: where the time goes"
_MEMORY = "keras-gpu: memory"
_GPU = "keras-gpu: GPU"
_PLACEMENT = "keras-gpu: placement"


@dataclass(frozen=True)
class Tag:
    """One logged series (or a family of them, one per device, replica or GPU).

    Attributes:
        pattern: The tag name, with `{field}` placeholders for families.
        unit: The unit of the values.
        meaning: What one point says; the docs' tag reference is generated from it.
        callback: The callback that writes it (its backends: `backends`).
        chart: `(category, title)` of its custom-scalars chart, or `None`.
        text: Whether it is a Markdown text summary rather than a scalar.
        rate: For a `throughput/` rate, the record `ThroughputLogger` takes
            it from: `"window"` (each logging window's
            `keras_gpu.meters.throughput_records.Window`) or `"epoch"` (each
            epoch's `EpochTimes`), whose field is the tag's name after
            `throughput/`; `keras-gpu report` reads it back by the same rule.
        epoch_log: Whether the epoch's value also goes into Keras' epoch
            `logs` (the field of `EpochRates` of the same name).
    """

    pattern: str
    unit: str
    meaning: str
    callback: str
    chart: tuple[str, str] | None = None
    text: bool = False
    rate: str | None = None
    epoch_log: bool = False

    @property
    def field(self) -> str:
        """The tag's name after its first `/`: the record field that holds its value."""
        return self.pattern.split("/", 1)[1]

    @property
    def backends(self) -> tuple[str, ...]:
        """The Keras backends on which `callback` writes this tag (`tensorflow`, `jax`, `torch`)."""
        return _BACKENDS[self.callback]

    @property
    def fields(self) -> tuple[str, ...]:
        """The placeholders in `pattern`, in order."""
        return tuple(_FIELD.findall(self.pattern))

    def name(self, **fields: object) -> str:
        """The concrete tag name, e.g. `ALLOC_CURRENT.name(device="GPU_0")`."""
        missing = set(self.fields) - set(fields)
        extra = set(fields) - set(self.fields)
        if missing or extra:
            raise ValueError(
                f"Tag {self.pattern!r} takes the fields {list(self.fields)}. Received: {sorted(fields)}"
            )
        return self.pattern.format(**fields)

    @property
    def regex(self) -> str:
        """A regex matching every concrete name of this tag (anchored, no groups)."""
        return self._regex(named=False)

    def _regex(self, named: bool) -> str:
        out, last = [], 0
        for m in _FIELD.finditer(self.pattern):
            out.append(re.escape(self.pattern[last : m.start()]))
            group = f"?P<{m.group(1)}>" if named else "?:"
            out.append(f"({group}{_FIELD_REGEX.get(m.group(1), '[^/]+')})")
            last = m.end()
        out.append(re.escape(self.pattern[last:]))
        return "^" + "".join(out) + "$"

    def match(self, tag: str) -> dict[str, str] | None:
        """The field values when `tag` is a name of this tag, else `None`."""
        regex = _REGEX_CACHE.get(self.pattern)  # compiled once per tag: the report matches every logged tag
        if regex is None:
            regex = _REGEX_CACHE[self.pattern] = re.compile(self._regex(named=True))
        m = regex.fullmatch(tag)
        return None if m is None else m.groupdict()


_REGEX_CACHE: dict[str, re.Pattern[str]] = {}


def _gpu_pair(metric: str, unit: str, meaning: str, chart: tuple[str, str]) -> tuple[Tag, Tag]:
    """An NVML metric's window mean and window maximum."""
    return (
        Tag(f"gpu/{{gpu}}/{metric}", unit, f"{meaning} (mean of the window's samples)", "MemoryLogger (NVML)", chart),
        Tag(f"gpu/{{gpu}}/{metric}_max", unit, f"{meaning} (maximum of the window's samples)", "MemoryLogger (NVML)", chart),
    )


# -- throughput ------------------------------------------------------------------
SAMPLES_PER_SEC = Tag(
    "throughput/samples_per_sec", "samples/s",
    "training samples per second of wall-clock time, all replicas on all workers; the window's time runs from the "
    "epoch's start (first execution included) to the end of its last training step, and excludes validation",
    "ThroughputLogger", (_THROUGHPUT, "samples/s, all replicas: wall clock, and steady state per epoch"),
    rate="window", epoch_log=True,
)
STEPS_PER_SEC = Tag(
    "throughput/steps_per_sec", "steps/s", "training steps per second of wall-clock time, same windows as samples/s",
    "ThroughputLogger", (_THROUGHPUT, "steps/s: wall clock, and steady state per epoch"), rate="window",
)
SAMPLES_PER_SEC_PER_REPLICA = Tag(
    "throughput/samples_per_sec_per_replica", "samples/s",
    "samples/s divided by the number of replicas: each replica's share of the global rate (not measured per replica; "
    "see step_time/replica_*)",
    "ThroughputLogger", (_THROUGHPUT, "samples/s per replica (share of the global rate)"), rate="window",
)
TOKENS_PER_SEC = Tag(
    "throughput/tokens_per_sec", "tokens/s",
    "samples/s times the tokens per sample the user gave (`tokens_per_sample=`), all replicas on all workers; same "
    "windows as samples/s",
    "ThroughputLogger", (_THROUGHPUT, "tokens/s, all replicas"), rate="window",
)
STEADY_SAMPLES_PER_SEC = Tag(
    "throughput/steady_samples_per_sec", "samples/s",
    "once per epoch: samples/s of the epoch's training phase with its first execution (tracing, iterator start) "
    "and every execution that compiled a new batch shape left out (in time/first_step_sec)",
    "ThroughputLogger", (_THROUGHPUT, "samples/s, all replicas: wall clock, and steady state per epoch"),
    rate="epoch", epoch_log=True,
)
STEADY_STEPS_PER_SEC = Tag(
    "throughput/steady_steps_per_sec", "steps/s",
    "once per epoch: steps/s of the epoch's training phase with its first execution and the executions that "
    "compiled left out",
    "ThroughputLogger", (_THROUGHPUT, "steps/s: wall clock, and steady state per epoch"), rate="epoch",
)
TFLOPS_PER_SEC = Tag(
    "throughput/tflops_per_sec", "TFLOP/s (1e12 FLOP/s)",
    "achieved model FLOP/s of all replicas: training FLOPs per sample times samples/s",
    "ThroughputLogger", (_THROUGHPUT, "TFLOP/s"), rate="window",
)
MFU = Tag(
    "throughput/mfu", "fraction 0..1",
    "model FLOPs utilisation: achieved FLOP/s over the summed dense peak of all replica devices",
    "ThroughputLogger", (_THROUGHPUT, "MFU (0..1)"), rate="window", epoch_log=True,
)
STEADY_MFU = Tag(
    "throughput/steady_mfu", "fraction 0..1",
    "once per epoch: MFU at the steady rate (throughput/steady_samples_per_sec): the first execution and the "
    "executions that compiled left out",
    "ThroughputLogger", (_THROUGHPUT, "MFU (0..1)"), rate="epoch",
)

# -- time per epoch --------------------------------------------------------------
EPOCH_SEC = Tag(
    "time/epoch_sec", "s",
    "wall time of the epoch, from its start to the start of the next (or the end of fit): "
    "train_sec + validation_sec + other_sec",
    "ThroughputLogger", (_TIME, "epoch time and its parts (s)"),
)
TRAIN_SEC = Tag(
    "time/train_sec", "s", "training phase of the epoch: from its start to the end of its last training step",
    "ThroughputLogger", (_TIME, "epoch time and its parts (s)"),
)
FIRST_STEP_SEC = Tag(
    "time/first_step_sec", "s",
    "the epoch's first execution (tracing, warm-up, iterator start) and any other that compiled a new batch "
    "shape, part of train_sec",
    "ThroughputLogger", (_TIME, "first execution of each epoch (s)"),
)
VALIDATION_SEC = Tag(
    "time/validation_sec", "s", "validation inside fit, from Keras' on_test_begin to on_test_end",
    "ThroughputLogger", (_TIME, "epoch time and its parts (s)"),
)
OTHER_EPOCH_SEC = Tag(
    "time/other_sec", "s", "the rest of the epoch: epoch-end callbacks (checkpoints, logging) and Keras' own work",
    "ThroughputLogger", (_TIME, "epoch time and its parts (s)"),
)

# -- step-time breakdown (sampled from profiler traces) ----------------------------
_STEP_CHART = (_TIME, "seconds per step: input, compute, communication, transfer, other")
STEP_SEC = Tag(
    "step_time/step_sec", "s/step", "measured wall time per training step over the traced steps",
    "StepTimeLogger", _STEP_CHART,
)
STEP_TRACED_STEPS = Tag(
    "step_time/traced_steps", "steps", "training steps in the trace the breakdown was measured on",
    "StepTimeLogger", None,
)
STEP_INPUT_SEC = Tag(
    "step_time/input_sec", "s/step",
    "time per step the step waited for the input pipeline while no device computed or communicated",
    "StepTimeLogger", _STEP_CHART,
)
STEP_COMPUTE_SEC = Tag(
    "step_time/compute_sec", "s/step", "time per step at least one replica device ran a model op",
    "StepTimeLogger", _STEP_CHART,
)
STEP_COMMUNICATION_SEC = Tag(
    "step_time/communication_sec", "s/step",
    "time per step spent in collectives (cross-replica or cross-worker reductions and exchanges, copies between "
    "devices) while no device computed",
    "StepTimeLogger", _STEP_CHART,
)
STEP_TRANSFER_SEC = Tag(
    "step_time/transfer_sec", "s/step",
    "time per step spent copying between host and device (and within a device's memory) while no device computed "
    "or communicated",
    "StepTimeLogger", _STEP_CHART,
)
STEP_OTHER_SEC = Tag(
    "step_time/other_sec", "s/step",
    "the rest of the step: host-side overhead (Python, callbacks, launching) and idle time; "
    "input_sec + compute_sec + communication_sec + transfer_sec + other_sec = step_sec",
    "StepTimeLogger", _STEP_CHART,
)
STEP_HOST_SEC = Tag(
    "step_time/host_sec", "s/step",
    "the part of other_sec outside the backend's compiled step: Python between steps (Keras' loop, callbacks)",
    "StepTimeLogger", _STEP_CHART,
)
REPLICA_COMPUTE_SEC = Tag(
    "step_time/replica_{replica}/compute_sec", "s/step",
    "time per step this replica's device ran its model ops, attributed by where the ops really ran",
    "StepTimeLogger", (_TIME, "compute seconds per step, per replica"),
)
REPLICA_COMMUNICATION_SEC = Tag(
    "step_time/replica_{replica}/communication_sec", "s/step",
    "time per step this replica's collectives (reductions, exchanges between devices) ran",
    "StepTimeLogger", (_TIME, "communication seconds per step, per replica"),
)
STEP_INPUT_STAGE = Tag(
    "step_time/input_stage", "Markdown",
    "the input stage with the most self time per batch in the traced steps (a tf.data stage, or the Python input "
    "that reads a PyDataset or generator), its milliseconds per batch, and the input-bound hint with what to try",
    "StepTimeLogger", text=True,
)
STEP_KERNELS = Tag(
    "step_time/kernels", "Markdown",
    "the kernel view of the trace: kernel time per step by class (attention, matmul, convolution, elementwise, "
    "copy, collective) and the kernels with the most time per step",
    "StepTimeLogger", text=True,
)
STEP_HOST_WORK = Tag(
    "step_time/host_work", "Markdown",
    "what the training thread did per step, as the profiler's Python tracer saw it (dispatch of the compiled step, "
    "Keras' log conversion, ...), milliseconds per step each",
    "StepTimeLogger", text=True,
)
STEP_UNMEASURED = Tag(
    "step_time/unmeasured", "text",
    "where a GPU job's trace holds no GPU activity, the sentence that says so (\"no GPU activity in this trace: the "
    "GPU profiler did not start\"); that trace's compute, communication, transfer and other are not logged",
    "StepTimeLogger", text=True,
)

# -- the cluster view (the chief's run of a multi-worker job) -------------------------
_CLUSTER = "keras-gpu: cluster"
CLUSTER_SLOWEST_WORKER = Tag(
    "cluster/slowest_worker", "worker index",
    "the worker the others wait for: the one with the most busy (non-waiting) time per step since the last gather",
    "StepTimeLogger (chief)", (_CLUSTER, "slowest worker (index)"),
)
CLUSTER_IMBALANCE = Tag(
    "cluster/imbalance", "fraction",
    "the share of each step the other workers wait for the slowest: its busy time per step minus the median of the "
    "other workers', over the step time (0: balanced)",
    "StepTimeLogger (chief)", (_CLUSTER, "imbalance (slowest busy - median busy) / step"),
)
CLUSTER_WORKERS_REPORTING = Tag(
    "cluster/workers_reporting", "workers",
    "workers that measured steps since the last gather (the others sent 'not available')",
    "StepTimeLogger (chief)", (_CLUSTER, "workers reporting"),
)
CLUSTER_PART = Tag(
    "cluster/straggler_part", "part index",
    "the part of the slowest worker's busy time that exceeds the other workers' median of the same part the most: "
    "0 compute (TensorFlow only), 1 input wait, 2 host time between steps",
    "StepTimeLogger (chief)", (_CLUSTER, "slowest worker's part (0 compute, 1 input, 2 host)"),
)
CLUSTER_PART_SEC = Tag(
    "cluster/part_sec", "s/step", "the slowest worker's seconds per step in that part",
    "StepTimeLogger (chief)", (_CLUSTER, "slowest worker's part against the others' median (s/step)"),
)
CLUSTER_PART_MEDIAN_SEC = Tag(
    "cluster/part_median_sec", "s/step", "the other workers' median of that part, seconds per step",
    "StepTimeLogger (chief)", (_CLUSTER, "slowest worker's part against the others' median (s/step)"),
)
CLUSTER_EXCESS_SEC = Tag(
    "cluster/excess_sec", "s/step", "the slowest worker's busy time per step minus the other workers' median",
    "StepTimeLogger (chief)", (_CLUSTER, "excess against the others' spread (s/step)"),
)
CLUSTER_SPREAD_SEC = Tag(
    "cluster/others_spread_sec", "s/step",
    "the spread of the other workers' busy times per step the slowest worker is judged against: 1.4826 times their "
    f"median absolute deviation, pooled with a prior of {_rule.PRIOR_NOISE:.0%} of their median where they are few, "
    f"and never below {_rule.NOISE_FLOOR:.0%} of it",
    "StepTimeLogger (chief)", (_CLUSTER, "excess against the others' spread (s/step)"),
)
_SCORE_CHART = (_CLUSTER, "slowest worker's score against the threshold (spreads)")
CLUSTER_SLOWEST_SCORE = Tag(
    "cluster/slowest_score", "spreads",
    "the slowest worker's excess over the other workers' median, in spreads (`cluster/others_spread_sec`)",
    "StepTimeLogger (chief)", _SCORE_CHART,
)
CLUSTER_SCORE_THRESHOLD = Tag(
    "cluster/score_threshold", "spreads",
    "how many spreads a worker's excess must exceed to stand out among n reporting workers: the normal quantile "
    f"at 1 - {_rule.FALSE_ALARM:g}/n, so that a balanced cluster's noise passes it in {_rule.FALSE_ALARM:.0%} of "
    f"gathers ({_rule.score_threshold(2):.2f} at 2 workers, {_rule.score_threshold(64):.2f} at 64, "
    f"{_rule.score_threshold(1024):.2f} at 1,024)",
    "StepTimeLogger (chief)", _SCORE_CHART,
)
CLUSTER_WORKERS_OUT = Tag(
    "cluster/workers_out", "workers",
    "workers that stand out in this gather: past the threshold, with the others waiting for each more than "
    f"{_rule.STRAGGLER_IMBALANCE:.0%} of every step",
    "StepTimeLogger (chief)", (_CLUSTER, "workers standing out"),
)
CLUSTER_STRAGGLER = Tag(
    "cluster/straggler", "worker index",
    "the straggler over the fit's gathers so far: the worker that stood out in more than half of them (-1: none); "
    "its last value is the end-of-fit verdict's",
    "StepTimeLogger (chief)", (_CLUSTER, "straggler over the fit so far (-1: none)"),
)
CLUSTER_SLOWEST_WORKERS = Tag(
    "cluster/slowest_workers", "Markdown",
    f"the workers with the highest scores at this gather, highest first ({_rule.SLOWEST_KEPT}, and every worker "
    "standing out): index, busy time per step, "
    "imbalance, score in spreads, the part that differs most, and whether each stands out; the fit's verdict is "
    "read from these tables alone, at any number of workers",
    "StepTimeLogger (chief)", text=True,
)
CLUSTER_SLOWDOWN = Tag(
    "cluster/slowdown", "ratio",
    "the largest ratio, over the workers, of a worker's busy time per step in the latest window to its own best "
    f"window so far in the fit (1: no worker slowed; named from {_rule.SLOWDOWN_NAMED} on, for the same worker in two "
    "gathers or more)",
    "StepTimeLogger (chief)", (_CLUSTER, "slowdown against each worker's own best window"),
)
CLUSTER_SLOWDOWN_MEDIAN = Tag(
    "cluster/slowdown_median", "ratio",
    "the median, over the workers, of that ratio: how much the cluster as a whole slowed (named from "
    f"{_rule.SLOWDOWN_NAMED} on, in two gathers or more)",
    "StepTimeLogger (chief)", (_CLUSTER, "slowdown against each worker's own best window"),
)
CLUSTER_SLOWDOWN_WORKER = Tag(
    "cluster/slowdown_worker", "worker index", "the worker with that ratio",
    "StepTimeLogger (chief)", (_CLUSTER, "slowdown against each worker's own best window"),
)
CLUSTER_VERDICT = Tag(
    "cluster/verdict", "text",
    "the end-of-fit verdict over the fit's gathers: the straggler with its part, or no straggler; and a worker "
    "slowed against its own best window",
    "StepTimeLogger (chief)", text=True,
)


def _cluster_stats(part: str, meaning: str, callback: str = "StepTimeLogger (chief)") -> tuple[Tag, Tag, Tag]:
    chart = (_CLUSTER, f"{part} seconds per step across workers: min, median, max")
    return tuple(  # type: ignore[return-value]
        Tag(f"cluster/{part}_sec/{stat}", "s/step", f"{stat} across workers of {meaning}", callback, chart)
        for stat in ("min", "median", "max")
    )


CLUSTER_BUSY_MIN, CLUSTER_BUSY_MEDIAN, CLUSTER_BUSY_MAX = _cluster_stats(
    "busy", "the busy time per step: input, compute and host time outside the step function (not waiting for peers)"
)
CLUSTER_INPUT_MIN, CLUSTER_INPUT_MEDIAN, CLUSTER_INPUT_MAX = _cluster_stats("input", "step_time/input_sec")
CLUSTER_COMMUNICATION_MIN, CLUSTER_COMMUNICATION_MEDIAN, CLUSTER_COMMUNICATION_MAX = _cluster_stats(
    "communication", "step_time/communication_sec (not on JAX, whose compiled step is not split)",
    "StepTimeLogger (chief, TensorFlow)",
)

# -- memory ------------------------------------------------------------------------
ALLOC_CURRENT = Tag(
    "memory/allocator/{device}/current_bytes", "bytes",
    "bytes the framework's allocator holds on the device, read at the end of the window (between steps when the "
    "window closes at a batch end, otherwise at any point of a step)",
    "MemoryLogger", (_MEMORY, "allocator in use (bytes), per device"),
)
ALLOC_PEAK = Tag(
    "memory/allocator/{device}/peak_bytes", "bytes",
    "the allocator's peak within the window: its peak counter where that rose in the window, else the largest of "
    "the window's reads of bytes in use (read about every half second; a spike between reads below an earlier high "
    "is missed)",
    "MemoryLogger", (_MEMORY, "allocator peak (bytes), window and run, per device"),
)
ALLOC_RUN_PEAK = Tag(
    "memory/allocator/{device}/run_peak_bytes", "bytes", "the allocator's peak so far in this fit (its windows' peaks)",
    "MemoryLogger", (_MEMORY, "allocator peak (bytes), window and run, per device"),
)
ALLOC_POOL = Tag(
    "memory/allocator/{device}/pool_bytes", "bytes",
    "the pool JAX preallocated on the GPU, used or not (`pool_bytes` of `Device.memory_stats()`, where JAX reports "
    "it): NVML's memory of this process counts all of it",
    "MemoryLogger", (_MEMORY, "allocator in use (bytes), per device"),
)
ALLOC_PREALLOCATION = Tag(
    "memory/allocator/{device}/preallocation", "Markdown",
    "JAX preallocates a pool on this GPU: the environment variables that decide it, and how to allocate on demand",
    "MemoryLogger", text=True,
)
HOST_RSS = Tag(
    "memory/host/rss_bytes", "bytes", "resident set size of this process at the end of the window",
    "MemoryLogger", (_MEMORY, "host RSS (bytes)"),
)
HOST_PEAK_RSS = Tag(
    "memory/host/peak_rss_bytes", "bytes", "peak resident set size of this process so far (never below rss_bytes)",
    "MemoryLogger", (_MEMORY, "host RSS (bytes)"),
)
_GPU_MEM_USED = (_MEMORY, "GPU memory used, all processes (bytes), per GPU")
GPU_MEMORY_USED, GPU_MEMORY_USED_MAX = _gpu_pair(
    "memory_used_bytes", "bytes", "memory used on the GPU by all processes", _GPU_MEM_USED
)
GPU_MEMORY_TOTAL = Tag(
    "gpu/{gpu}/memory_total_bytes", "bytes", "the GPU's total memory", "MemoryLogger (NVML)", _GPU_MEM_USED
)
GPU_PROCESS_MEMORY, GPU_PROCESS_MEMORY_MAX = _gpu_pair(
    "process_memory_bytes", "bytes",
    "memory used on the GPU by this process (absent where the driver does not list the process, e.g. in a container)",
    (_MEMORY, "GPU memory of this process (bytes), per GPU"),
)
GPU_UTILIZATION, GPU_UTILIZATION_MAX = _gpu_pair(
    "utilization_percent", "%", "share of time a kernel ran", (_GPU, "utilization (%), per GPU")
)
GPU_MEMORY_UTILIZATION, GPU_MEMORY_UTILIZATION_MAX = _gpu_pair(
    "memory_utilization_percent", "%", "share of time memory was read or written",
    (_GPU, "memory bandwidth utilization (%), per GPU"),
)
GPU_POWER, GPU_POWER_MAX = _gpu_pair("power_watts", "W", "power draw", (_GPU, "power (W), per GPU"))
GPU_TEMPERATURE, GPU_TEMPERATURE_MAX = _gpu_pair(
    "temperature_c", "°C", "GPU temperature", (_GPU, "temperature (C), per GPU")
)
GPU_SM_CLOCK, GPU_SM_CLOCK_MAX = _gpu_pair("sm_clock_mhz", "MHz", "SM clock", (_GPU, "SM clock (MHz), per GPU"))

# -- placement -------------------------------------------------------------------------
PLACEMENT_CPU_FALLBACK_OPS = Tag(
    "placement/cpu_fallback_ops", "ops", "ops of the training step on the CPU while the replicas sit on GPUs",
    "PlacementLogger", (_PLACEMENT, "CPU fallbacks and copies (ops)"),
)
PLACEMENT_COPY_OPS = Tag(
    "placement/copy_ops", "ops", "cross-device transfers (_Send/_Recv pairs) in the training step",
    "PlacementLogger", (_PLACEMENT, "CPU fallbacks and copies (ops)"),
)
PLACEMENT_HOST_DEVICE_COPY_OPS = Tag(
    "placement/host_device_copy_ops", "ops", "the transfers among them between host and accelerator memory",
    "PlacementLogger", (_PLACEMENT, "CPU fallbacks and copies (ops)"),
)
PLACEMENT_STRATEGY = Tag(
    "placement/strategy", "Markdown",
    "the strategy: its class and keras-gpu kind, replicas in sync, this worker's replica devices, worker index and "
    "count, chief",
    "PlacementLogger", text=True,
)
PLACEMENT_VARIABLES = Tag(
    "placement/variables", "Markdown",
    "where each variable lives: its path, group, shape, dtype, kind and component devices, and bytes per device set",
    "PlacementLogger", text=True,
)
PLACEMENT_OPS_PER_DEVICE = Tag(
    "placement/ops_per_device", "Markdown",
    "ops of the training step per device: placed ops, compute ops and XLA clusters", "PlacementLogger", text=True,
)
PLACEMENT_COPIES = Tag(
    "placement/copies", "Markdown", "cross-device transfers per step, by kind and by tensor", "PlacementLogger",
    text=True,
)
PLACEMENT_CPU_FALLBACKS = Tag(
    "placement/cpu_fallbacks", "Markdown",
    "the ops that ran on a CPU while the replicas run on accelerators, by type and by name", "PlacementLogger",
    text=True,
)

# -- the scaling study (`keras-gpu scale`; the step is the total replica count) --------
_SCALE = "keras-gpu: scaling"
_SPEEDUP_CHART = (_SCALE, "speed-up against ideal (step: total replicas)")
SCALE_SAMPLES_PER_SEC = Tag(
    "scale/samples_per_sec", "samples/s",
    "samples per second of the configuration's measured window (warm-up, compilation and validation left out)",
    "keras-gpu scale", (_SCALE, "samples/s (step: total replicas)"),
)
SCALE_SPEEDUP = Tag(
    "scale/speedup", "x", "samples/s over the first configuration's", "keras-gpu scale", _SPEEDUP_CHART,
)
SCALE_IDEAL_SPEEDUP = Tag(
    "scale/ideal_speedup", "x", "linear scaling: total replicas over the first configuration's", "keras-gpu scale",
    _SPEEDUP_CHART,
)
SCALE_EFFICIENCY = Tag(
    "scale/efficiency", "fraction", "speed-up over ideal speed-up (1: linear)", "keras-gpu scale",
    (_SCALE, "efficiency (step: total replicas)"),
)
SCALE_TABLE = Tag(
    "scale/table", "Markdown", "the study's table: one row per configuration, with the cause of each shortfall",
    "keras-gpu scale", text=True,
)

# -- the fixes measured (`keras-gpu tune`; the step is the row's number in the table) --------
_TUNE = "keras-gpu: fixes measured"
TUNE_SAMPLES_PER_SEC = Tag(
    "tune/samples_per_sec", "samples/s",
    "samples per second of the row's measured window (step: the row's number in `tune/table`)",
    "keras-gpu tune", (_TUNE, "samples/s per change (step: row)"),
)
TUNE_SPEEDUP = Tag(
    "tune/speedup", "x", "samples/s over the mean of the baseline's two runs (step: the row's number)",
    "keras-gpu tune", (_TUNE, "speed-up against the baseline (step: row)"),
)
TUNE_TABLE = Tag(
    "tune/table", "Markdown",
    "the rows (change, samples/s, speed-up, part that moved, peak memory, losses), the skipped changes and the verdict",
    "keras-gpu tune", text=True,
)

TAGS: tuple[Tag, ...] = tuple(v for v in list(globals().values()) if isinstance(v, Tag))
"""Every tag, in declaration order."""

_BY_PATTERN = {t.pattern: t for t in TAGS}
__all__ += [name for name, value in list(globals().items()) if isinstance(value, Tag)]


def rates(record: str) -> tuple[Tag, ...]:
    """The `throughput/` rates `ThroughputLogger` takes from `record` (`"window"` or `"epoch"`; see `Tag.rate`)."""
    return tuple(t for t in TAGS if t.rate == record)


def by_name(pattern: str) -> Tag:
    """The tag declared with `pattern` (e.g. `"throughput/mfu"`)."""
    try:
        return _BY_PATTERN[pattern]
    except KeyError:
        raise KeyError(f"keras-gpu writes no tag {pattern!r}.") from None


def match(tag: str, candidates: Iterable[Tag] = TAGS) -> tuple[Tag, dict[str, str]] | None:
    """The declared tag that `tag` is a name of, with its field values; `None` if none is."""
    for t in candidates:
        if not t.fields:
            if t.pattern == tag:
                return t, {}
            continue
        fields = t.match(tag)
        if fields is not None:
            return t, fields
    return None


def charts() -> list[tuple[str, str, str]]:
    """`(category, title, regex)` per custom-scalars chart: one regex for all the chart's tags."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for t in TAGS:
        if t.chart is not None and not t.text:
            grouped.setdefault(t.chart, []).append(t.regex[1:-1])
    return [(cat, title, "^(?:" + "|".join(regexes) + ")$") for (cat, title), regexes in grouped.items()]
