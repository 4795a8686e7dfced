"""Memory readings as tag values: the one place an allocator, host or NVML reading becomes `memory/*` and `gpu/*`.

The reader turns the same tags back into records
(`keras_gpu.output.tag_records`).
"""

from __future__ import annotations

from keras_gpu.core.units import format_bytes
from keras_gpu.output import tags as _tags

__all__ = ["allocator_values", "epoch_log_values", "gpu_values", "host_values", "pool_values", "pool_words"]


def allocator_values(device: str, current_bytes: float, peak_bytes: float, run_peak_bytes: float) -> dict[str, float]:
    """One allocator's window (`device` as in the tags, e.g. `GPU_0`): current, window peak and run peak bytes."""
    return {
        _tags.ALLOC_CURRENT.name(device=device): current_bytes,
        _tags.ALLOC_PEAK.name(device=device): peak_bytes,
        _tags.ALLOC_RUN_PEAK.name(device=device): run_peak_bytes,
    }


def host_values(rss_bytes: float | None, peak_rss_bytes: float | None) -> dict[str, float]:
    """The process's resident set and its peak, where measured."""
    values = {}
    if rss_bytes is not None:
        values[_tags.HOST_RSS.name()] = rss_bytes
    if peak_rss_bytes is not None:
        values[_tags.HOST_PEAK_RSS.name()] = peak_rss_bytes
    return values


def gpu_values(gpu: int | str, metric: str, mean: float, maximum: float) -> dict[str, float]:
    """One NVML metric of one GPU over a window: its mean, and its maximum where the metric varies.

    `metric` is the sampler's metric name (e.g. `utilization_percent`); the
    tags are the declared `gpu/{gpu}/<metric>` and `gpu/{gpu}/<metric>_max`.
    """
    values = {_tags.by_name(f"gpu/{{gpu}}/{metric}").name(gpu=str(gpu)): mean}
    if metric != "memory_total_bytes":  # a constant: no window maximum
        values[_tags.by_name(f"gpu/{{gpu}}/{metric}_max").name(gpu=str(gpu))] = maximum
    return values


def epoch_log_values(run_peaks: dict[str, float], peak_rss_bytes: float | None) -> dict[str, float]:
    """The peaks so far for Keras' epoch `logs`, by tag name: each allocator's (by device label) and the host's.

    An allocator that counted nothing (TensorFlow's CPU allocator leaves small
    tensors out) is left out rather than shown as 0 bytes.
    """
    values = {_tags.ALLOC_RUN_PEAK.name(device=device): peak for device, peak in run_peaks.items() if peak > 0}
    if peak_rss_bytes is not None:
        values[_tags.HOST_PEAK_RSS.name()] = peak_rss_bytes
    return values


def pool_values(device: str, pool_bytes: float) -> dict[str, float]:
    """The size of the pool the allocator of `device` preallocated (JAX on a GPU), where the backend reports it."""
    return {_tags.ALLOC_POOL.name(device=device): pool_bytes}


def pool_words(pool_bytes: float | None, setting: str) -> str:
    """JAX's preallocated pool in words, for the end-of-fit line and `keras-gpu report`.

    Args:
        pool_bytes: Its size as JAX reports it, `None` where it does not
            (then no number is given).
        setting: The environment variables that decide it
            (`keras_gpu.core.backend.jax_preallocation`), `""` where unknown.

    Returns:
        E.g. `"JAX's preallocated pool 105.0 GiB (XLA_PYTHON_CLIENT_PREALLOCATE
        unset: on by default; ...; set XLA_PYTHON_CLIENT_PREALLOCATE=false to
        allocate on demand)"`.

    Examples:
        >>> pool_words(None, "XLA_PYTHON_CLIENT_PREALLOCATE=true")
        "JAX's preallocated pool, its size not reported by JAX (XLA_PYTHON_CLIENT_PREALLOCATE=true; set XLA_PYTHON_CLIENT_PREALLOCATE=false to allocate on demand)"
    """
    size = f" {format_bytes(pool_bytes)}" if pool_bytes is not None else ", its size not reported by JAX"
    said = f"{setting}; " if setting else ""
    return f"JAX's preallocated pool{size} ({said}set XLA_PYTHON_CLIENT_PREALLOCATE=false to allocate on demand)"
