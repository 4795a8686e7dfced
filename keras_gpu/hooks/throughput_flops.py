"""The FLOPs and MFU set-up of `ThroughputLogger`: training FLOPs per sample and the replicas' summed peak FLOP/s.

Once per `fit`, never per batch. Where a number cannot be had, one INFO hint
(once per process) names the argument to pass, and the rates that need it
(`throughput/tflops_per_sec`, `throughput/mfu`) are not logged.
"""

from __future__ import annotations

import logging
from typing import Any

from keras_gpu.core import backend, topology
from keras_gpu.core.log import Once, call_with
from keras_gpu.hooks.fit_introspection import FitData
from keras_gpu.meters import model_flops

__all__ = ["flops_per_sample", "peak_flops_total"]


def flops_per_sample(
    model: Any, data: FitData | None, *, given: float | None, caller: object, once: Once
) -> float | None:
    """Training FLOPs per sample (forward and backward) of `model`, or `None` where they cannot be counted.

    Args:
        model: The model in `fit`.
        data: The running fit's data: its input spec counts a model not yet
            called.
        given: The user's `flops_per_sample`, which overrides the count.
        caller: The callback, named in the hint.
        once: Scope of the hint.
    """
    if given is not None:
        return float(given)
    value = model_flops.training_flops_per_sample(model)
    spec = None if data is None else data.x_spec if data.x_spec is not None else data.x_shapes
    if value is None and spec is not None:  # a dimension the model leaves to the data (RNN time steps): the data's
        value = model_flops.training_flops_per_sample(model, spec)
    if value is None:
        once.log(
            logging.INFO,
            "throughput:no-flops",
            "keras-gpu: ThroughputLogger could not count the FLOPs of model %r (%s), so "
            "throughput/tflops_per_sec and throughput/mfu are not logged; pass %s "
            "(training FLOPs per sample, about 3x the forward FLOPs) to log them.",
            getattr(model, "name", "?"),
            model_flops.flops_failure(model),
            call_with(caller, "flops_per_sample"),
        )
    return value


def peak_flops_total(
    model: Any, devices: list[str], num_replicas: int, *, given: float | None, caller: object, once: Once
) -> float | None:
    """The summed peak FLOP/s of all `num_replicas` replica devices for `model`'s compute dtype, or `None`.

    Args:
        model: The model in `fit`.
        devices: This worker's replica devices.
        num_replicas: Replicas of all workers.
        given: The user's `peak_flops` of one replica's device, which
            overrides the table of :mod:`keras_gpu.meters.flops`.
        caller: The callback, named in the hint.
        once: Scope of the hint.
    """
    if given is not None:
        return float(given) * num_replicas
    kinds = {topology.device_type(d) or "device" for d in devices}
    dtype = backend.compute_dtype(model)
    if kinds != {"GPU"}:
        once.log(
            logging.INFO,
            "throughput:no-peak",
            "keras-gpu: ThroughputLogger logs no throughput/mfu: no peak FLOP/s is known for %s devices. "
            "Pass %s (peak FLOP/s of one replica's device) to log it.",
            "/".join(sorted(kinds)),
            call_with(caller, "peak_flops"),
        )
        return None
    local, names = model_flops.gpu_peak_flops(model, dtype)
    if local is None:
        once.log(
            logging.INFO,
            "throughput:no-peak",
            "keras-gpu: ThroughputLogger logs no throughput/mfu: no %s peak FLOP/s is known for %s. "
            "Pass %s (peak FLOP/s of one replica's device) to log it.",
            dtype,
            ", ".join(sorted(set(names))) or "this GPU",
            call_with(caller, "peak_flops"),
        )
        return None
    return local * max(1, num_replicas // max(1, len(devices)))
