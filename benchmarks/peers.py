"""Peer callbacks, written for the benchmark only, to compare keras-gpu's callbacks with.

* :class:`TimeHistory`: the common "time every N steps" throughput logger,
  in the style of TensorFlow Model Garden's `TimeHistory`: a timestamp every
  `log_steps` batches, examples/s logged (and written to TensorBoard when
  given a `log_dir`).
* :class:`NaiveSyncMonitor`: how older monitoring tools sample memory: on the
  training thread, every batch, read TensorFlow's allocator statistics and
  the host RSS and write them with `tf.summary.scalar`.

Both are independent implementations of those behaviours, kept small.
"""

from __future__ import annotations

import logging
import os
import time

import keras

from benchmarks._proc import rss_bytes

__all__ = ["NaiveSyncMonitor", "TimeHistory"]

_logger = logging.getLogger("benchmarks.peers")


class TimeHistory(keras.callbacks.Callback):
    """Logs examples/s every `log_steps` training steps, measured between timestamps.

    Args:
        batch_size: Samples per step (the global batch size).
        log_steps: Steps between timestamps.
        log_dir: If given, also write `examples_per_second` and
            `steps_per_second` scalars there, at the global step.

    Attributes:
        timestamps: `(global_step, time.time())` at the start of training and
            every `log_steps` steps.
        rates: The examples/s of each completed interval.
    """

    def __init__(self, batch_size: int, log_steps: int = 100, log_dir: str | os.PathLike | None = None) -> None:
        super().__init__()
        for name, value in (("batch_size", batch_size), ("log_steps", log_steps)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"`{name}` must be a positive integer. Received: {name}={value!r}")
        self.batch_size = batch_size
        self.log_steps = log_steps
        self.log_dir = None if log_dir is None else os.fspath(log_dir)
        self.timestamps: list[tuple[int, float]] = []
        self.rates: list[float] = []
        self.global_steps = 0
        self._steps_since = 0
        self._start: float | None = None
        self._writer = None

    def on_train_begin(self, logs=None):
        if self.log_dir is not None and self._writer is None:
            import tensorflow as tf

            self._writer = tf.summary.create_file_writer(self.log_dir)

    def on_train_batch_begin(self, batch, logs=None):
        if self._start is None:
            self._start = time.time()
            self.timestamps.append((self.global_steps, self._start))

    def on_train_batch_end(self, batch, logs=None):
        self.global_steps += 1
        self._steps_since += 1
        if self._steps_since < self.log_steps:
            return
        now = time.time()
        elapsed = now - self._start
        steps_per_sec = self._steps_since / elapsed
        examples_per_sec = steps_per_sec * self.batch_size
        self.rates.append(examples_per_sec)
        self.timestamps.append((self.global_steps, now))
        _logger.info(
            "TimeHistory: steps %d-%d: %.1f examples/s", self.global_steps - self._steps_since, self.global_steps,
            examples_per_sec,
        )
        if self._writer is not None:
            import tensorflow as tf

            with self._writer.as_default(step=self.global_steps):
                tf.summary.scalar("examples_per_second", examples_per_sec)
                tf.summary.scalar("steps_per_second", steps_per_sec)
        self._start = now
        self._steps_since = 0

    def on_epoch_end(self, epoch, logs=None):
        self._start = None  # time spent between epochs is not training
        self._steps_since = 0

    def on_train_end(self, logs=None):
        if self._writer is not None:
            self._writer.close()
            self._writer = None


class NaiveSyncMonitor(keras.callbacks.Callback):
    """Samples memory on the training thread every batch and writes it straight away.

    Per batch: `tf.config.experimental.get_memory_info(device)` (current and
    peak bytes), the host RSS from `/proc/self/statm`, and three
    `tf.summary.scalar` calls.

    Args:
        log_dir: Directory of the event file.
        device: TensorFlow device whose allocator is read, e.g. `"GPU:0"`;
            `None` picks the first GPU, else `"CPU:0"`.
    """

    def __init__(self, log_dir: str | os.PathLike, device: str | None = None) -> None:
        super().__init__()
        self.log_dir = os.fspath(log_dir)
        self.device = device
        self._writer = None
        self._step = 0

    def on_train_begin(self, logs=None):
        import tensorflow as tf

        if self.device is None:
            self.device = "GPU:0" if tf.config.list_logical_devices("GPU") else "CPU:0"
        self._writer = tf.summary.create_file_writer(self.log_dir)
        self._step = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))

    def on_train_batch_end(self, batch, logs=None):
        import tensorflow as tf

        self._step += 1
        info = tf.config.experimental.get_memory_info(self.device)
        rss = rss_bytes()
        with self._writer.as_default(step=self._step):
            tf.summary.scalar("memory/current_bytes", info["current"])
            tf.summary.scalar("memory/peak_bytes", info["peak"])
            if rss is not None:
                tf.summary.scalar("memory/host_rss_bytes", rss)

    def on_train_end(self, logs=None):
        if self._writer is not None:
            self._writer.close()
            self._writer = None
