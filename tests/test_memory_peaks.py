"""The user's peak counters stay the user's, and JAX's preallocated pool is named.

`MemoryLogger` resets no allocator peak counter unless `reset_peaks=True`;
each window's peak comes from its own reads (`keras_gpu.meters.allocator_peak`).
PyTorch's `torch.cuda` and JAX's `Device.memory_stats()` are faked here (no
GPU); TensorFlow's CPU allocator is the real one.
"""

from __future__ import annotations

import os
import sys
import types
from types import SimpleNamespace

import numpy as np
import pytest

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras
import tensorflow as tf

from keras_gpu.cli import report as report_cli
from keras_gpu.core import backend
from keras_gpu.hooks import memory_logger as memory
from keras_gpu.hooks.memory_logger import MemoryLogger
from keras_gpu.meters.allocator_peak import WindowPeak
from keras_gpu.output import writer as _writer
from keras_gpu.output.reader import read_report
from tests.test_memory_callback import _read_scalars, _values

GIB = 2**30


# --------------------------------------------------------------------------- the window's peak, as arithmetic


def test_a_counter_that_did_not_move_leaves_the_largest_read():
    window = WindowPeak(counter=5 * GIB)  # the user's high from before
    for current in (1, 3, 2):
        window.add(current * GIB, 5 * GIB)
    assert window.close() == 3 * GIB


def test_a_counter_that_rose_is_the_window_peak_even_between_reads():
    window = WindowPeak(counter=5 * GIB)
    window.add(1 * GIB, 5 * GIB)
    window.add(1 * GIB, 7 * GIB)  # a spike to 7 GiB between the two reads
    assert window.close() == 7 * GIB
    window.add(2 * GIB, 7 * GIB)  # the next window: the old high is not this window's
    assert window.close() == 2 * GIB


def test_a_counter_reset_by_someone_else_counts_from_the_reset():
    window = WindowPeak(counter=5 * GIB)
    window.add(1 * GIB, 3 * GIB)  # the user reset it in this window, then the counter rose to 3 GiB
    assert window.close() == 3 * GIB


def test_after_a_reset_the_first_read_of_the_counter_counts():
    window = WindowPeak(counter=None)
    window.add(1 * GIB, 4 * GIB)
    assert window.close(counter_reset=True) == 4 * GIB
    window.add(1 * GIB, 4 * GIB)  # the same value as before the reset: the peak since the reset
    assert window.close() == 4 * GIB


def test_so_far_reads_without_taking_the_read():
    window = WindowPeak(counter=5 * GIB)
    window.add(2 * GIB, 5 * GIB)
    assert window.so_far(1 * GIB, 6 * GIB) == 6 * GIB
    assert window.close() == 2 * GIB
    assert window.close() is None


# --------------------------------------------------------------------------- PyTorch, with a fake torch.cuda


class _FakeCuda:
    """One CUDA device's caching allocator: bytes allocated now and the peak counter, as `torch.cuda` keeps them."""

    def __init__(self, current: int, peak: int) -> None:
        self.current, self.peak = current, peak
        self.resets: list[str] = []
        self.reads: list[str] = []

    def set(self, current: int) -> None:
        self.current = current
        self.peak = max(self.peak, current)

    def memory_stats(self, device):
        self.reads.append(device)
        return {"allocated_bytes.all.current": self.current, "allocated_bytes.all.peak": self.peak}

    def max_memory_allocated(self, device=None):
        return self.peak

    def reset_peak_memory_stats(self, device):
        self.resets.append(device)
        self.peak = self.current


class _Step:
    """The optimizer's iterations, as `read_step` reads them."""

    def __init__(self) -> None:
        self.step = 0
        self.value = SimpleNamespace(numpy=lambda: self.step)


class _Writer:
    def __init__(self) -> None:
        self.points: list[tuple[int, dict[str, float]]] = []
        self.texts: list[tuple[str, str, int]] = []

    def scalars(self, values, step):
        self.points.append((step, dict(values)))
        return True

    def text(self, tag, markdown, step):
        self.texts.append((tag, markdown, step))
        return True

    def flush(self):
        pass

    def close(self):
        pass

    def series(self, tag: str) -> list[float]:
        return [values[tag] for _, values in self.points if tag in values]


def _run(allocator: backend.Allocator, writer, *, reset_peaks: bool):
    """A `MemoryLogger` run over one allocator, its reads and windows driven by the test (no thread started)."""
    iterations = _Step()
    owner = SimpleNamespace(
        model=SimpleNamespace(optimizer=SimpleNamespace(iterations=iterations)),
        every_s=1000.0,
        host=False,
        reset_peaks=reset_peaks,
    )
    run = memory._Run(owner, writer, [allocator], [], SimpleNamespace(alive=lambda: True))
    run.open()
    return run, iterations


@pytest.fixture
def fake_torch(monkeypatch):
    cuda = _FakeCuda(current=1 * GIB, peak=5 * GIB)  # the user's own high of 5 GiB, from before the fit
    torch = types.ModuleType("torch")
    torch.cuda = cuda
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setattr(backend, "name", lambda: "torch")
    return cuda


def test_torch_no_reset_by_default_and_window_peaks_from_reads(fake_torch):
    cuda, writer = fake_torch, _Writer()
    run, iterations = _run(backend.Allocator("cuda:0", "GPU_0", True), writer, reset_peaks=False)

    cuda.set(2 * GIB)
    run.read_allocators()  # the window thread's read
    cuda.set(1 * GIB)
    iterations.step = 1
    run.write_window()  # the largest read: not the user's 5 GiB from before, not the 1 GiB at the end

    cuda.set(6 * GIB)  # a spike to a new high that no read sees
    cuda.set(1 * GIB)
    iterations.step = 2
    assert run.epoch_peaks()["memory/allocator/GPU_0/run_peak_bytes"] == 6 * GIB  # the training thread's read
    run.write_window()

    cuda.set(3 * GIB)  # a spike below the earlier high, between reads: missed, as documented
    cuda.set(1 * GIB)
    iterations.step = 3
    run.finish(abandoned=False)

    assert cuda.resets == []
    assert cuda.max_memory_allocated() == 6 * GIB  # what the user reads, as without keras-gpu
    assert writer.series("memory/allocator/GPU_0/peak_bytes") == [2 * GIB, 6 * GIB, 1 * GIB]
    assert writer.series("memory/allocator/GPU_0/current_bytes") == [1 * GIB] * 3
    assert writer.series("memory/allocator/GPU_0/run_peak_bytes") == [2 * GIB, 6 * GIB, 6 * GIB]
    assert [step for step, _ in writer.points] == [1, 2, 3]
    assert "peak allocator memory on GPU_0: 6.0 GiB" in run.summary()
    assert set(cuda.reads) == {"cuda:0"}


def test_torch_reset_peaks_is_opt_in(fake_torch):
    cuda, writer = fake_torch, _Writer()
    run, iterations = _run(backend.Allocator("cuda:0", "GPU_0", True), writer, reset_peaks=True)
    assert cuda.resets == ["cuda:0"]  # at the start of fit

    cuda.set(3 * GIB)  # a spike below the user's old high, between reads: the reset counter holds it
    cuda.set(1 * GIB)
    iterations.step = 1
    run.write_window()
    iterations.step = 2
    run.finish(abandoned=False)

    assert cuda.resets == ["cuda:0"] * 3  # and after each of the two windows
    assert cuda.max_memory_allocated() == 1 * GIB  # the user's own reader sees the resets
    assert writer.series("memory/allocator/GPU_0/peak_bytes") == [3 * GIB, 1 * GIB]


def test_reset_peaks_is_checked(tmp_path):
    with pytest.raises(TypeError, match="Received: reset_peaks='yes'"):
        MemoryLogger(tmp_path, reset_peaks="yes")
    assert MemoryLogger(tmp_path).reset_peaks is False


# --------------------------------------------------------------------------- TensorFlow's CPU allocator, for real


def _tf_fit(callbacks) -> None:
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((512,)), keras.layers.Dense(256, activation="relu"), keras.layers.Dense(10)])
    model.compile(optimizer="sgd", loss="mse")
    x = np.random.default_rng(0).normal(size=(512, 512)).astype("float32")
    y = np.zeros((512, 10), "float32")
    model.fit(x, y, batch_size=128, epochs=2, verbose=0, callbacks=callbacks)


def _tf_peak() -> int:
    return int(tf.config.experimental.get_memory_info("CPU:0")["peak"])


def _user_high() -> int:
    """A high of the CPU allocator's peak counter far above what the fits below allocate: the user's own."""
    block = tf.random.uniform((32 * 2**20,))  # 128 MiB
    del block
    peak = _tf_peak()
    assert peak >= 128 * 2**20
    return peak


def test_tensorflow_user_peak_after_fit_is_what_it_is_without_keras_gpu(tmp_path):
    high = _user_high()
    _tf_fit([])
    assert _tf_peak() == high  # without keras-gpu: the fit stays below the user's high

    _tf_fit([MemoryLogger(tmp_path, every_s=0.05, sample_interval_s=0.01, nvml=False)])
    assert _tf_peak() == high  # with it: the same

    peaks = _values(_read_scalars(str(tmp_path / "train")), "memory/allocator/CPU_0/peak_bytes")
    assert len(peaks) >= 2
    assert 0 < max(peaks) < high  # each window's own peak, not the process's high from before the fit


def test_tensorflow_reset_peaks_resets_the_users_counter(tmp_path):
    high = _user_high()
    _tf_fit([MemoryLogger(tmp_path, every_s=0.05, sample_interval_s=0.01, nvml=False, reset_peaks=True)])
    assert _tf_peak() < high


# --------------------------------------------------------------------------- JAX's preallocated pool, with fake memory_stats


_PREALLOCATION_VARIABLES = (
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "XLA_PYTHON_CLIENT_ALLOCATOR",
    "XLA_CLIENT_MEM_FRACTION",
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
)


@pytest.fixture
def fake_jax(monkeypatch):
    """One JAX GPU whose allocator preallocated 105 GiB; 1 GiB in use when the fit starts."""
    stats = {
        "bytes_in_use": 1 * GIB,
        "peak_bytes_in_use": 1 * GIB,
        "bytes_limit": 105 * GIB,
        "pool_bytes": 105 * GIB,
        "peak_pool_bytes": 105 * GIB,
    }
    device = SimpleNamespace(platform="gpu", id=0, local_hardware_id=0, memory_stats=lambda: dict(stats))
    jax = types.ModuleType("jax")
    jax.local_devices = lambda: [device]
    monkeypatch.setitem(sys.modules, "jax", jax)
    monkeypatch.setattr(backend, "name", lambda: "jax")
    for variable in _PREALLOCATION_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    return stats


_JAX_GPU = backend.Allocator("gpu:0", "GPU_0", False)
_DEFAULT_SETTING = "XLA_PYTHON_CLIENT_PREALLOCATE unset: on by default; 75% of the GPU's memory by default"


def _jax_fit_summary(tmp_path, stats, nvml_process_bytes: float | None = None):
    """The end-of-fit line and the report's notes of a run over the fake JAX GPU (NVML's peak given, if any).

    The fit's step raises the allocator's peak to 1.6 GiB and leaves 1.2 GiB in use.
    """
    writer = _writer.acquire(str(tmp_path / "train"))
    try:
        run, iterations = _run(_JAX_GPU, writer, reset_peaks=False)
        stats.update(bytes_in_use=int(1.2 * GIB), peak_bytes_in_use=int(1.6 * GIB))
        iterations.step = 1
        run.write_window()
        if nvml_process_bytes is not None:
            run.gpu_peaks[(0, "process_memory_bytes")] = nvml_process_bytes
        line = run.summary()
        writer.flush()
    finally:
        _writer.release(writer)
    report = read_report(str(tmp_path))
    _, notes = report_cli._memory_table(report.runs)
    return line, notes, report


def test_jax_preallocated_pool_is_named_with_nvml_and_the_allocator_peak(fake_jax, tmp_path):
    line, notes, report = _jax_fit_summary(tmp_path, fake_jax, nvml_process_bytes=105.5 * GIB)
    assert (
        "peak memory on GPU 0: this process 105.5 GiB in NVML, of which JAX's preallocated pool 105.0 GiB "
        f"({_DEFAULT_SETTING}; set XLA_PYTHON_CLIENT_PREALLOCATE=false to allocate on demand); "
        "the allocator's peak use 1.6 GiB"
    ) in line
    assert "peak allocator memory on GPU_0: 1.6 GiB;" in line  # named once with NVML's figure, not twice
    assert notes == [
        f"chief, GPU_0: JAX's preallocated pool 105.0 GiB ({_DEFAULT_SETTING}; set XLA_PYTHON_CLIENT_PREALLOCATE=false "
        "to allocate on demand). NVML's 'GPU: this process' counts all of the pool; the allocator peak is what the "
        "model used of it."
    ]
    memory_json = report.as_dict()["runs"][0]["memory"]
    assert memory_json["pools"] == {"GPU_0": {"pool_bytes": 105 * GIB, "setting": _DEFAULT_SETTING}}
    assert memory_json["allocator_peak_bytes"] == {"GPU_0": pytest.approx(1.6 * GIB, rel=1e-6)}  # not the pool


def test_jax_pool_without_a_reported_size_gets_no_number(fake_jax, tmp_path):
    del fake_jax["pool_bytes"], fake_jax["peak_pool_bytes"]
    line, notes, report = _jax_fit_summary(tmp_path, fake_jax)
    assert (
        "peak allocator memory on GPU_0: 1.6 GiB, in JAX's preallocated pool, its size not reported by JAX "
        f"({_DEFAULT_SETTING}; set XLA_PYTHON_CLIENT_PREALLOCATE=false to allocate on demand)"
    ) in line
    assert "105" not in line and "75.0" not in line
    assert len(notes) == 1 and "its size not reported by JAX" in notes[0]
    assert report.runs[0].memory.pools == {"GPU_0": (None, _DEFAULT_SETTING)}


@pytest.mark.parametrize(
    ("env", "setting"),
    [
        ({}, _DEFAULT_SETTING),
        ({"XLA_PYTHON_CLIENT_PREALLOCATE": "true"}, "XLA_PYTHON_CLIENT_PREALLOCATE=true; 75% of the GPU's memory by default"),
        ({"XLA_PYTHON_CLIENT_PREALLOCATE": "FALSE"}, "XLA_PYTHON_CLIENT_PREALLOCATE=FALSE; 75% of the GPU's memory by default"),
        ({"XLA_PYTHON_CLIENT_MEM_FRACTION": ".5"}, "XLA_PYTHON_CLIENT_PREALLOCATE unset: on by default; XLA_PYTHON_CLIENT_MEM_FRACTION=.5"),
        (
            {"XLA_CLIENT_MEM_FRACTION": ".3", "XLA_PYTHON_CLIENT_ALLOCATOR": "bfc"},
            "XLA_PYTHON_CLIENT_PREALLOCATE unset: on by default; XLA_CLIENT_MEM_FRACTION=.3",
        ),
        ({"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}, None),
        ({"XLA_PYTHON_CLIENT_PREALLOCATE": "False"}, None),
        ({"XLA_PYTHON_CLIENT_PREALLOCATE": "0"}, None),
        ({"XLA_PYTHON_CLIENT_ALLOCATOR": "platform"}, None),
        ({"XLA_PYTHON_CLIENT_ALLOCATOR": "PLATFORM"}, None),
    ],
)
def test_jax_preallocation_follows_jaxlibs_rules(env, setting):
    # jaxlib's GPU plugin options: only "false", "False" and "0" turn preallocation off; the platform allocator
    # allocates on demand.
    assert backend.jax_preallocation(env) == setting


def test_jax_without_preallocation_names_no_pool(fake_jax, tmp_path, monkeypatch):
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    line, notes, report = _jax_fit_summary(tmp_path, fake_jax, nvml_process_bytes=2 * GIB)
    assert "pool" not in line and notes == [] and report.runs[0].memory.pools == {}
    assert "peak memory on GPU 0: this process 2.0 GiB" in line


def test_jax_on_cpu_names_no_pool(fake_jax):
    assert backend.allocator_pool(backend.Allocator("cpu:0", "CPU_0", False)) is None
