"""Tests of `MemoryLogger`: real `fit` on CPU, with a fake NVML (two GPUs) and without NVML."""

from __future__ import annotations

import inspect
import logging
import os
import sys
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from tests import _events

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras
import tensorflow as tf

from keras_gpu.core import host_memory, nvml_session
from keras_gpu.hooks import fit_introspection
from keras_gpu.hooks import memory_logger as memory
from keras_gpu.hooks.memory_logger import MemoryLogger
from keras_gpu.output import writer as _writer
from tests._util import run_python
from tests.fake_pynvml import GIB, FakeGpu, FakeProcess, FakePynvml

THREAD_NAMES = ("keras-gpu-memory-logger", "keras-gpu-nvml-sampler")
STEPS_PER_EPOCH = 4
BATCH = 128


# --------------------------------------------------------------------------- helpers


def _threads(name: str | None = None) -> list[threading.Thread]:
    names = THREAD_NAMES if name is None else (name,)
    return [t for t in threading.enumerate() if t.name in names]


def _wait_no_threads(timeout: float) -> float:
    """Seconds until no MemoryLogger thread is left (fails after `timeout`)."""
    t0 = time.monotonic()
    while _threads():
        assert time.monotonic() - t0 < timeout, f"threads still alive: {_threads()}"
        time.sleep(0.02)
    return time.monotonic() - t0


_read_scalars = _events.read_scalars


def _values(scalars, tag):
    return [v for _, v in scalars[tag]]


class _Probe(keras.callbacks.Callback):
    """Slows each batch a little and records the threads alive at each batch."""

    def __init__(self, delay_s: float = 0.0, interrupt_at: int | None = None) -> None:
        super().__init__()
        self.delay_s = delay_s
        self.interrupt_at = interrupt_at
        self.batches = 0
        self.fit_thread: int | None = None
        self.thread_counts: list[tuple[int, int]] = []
        self.registry_counts: list[int] = []

    def on_train_begin(self, logs=None):
        self.fit_thread = threading.get_ident()

    def on_train_batch_end(self, batch, logs=None):
        self.batches += 1
        time.sleep(self.delay_s)
        self.thread_counts.append((len(_threads(THREAD_NAMES[0])), len(_threads(THREAD_NAMES[1]))))
        self.registry_counts.append(sum(count for _, count in _writer._registry.values()))
        if self.interrupt_at is not None and self.batches == self.interrupt_at:
            raise KeyboardInterrupt


class _LogCapture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def find(self, level: int, *needles: str) -> list[str]:
        return [
            r.getMessage()
            for r in self.records
            if r.levelno == level and all(n in r.getMessage() for n in needles)
        ]


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(STEPS_PER_EPOCH * BATCH, 512)).astype("float32")
    y = rng.normal(size=(STEPS_PER_EPOCH * BATCH, 10)).astype("float32")
    return x, y


def _model() -> keras.Model:
    # Wide enough that TensorFlow's CPU allocator counts its tensors (it skips small ones).
    model = keras.Sequential([keras.Input((512,)), keras.layers.Dense(256, activation="relu"), keras.layers.Dense(10)])
    model.compile(optimizer="sgd", loss="mse")
    return model


@pytest.fixture(scope="module")
def model():
    return _model()


def _fit(model, data, callbacks, epochs=2):
    x, y = data
    return model.fit(x, y, batch_size=BATCH, epochs=epochs, verbose=0, callbacks=callbacks)


@pytest.fixture(scope="module")
def log_capture():
    handler = _LogCapture()
    log = logging.getLogger("keras_gpu")
    old_level = log.level
    log.setLevel(logging.DEBUG)
    log.addHandler(handler)
    yield handler
    log.removeHandler(handler)
    log.setLevel(old_level)


@pytest.fixture(autouse=True)
def _fresh_nvml():
    nvml_session.reset_for_tests()
    yield
    nvml_session.reset_for_tests()


def _fake_gpus() -> list[FakeGpu]:
    me = os.getpid()
    return [
        FakeGpu(
            name="NVIDIA Fake 0",
            uuid="GPU-00000000-0000-0000-0000-000000000000",
            memory_total=80 * GIB,
            memory_used=3 * GIB,
            utilization_gpu=87,
            utilization_memory=35,
            power_mw=[400_000, 100_000] * 500,  # alternating: a window of >= 2 samples has mean 250 W, max 400 W
            temperature_c=65,
            sm_clock_mhz=1410,
            compute_processes=[FakeProcess(me, 1 * GIB), FakeProcess(me + 100_000, 2 * GIB)],
        ),
        FakeGpu(
            name="NVIDIA Fake 1",
            uuid="GPU-11111111-0000-0000-0000-000000000000",
            memory_total=40 * GIB,
            memory_used=10 * GIB,
            utilization_gpu=10,
            utilization_memory=5,
            temperature_c=40,
            sm_clock_mhz=1200,
            unsupported={"nvmlDeviceGetPowerUsage"},
        ),
    ]


# --------------------------------------------------------------------------- a run with the fake NVML


@pytest.fixture(scope="module")
def fake_run(tmp_path_factory, data, log_capture):
    """One `fit` of two epochs with the fake NVML on two GPUs, shared by the tests below."""
    log_dir = tmp_path_factory.mktemp("fake_run")
    fake = FakePynvml(_fake_gpus())
    nvml_session.reset_for_tests()
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, "pynvml", fake)
        mp.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        model = _model()
        probe = _Probe(delay_s=0.06)
        cb = MemoryLogger(log_dir, every_s=0.15, sample_interval_s=0.02, gpus=[0, 1])
        t0 = time.perf_counter()
        _fit(model, data, [cb, probe])
        fit_s = time.perf_counter() - t0
        threads_after = _threads()
        calls_during_fit = list(fake.calls)
        nvml_session.reset_for_tests()
    return SimpleNamespace(
        fake=fake,
        calls=calls_during_fit,
        probe=probe,
        cb=cb,
        fit_s=fit_s,
        threads_after=threads_after,
        scalars=_read_scalars(os.path.join(log_dir, "train")),
        steps=int(model.optimizer.iterations.numpy()),
        logs=log_capture,
    )


def test_allocator_tags(fake_run):
    s = fake_run.scalars
    current = _values(s, "memory/allocator/CPU_0/current_bytes")
    peak = _values(s, "memory/allocator/CPU_0/peak_bytes")
    run_peak = _values(s, "memory/allocator/CPU_0/run_peak_bytes")
    assert len(current) == len(peak) == len(run_peak) >= 3
    assert max(peak) > 0
    assert all(v >= 0 and v == int(v) for v in current + peak)
    # The run peak is the running maximum of the window peaks.
    running = []
    for value in peak:
        running.append(max(running[-1] if running else 0, value))
    assert run_peak == running
    assert not any(t.startswith("memory/allocator/CPU_1") for t in s)


def test_host_tags(fake_run):
    rss = _values(fake_run.scalars, "memory/host/rss_bytes")
    peak = _values(fake_run.scalars, "memory/host/peak_rss_bytes")
    assert min(rss) > 50 * 2**20  # TensorFlow alone is far above 50 MiB
    assert all(p >= r for p, r in zip(peak, rss))  # the peak is never below the same window's RSS
    assert peak == sorted(peak)  # the peak since the process started never goes down


def test_host_memory_is_in_bytes_and_its_peak_covers_the_rss():
    rss0, _ = host_memory.host_memory()
    block = bytearray(96 * 2**20)
    block[:: 4096] = b"x" * len(block[:: 4096])  # touch every page so it is resident
    rss1, peak1 = host_memory.host_memory()
    assert rss1 - rss0 >= 80 * 2**20  # 96 MiB resident more: the unit is bytes
    assert peak1 >= rss1
    del block


def test_host_peak_is_kept_at_or_above_the_rss_when_the_sources_disagree(monkeypatch):
    # Without /proc/self/status the RSS and the peak come from two reads that can disagree.
    real_open = open

    def no_status(path, *args, **kwargs):
        if str(path) == "/proc/self/status":
            raise FileNotFoundError(path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", no_status)
    monkeypatch.setattr(host_memory, "statm_rss_bytes", lambda: 500 * 2**20)
    monkeypatch.setattr(host_memory, "rusage_peak_rss_bytes", lambda: 499 * 2**20)
    run = SimpleNamespace(host_peak=None)
    values: dict[str, float] = {}
    memory._Run._host_window(run, values)
    assert values == {"memory/host/rss_bytes": 500 * 2**20, "memory/host/peak_rss_bytes": 500 * 2**20}
    monkeypatch.setattr(host_memory, "statm_rss_bytes", lambda: 400 * 2**20)
    memory._Run._host_window(run, values)
    assert values == {"memory/host/rss_bytes": 400 * 2**20, "memory/host/peak_rss_bytes": 500 * 2**20}


def test_gpu_tags_carry_the_fake_values(fake_run):
    s = fake_run.scalars
    expected = {
        "gpu/0/memory_used_bytes": 3 * GIB,
        "gpu/0/memory_total_bytes": 80 * GIB,
        "gpu/0/process_memory_bytes": 1 * GIB,  # only this process's entry
        "gpu/0/utilization_percent": 87.0,
        "gpu/0/memory_utilization_percent": 35.0,
        "gpu/0/temperature_c": 65.0,
        "gpu/0/sm_clock_mhz": 1410.0,
        "gpu/1/memory_used_bytes": 10 * GIB,
        "gpu/1/memory_total_bytes": 40 * GIB,
        "gpu/1/process_memory_bytes": 0.0,  # nothing runs on GPU 1
        "gpu/1/utilization_percent": 10.0,
        "gpu/1/temperature_c": 40.0,
        "gpu/1/sm_clock_mhz": 1200.0,
    }
    for tag, value in expected.items():
        assert _values(s, tag) and set(_values(s, tag)) == {float(value)}, tag
        if not tag.endswith("memory_total_bytes"):
            assert set(_values(s, tag + "_max")) == {float(value)}, tag
    assert "gpu/0/memory_total_bytes_max" not in s
    # The power of GPU 0 alternates 400 W / 100 W (fake milliwatts / 1000).
    mean, peak = _values(s, "gpu/0/power_watts"), _values(s, "gpu/0/power_watts_max")
    assert len(mean) == len(peak) >= 3
    assert set(peak) <= {100.0, 400.0} and max(peak) == 400.0
    assert all(100.0 <= m <= p for m, p in zip(mean, peak))
    assert any(m < p for m, p in zip(mean, peak))
    # GPU 1 does not support power: no tag, one warning.
    assert not any(t.startswith("gpu/1/power") for t in s)
    assert len(fake_run.logs.find(logging.WARNING, "power", "GPU 1")) == 1


def test_windows_steps_and_final_window(fake_run):
    s = fake_run.scalars
    steps = [step for step, _ in s["memory/allocator/CPU_0/current_bytes"]]
    assert steps == sorted(steps)
    assert steps[-1] == fake_run.steps == 2 * STEPS_PER_EPOCH
    # Timed windows (every 0.15 s over a fit of ~0.5 s), epoch ends and the final one.
    assert len(steps) >= 3
    assert [step for step, _ in s["gpu/0/temperature_c"]][-1] == fake_run.steps
    summary = fake_run.logs.find(logging.INFO, "MemoryLogger", "peak allocator memory on CPU_0")
    assert len(summary) == 1
    assert "peak memory on GPU 0: this process 1.0 GiB, all processes 3.0 GiB" in summary[0]


def test_no_nvml_call_on_the_training_thread(fake_run):
    callers = {ident for _, ident in fake_run.calls}
    assert callers, "the fake NVML was never called"
    assert fake_run.probe.fit_thread not in callers
    assert fake_run.fake.init_calls == 1


def test_one_thread_each_during_fit_and_none_after(fake_run):
    counts = fake_run.probe.thread_counts
    assert len(counts) == 2 * STEPS_PER_EPOCH
    assert set(counts) == {(1, 1)}
    assert fake_run.threads_after == []
    assert set(fake_run.probe.registry_counts) == {1}  # one shared writer, acquired once


def _params(fn) -> list[tuple[str, object, object]]:
    return [(p.name, p.default, p.kind) for p in inspect.signature(fn).parameters.values()]


def test_memory_logger_defines_only_keras_hooks():
    base = keras.callbacks.Callback
    for cls in (MemoryLogger,):
        hooks = [
            n for c in cls.__mro__ if c is not base and issubclass(c, base) for n in vars(c) if n.startswith("on_")
        ]
        assert hooks, "no hook found"
        for name in hooks:
            assert hasattr(base, name), f"{cls.__name__}.{name} is not a Keras hook"
            assert _params(getattr(cls, name)) == _params(getattr(base, name)), name
        assert not [n for n in hooks if "batch" in n], "MemoryLogger must not define a per-batch hook"


# --------------------------------------------------------------------------- without NVML


def test_without_nvml_logs_allocator_and_host_only(tmp_path, model, data, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="keras_gpu")
    monkeypatch.setitem(sys.modules, "pynvml", None)
    cb = MemoryLogger(tmp_path, every_s=0.2, sample_interval_s=0.05, gpus=[0])
    _fit(model, data, [cb], epochs=1)
    assert _threads() == []
    s = _read_scalars(str(tmp_path / "train"))
    expected = {"memory/allocator/CPU_0/current_bytes", "memory/allocator/CPU_0/peak_bytes", "memory/host/rss_bytes"}
    assert expected <= set(s)
    assert not any(t.startswith("gpu/") for t in s)
    assert len([r for r in caplog.records if "NVML is not available" in r.getMessage()]) == 1


def test_an_allocator_tensorflow_keeps_no_statistics_for_is_said_plainly_once(tmp_path, model, data, monkeypatch, caplog):
    # TensorFlow 2.21 on a CPU without oneDNN's ops raises on every read of the CPU allocator.
    from keras_gpu.core import backend
    from keras_gpu.core import log as _log

    def no_statistics(allocator):
        raise ValueError(f"Allocator stats not available for device '{allocator.device}'")

    monkeypatch.setattr(backend, "allocator_memory", no_statistics)
    monkeypatch.setattr(_log, "_process", _log.Once())
    caplog.set_level(logging.DEBUG, logger="keras_gpu")
    for _ in range(2):  # two fits: still one line
        _fit(model, data, [MemoryLogger(tmp_path, every_s=0.2, sample_interval_s=0.05, nvml=False)], epochs=1)
    info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO and "allocator" in r.getMessage()]
    assert info == [
        "keras-gpu: MemoryLogger: no allocator statistics for CPU:0: TensorFlow keeps them on CPU only with its "
        "oneDNN ops on, by default only on CPUs with AVX-512 (TF_ENABLE_ONEDNN_OPTS=1 turns them on). The host's "
        "memory (memory/host/*) is logged."
    ]
    # The backend's own words stay at DEBUG.
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert any("Allocator stats not available for device 'CPU:0'" in m for m in debug)
    s = _read_scalars(str(tmp_path / "train"))
    assert "memory/host/rss_bytes" in s and not any(t.startswith("memory/allocator/") for t in s)


def test_cpu_only_default_does_not_touch_nvml(tmp_path, model, data, monkeypatch):
    fake = FakePynvml(_fake_gpus())
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    cb = MemoryLogger(tmp_path, every_s=0.2, sample_interval_s=0.05)  # gpus=None: the GPUs the model uses
    _fit(model, data, [cb], epochs=1)
    assert fake.calls == []  # TensorFlow trains on CPU here, so there is no GPU to sample
    s = _read_scalars(str(tmp_path / "train"))
    assert "memory/allocator/CPU_0/peak_bytes" in s and not any(t.startswith("gpu/") for t in s)


def test_switches_turn_groups_off(tmp_path, model, data, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", FakePynvml(_fake_gpus()))
    cb = MemoryLogger(tmp_path, every_s=0.2, sample_interval_s=0.05, allocator=False, host=False, gpus=[1])
    _fit(model, data, [cb], epochs=1)
    s = _read_scalars(str(tmp_path / "train"))
    assert s and all(t.startswith("gpu/1/") for t in s)


# --------------------------------------------------------------------------- several fits, interruptions


def test_two_fits_with_one_callback(tmp_path, model, data, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", FakePynvml(_fake_gpus()))
    cb = MemoryLogger(tmp_path, every_s=0.2, sample_interval_s=0.02, gpus=[0])
    for _ in range(2):
        probe = _Probe()
        _fit(model, data, [cb, probe], epochs=1)
        assert set(probe.thread_counts) == {(1, 1)}
        assert set(probe.registry_counts) == {1}
        assert _threads() == []
        assert cb._run is None and cb._writer is None
    assert _writer._registry == {}
    s = _read_scalars(str(tmp_path / "train"))
    steps = [step for step, _ in s["gpu/0/temperature_c"]]
    assert steps == sorted(steps) and steps[-1] == int(model.optimizer.iterations.numpy())


def test_interrupted_fit_stops_its_threads_by_itself(tmp_path, model, data, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="keras_gpu")
    fake = FakePynvml(_fake_gpus())
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    cb = MemoryLogger(tmp_path, every_s=30.0, sample_interval_s=0.02, gpus=[0, 1])
    with pytest.raises(KeyboardInterrupt):
        _fit(model, data, [cb, _Probe(interrupt_at=2)])
    assert len(_threads()) == 2  # on_train_end was not called
    waited = _wait_no_threads(timeout=5.0)
    assert waited < 2.0
    calls = len(fake.calls)
    time.sleep(0.1)
    assert len(fake.calls) == calls  # sampling really stopped
    # The last window was written and flushed although `on_train_end` never ran.
    s = _read_scalars(str(tmp_path / "train"))
    assert s["gpu/0/temperature_c"] and s["memory/allocator/CPU_0/current_bytes"]
    assert any("ended without `on_train_end`" in r.getMessage() for r in caplog.records)
    assert cb._writer is not None and cb._writer.closed  # the event file was closed too
    # The same callback trains again normally afterwards.
    probe = _Probe()
    _fit(model, data, [cb, probe], epochs=1)
    assert set(probe.thread_counts) == {(1, 1)}
    assert _threads() == [] and _writer._registry == {}


def test_next_fit_replaces_a_run_left_by_an_interruption(tmp_path, model, data, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", FakePynvml(_fake_gpus()))
    cb = MemoryLogger(tmp_path, every_s=30.0, sample_interval_s=0.02, gpus=[0])
    with pytest.raises(KeyboardInterrupt):
        _fit(model, data, [cb, _Probe(interrupt_at=1)])
    stale = list(_threads())
    assert len(stale) == 2
    probe = _Probe()
    _fit(model, data, [cb, probe], epochs=1)  # at once, before the old threads noticed
    assert set(probe.thread_counts) == {(1, 1)}
    assert not any(t.is_alive() for t in stale)
    assert _threads() == [] and _writer._registry == {}


def test_epoch_end_asks_for_a_window_but_not_too_often(tmp_path, model):
    cb = MemoryLogger(tmp_path, every_s=30.0, sample_interval_s=0.5, nvml=False)
    cb.set_model(model)
    cb.on_train_begin()  # by hand: the run lives while this test function runs
    run = cb._run
    try:
        cb.on_epoch_end(0)  # right after the start: left to the next window
        time.sleep(0.3)
        assert run.windows == 0
        time.sleep(memory._MIN_EPOCH_WINDOW_S - 0.2)
        cb.on_epoch_end(1)
        deadline = time.monotonic() + 5
        while run.windows == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert run.windows == 1
        assert len(_threads()) == 1  # the window thread (nvml=False: no sampler)
    finally:
        cb.on_train_end()
    assert run.windows == 1  # no step since the epoch-end window: the final one is not repeated
    assert _threads() == []
    steps = [step for step, _ in _read_scalars(str(tmp_path / "train"))["memory/host/rss_bytes"]]
    assert steps == [int(model.optimizer.iterations.numpy())]


def test_unwritable_log_dir_fails_before_training_and_starts_nothing(tmp_path, model, data):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    probe = _Probe()
    with pytest.raises(RuntimeError, match="Cannot write TensorBoard logs"):
        _fit(model, data, [MemoryLogger(blocker), probe], epochs=1)
    assert probe.batches == 0
    assert _threads() == []


# --------------------------------------------------------------------------- pieces


def test_fit_watch_follows_the_capturing_frame():
    def start():
        watch = fit_introspection.FitWatch.capture()
        seen = []
        other = threading.Thread(target=lambda: seen.append(watch.alive()))
        other.start()
        other.join()
        return watch, seen[0]

    watch, inside = start()
    assert inside is True
    assert watch.alive() is False


def test_mirrored_logical_cpus_log_one_allocator():
    proc = run_python(
        """
        import os, tempfile, numpy as np, tensorflow as tf, keras
        from keras_gpu.hooks import memory_logger as memory
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        from keras_gpu.core import backend
        with strategy.scope():
            model = keras.Sequential([keras.Input((512,)), keras.layers.Dense(256), keras.layers.Dense(10)])
            model.compile(optimizer="sgd", loss="mse")
        print([(a.device, a.tag) for a in backend.allocators(model)])
        log_dir = tempfile.mkdtemp()
        cb = memory.MemoryLogger(log_dir, every_s=5.0, sample_interval_s=0.5, nvml=False)
        model.fit(np.ones((256, 512), "float32"), np.ones((256, 10), "float32"), batch_size=128, epochs=1,
                  verbose=0, callbacks=[cb])
        from tensorboard.backend.event_processing import event_accumulator as ea
        acc = ea.EventAccumulator(os.path.join(log_dir, "train"), size_guidance={ea.TENSORS: 0})
        acc.Reload()
        print([e.step for e in acc.Tensors("memory/allocator/CPU_0/current_bytes")][-1])
        print(sorted(t for t in acc.Tags()["tensors"] if t.startswith("memory/allocator")))
        """,
        timeout=240,
        logical_cpus=2,
    )
    lines = proc.stdout.strip().splitlines()
    assert lines[-3] == "[('CPU:0', 'CPU_0')]"
    assert lines[-2] == "2"  # the optimizer's step (2 batches), read from a mirrored variable
    assert lines[-1] == str(
        [
            "memory/allocator/CPU_0/current_bytes",
            "memory/allocator/CPU_0/peak_bytes",
            "memory/allocator/CPU_0/run_peak_bytes",
        ]
    )


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"every_s": 0}, ValueError, "Received: every_s=0"),
        ({"every_s": "10"}, TypeError, "Received: every_s='10'"),
        ({"sample_interval_s": -1}, ValueError, "Received: sample_interval_s=-1"),
        ({"every_s": 1.0, "sample_interval_s": 2.0}, ValueError, "must not exceed `every_s`"),
        ({"nvml": 1}, TypeError, "Received: nvml=1"),
        ({"host": None}, TypeError, "Received: host=None"),
        ({"nvml": False, "allocator": False, "host": False}, ValueError, "nothing to log"),
        ({"gpus": 0}, TypeError, "Received: gpus=0"),
        ({"gpus": "0"}, TypeError, "Received: gpus='0'"),
        ({"gpus": [-1]}, ValueError, r"Received: gpus=\[-1\]"),
        ({"gpus": [1, 1]}, ValueError, "must not repeat"),
    ],
)
def test_argument_errors(tmp_path, kwargs, error, match):
    with pytest.raises(error, match=match):
        MemoryLogger(tmp_path, **kwargs)


def test_bad_log_dir():
    with pytest.raises(TypeError, match="Received: log_dir=3"):
        MemoryLogger(3)


# --------------------------------------------------------------------------- real hardware


@pytest.mark.gpu
def test_real_gpu_fit(tmp_path, data):
    if not tf.config.list_physical_devices("GPU"):
        pytest.skip("this TensorFlow build sees no GPU")
    model = _model()
    cb = MemoryLogger(tmp_path, every_s=0.5, sample_interval_s=0.05)
    _fit(model, data, [cb, _Probe(delay_s=0.05)])
    s = _read_scalars(str(tmp_path / "train"))
    assert max(_values(s, "memory/allocator/GPU_0/peak_bytes")) > 0
    assert min(_values(s, "gpu/0/memory_total_bytes")) > 2**30
    assert max(_values(s, "gpu/0/memory_used_bytes_max")) > 0
    assert _threads() == []


# --------------------------------------------------------------------------- one point per step, no misleading zero


def test_one_point_per_step_while_the_first_step_runs_long(tmp_path, model, data):
    # The first step waits 0.4 s (a long compilation, say): six windows of
    # 0.05 s pass at step 0, and step 0 still gets one point.
    class SlowFirstStep(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if batch == 0 and not getattr(self, "done", False):
                self.done = True
                time.sleep(0.4)

    cb = MemoryLogger(tmp_path, every_s=0.05, sample_interval_s=0.01, nvml=False)
    _fit(model, data, [SlowFirstStep(), cb], epochs=1)
    s = _read_scalars(str(tmp_path / "train"))
    for tag in ("memory/host/rss_bytes", "memory/host/peak_rss_bytes", "memory/allocator/CPU_0/peak_bytes"):
        steps = [step for step, _ in s[tag]]
        assert steps == sorted(set(steps)), (tag, steps)
    assert cb is not None and [step for step, _ in s["memory/host/rss_bytes"]][-1] == int(
        model.optimizer.iterations.numpy()
    )


def test_an_allocator_that_counted_nothing_is_not_summarised_as_zero():
    run = SimpleNamespace(run_peaks={"CPU_0": 0, "GPU_0": 2**20}, gpu_peaks={}, host_peak=2**30, pools={})
    run._gpu_summary = lambda: memory._Run._gpu_summary(run)
    line = memory._Run.summary(run)
    assert "0 B" not in line
    assert "the CPU_0 allocator counted no allocation (TensorFlow's CPU allocator statistics leave small tensors out" in line
    assert "peak allocator memory on GPU_0: 1.0 MiB" in line and "host peak RSS: 1.0 GiB" in line
