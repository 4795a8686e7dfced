"""A storage failure in the middle of `fit` turns logging off once and never stops training."""

from __future__ import annotations

import errno
import logging

import keras
import numpy as np

import keras_gpu
from keras_gpu.output import writer as _writer
from keras_gpu.output.reader import read_scalars


class _DiskFillsAtEpoch(keras.callbacks.Callback):
    """From epoch `epoch` on, every write to the event file fails with ENOSPC."""

    def __init__(self, epoch: int, monkeypatch) -> None:
        super().__init__()
        self.epoch = epoch
        self.monkeypatch = monkeypatch

    def on_epoch_begin(self, epoch, logs=None):
        if epoch == self.epoch:
            def full(*args, **kwargs):
                raise OSError(errno.ENOSPC, "No space left on device")

            self.monkeypatch.setattr("tensorboard.summary.writer.record_writer.RecordWriter.write", full)


def test_disk_full_mid_run_turns_logging_off_with_one_error_and_training_continues(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="keras_gpu")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(512, 16)).astype("float32")
    y = rng.normal(size=(512, 1)).astype("float32")
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(8), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    callbacks = keras_gpu.callbacks(tmp_path, every_s=0.05)
    history = model.fit(
        x, y, batch_size=32, epochs=4, verbose=0, callbacks=[*callbacks, _DiskFillsAtEpoch(2, monkeypatch)]
    )
    assert len(history.history["loss"]) == 4  # every epoch trained
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "No space left on device" in errors[0] and "training continues" in errors[0]
    monkeypatch.undo()
    # What was logged before the disk filled is still there and readable.
    steps = [step for step, _ in read_scalars(str(tmp_path / "train"))["throughput/samples_per_sec"]]
    assert steps and max(steps) <= 2 * 16
    assert _writer._registry == {}


def test_a_write_after_the_exit_time_close_is_dropped_without_an_error(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.DEBUG, logger="keras_gpu")
    writer = _writer.SummaryWriter(str(tmp_path / "run"))
    assert writer.scalars({"a": 1.0}, step=1)
    monkeypatch.setattr(_writer, "_exiting", False)
    _writer._close_all()  # what the interpreter runs at exit: every event file closed
    assert _writer._exiting
    assert writer.scalars({"a": 2.0}, step=2) is False  # a late write (a logger's thread, an epoch end) meets it
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "training continues" not in caplog.text and "was closed at exit" in caplog.text
