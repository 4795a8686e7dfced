"""`GpuSampler`: GPU metrics sampled on a daemon thread into per-window accumulators.

It reaches NVML only through the NVML session (`keras_gpu.core.nvml_session`,
the one wrapper, with its error policy), the TensorFlow-to-NVML index mapping
(`keras_gpu.core.nvml_index`) and the readings (`keras_gpu.core.nvml_readings`);
the training thread makes no NVML call. `keras_gpu.core.nvml` serves
`GpuSampler` and `WindowStat` too.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

from keras_gpu.core import nvml_session as _session
from keras_gpu.core.checks import check_indices, check_seconds
from keras_gpu.core.log import log_once, logger
from keras_gpu.core.nvml_index import visible_devices
from keras_gpu.core.nvml_readings import METRICS, read_device
from keras_gpu.core.nvml_session import Device

__all__ = ["GpuSampler", "WindowStat"]


class WindowStat(NamedTuple):
    """Summary of one metric over a sampler window.

    Attributes:
        count: Number of valid samples in the window.
        mean: Mean of the samples, in the metric's unit.
        max: Largest sample, in the metric's unit.
    """

    count: int
    mean: float
    max: float


class GpuSampler:
    """Samples GPU metrics on a daemon thread into per-window accumulators.

    The thread initialises NVML and resolves the GPUs itself, so a caller
    such as a training loop makes no NVML call at all. It stops when any of
    these happens:

    * `stop` is called;
    * `alive()` returns False (the owner is gone, e.g. the `fit` that
      started it has ended without calling back), checked before each sample;
    * nobody called `drain` for `max_idle_s` seconds (a heartbeat:
      an owner that stopped draining is presumed gone);
    * NVML fails for good (GPU lost, driver gone), or is not available, or
      none of `indices` is a visible GPU.

    Args:
        indices: TensorFlow GPU indices to sample (see `keras_gpu.core.nvml_index`
            for how they map to NVML), or `None` for every GPU visible to this process.
        interval_s: Seconds between samples.
        alive: Optional callable returning False once the owner is gone.
        max_idle_s: Seconds without a `drain` after which the thread
            stops by itself, or `None` for no such limit.

    Raises:
        TypeError, ValueError: An argument is malformed.
    """

    def __init__(
        self,
        indices: Sequence[int] | None = None,
        interval_s: float = 0.5,
        *,
        alive: Callable[[], bool] | None = None,
        max_idle_s: float | None = 600.0,
    ) -> None:
        self.indices = check_indices("indices", indices, "TensorFlow GPU indices", none_means="every visible GPU")
        self.interval_s = check_seconds("interval_s", interval_s)
        self.max_idle_s = check_seconds("max_idle_s", max_idle_s, allow_none=True)
        if alive is not None and not callable(alive):
            raise TypeError(f"`alive` must be a callable returning a bool, or None. Received: alive={alive!r}")
        self._alive = alive
        self._acc: dict[int, dict[str, list[float]]] = {}
        self._acc_lock = threading.Lock()
        self._stop_event = threading.Event()
        self._ready = threading.Event()
        self._final_sample = False
        self._thread: threading.Thread | None = None
        self._last_drain = time.monotonic()
        self._gpus: dict[int, int] = {}
        self.stop_reason: str | None = None
        self.samples_taken = 0

    # -- control

    def start(self) -> GpuSampler:
        """Start the sampling thread; a second call is a no-op. Returns `self`.

        Raises:
            RuntimeError: The sampler was already stopped (create a new one).
        """
        if self._thread is not None:
            if self._stop_event.is_set():
                raise RuntimeError("This GpuSampler was stopped; create a new GpuSampler to sample again.")
            return self
        self._last_drain = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="keras-gpu-nvml-sampler", daemon=True)
        _session.register_sampler(self)
        self._thread.start()
        return self

    def stop(self, timeout: float | None = 5.0, *, final_sample: bool = False) -> bool:
        """Stop the thread and wait up to `timeout` seconds for it; idempotent.

        Args:
            timeout: Seconds to wait for the thread (`None`: no limit).
            final_sample: Take one last sample, on the sampling thread, before
                it exits, so the current window ends with a fresh reading.

        Returns:
            True when no sampling thread is left running.
        """
        self._final_sample = final_sample
        self._stop_event.set()
        thread = self._thread
        if thread is None or thread is threading.current_thread():
            return True
        thread.join(timeout)
        if thread.is_alive():
            logger.warning(
                "keras-gpu: the NVML sampling thread did not stop within %.1f s (an NVML call is hanging); "
                "it is a daemon thread and will not keep the process alive.",
                timeout,
            )
            return False
        return True

    @property
    def running(self) -> bool:
        """Whether the sampling thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def gpus(self) -> dict[int, int]:
        """TensorFlow GPU index to NVML index of each GPU sampled (filled once the thread has started)."""
        return dict(self._gpus)

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Wait until the thread has resolved its GPUs and taken a first sample (or given up)."""
        return self._ready.wait(timeout)

    # -- windows

    def drain(self) -> dict[int, dict[str, WindowStat]]:
        """The window since the previous drain, and start a new one.

        Returns:
            TensorFlow GPU index -> metric name (see `METRICS`) ->
            `WindowStat`. Metrics without a valid sample in the
            window are absent.
        """
        self._last_drain = time.monotonic()
        with self._acc_lock:
            acc, self._acc = self._acc, {}
        return {
            gpu: {name: WindowStat(int(c), s / c, m) for name, (c, s, m) in metrics.items()}
            for gpu, metrics in acc.items()
        }

    # -- thread

    def _should_stop(self) -> bool:
        if self._stop_event.is_set():
            return True
        stopped = _session.stopped_reason()
        if stopped is not None:
            self.stop_reason = stopped
            return True
        if self.max_idle_s is not None and time.monotonic() - self._last_drain > self.max_idle_s:
            self.stop_reason = f"nothing drained the sampler for {self.max_idle_s:g} s"
            logger.info("keras-gpu: NVML sampler stopped: %s.", self.stop_reason)
            return True
        if self._alive is not None:
            try:
                alive = bool(self._alive())
            except Exception as exc:  # noqa: BLE001 - a broken owner check means a gone owner
                logger.debug("keras-gpu: NVML sampler owner check failed: %r", exc)
                alive = False
            if not alive:
                self.stop_reason = "its owner is gone"
                return True
        return False

    def _resolve(self) -> list[tuple[int, Device]]:
        if not _session.available():
            self.stop_reason = _session.unavailable_reason()
            return []
        visible = visible_devices()
        indices = range(len(visible)) if self.indices is None else self.indices
        targets = []
        for index in indices:
            if index < len(visible):
                targets.append((index, visible[index]))
            else:
                log_once(
                    logging.WARNING,
                    f"nvml:{_session.generation()}:notvisible:{index}",
                    "keras-gpu: TensorFlow GPU %d is not a GPU NVML can see (%d visible with "
                    "CUDA_VISIBLE_DEVICES=%r); it is not monitored.",
                    index,
                    len(visible),
                    os.environ.get("CUDA_VISIBLE_DEVICES"),
                )
        if not targets:
            self.stop_reason = "no GPU to sample"
        self._gpus = {index: target.nvml_index for index, target in targets}
        return targets

    def _sample_all(self, targets: list[tuple[int, Device]]) -> None:
        readings = [(index, read_device(target)) for index, target in targets]
        with self._acc_lock:
            for index, reading in readings:
                metrics = self._acc.setdefault(index, {})
                for name, value in zip(METRICS, reading):
                    if value is None:
                        continue
                    entry = metrics.get(name)
                    if entry is None:
                        metrics[name] = [1, float(value), float(value)]
                    else:
                        entry[0] += 1
                        entry[1] += value
                        if value > entry[2]:
                            entry[2] = float(value)
        self.samples_taken += 1

    def _run(self) -> None:
        try:
            targets = self._resolve()
            if not targets:
                return
            next_time = time.monotonic()
            while True:
                if self._should_stop():
                    if self._stop_event.is_set() and self._final_sample and _session.stopped_reason() is None:
                        self._sample_all(targets)
                    return
                self._sample_all(targets)
                self._ready.set()
                next_time += self.interval_s
                now = time.monotonic()
                if next_time < now:  # fell behind (slow NVML): skip the missed ticks
                    next_time = now + self.interval_s
                self._stop_event.wait(next_time - now)
        except Exception as exc:  # noqa: BLE001 - never let the thread die with a traceback
            self.stop_reason = f"unexpected error: {_session.describe_error(exc)}"
            logger.warning("keras-gpu: the NVML sampler stopped after an unexpected error: %s", _session.describe_error(exc))
        finally:
            self._ready.set()
            _session.unregister_sampler(self)
