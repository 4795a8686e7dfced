"""Throughput records as tag values: the one place a window or an epoch's times become `throughput/*` and `time/*`.

The reader turns the same tags back into records
(:mod:`keras_gpu.output.tag_records`).
"""

from __future__ import annotations

from keras_gpu.meters.epoch_times import EpochRates, EpochTimes
from keras_gpu.meters.throughput_window import Window
from keras_gpu.output import tags as _tags

__all__ = ["epoch_log_values", "epoch_values", "window_values"]


def window_values(window: Window) -> dict[str, float]:
    """A window's rates by tag name; samples, TFLOP/s and MFU only where they were measured."""
    values = {_tags.STEPS_PER_SEC.name(): window.steps_per_sec}
    if window.samples_per_sec is not None:
        values[_tags.SAMPLES_PER_SEC.name()] = window.samples_per_sec
        values[_tags.SAMPLES_PER_SEC_PER_REPLICA.name()] = window.samples_per_sec_per_replica
    if window.tflops_per_sec is not None:
        values[_tags.TFLOPS_PER_SEC.name()] = window.tflops_per_sec
    if window.mfu is not None:
        values[_tags.MFU.name()] = window.mfu
    return values


def epoch_values(times: EpochTimes) -> dict[str, float]:
    """An epoch's times (and its steady rates, where known) by tag name."""
    values = {
        _tags.EPOCH_SEC.name(): times.epoch_sec,
        _tags.TRAIN_SEC.name(): times.train_sec,
        _tags.FIRST_STEP_SEC.name(): times.first_step_sec,
        _tags.VALIDATION_SEC.name(): times.validation_sec,
        _tags.OTHER_EPOCH_SEC.name(): times.other_sec,
    }
    if times.steady_steps_per_sec is not None:
        values[_tags.STEADY_STEPS_PER_SEC.name()] = times.steady_steps_per_sec
    if times.steady_samples_per_sec is not None:
        values[_tags.STEADY_SAMPLES_PER_SEC.name()] = times.steady_samples_per_sec
    return values


def epoch_log_values(rates: EpochRates) -> dict[str, float]:
    """An epoch's rates for Keras' epoch `logs` (History, the progress bar, CSVLogger), by tag name; where measured."""
    values = {}
    if rates.samples_per_sec is not None:
        values[_tags.SAMPLES_PER_SEC.name()] = rates.samples_per_sec
    if rates.steady_samples_per_sec is not None:
        values[_tags.STEADY_SAMPLES_PER_SEC.name()] = rates.steady_samples_per_sec
    if rates.mfu is not None:
        values[_tags.MFU.name()] = rates.mfu
    return values
