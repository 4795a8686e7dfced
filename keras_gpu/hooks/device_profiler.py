"""Whether the GPU profiler works in this process: one trace of a GPU job without GPU activity turns tracing off.

JAX's GPU profiler, once it failed to start (`cuptiSubscribe: error 15:
CUPTI_ERROR_NOT_INITIALIZED`, which XLA prints on stderr while Python sees
no exception), failed again at every later start in the same process on an
H200, and each start and stop still cost about 0.3 s. So after one trace
without GPU activity (`keras_gpu.meters.step_time.StepTime.unmeasured`),
`StepTimeLogger` starts no more traces in the process, later fits included,
and says so once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from keras_gpu.core import topology
from keras_gpu.core.log import log_once

__all__ = ["expected_device", "failed", "turn_off"]

_FAILED = threading.Event()


def failed() -> bool:
    """Whether a trace of this process held no GPU activity where the job ran on GPUs (tracing is then off)."""
    return _FAILED.is_set()


def turn_off(sentence: str) -> None:
    """Turn tracing off in this process after a trace without GPU activity, with one warning (per process)."""
    _FAILED.set()
    log_once(
        logging.WARNING,
        "step_time:no-device-activity",
        "keras-gpu: StepTimeLogger: %s, so the trace's compute, communication and other are not measured; "
        "StepTimeLogger starts no more traces in this process (a GPU profiler that failed to start fails again, "
        "and each start costs time).",
        sentence,
    )


def expected_device(devices: Iterable[str]) -> str | None:
    """`"GPU"` where any of the replicas' `devices` is a GPU, else `None` (for `step_time.analyze(expect_device=)`)."""
    for device in devices:
        parsed = topology.parse_device(device)
        if parsed is not None and parsed.device_type == "GPU":
            return "GPU"
    return None
