"""`MemoryLogger`: the backend's allocator, GPU (NVML) and host memory in TensorBoard."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

from keras_gpu.core import backend
from keras_gpu.core import nvml as _nvml
from keras_gpu.core.checks import check_bool, check_positive
from keras_gpu.core.host_memory import host_memory
from keras_gpu.core.log import log_once, logger
from keras_gpu.core.units import format_bytes
from keras_gpu.hooks._base import LoggingCallback, read_step
from keras_gpu.hooks.fit_introspection import FitWatch
from keras_gpu.meters.allocator_peak import WindowPeak
from keras_gpu.output import tags as _tags
from keras_gpu.output import writer as _writer
from keras_gpu.output.memory_tags import (
    allocator_values,
    epoch_log_values,
    gpu_values,
    host_values,
    pool_values,
    pool_words,
)
from keras_gpu.output.reader import uncounted_allocator

__all__ = ["MemoryLogger"]

_WATCH_PERIOD_S = 0.5
"""How often the background thread checks that the `fit` which started it is still running."""

_JOIN_TIMEOUT_S = 10.0

_MIN_EPOCH_WINDOW_S = 1.0
"""An epoch-end window is skipped when the previous window ended less than this long ago (or `every_s`, if shorter)."""


class MemoryLogger(LoggingCallback):
    """Logs memory (the backend's allocator, GPU, host) and GPU activity to TensorBoard.

    Everything is measured and written on background threads; the callback
    defines no per-batch hook, and nothing runs on the training thread's
    per-batch path. A *window* is written at the optimizer's current step
    every `every_s` seconds, at the end of each epoch (the training thread
    only raises a flag; an epoch that ends less than a second, or
    `every_s` if shorter, after the previous window is left to the next
    one, which bounds the cost of very short epochs) and at the end of
    training (on the training thread, once the background threads have
    stopped). What each window holds, with each tag's unit and meaning: the
    `memory/` and `gpu/` groups of the [tag reference](../tags.md#memory).

    The Keras backend's allocator is read for each device this worker trains
    on (TensorFlow: the model's distribution strategy, with logical CPU
    devices sharing one allocator, logged once as `CPU_0`; JAX: the devices
    of the `keras.distribution`, else the default device; PyTorch: the
    model's device; see `keras_gpu.core.backend`), from TensorFlow's
    `get_memory_info`, JAX's `Device.memory_stats()` or PyTorch's
    `torch.cuda.memory_stats` (what `memory_allocated` and
    `max_memory_allocated` read). It is read on the window thread about
    every half second (and at each window's end) while training runs, so a
    reading includes the step's temporaries (except the last window of
    `fit`, read after the last step). Reading it is a cheap, thread-safe call
    with no device synchronisation.

    The backend's peak counter belongs to the process, and keras-gpu leaves
    it alone: after `fit`, `torch.cuda.max_memory_allocated()` or
    `get_memory_info(...)["peak"]` read what they would without keras-gpu. A
    window's peak (`peak_bytes`) is the counter's value where the counter
    rose during the window (exact, short spikes included), else the largest
    bytes-in-use read of the window: a spike that came and went between two
    reads, below an earlier high of the counter, is then missed (see
    `keras_gpu.meters.allocator_peak`). `reset_peaks=True` resets the
    counter at the start of `fit` and after each window instead (TensorFlow's
    `reset_memory_stats`, PyTorch's `reset_peak_memory_stats`; JAX cannot),
    so that each window's peak is the counter's; the user's own readers of
    the peak then see the resets too.

    JAX preallocates a pool of 75% of each GPU's memory by default
    (`XLA_PYTHON_CLIENT_PREALLOCATE`, `XLA_CLIENT_MEM_FRACTION`), which NVML
    counts as this process's memory whatever the model uses of it. Where
    preallocation is on, the pool's size is logged
    (`memory/allocator/<device>/pool_bytes`, from `Device.memory_stats()`,
    where JAX reports it) with the setting
    (`memory/allocator/<device>/preallocation`), and the end-of-fit line and
    `keras-gpu report` name it beside NVML's figure and the allocator's peak.

    JAX and PyTorch keep no allocator statistics on CPU: there, the host
    readings are the process's memory, and the allocator is left out after
    one INFO line. TensorFlow (2.21) keeps them on CPU only with its oneDNN
    ops on, which it turns on by default only on CPUs with AVX-512
    (`TF_ENABLE_ONEDNN_OPTS=1` turns them on elsewhere); without them
    `get_memory_info` raises, and the allocator is left out after the same
    INFO line. With them, small allocations are left out (a 40 KB tensor
    is not counted, a 400 KB one is), so a tiny model may show 0 there.

    The host's memory comes from one read of `/proc/self/status` (`VmRSS`,
    `VmHWM`); without it, from `/proc/self/statm` and `resource.getrusage`.

    Each GPU this process trains on is sampled from NVML every
    `sample_interval_s` seconds by a background thread; a window logs the
    mean and the maximum of its samples. The GPU index in the tags is the
    CUDA ordinal of the GPU among this process's visible GPUs (TensorFlow's
    physical GPU index; see `keras_gpu.core.nvml` for how it maps to NVML).

    Without NVML (no driver, no `nvidia-ml-py`) or without a GPU, only the
    allocator and host metrics are logged, after one INFO line. A metric a
    GPU does not support is turned off for that GPU with one WARNING; if
    NVML fails during the run (a lost GPU), GPU sampling stops with one
    WARNING and training continues.

    The threads stop and are joined at the end of `fit`. If `fit` ends
    without calling `on_train_end` (an exception, Ctrl-C), they notice
    within about half a second that the `fit` that started them is no
    longer running, write a last window and stop; the next `fit` with the
    same callback also replaces anything left over.

    Args:
        log_dir: The TensorBoard log directory, shared with the other
            callbacks; each worker writes to its own run under it.
        every_s: Seconds between windows.
        sample_interval_s: Seconds between NVML samples (at most `every_s`).
        nvml: Log the NVML GPU metrics.
        allocator: Log the backend's allocator metrics.
        host: Log the host metrics.
        gpus: GPU indices (CUDA ordinals of this process) to monitor with
            NVML, or `None` for the GPUs the model trains on.
        per_worker_runs: Whether a worker other than the chief writes its own
            run (`log_dir/worker_k/train`). `None`: yes in jobs of up to 16
            workers; above that only the chief writes.
        epoch_logs: Whether each epoch's peaks so far, every allocator's
            `memory/allocator/<device>/run_peak_bytes` (where it counted
            something) and `memory/host/peak_rss_bytes`, are added to Keras'
            epoch `logs`, so that `History`, the progress bar, `CSVLogger` and
            any callback after this one in the list record them.
        reset_peaks: Reset the backend's peak counter of each allocator at
            the start of `fit` and after each window (TensorFlow, PyTorch).
            Off by default: the counter is the process's, and a reset changes
            what the user's own `torch.cuda.max_memory_allocated()` or
            `get_memory_info(...)["peak"]` read afterwards.

    Raises:
        TypeError, ValueError: An argument is malformed.

    Examples:
        >>> import os, tempfile
        >>> import numpy as np
        >>> import keras
        >>> import keras_gpu
        >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        >>> model.compile(optimizer="sgd", loss="mse")
        >>> x, y = np.zeros((16, 4), "float32"), np.zeros((16, 1), "float32")
        >>> with tempfile.TemporaryDirectory() as log_dir:
        ...     memory = keras_gpu.MemoryLogger(log_dir, every_s=1.0)
        ...     _ = model.fit(x, y, batch_size=4, epochs=1, callbacks=[memory], verbose=0)
        ...     print(os.listdir(log_dir))  # this process's run
        ['train']
    """

    DEFAULT_SAMPLE_INTERVAL_S = 0.5
    """Seconds between NVML samples unless `sample_interval_s` says otherwise."""

    def __init__(
        self,
        log_dir: str | os.PathLike,
        *,
        every_s: float = 10.0,
        sample_interval_s: float = DEFAULT_SAMPLE_INTERVAL_S,
        nvml: bool = True,
        allocator: bool = True,
        host: bool = True,
        gpus: Sequence[int] | None = None,
        per_worker_runs: bool | None = None,
        epoch_logs: bool = True,
        reset_peaks: bool = False,
    ) -> None:
        super().__init__(log_dir, per_worker_runs)
        self.epoch_logs = check_bool("epoch_logs", epoch_logs)
        self.reset_peaks = check_bool("reset_peaks", reset_peaks)
        # keras_gpu.callbacks() checked the every_s it forwards.
        self.every_s = float(check_positive("every_s", every_s))
        self.sample_interval_s = float(check_positive("sample_interval_s", sample_interval_s, minimum=0.001))
        if self.sample_interval_s > self.every_s:
            raise ValueError(
                "`sample_interval_s` must not exceed `every_s`, or windows would hold no sample. "
                f"Received: sample_interval_s={sample_interval_s!r}, every_s={every_s!r}"
            )
        for name, value in (("nvml", nvml), ("allocator", allocator), ("host", host)):
            check_bool(name, value)
        if not (nvml or allocator or host):
            raise ValueError(
                "MemoryLogger has nothing to log: set at least one of `nvml`, `allocator`, `host` to True. "
                "Received: nvml=False, allocator=False, host=False"
            )
        self.nvml = nvml
        self.allocator = allocator
        self.host = host
        self.gpus = _check_gpus(gpus)
        self._run: _Run | None = None

    # -- Keras hooks (no per-batch hook on purpose)

    def on_train_begin(self, logs: dict | None = None) -> None:
        self._end_run(abandoned=True)
        writer = self._open()
        if writer is None:  # this worker writes no run
            return
        watch = FitWatch.capture()
        allocators = backend.allocators(self.model) if self.allocator else []
        gpus = self._gpu_indices() if self.nvml else []
        run = _Run(self, writer, allocators, gpus, watch)
        run.start()
        self._run = run

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        run = self._run
        if run is not None:
            run.request_window()
            if self.epoch_logs and logs is not None:
                logs.update(run.epoch_peaks())  # read by History, the progress bar, CSVLogger, ...

    def on_train_end(self, logs: dict | None = None) -> None:
        try:
            self._end_run(abandoned=False)
        finally:
            self._close()

    # -- helpers

    def _end_run(self, *, abandoned: bool) -> None:
        run, self._run = self._run, None
        if run is not None:
            run.finish(abandoned=abandoned)

    def _gpu_indices(self) -> list[int]:
        """The GPUs to sample: `gpus`, or those the model's replicas run on."""
        if self.gpus is not None:
            return list(self.gpus)
        physical = backend.physical_gpus(self.model)
        if not physical:
            log_once(
                logging.INFO,
                "memory:no-gpu",
                "keras-gpu: MemoryLogger found no GPU in use by this process; it logs no gpu/ metrics.",
            )
        return physical


class _Run:
    """The state of one `fit`: devices, peaks, the sampler and the window thread."""

    def __init__(
        self,
        owner: MemoryLogger,
        writer: _writer.SummaryWriter,
        allocators: list[backend.Allocator],
        gpus: list[int],
        watch: FitWatch,
    ) -> None:
        self.model = owner.model
        self.writer = writer
        self.every_s = owner.every_s
        self.host = owner.host
        self.reset_peaks = owner.reset_peaks
        self.allocators = allocators
        self.windows_of: dict[str, WindowPeak] = {}  # allocator tag -> its window's peak so far
        self.pools: dict[str, backend.AllocatorPool] = {}  # allocator tag -> JAX's preallocated pool
        self.watch = watch
        self.sampler = (
            _nvml.GpuSampler(gpus, owner.sample_interval_s, alive=watch.alive, max_idle_s=None) if gpus else None
        )
        self.run_peaks: dict[str, int] = {}  # allocator tag -> bytes
        self._unread: dict[str, str] = {}  # allocator device -> why it has given no reading yet
        self.gpu_peaks: dict[tuple[int, str], float] = {}
        self.host_peak: int | None = None
        self.windows = 0
        self._step = 0
        self._written_step: int | None = None
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
        self._requested = False
        self._finished = False
        self._thread = threading.Thread(target=self._loop, name="keras-gpu-memory-logger", daemon=True)

    def start(self) -> None:
        """Read the allocators (`open`), then start the sampler and the window thread."""
        self.open()
        if self.sampler is not None:
            self.sampler.start()
        self._thread.start()

    def open(self) -> None:
        """Read each allocator once (resetting its peak counter where asked to) and name JAX's pools."""
        usable = []
        for allocator in self.allocators:
            counter = None  # not read yet: its first read counts
            try:
                reading = backend.allocator_memory(allocator)
                if reading is not None:
                    counter = self._reset(allocator, reading.peak_bytes)
            except Exception as exc:  # noqa: BLE001 - not yet available (TensorFlow before its first allocation)
                self._unread[allocator.device] = f"{type(exc).__name__}: {exc}"
            else:
                if reading is None:  # definitive: the backend keeps no statistics for this device
                    self._say_no_allocator(allocator.device, backend.allocator_unavailable(allocator.device))
                    continue
            usable.append(allocator)
            self.windows_of[allocator.tag] = WindowPeak(counter)
        self.allocators = usable
        self._step = read_step(self.model, 0)
        self._find_pools()

    def request_window(self) -> None:
        """Ask the window thread to write a window (called on the training thread).

        Only a flag: the thread polls it every `_WATCH_PERIOD_S`, and waking it
        with an event costs the training thread far more on a busy machine.
        """
        self._requested = True

    def epoch_peaks(self) -> dict[str, float]:
        """The peaks of this `fit` so far, for the epoch's `logs` (on the training thread, once per epoch).

        Reads each allocator once (cheap, no device synchronisation, no NVML,
        no lock: the window thread's state is only read) and the host's peak
        resident set.
        """
        peaks = dict(self.run_peaks)
        for allocator in self.allocators:
            try:
                reading = backend.allocator_memory(allocator)
            except Exception:  # noqa: BLE001, S112 - a device that went away: its last window's peak stands
                continue
            if reading is not None:
                window = self.windows_of[allocator.tag].so_far(reading.current_bytes, reading.peak_bytes)
                peaks[allocator.tag] = max(peaks.get(allocator.tag, 0), window)
        host_peak = None
        if self.host:
            rss, peak = host_memory()
            known = [p for p in (rss, peak, self.host_peak) if p is not None]
            host_peak = max(known) if known else None
        return epoch_log_values(peaks, host_peak)

    def finish(self, *, abandoned: bool) -> None:
        """Stop the threads, write the last window and log the summary (once)."""
        self._stopping = True
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(_JOIN_TIMEOUT_S)
        self._final(abandoned)

    # -- the window thread

    def _loop(self) -> None:
        try:
            min_gap = min(self.every_s, _MIN_EPOCH_WINDOW_S)
            last_window = time.monotonic()
            next_window = last_window + self.every_s
            while True:
                self._wake.wait(min(max(next_window - time.monotonic(), 0.0), _WATCH_PERIOD_S))
                self._wake.clear()
                if self._stopping:
                    return
                if not self.watch.alive():
                    self._final(abandoned=True)
                    return
                now = time.monotonic()
                requested, self._requested = self._requested, False
                if now >= next_window or (requested and now - last_window >= min_gap):
                    self.write_window()  # reads the allocators at the window's end
                    last_window = time.monotonic()
                    next_window = last_window + self.every_s
                else:
                    self.read_allocators()
        except Exception as exc:  # noqa: BLE001 - monitoring must never take training down
            logger.warning("keras-gpu: MemoryLogger stopped after an unexpected error: %s: %s", type(exc).__name__, exc)
            if self.sampler is not None:
                self.sampler.stop(timeout=0)

    def _final(self, abandoned: bool) -> None:
        with self._lock:
            if self._finished:
                return
            self._finished = True
        if self.sampler is not None:
            self.sampler.stop(timeout=_JOIN_TIMEOUT_S, final_sample=not abandoned)
        # A window already written at this step (the last epoch's) is not repeated.
        self.write_window()
        self.writer.flush()
        for device, error in sorted(self._unread.items()):
            # The backend's own words stay at DEBUG: the INFO line says what it means.
            logger.debug("keras-gpu: MemoryLogger: reading the %s allocator failed: %s", device, error)
            self._say_no_allocator(device, backend.allocator_unavailable(device))
        if abandoned:
            # Nobody will call on_train_end: close the run's event file now. The
            # other callbacks' writes become no-ops, and the next `fit` opens a
            # fresh writer.
            self.writer.close()
            logger.info(
                "keras-gpu: MemoryLogger: `fit` ended without `on_train_end` (interrupted); monitoring stopped. %s",
                self.summary(),
            )
        else:
            logger.info("keras-gpu: MemoryLogger: %s", self.summary())

    # -- one window

    def write_window(self) -> None:
        """Measure and write one window at the optimizer's current step.

        One point per step: while no step has finished since the last window
        (a long first step, compilation), nothing is measured or reset, and
        the window goes on until the next one.
        """
        with self._lock:
            if self._written_step is not None and read_step(self.model, self._step) <= self._written_step:
                return
            values: dict[str, float] = {}
            self._allocator_window(values)
            if self.host:
                self._host_window(values)
            if self.sampler is not None:
                self._gpu_window(values)
            self._step = max(self._step, read_step(self.model, self._step))
            if values:
                self.writer.scalars(values, self._step)
                self._written_step = self._step
            self.windows += 1

    def read_allocators(self) -> None:
        """Read each allocator into its window's peak (on the window thread, about every half second)."""
        with self._lock:
            for allocator in self.allocators:
                self._read(allocator)

    def _read(self, allocator: backend.Allocator) -> backend.AllocatorReading | None:
        try:
            reading = backend.allocator_memory(allocator)
        except Exception:  # noqa: BLE001 - a device that went away, or not allocated yet: no read
            return None
        if reading is not None:
            self._unread.pop(allocator.device, None)
            self.windows_of[allocator.tag].add(reading.current_bytes, reading.peak_bytes)
        return reading

    def _reset(self, allocator: backend.Allocator, counter: int) -> int | None:
        """Reset the peak counter where asked to: the counter value the next window starts from (`None`: reset)."""
        if not (self.reset_peaks and allocator.peak_resets):
            return counter
        backend.reset_allocator_peak(allocator)
        return None

    def _allocator_window(self, values: dict[str, float]) -> None:
        for allocator in self.allocators:
            reading = self._read(allocator)
            if reading is None:  # a device that went away: skip it this window
                continue
            tag, window = allocator.tag, self.windows_of[allocator.tag]
            peak = window.so_far(reading.current_bytes, reading.peak_bytes)
            self.run_peaks[tag] = max(self.run_peaks.get(tag, 0), peak)  # before the window closes: see epoch_peaks
            try:
                reset = self._reset(allocator, reading.peak_bytes) is None
            except Exception:  # noqa: BLE001 - a failed reset: the counter goes on, and so does its window
                reset = False
            window.close(counter_reset=reset)
            values.update(allocator_values(tag, reading.current_bytes, peak, self.run_peaks[tag]))
            if tag in self.pools:
                self._pool_window(allocator, values)

    def _find_pools(self) -> None:
        """JAX's preallocated pools: their setting is written once, at the start of `fit`."""
        for allocator in self.allocators:
            try:
                pool = backend.allocator_pool(allocator)
            except Exception:  # noqa: BLE001, S112 - no statistics from this device: no pool named
                continue
            if pool is not None:
                self.pools[allocator.tag] = pool
                self.writer.text(_tags.ALLOC_PREALLOCATION.name(device=allocator.tag), pool.setting, self._step)

    def _pool_window(self, allocator: backend.Allocator, values: dict[str, float]) -> None:
        try:
            pool = backend.allocator_pool(allocator)
        except Exception:  # noqa: BLE001 - a device that went away: its last size stands
            return
        if pool is not None and pool.pool_bytes is not None:
            known = self.pools[allocator.tag]
            self.pools[allocator.tag] = known._replace(pool_bytes=max(pool.pool_bytes, known.pool_bytes or 0))
            values.update(pool_values(allocator.tag, pool.pool_bytes))

    @staticmethod
    def _say_no_allocator(device: str, why: str) -> None:
        log_once(
            logging.INFO,
            f"memory:no-allocator:{backend.name()}:{device}",
            "keras-gpu: MemoryLogger: no allocator statistics for %s: %s. The host's memory (memory/host/*) is logged.",
            device,
            why,
        )

    def _host_window(self, values: dict[str, float]) -> None:
        rss, peak = host_memory()
        if rss is None and peak is None:
            log_once(logging.INFO, "memory:no-host", "keras-gpu: host memory is not measurable on this platform.")
        if peak is not None or rss is not None:
            # The peak since the process started can never be below what was resident at any reading.
            peak = max(p for p in (peak, rss, self.host_peak) if p is not None)
            self.host_peak = peak
        values.update(host_values(rss, peak))

    def _gpu_window(self, values: dict[str, float]) -> None:
        for gpu, metrics in sorted(self.sampler.drain().items()):
            for name, stat in metrics.items():
                values.update(gpu_values(gpu, name, stat.mean, stat.max))
                key = (gpu, name)
                self.gpu_peaks[key] = max(self.gpu_peaks.get(key, 0.0), stat.max)

    def summary(self) -> str:
        """One line: the run's peaks.

        An allocator that counted no byte in the whole `fit` (TensorFlow's CPU
        allocator leaves small tensors out) is named as such, never as "0 B".
        JAX's preallocated pool is named with NVML's figure of this process
        on its GPU (which counts all of it) and the allocator's peak use of
        it; without that figure, with the allocator's peak.
        """
        gpu_parts, told = self._gpu_summary()
        parts = []
        for tag, peak in self.run_peaks.items():
            if peak <= 0:
                parts.append(f"the {tag} allocator counted no allocation ({uncounted_allocator(tag)})")
                continue
            pool = self.pools.get(tag)
            within = f", in {pool_words(pool.pool_bytes, pool.setting)}" if pool is not None and tag not in told else ""
            parts.append(f"peak allocator memory on {tag}: {format_bytes(peak)}{within}")
        parts += gpu_parts
        if self.host_peak is not None:
            parts.append(f"host peak RSS: {format_bytes(self.host_peak)}")
        return "; ".join(parts) + "." if parts else "no memory figures were available."

    def _gpu_summary(self) -> tuple[list[str], set[str]]:
        """`(one part per GPU with NVML's memory peaks, the allocator tags whose pool those parts name)`."""
        parts, told = [], set()
        for gpu in sorted({gpu for gpu, _ in self.gpu_peaks}):
            used = self.gpu_peaks.get((gpu, "memory_used_bytes"))
            mine = self.gpu_peaks.get((gpu, "process_memory_bytes"))
            bits = []
            if mine is not None:
                bit = f"this process {format_bytes(mine)}"
                for tag, pool in self.pools.items():
                    if pool.gpu == gpu:
                        told.add(tag)
                        bit += f" in NVML, of which {pool_words(pool.pool_bytes, pool.setting)}"
                        if self.run_peaks.get(tag, 0) > 0:
                            bit += f"; the allocator's peak use {format_bytes(self.run_peaks[tag])}"
                bits.append(bit)
            if used is not None:
                bits.append(f"all processes {format_bytes(used)}")
            if bits:
                parts.append(f"peak memory on GPU {gpu}: " + ", ".join(bits))
        return parts, told


def _check_gpus(gpus: Any) -> tuple[int, ...] | None:
    if gpus is None:
        return None
    if isinstance(gpus, (str, bytes)) or not isinstance(gpus, Sequence):
        raise TypeError(
            "`gpus` must be a list of GPU indices (e.g. [0, 1]) or None for the GPUs the model uses. "
            f"Received: gpus={gpus!r}"
        )
    if any(isinstance(g, bool) or not isinstance(g, int) or g < 0 for g in gpus):
        raise ValueError(f"`gpus` must hold non-negative ints (GPU indices). Received: gpus={gpus!r}")
    if len(set(gpus)) != len(gpus):
        raise ValueError(f"`gpus` must not repeat a GPU. Received: gpus={gpus!r}")
    return tuple(gpus)
