"""What one configuration of a scaling study (`keras-gpu scale`) measured, and the arithmetic on it.

Bandwidth of an all-reduce, as nccl-tests defines it (its
`doc/PERFORMANCE.md`): the *algorithm bandwidth* is the buffer's bytes over
the time, and the *bus bandwidth* is that times `2 (n - 1) / n` for `n`
ranks, the share of the data every link carries in an optimal ring, so it
can be compared with the hardware's link speed whatever `n` is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["AllReduce", "RunResult", "algorithm_bandwidth", "bus_bandwidth", "work_factor"]


def algorithm_bandwidth(nbytes: float, seconds: float) -> float:
    """Bytes per second of an all-reduce of `nbytes` that took `seconds` (nccl-tests' `algbw`)."""
    if not seconds > 0:
        raise ValueError(f"`seconds` must be > 0. Received: seconds={seconds!r}")
    return nbytes / seconds


def bus_bandwidth(algbw: float, ranks: int) -> float:
    """nccl-tests' bus bandwidth of an all-reduce over `ranks`: `algbw * 2 (ranks - 1) / ranks`."""
    if ranks < 1:
        raise ValueError(f"`ranks` must be >= 1. Received: ranks={ranks!r}")
    return algbw * 2 * (ranks - 1) / ranks


@dataclass(frozen=True)
class AllReduce:
    """The all-reduce of one gradient-sized buffer over a row's devices, measured alone.

    Attributes:
        nbytes: Bytes of the buffer (the model's trainable weights).
        seconds: Median time of one all-reduce.
        ranks: Replicas taking part (all workers).
    """

    nbytes: int
    seconds: float
    ranks: int

    @property
    def algbw(self) -> float:
        """Algorithm bandwidth, bytes/s."""
        return algorithm_bandwidth(self.nbytes, self.seconds)

    @property
    def busbw(self) -> float:
        """Bus bandwidth, bytes/s."""
        return bus_bandwidth(self.algbw, self.ranks)


@dataclass(frozen=True)
class RunResult:
    """What one configuration's run measured over its window (every worker together).

    Attributes:
        workers: Worker processes.
        replicas: Replicas per worker.
        steps: Measured training steps.
        seconds: Wall time of the measured steps (the chief's).
        samples: Samples of the measured steps, all workers.
        parts: Seconds per step of `input`, `compute`, `communication`,
            `other` (the chief's), or `None` where not measured; a part may
            be `None` too, and JAX's compiled step, where compute and
            communication are one program, is `device`.
        grad_bytes: Bytes of the model's trainable weights (its gradients).
        allreduce: The all-reduce measured alone, or `None`.
        label: A name for the row in the terminal table (e.g. `"2 CPU"`).
        note: Why the breakdown is missing, where it is.
        halves: Seconds per step of the window's first and second half, or
            `None` where not measured (a part of the run-to-run spread).
        device: What the replicas are: `"CPU"` or the GPU's name.
        shares: Where the replicas share hardware (logical CPUs on the same
            cores, several replicas on one device), how, in words (e.g.
            `"2 replicas in 1 process of 2 logical CPUs on 2 CPU cores"`); empty where each has its own.
        versus_gpu: The `--cpu` row of a GPU machine: the CPU against the GPU
            baseline, not a scaling step.
    """

    workers: int
    replicas: int
    steps: int
    seconds: float
    samples: float
    parts: Mapping[str, float | None] | None
    grad_bytes: int = 0
    allreduce: AllReduce | None = None
    label: str = ""
    note: str = ""
    halves: tuple[float, float] | None = None
    device: str = "CPU"
    shares: str = ""
    versus_gpu: bool = False

    @property
    def total_replicas(self) -> int:
        """Replicas over all workers."""
        return self.workers * self.replicas

    @property
    def step_sec(self) -> float:
        """Wall seconds per measured step."""
        return self.seconds / self.steps

    @property
    def global_batch(self) -> float:
        """Samples per step, all workers."""
        return self.samples / self.steps


def work_factor(first: RunResult, r: RunResult) -> float:
    """How the per-replica work of a step in `r` compares with `first`: the ideal ratio of their step times."""
    return (r.global_batch / r.total_replicas) / (first.global_batch / first.total_replicas)
