"""Tests of `keras_gpu.core.nvml` against a fake `pynvml` (and, with a GPU, the real one)."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time

import pytest

from keras_gpu.core import nvml, nvml_sampler, nvml_session
from tests._util import run_python
from tests.fake_pynvml import ERROR_CODES, GIB, FakeGpu, FakeProcess, FakePynvml

UUID_A = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
UUID_B = "GPU-bbbbbbbb-0000-0000-0000-000000000000"
UUID_C = "GPU-abcdef01-0000-0000-0000-000000000000"
MIG_B = "MIG-11111111-2222-3333-4444-555555555555"


def _three_gpus() -> list[FakeGpu]:
    return [
        FakeGpu(name="NVIDIA Fake A", uuid=UUID_A, pci_bus_id="00000000:17:00.0"),
        FakeGpu(name="NVIDIA Fake B", uuid=UUID_B, pci_bus_id="00000000:3B:00.0", mig_uuids=(MIG_B,)),
        FakeGpu(name="NVIDIA Fake C", uuid=UUID_C, pci_bus_id="00000000:86:00.0", compute_capability=(9, 0)),
    ]


@pytest.fixture(autouse=True)
def _fresh_nvml(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    nvml_session.reset_for_tests()
    yield
    nvml_session.reset_for_tests()


@pytest.fixture
def install(monkeypatch):
    def _install(fake: FakePynvml | None) -> FakePynvml | None:
        monkeypatch.setitem(sys.modules, "pynvml", fake)
        return fake

    return _install


@pytest.fixture
def records(caplog):
    caplog.set_level(logging.DEBUG, logger="keras_gpu")

    def _records(level: int, *needles: str) -> list[logging.LogRecord]:
        return [
            r
            for r in caplog.records
            if r.name == "keras_gpu" and r.levelno == level and all(n in r.getMessage() for n in needles)
        ]

    return _records


def _sampler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "keras-gpu-nvml-sampler"]


# --------------------------------------------------------------------------- the fake itself


def test_fake_matches_real_pynvml_names_and_codes():
    import pynvml as real

    fake = FakePynvml()
    for const, code in ERROR_CODES.items():
        assert getattr(real, const) == code, const
    real_classes = {n for n in dir(real) if n.startswith("NVMLError_")}
    fake_classes = {n for n in dir(fake) if n.startswith("NVMLError_")}
    assert fake_classes <= real_classes
    for name in fake_classes:
        assert getattr(fake, name)().value == getattr(real, name)().value, name
    assert type(fake.NVMLError(15)).__name__ == "NVMLError_GpuIsLost"
    assert type(real.NVMLError(15)).__name__ == "NVMLError_GpuIsLost"
    assert (fake.NVML_TEMPERATURE_GPU, fake.NVML_CLOCK_SM) == (real.NVML_TEMPERATURE_GPU, real.NVML_CLOCK_SM)


def test_importing_the_module_does_not_import_pynvml():
    proc = run_python(
        """
        import sys
        import keras_gpu.core.nvml
        print("pynvml" in sys.modules, "tensorflow" in sys.modules)
        """
    )
    assert proc.stdout.split() == ["False", "False"]


# --------------------------------------------------------------------------- availability


def test_missing_pynvml_means_unavailable_with_one_info(install, records):
    install(None)  # `import pynvml` raises ImportError
    assert nvml.available() is False
    assert nvml.available() is False
    assert "nvidia-ml-py" in nvml.unavailable_reason()
    assert nvml.device_count() == 0
    assert nvml.static_info() == []
    assert nvml.driver_version() is None
    assert nvml.memory_total_bytes(0) is None
    assert nvml.tf_to_nvml_index(0) is None
    assert nvml.sample(0) is None
    assert len(records(logging.INFO, "NVML is not available")) == 1


def test_library_not_found_at_init(install, records):
    fake = install(FakePynvml(_three_gpus(), init_error="LibraryNotFound"))
    assert nvml.available() is False
    assert nvml.available() is False
    assert "NVMLError_LibraryNotFound" in nvml.unavailable_reason()
    assert fake.init_calls == 1  # not retried on every query
    assert nvml.device_count() == 0
    assert [f for f, _ in fake.calls] == ["nvmlInit"]
    assert len(records(logging.INFO, "NVML is not available", "LibraryNotFound")) == 1


def test_init_once_under_concurrency_and_shutdown(install):
    fake = install(FakePynvml(_three_gpus()))
    results = []
    threads = [threading.Thread(target=lambda: results.append(nvml.available())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True] * 8
    assert fake.init_calls == 1 and fake.refcount == 1
    assert nvml.unavailable_reason() is None
    nvml_session.reset_for_tests()
    assert fake.shutdown_calls == 1 and fake.refcount == 0


# --------------------------------------------------------------------------- static info and units


@pytest.mark.parametrize("as_bytes", [False, True])
def test_static_info_and_driver(install, as_bytes):
    install(FakePynvml(_three_gpus(), names_as_bytes=as_bytes, driver="550.54.15"))
    assert nvml.driver_version() == "550.54.15"
    assert nvml.device_count() == 3
    info = nvml.static_info()
    assert info == [
        nvml.GpuInfo(0, "NVIDIA Fake A", UUID_A, 80 * GIB, (8, 0), "00000000:17:00.0"),
        nvml.GpuInfo(1, "NVIDIA Fake B", UUID_B, 80 * GIB, (8, 0), "00000000:3B:00.0"),
        nvml.GpuInfo(2, "NVIDIA Fake C", UUID_C, 80 * GIB, (9, 0), "00000000:86:00.0"),
    ]
    assert all(isinstance(i.name, str) and isinstance(i.pci_bus_id, str) for i in info)


def test_sample_units(install):
    gpu = FakeGpu(memory_total=40 * GIB, memory_used=5 * GIB, utilization_gpu=87, utilization_memory=35,
                  power_mw=312_500, temperature_c=71, sm_clock_mhz=1755)
    install(FakePynvml([gpu]))
    s = nvml.sample(0)
    assert s == nvml.GpuSample(
        memory_used_bytes=5 * GIB,
        memory_total_bytes=40 * GIB,
        process_memory_bytes=0,  # no process on the GPU
        utilization_percent=87.0,
        memory_utilization_percent=35.0,
        power_watts=312.5,  # milliwatts -> watts
        temperature_c=71.0,
        sm_clock_mhz=1755.0,
    )
    assert nvml.memory_total_bytes(0) == 40 * GIB


# --------------------------------------------------------------------------- error policy


def test_not_supported_turns_off_one_metric_on_one_device(install, records):
    gpus = _three_gpus()[:2]
    gpus[1].unsupported = {"nvmlDeviceGetPowerUsage"}
    fake = install(FakePynvml(gpus))
    for _ in range(3):
        s0, s1 = nvml.sample(0), nvml.sample(1)
        assert s0.power_watts == 250.0
        assert s1.power_watts is None
        assert s1.temperature_c == 65.0 and s1.utilization_percent == 87.0  # the rest still works
    warnings = records(logging.WARNING, "power")
    assert len(warnings) == 1
    assert "GPU 1" in warnings[0].getMessage()
    assert "NotSupported" in warnings[0].getMessage()
    power_calls = [f for f, _ in fake.calls if f == "nvmlDeviceGetPowerUsage"]
    assert len(power_calls) == 3 + 1  # GPU 0 every time, GPU 1 only until it was turned off
    assert nvml.available()


def test_gpu_lost_mid_run_stops_all_queries(install, records):
    fake = install(FakePynvml(_three_gpus()[:1]))
    assert nvml.sample(0).temperature_c == 65.0
    fake.lose_after = fake.device_queries + 2  # two more device calls succeed, then the GPU is lost
    lost = nvml.sample(0)
    assert lost is not None and lost.temperature_c is None and lost.sm_clock_mhz is None
    assert nvml.available() is False
    assert "GPU is lost" in nvml.unavailable_reason() or "GpuIsLost" in nvml.unavailable_reason()
    calls_after = len(fake.calls)
    assert nvml.sample(0) is None
    assert nvml.device_count() == 0
    assert len(fake.calls) == calls_after  # nothing more reaches NVML
    assert len(records(logging.WARNING, "NVML failed during the run", "GpuIsLost")) == 1


@pytest.mark.parametrize("fatal", ["Unknown", "Uninitialized", "DriverNotLoaded"])
def test_other_fatal_errors_stop_nvml(install, fatal):
    gpu = FakeGpu()
    fake = install(FakePynvml([gpu]))
    gpu.temperature_c = [fake.error(fatal)]
    nvml.sample(0)
    assert nvml.available() is False
    assert fatal in nvml.unavailable_reason()


def test_transient_error_skips_one_sample_only(install, records):
    gpu = FakeGpu()
    fake = install(FakePynvml([gpu]))
    gpu.power_mw = [fake.error("Timeout"), 100_000, fake.error("Timeout"), 120_000]
    values = [nvml.sample(0).power_watts for _ in range(4)]
    assert values == [None, 100.0, None, 120.0]
    assert len(records(logging.WARNING, "power", "skipped")) == 1
    assert nvml.available()


def test_garbage_values_are_discarded_with_one_warning_each(install, records):
    gpu = FakeGpu(
        memory_total=16 * GIB,
        memory_used=[32 * GIB, 32 * GIB, 4 * GIB],  # used > total, twice, then sane
        utilization_gpu=[150, 150, 40],
        temperature_c=[250, 250, 60],
        power_mw=[-5, -5, 90_000],
        sm_clock_mhz=[0xFFFFFFFF, 0xFFFFFFFF, 1200],  # NVML's "not available" sentinel
    )
    install(FakePynvml([gpu]))
    for _ in range(2):
        s = nvml.sample(0)
        assert (s.memory_used_bytes, s.utilization_percent, s.temperature_c, s.power_watts, s.sm_clock_mhz) == (
            None, None, None, None, None,
        )
        assert s.memory_total_bytes == 16 * GIB and s.memory_utilization_percent == 35.0
    s = nvml.sample(0)
    assert (s.memory_used_bytes, s.utilization_percent, s.temperature_c, s.power_watts, s.sm_clock_mhz) == (
        4 * GIB, 40.0, 60.0, 90.0, 1200.0,
    )
    for metric in ("memory_used_bytes", "utilization_percent", "temperature_c", "power_watts", "sm_clock_mhz"):
        assert len(records(logging.WARNING, "impossible", metric)) == 1, metric
    assert nvml.available()


# --------------------------------------------------------------------------- index mapping


@pytest.mark.parametrize(
    ("visible", "expected"),
    [
        (None, [0, 1, 2, None]),
        ("2,0", [2, 0, None]),
        (" 1 , 2 ", [1, 2, None]),
        ("", [None]),
        ("-1", [None]),
        ("1,7,0", [1, None, None]),  # CUDA stops at the first invalid entry
        ("0,0,1", [0, None, None]),  # a repeated device ends the list
        (f"{UUID_C},{UUID_A}", [2, 0, None]),
        ("GPU-bbbb,0", [1, 0, None]),  # unique UUID prefix
        ("GPU-a,1", [None, None]),  # ambiguous prefix (GPU-aaaa..., GPU-abcd...)
        (f"{UUID_A.lower()}", [0, None]),
        (MIG_B, [1, None]),  # MIG instance -> its parent GPU
        ("MIG-does-not-exist", [None]),
        ("banana,0", [None, None]),
    ],
)
def test_tf_to_nvml_index(install, visible, expected):
    install(FakePynvml(_three_gpus()))
    environ = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    assert [nvml.tf_to_nvml_index(i, environ=environ) for i in range(len(expected))] == expected


def test_mapping_reads_the_process_environment(install, monkeypatch):
    install(FakePynvml(_three_gpus()))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    assert nvml.tf_to_nvml_index(0) == 2
    assert nvml.tf_to_nvml_index(1) is None
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,2")
    assert nvml.tf_to_nvml_index(1) == 2


def test_memory_total_follows_the_mapping(install):
    gpus = _three_gpus()
    gpus[2].memory_total = 24 * GIB
    install(FakePynvml(gpus))
    assert nvml.memory_total_bytes(0, environ={"CUDA_VISIBLE_DEVICES": "2,0"}) == 24 * GIB
    assert nvml.memory_total_bytes(1, environ={"CUDA_VISIBLE_DEVICES": "2,0"}) == 80 * GIB
    assert nvml.memory_total_bytes(2, environ={"CUDA_VISIBLE_DEVICES": "2,0"}) is None
    # A MIG instance reports its own slice of the card's memory.
    assert nvml.memory_total_bytes(0, environ={"CUDA_VISIBLE_DEVICES": MIG_B}) == 80 * GIB // 7


def test_mig_utilization_not_supported_is_turned_off(install, records):
    install(FakePynvml(_three_gpus()))
    s = nvml.sample(0, environ={"CUDA_VISIBLE_DEVICES": MIG_B})
    assert s.utilization_percent is None and s.memory_total_bytes == 80 * GIB // 7
    assert len(records(logging.WARNING, "utilization", "MIG")) == 1


@pytest.mark.parametrize(
    ("value", "error"),
    [(-1, ValueError), ("0", TypeError), (True, TypeError), (0.0, TypeError), (None, TypeError)],
)
def test_bad_tf_index_is_rejected(install, value, error):
    install(FakePynvml(_three_gpus()))
    for fn in (nvml.tf_to_nvml_index, nvml.memory_total_bytes, nvml.sample, nvml.process_memory_bytes):
        with pytest.raises(error, match=rf"Received: tf_gpu_index={value!r}"):
            fn(value)


# --------------------------------------------------------------------------- per-process memory


def test_process_memory_found_not_doubled_and_summed(install):
    me, other = os.getpid(), os.getpid() + 100_000
    gpus = [
        FakeGpu(compute_processes=[FakeProcess(me, 1 * GIB), FakeProcess(other, 2 * GIB)]),
        # A process with compute and graphics contexts appears in both lists with one figure.
        FakeGpu(compute_processes=[FakeProcess(me, 3 * GIB)], graphics_processes=[FakeProcess(me, 3 * GIB)]),
        # Two compute entries for this process (e.g. one per MIG instance on the parent): summed.
        FakeGpu(compute_processes=[FakeProcess(me, 1 * GIB), FakeProcess(me, 2 * GIB)]),
    ]
    install(FakePynvml(gpus))
    assert [nvml.process_memory_bytes(i) for i in range(3)] == [1 * GIB, 3 * GIB, 3 * GIB]
    assert nvml.sample(0).process_memory_bytes == 1 * GIB


def test_process_memory_pid_not_found_is_none_with_one_info(install, records):
    gpu = FakeGpu(compute_processes=[FakeProcess(1, 2 * GIB)])  # only another namespace's pid
    install(FakePynvml([gpu]))
    assert nvml.process_memory_bytes(0) is None
    assert nvml.process_memory_bytes(0) is None
    assert len(records(logging.INFO, "PID namespace")) == 1


def test_process_memory_none_from_driver_is_none(install, records):
    gpu = FakeGpu(compute_processes=[FakeProcess(os.getpid(), None)])  # e.g. Windows WDDM
    install(FakePynvml([gpu]))
    assert nvml.process_memory_bytes(0) is None
    assert len(records(logging.INFO, "does not report per-process memory")) == 1


def test_process_memory_empty_list_is_zero_and_unsupported_is_none(install, records):
    gpus = [FakeGpu(), FakeGpu(unsupported={"nvmlDeviceGetComputeRunningProcesses"})]
    install(FakePynvml(gpus))
    assert nvml.process_memory_bytes(0) == 0
    assert nvml.process_memory_bytes(1) is None
    assert len(records(logging.WARNING, "process_memory", "GPU 1")) == 1


def test_graphics_list_unsupported_is_quiet(install, records):
    gpu = FakeGpu(
        compute_processes=[FakeProcess(os.getpid(), GIB)], unsupported={"nvmlDeviceGetGraphicsRunningProcesses"}
    )
    install(FakePynvml([gpu]))
    assert nvml.process_memory_bytes(0) == GIB
    assert records(logging.WARNING) == []


# --------------------------------------------------------------------------- sampler


def test_sampler_window_mean_and_max(install):
    gpus = _three_gpus()[:2]
    gpus[0].utilization_gpu = [10, 90]
    gpus[0].power_mw = [100_000, 300_000]
    gpus[1].unsupported = {"nvmlDeviceGetPowerUsage"}
    install(FakePynvml(gpus))
    sampler = nvml_sampler.GpuSampler([0, 1], interval_s=60.0).start()
    assert sampler.wait_ready(10)
    assert sampler.gpus == {0: 0, 1: 1}
    assert sampler.stop(final_sample=True)  # the second sample, taken on the sampler thread
    window = sampler.drain()
    assert set(window) == {0, 1}
    assert window[0]["utilization_percent"] == nvml.WindowStat(2, 50.0, 90.0)
    assert window[0]["power_watts"] == nvml.WindowStat(2, 200.0, 300.0)
    assert window[0]["temperature_c"] == nvml.WindowStat(2, 65.0, 65.0)
    assert window[0]["memory_total_bytes"] == nvml.WindowStat(2, 80.0 * GIB, 80.0 * GIB)
    assert "power_watts" not in window[1]  # unsupported on GPU 1
    assert window[1]["sm_clock_mhz"] == nvml.WindowStat(2, 1410.0, 1410.0)
    assert sampler.drain() == {}  # drained windows start empty
    assert sampler.samples_taken == 2


def test_sampler_windows_split_samples(install):
    gpu = FakeGpu(temperature_c=[50, 60, 70, 90])  # 90 from the fourth sample on
    install(FakePynvml([gpu]))
    sampler = nvml_sampler.GpuSampler(None, interval_s=0.01).start()
    deadline = time.monotonic() + 10
    while sampler.samples_taken < 3 and time.monotonic() < deadline:
        time.sleep(0.005)
    first = sampler.drain()
    assert sampler.stop(final_sample=True)
    second = sampler.drain()
    total = first[0]["temperature_c"].count + second[0]["temperature_c"].count
    assert total == sampler.samples_taken >= 4
    assert first[0]["temperature_c"].max <= second[0]["temperature_c"].max == 90.0
    assert first[0]["temperature_c"].mean < second[0]["temperature_c"].mean


def test_sampler_stop_is_idempotent_and_leaves_no_thread(install):
    install(FakePynvml(_three_gpus()))
    sampler = nvml_sampler.GpuSampler([0], interval_s=0.01)
    assert sampler.stop() is True  # never started
    sampler = nvml_sampler.GpuSampler([0], interval_s=0.01)
    assert sampler.start() is sampler
    assert sampler.start() is sampler  # no second thread
    assert sampler.wait_ready(10)
    assert len(_sampler_threads()) == 1
    assert sampler.stop() is True
    assert sampler.stop() is True
    assert not sampler.running
    assert _sampler_threads() == []
    with pytest.raises(RuntimeError, match="create a new GpuSampler"):
        sampler.start()


def test_sampler_stops_itself_when_gpu_is_lost(install, records):
    fake = install(FakePynvml(_three_gpus()[:1], lose_after=40))
    sampler = nvml_sampler.GpuSampler([0], interval_s=0.005).start()
    sampler._thread.join(10)
    assert not sampler.running
    assert "GpuIsLost" in sampler.stop_reason
    assert sampler.samples_taken >= 3
    assert len(records(logging.WARNING, "NVML failed during the run")) == 1
    assert sampler.drain()[0]["temperature_c"].count >= 3  # what was sampled before the loss is kept
    assert fake.device_queries == 41  # the failing call, and nothing after it


def test_sampler_stops_when_owner_is_gone(install):
    install(FakePynvml(_three_gpus()[:1]))
    owner_alive = threading.Event()
    owner_alive.set()
    sampler = nvml_sampler.GpuSampler([0], interval_s=0.01, alive=owner_alive.is_set).start()
    assert sampler.wait_ready(10)
    assert sampler.running
    owner_alive.clear()
    sampler._thread.join(5)
    assert not sampler.running
    assert sampler.stop_reason == "its owner is gone"


def test_sampler_stops_when_nobody_drains(install, records):
    install(FakePynvml(_three_gpus()[:1]))
    sampler = nvml_sampler.GpuSampler([0], interval_s=0.01, max_idle_s=0.3).start()
    t0 = time.monotonic()
    sampler._thread.join(10)
    assert not sampler.running
    assert 0.25 < time.monotonic() - t0 < 5
    assert "drained" in sampler.stop_reason
    assert len(records(logging.INFO, "NVML sampler stopped")) == 1


def test_sampler_without_nvml_exits_at_once(install):
    install(None)
    sampler = nvml_sampler.GpuSampler(None, interval_s=0.01).start()
    sampler._thread.join(10)
    assert not sampler.running
    assert "nvidia-ml-py" in sampler.stop_reason
    assert sampler.drain() == {}


def test_sampler_skips_gpus_that_are_not_visible(install, monkeypatch, records):
    install(FakePynvml(_three_gpus()))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    sampler = nvml_sampler.GpuSampler([0, 3], interval_s=60.0).start()
    assert sampler.wait_ready(10)
    assert sampler.gpus == {0: 2}
    sampler.stop()
    assert set(sampler.drain()) == {0}
    assert len(records(logging.WARNING, "TensorFlow GPU 3 is not a GPU NVML can see")) == 1


def test_reset_stops_running_samplers(install):
    install(FakePynvml(_three_gpus()))
    sampler = nvml_sampler.GpuSampler(None, interval_s=0.01).start()
    assert sampler.wait_ready(10)
    nvml_session.reset_for_tests()  # the same path as the atexit shutdown
    assert not sampler.running
    assert _sampler_threads() == []


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"interval_s": 0}, ValueError, "Received: interval_s=0"),
        ({"interval_s": -1.0}, ValueError, "Received: interval_s=-1.0"),
        ({"interval_s": "1"}, TypeError, "Received: interval_s='1'"),
        ({"interval_s": float("nan")}, ValueError, "Received: interval_s=nan"),
        ({"max_idle_s": 0}, ValueError, "Received: max_idle_s=0"),
        ({"indices": "01"}, TypeError, "Received: indices='01'"),
        ({"indices": 0}, TypeError, "Received: indices=0"),
        ({"indices": [-1]}, ValueError, r"Received: indices=\[-1\]"),
        ({"indices": [0, True]}, ValueError, r"Received: indices=\[0, True\]"),
        ({"indices": [0, 0]}, ValueError, "must not repeat"),
        ({"alive": 3}, TypeError, "Received: alive=3"),
    ],
)
def test_sampler_argument_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        nvml_sampler.GpuSampler(**kwargs)


# --------------------------------------------------------------------------- real hardware


@pytest.mark.gpu
def test_real_nvml():
    assert nvml.available(), nvml.unavailable_reason()
    count = nvml.device_count()
    info = nvml.static_info()
    assert count > 0 and len(info) == count
    assert all(i.memory_total_bytes and i.memory_total_bytes > 2**30 for i in info)
    assert all(i.uuid and i.uuid.startswith(("GPU-", "MIG-")) for i in info)
    assert nvml.driver_version()
    s = nvml.sample(0)
    assert s is not None
    assert 0 < s.memory_total_bytes and (s.memory_used_bytes is None or s.memory_used_bytes <= s.memory_total_bytes)
    assert s.temperature_c is None or 0 < s.temperature_c < 120
    assert s.power_watts is None or 0 < s.power_watts < 2000
    sampler = nvml_sampler.GpuSampler([0], interval_s=0.05).start()
    time.sleep(0.3)
    assert sampler.stop(final_sample=True)
    window = sampler.drain()
    assert window[0]["memory_total_bytes"].count >= 2
