"""The step-time breakdown as a record: `StepTime`, and the per-replica, per-device and input-stage figures in it.

Plain data, in seconds per step; `keras_gpu.meters.step_time.analyze`
measures it from a trace, the step probe from timestamps inside the step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from keras_gpu.meters.host_work import HostWork
from keras_gpu.meters.kernels import KernelTime

__all__ = ["DEVICE_PARTS", "DeviceTime", "InputStage", "ReplicaTime", "StepTime"]

#: The parts of a step that only a device's timeline measures (not measured where the trace holds none).
DEVICE_PARTS = ("compute", "communication", "transfer", "other")


@dataclass(frozen=True)
class ReplicaTime:
    """One replica's busy seconds per step.

    Attributes:
        compute_sec: Seconds per step its device ran model ops.
        communication_sec: Seconds per step its collectives (reductions, exchanges between devices) ran;
            host-device copies are not in it.
    """

    compute_sec: float
    communication_sec: float


@dataclass(frozen=True)
class DeviceTime:
    """One device's busy seconds per step, from its own timeline in the trace.

    Attributes:
        name: The device as the trace names it, `"GPU:4"`, `"TPU:0"`.
        compute_sec: Kernels (NCCL kernels left out).
        communication_sec: NCCL kernels and copies between devices (peer-to-peer).
        transfer_sec: Host-to-device and device-to-host copies, and copies within the device's memory.
        replicas: The local replicas mapped to it; empty when none is.
    """

    name: str
    compute_sec: float
    communication_sec: float
    transfer_sec: float
    replicas: tuple[int, ...] = ()


@dataclass(frozen=True)
class InputStage:
    """The input stage with the most self time.

    Attributes:
        name: The stage, `"ParallelMapV2"`, `"Generator"`, or `"Python input"`
            (a `PyDataset` or generator read by Python's `next()`).
        path: The tf.data iterator's full name
            (`"Iterator::Root::Prefetch::ParallelMapV2"`), or the name itself.
        sec_per_step: Its self time per step (per batch): its own time,
            leaving out the stages nested in it.
    """

    name: str
    path: str
    sec_per_step: float


@dataclass(frozen=True)
class StepTime:
    """The measured breakdown of the traced steps, in seconds per step.

    `input_sec + compute_sec + communication_sec + transfer_sec + other_sec == step_sec`.

    Where a GPU job's trace holds no GPU activity (`unmeasured`), the device
    parts (`DEVICE_PARTS`) and `host_sec` are NaN: not measured.

    Attributes:
        steps: Training steps in the trace.
        step_sec: Wall time per step.
        input_sec: Waiting for input while nothing else ran.
        compute_sec: At least one replica device computing.
        communication_sec: Collectives (reductions, exchanges between devices or
            workers) while no device computed.
        other_sec: Host-side overhead and idle time.
        replicas: Per local replica (in replica order), its own busy time.
        source: `"gpu"` when GPU timelines were read, `"tpu"` when TPU ones
            were (their `XLA Ops` lines), else `"host"`.
        host_sec: The part of `other_sec` outside the backend's step function:
            Python between steps (Keras' loop, callbacks). Where the trace
            names no step function, all of `other_sec`.
        step_source: Where `steps` and the window come from: `"host markers"`,
            `"device markers"` (GPU `Steps` lines), `"caller"` (the
            arguments), `"step function"` (executions of the step function)
            or `"trace"` (the span of the trace's events).
        devices: Per GPU in the trace that did work, its own busy time.
        input_stage: The input stage with the most self time, if the trace shows one.
        notes: What the reader could not attribute (a GPU that maps to no
            replica, a line it does not know, a replica scope that
            contradicts the mapping).
        transfer_sec: Copies between host and device (and within a device's
            memory) while no device computed or communicated.
        unmeasured: Where a GPU job's trace holds no GPU activity, the
            sentence that says so ("no GPU activity in this trace: the GPU
            profiler did not start"); else empty.
        host_work: What the training thread did per step, largest first
            (`keras_gpu.meters.host_work`), where the trace shows it.
        kernels: The kernels (and copies) with the most time per step
            (`keras_gpu.meters.kernels`), on all devices.
        kernel_classes: Kernel time per step by class, largest first.
    """

    steps: int
    step_sec: float
    input_sec: float
    compute_sec: float
    communication_sec: float
    other_sec: float
    replicas: tuple[ReplicaTime, ...]
    source: str
    host_sec: float = 0.0
    step_source: str = "caller"
    devices: tuple[DeviceTime, ...] = ()
    input_stage: InputStage | None = None
    notes: tuple[str, ...] = field(default=())
    transfer_sec: float = 0.0
    unmeasured: str = ""
    host_work: tuple[HostWork, ...] = ()
    kernels: tuple[KernelTime, ...] = ()
    kernel_classes: tuple[KernelTime, ...] = ()

    @property
    def device_busy_sec(self) -> float:
        """Seconds per step a device computed, communicated or copied (NaN where not measured)."""
        return self.compute_sec + self.communication_sec + self.transfer_sec

    @property
    def busy_sec(self) -> float:
        """Seconds per step this worker worked rather than waited for peers or the device runtime.

        Input, compute, and host time outside the step function; communication
        (where waiting for a slower worker lands) and the idle gaps inside the
        step function are left out.
        """
        return self.input_sec + self.compute_sec + self.host_sec

    def share(self, part: str) -> float:
        """A part's share of the step, 0..1 (`part` is `"input"`, `"compute"`, ...)."""
        value = getattr(self, f"{part}_sec")
        return value / self.step_sec if self.step_sec > 0 else 0.0 * value

    def as_dict(self) -> dict[str, Any]:
        """A JSON-serialisable copy."""
        fields = (
            "steps", "step_sec", "input_sec", "compute_sec", "communication_sec", "transfer_sec", "other_sec",
            "host_sec", "source", "step_source",
        )
        out = {k: _measured(getattr(self, k)) for k in fields}
        out["unmeasured"] = self.unmeasured or None
        out["host_work"] = [w._asdict() for w in self.host_work]
        out["kernels"] = [k._asdict() for k in self.kernels]
        out["kernel_classes"] = {k.name: {"sec_per_step": k.sec_per_step, "share": k.share} for k in self.kernel_classes}
        out["replicas"] = [{"compute_sec": r.compute_sec, "communication_sec": r.communication_sec} for r in self.replicas]
        out["devices"] = {
            d.name: {
                "compute_sec": d.compute_sec,
                "communication_sec": d.communication_sec,
                "transfer_sec": d.transfer_sec,
                "replicas": list(d.replicas),
            }
            for d in self.devices
        }
        stage = self.input_stage
        out["input_stage"] = None if stage is None else {"name": stage.name, "path": stage.path, "sec_per_step": stage.sec_per_step}
        out["notes"] = list(self.notes)
        return out


def _measured(value: Any) -> Any:
    """`None` for a figure that was not measured (NaN), else the value (JSON has no NaN)."""
    return None if isinstance(value, float) and math.isnan(value) else value
