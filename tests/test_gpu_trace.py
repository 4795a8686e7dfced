"""GPU traces read right: a real multi-GPU trace, hand-built ones with known intervals, step markers, replica mapping."""

from __future__ import annotations

import os

import pytest

from keras_gpu.core import topology
from keras_gpu.meters import gpu_lines, xspace
from keras_gpu.meters import step_time as steptime
from tests._xspace import US
from tests._xspace import space as _space

FIXTURE = os.path.join(os.path.dirname(__file__), "data", "gpu_multi_worker.xplane.pb")
DERIVED = ("Steps", "TensorFlow Ops", "TensorFlow Name Scope")


def _union_us(spans):
    """Hand-counted union length of `(start, end)` spans."""
    total, current = 0, None
    for a, b in sorted(spans):
        if current is None or a > current[1]:
            total += 0 if current is None else current[1] - current[0]
            current = [a, b]
        else:
            current[1] = max(current[1], b)
    return total + (0 if current is None else current[1] - current[0])


# --------------------------------------------------------------------------- the recorded multi-GPU trace


@pytest.fixture(scope="module")
def fixture_space():
    return xspace.load(FIXTURE)


def _compute_stream_union_sec(space, gpu: int) -> float:
    """The union of the `Stream #...(Compute)` kernels of one GPU plane, counted from the raw events."""
    plane = xspace.planes(space)[f"/device:GPU:{gpu}"]
    spans = []
    for line in plane.lines:
        if line.name.endswith("(Compute)"):
            base = line.timestamp_ns * 1000
            spans.extend((base + e.offset_ps, base + e.offset_ps + e.duration_ps) for e in line.events)
    assert len(spans) == 665
    return _union_us(spans) / 1e12


def test_fixture_compute_per_gpu_is_the_compute_stream(fixture_space):
    st = steptime.analyze(fixture_space, steps=1, wall_sec=0.02131, num_replicas=2, gpu_replicas={4: 0, 6: 1})
    devices = {d.name: d for d in st.devices}
    assert sorted(devices) == ["GPU:4", "GPU:6"]  # GPU:1's copies lie outside the step
    for gpu, expected_ms in ((4, 14.83), (6, 14.87)):
        by_hand = _compute_stream_union_sec(fixture_space, gpu)
        assert by_hand == pytest.approx(expected_ms * 1e-3, rel=0.01)
        assert devices[f"GPU:{gpu}"].compute_sec == pytest.approx(by_hand, rel=0.01)
        assert 0 < devices[f"GPU:{gpu}"].transfer_sec < 0.3e-3
    # The trace's own step marker: one step of 21.31 ms (GPU:6's, the longer), as xprof reads it.
    assert st.steps == 1 and st.step_source == "device markers"
    assert st.step_sec == pytest.approx(0.02131, rel=1e-3)
    assert 0.65 <= st.share("compute") <= 0.75  # xprof: 14.88 ms of 21.31 ms, 0.70
    assert st.input_sec + st.compute_sec + st.communication_sec + st.transfer_sec + st.other_sec == pytest.approx(
        st.step_sec
    )
    # Replicas mapped to GPUs 4 and 6 each get their GPU's compute.
    assert [r.compute_sec for r in st.replicas] == pytest.approx([devices["GPU:4"].compute_sec, devices["GPU:6"].compute_sec])


def test_fixture_derived_lines_add_nothing(fixture_space):
    st = steptime.analyze(fixture_space, steps=1, wall_sec=0.02131)
    stripped = xspace.parse(fixture_space.SerializeToString())
    for plane in stripped.planes:
        keep = [line for line in plane.lines if line.name not in DERIVED[1:]]  # Steps stays: it bounds the step
        del plane.lines[:]
        plane.lines.extend(keep)
    bare = steptime.analyze(stripped, steps=1, wall_sec=0.02131)
    assert bare.compute_sec == st.compute_sec and bare.communication_sec == st.communication_sec
    assert bare.devices == st.devices
    assert [gpu_lines.line_kind(name).busy for name in DERIVED] == [False, False, False]


def test_fixture_default_mapping_reports_the_unmapped_gpu(fixture_space):
    st = steptime.analyze(fixture_space)  # no steps, no wall time: the trace's marker gives both
    assert st.steps == 1 and st.step_sec == pytest.approx(0.02131, rel=1e-3)
    assert st.replicas[0].compute_sec == pytest.approx(14.83e-3, rel=0.01)  # the first GPU that ran kernels
    assert any(n.startswith("GPU:6 did work") and "no replica" in n for n in st.notes)
    # The kernels' own replica scopes cross-check the mapping.
    assert any("replica_4/" in n for n in st.notes)


# --------------------------------------------------------------------------- hand-built traces, exact results


def _gpu_space(with_derived: bool = True):
    gpu0 = {
        "Stream #1(Compute)": [
            ("volta_sgemm", 10, 30, {"annotation": "model/dense/MatMul:MatMul"}),
            ("volta_sgemm", 25, 40),
            ("ncclDevKernel_AllReduce_Sum_f32", 40, 50),
        ],
        "Stream #2(MemcpyH2D)": [("MemcpyH2D", 0, 5)],
        "Stream #3(MemcpyP2P)": [("MemcpyP2P", 50, 55)],
        "Steps": [("0", 0, 60, {"group_id": 0})],
    }
    gpu1 = {
        "Stream #1(Compute)": [("volta_sgemm", 20, 70, {"annotation": "replica_1/model/dense/MatMul:MatMul"})],
        "Steps": [("0", 0, 80, {"group_id": 0})],
    }
    if with_derived:
        gpu0["TensorFlow Ops"] = [("MatMul", 10, 40), ("NcclAllReduce", 40, 50)]
        gpu0["TensorFlow Name Scope"] = [("model", 10, 50), ("dense", 10, 40)]
        gpu0["XLA Ops"] = [("fusion", 0, 100)]
        gpu1["Source"] = [("model.py:12", 0, 80)]
    return _space(
        {
            "/host:CPU": {
                "tf_Compute/1": [("model/dense/MatMul:MatMul", 0, 90)],  # a launch, not the work
                "tf_data_iterator_get_next/2": [("IteratorGetNextOp::DoCompute", 70, 78)],
            },
            "/device:GPU:0": gpu0,
            "/device:GPU:1": gpu1,
            "/device:GPU:2": {"Stream #5(MemcpyH2D)": [("MemcpyH2D", 5, 8)]},
        }
    )


def test_gpu_lines_kernels_copies_nccl_and_derived_exactly():
    st = steptime.analyze(_gpu_space(), num_replicas=2, gpu_replicas={0: 0, 1: 1})
    # One step, as long as its slowest device's window (GPU:1, 0..80 us).
    assert (st.steps, st.step_source, st.source) == (1, "device markers", "gpu")
    assert st.step_sec == pytest.approx(80e-6)
    assert st.compute_sec == pytest.approx(60e-6)  # kernels 10..70
    assert st.communication_sec == 0.0  # NCCL and P2P overlap GPU:1's kernel
    assert st.transfer_sec == pytest.approx(8e-6)  # host-device copies 0..8: transfers, not communication
    assert st.input_sec == pytest.approx(8e-6)  # 70..78
    assert st.other_sec == pytest.approx(4e-6)
    devices = {d.name: d for d in st.devices}
    assert devices["GPU:0"] == steptime.DeviceTime("GPU:0", pytest.approx(30e-6), pytest.approx(15e-6), pytest.approx(5e-6), (0,))
    assert devices["GPU:1"] == steptime.DeviceTime("GPU:1", pytest.approx(50e-6), 0.0, 0.0, (1,))
    assert devices["GPU:2"].transfer_sec == pytest.approx(3e-6) and devices["GPU:2"].replicas == ()
    assert [r.compute_sec for r in st.replicas] == pytest.approx([30e-6, 50e-6])
    assert [r.communication_sec for r in st.replicas] == pytest.approx([15e-6, 0.0])  # NCCL and P2P only
    assert any(n.startswith("GPU:2 did work") for n in st.notes)
    assert not any("replica_1/" in n for n in st.notes)  # GPU:1's scope agrees with its replica
    # The derived lines add nothing.
    bare = steptime.analyze(_gpu_space(with_derived=False), num_replicas=2, gpu_replicas={0: 0, 1: 1})
    assert bare == st


def test_a_scope_that_contradicts_the_mapping_is_noted():
    st = steptime.analyze(_gpu_space(), num_replicas=2, gpu_replicas={0: 1, 1: 0})
    assert any(n.startswith("GPU:1's kernels come from replica_1/ ops") for n in st.notes)


def test_host_step_markers_bound_the_window_and_count_the_steps():
    marker, stats = steptime.step_marker(1)
    space = _space(
        {
            "/host:CPU": {
                "python": [(marker, 0, 40, stats), (marker, 45, 90, steptime.step_marker(2)[1])],
                "tf_Compute/1": [("m/MatMul:MatMul", 10, 30), ("m/MatMul:MatMul", 50, 60), ("m/MatMul:MatMul", 95, 120)],
            }
        }
    )
    found = steptime.trace_steps(space)
    assert found.steps == 2 and found.windows == ((0, 90 * US),) and found.source == "host markers"
    st = steptime.analyze(space, steps=5, wall_sec=1.0)
    assert (st.steps, st.step_source) == (2, "host markers")
    assert st.step_sec == pytest.approx(45e-6) and st.compute_sec == pytest.approx(15e-6)  # 95..120 lies outside
    assert any("marks 2 steps where the caller counted 5" in n for n in st.notes)
    unmarked = _space({"/host:CPU": {"tf_Compute/1": [("m/MatMul:MatMul", 10, 30)]}})
    assert steptime.trace_steps(unmarked) is None
    assert steptime.analyze(unmarked, steps=1, wall_sec=40e-6).step_source == "caller"
    with pytest.raises(ValueError, match="Received: step_num=-1"):
        steptime.step_marker(-1)


def test_gpu_line_table():
    assert gpu_lines.line_kind("Stream #142(Compute)").name == "stream"
    assert gpu_lines.line_kind("Stream #7").busy
    assert gpu_lines.line_kind("Steps").name == "steps"
    for derived in ("TensorFlow Ops", "TensorFlow Name Scope", "XLA Modules", "XLA Ops", "Source", "Launch Stats"):
        assert not gpu_lines.line_kind(derived).busy, derived
    assert gpu_lines.line_kind("Something Else") is None
    assert gpu_lines.event_kind("MemcpyH2D").part == "transfer"
    assert gpu_lines.event_kind("MemcpyD2H").part == "transfer"
    assert gpu_lines.event_kind("MemcpyP2P").part == "communication"
    assert gpu_lines.event_kind("ncclKernel_AllReduce_RING_LL_Sum_float").part == "communication"
    assert gpu_lines.event_kind("void tensorflow::functor::FillPhiloxRandomKernelLaunch<>").part == "compute"


# --------------------------------------------------------------------------- replicas to the GPUs a trace names


def test_trace_gpu_replicas_follow_the_logical_to_physical_map():
    devices = ["/job:localhost/replica:0/task:0/device:GPU:0", "/job:localhost/replica:0/task:0/device:GPU:1"]
    assert topology.trace_gpu_replicas(devices, [(4, 1), (6, 1)]) == {4: (0,), 6: (1,)}  # set_visible_devices
    assert topology.trace_gpu_replicas(devices, [(0, 2)]) == {0: (0, 1)}  # two logical GPUs on one
    assert topology.trace_gpu_replicas(devices, None) == {0: (0,), 1: (1,)}  # JAX: each device its own
    assert topology.trace_gpu_replicas(["/device:CPU:0", "/device:GPU:3"], [(0, 1)]) == {}
    assert topology.logical_gpu_order([(1, 2), (3, 1)]) == [1, 1, 3]


def test_logical_gpus_on_one_device_both_get_its_time():
    st = steptime.analyze(_gpu_space(), num_replicas=3, gpu_replicas={1: (1, 2), 0: 0})
    assert [r.compute_sec for r in st.replicas] == pytest.approx([30e-6, 50e-6, 50e-6])


# --------------------------------------------------------------------------- the slowest input stage


def _stage_space(lines):
    return _space({"/host:CPU": {**lines, "python": [("multi_step_on_iterator", 0, 100)]}})


def test_input_stage_sequential_map_and_async_stages():
    # A sequential map (Map nested in BatchV2 on the consumer's thread) doing 60 us of its own work.
    space = _stage_space(
        {
            "tf_data_iterator_get_next/1": [
                ("IteratorGetNextOp::DoCompute", 0, 90),
                ("Iterator::Root", 0, 90),
                ("Iterator::Root::BatchV2", 1, 89),
                ("Iterator::Root::BatchV2::Map", 2, 80),
                ("Iterator::Root::BatchV2::Map::TensorSlice", 2, 20),
            ],
        }
    )
    st = steptime.analyze(space, steps=2, wall_sec=100e-6)
    assert st.input_stage == steptime.InputStage("Map", "Iterator::Root::BatchV2::Map", pytest.approx(30e-6))
    (hint,) = steptime.verdict(st)
    assert hint.startswith("input-bound: 90% of each step waits for input; the slowest stage is Map (0.03 ms per batch)")
    assert "num_parallel_calls" in hint
    # A parallel map waiting on a slow source: the source's time is not the map's.
    space = _stage_space(
        {
            "tf_data_iterator_get_next/1": [("Iterator::Root", 0, 90), ("Iterator::Root::Prefetch", 0, 90)],
            "tf_data_iterator_resource/2": [("Iterator::Root::Prefetch::ParallelMapV2", 0, 90)],
            "tf_data_private_threadpool/3": [("Iterator::Root::Prefetch::ParallelMapV2::Generator", 5, 85)],
        }
    )
    stage = steptime.analyze(space, steps=1, wall_sec=100e-6).input_stage
    assert (stage.name, stage.sec_per_step) == ("Generator", pytest.approx(80e-6))
