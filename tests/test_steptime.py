"""The step-time arithmetic on hand-built traces: every instant attributed once, per replica, hints from numbers."""

from __future__ import annotations

import subprocess
import sys

import pytest

from keras_gpu.meters import step_time as steptime
from keras_gpu.meters import xspace
from keras_gpu.meters.step_time import ReplicaTime, StepTime

US = 1_000_000  # picoseconds per microsecond


def _space(planes: dict[str, dict[str, list[tuple[str, int, int]]]]) -> object:
    """An XSpace from `{plane: {line: [(event name, start_us, end_us)]}}`, serialised and parsed back."""
    space = xspace._xspace_class()()
    for plane_name, lines in planes.items():
        plane = space.planes.add(name=plane_name)
        ids: dict[str, int] = {}
        for line_name, events in lines.items():
            line = plane.lines.add(name=line_name, timestamp_ns=1000)  # every line starts at 1 us
            for name, start, end in events:
                if name not in ids:
                    ids[name] = len(ids) + 1
                    entry = plane.event_metadata.add(key=ids[name])
                    entry.value.id, entry.value.name = ids[name], name
                line.events.add(metadata_id=ids[name], offset_ps=(start - 1) * US, duration_ps=(end - start) * US)
    return xspace.parse(space.SerializeToString())


def test_module_does_not_import_tensorflow():
    code = "import sys, keras_gpu.meters.step_time; assert 'tensorflow' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_each_instant_counts_once_compute_first():
    # 2 steps in 100 us. Compute 10..40 and 30..50 (union 40 us), a send 45..60
    # (10 us beyond compute), input waits 0..12 (10 us beyond compute) and
    # 70..75; the rest is other.
    space = _space(
        {
            "/host:CPU": {
                "tf_Compute/1": [("model/dense/MatMul:MatMul", 10, 40), ("model/dense/Relu:Relu", 30, 50)],
                "tf_Compute/2": [("model/grad/_Send:_Send", 45, 60), ("GroupCrossDevice/NoOp:NoOp", 0, 100)],
                "tf_data_iterator_get_next/3": [("IteratorGetNextOp::DoCompute", 0, 12), ("IteratorGetNextOp::DoCompute", 70, 75)],
                "python": [("multi_step_on_iterator", 0, 100)],
            }
        }
    )
    st = steptime.analyze(space, steps=2, wall_sec=100e-6)
    assert st.step_sec == pytest.approx(50e-6)
    assert st.compute_sec == pytest.approx(20e-6)
    assert st.communication_sec == pytest.approx(5e-6)
    assert st.input_sec == pytest.approx(7.5e-6)
    assert st.other_sec == pytest.approx(17.5e-6)
    assert st.input_sec + st.compute_sec + st.communication_sec + st.other_sec == pytest.approx(st.step_sec)
    assert st.share("compute") == pytest.approx(0.4)
    assert st.source == "host"
    # The step function ran the whole window: no host time outside it.
    assert st.host_sec == 0.0 and st.busy_sec == pytest.approx(st.input_sec + st.compute_sec)


def test_host_time_outside_the_step_function_is_busy_time():
    # Two 30 us executions of the step function in a 100 us window of 2 steps:
    # 40 us of Python between them (a callback), 20 us of compute inside.
    space = _space(
        {
            "/host:CPU": {
                "python": [("multi_step_on_iterator", 0, 30), ("multi_step_on_iterator", 70, 100)],
                "tf_Compute/1": [("m/MatMul:MatMul", 5, 15), ("m/MatMul:MatMul", 75, 85)],
            }
        }
    )
    st = steptime.analyze(space, steps=2, wall_sec=100e-6)
    assert st.compute_sec == pytest.approx(10e-6) and st.other_sec == pytest.approx(40e-6)
    assert st.host_sec == pytest.approx(20e-6)  # 40 us outside the function, per step
    assert st.busy_sec == pytest.approx(30e-6)
    # A trace that names no step function: all of `other` counts as host time.
    bare = steptime.analyze(_space({"/host:CPU": {"tf_Compute/1": [("m/MatMul:MatMul", 0, 10)]}}), steps=1, wall_sec=50e-6)
    assert bare.host_sec == pytest.approx(bare.other_sec)


def test_parts_never_exceed_the_step():
    space = _space({"/host:CPU": {"tf_Compute/1": [("a:MatMul", 0, 200)]}})
    st = steptime.analyze(space, steps=1, wall_sec=100e-6)  # the trace ran past the caller's window
    assert st.compute_sec == pytest.approx(100e-6) and st.other_sec == pytest.approx(0.0, abs=1e-15)
    assert st.replicas[0].compute_sec == pytest.approx(100e-6)


def test_replicas_by_name_scope_on_cpu():
    space = _space(
        {
            "/host:CPU": {
                "tf_Compute/1": [
                    ("StatefulPartitionedCall/sequential/dense/MatMul:MatMul", 0, 10),
                    ("StatefulPartitionedCall/replica_1/sequential/dense/MatMul:MatMul", 0, 30),
                    ("StatefulPartitionedCall/gradient_tape/replica_1/dense/MatMul_1:MatMul", 30, 40),
                    ("StatefulPartitionedCall/sgd/update_1_2/Mul:Mul", 40, 45),
                    ("StatefulPartitionedCall/sgd/update_0/Mul:Mul", 40, 42),
                    ("StatefulPartitionedCall/replica_1/x/_Send:_Send", 45, 47),
                ]
            }
        }
    )
    st = steptime.analyze(space, steps=1, wall_sec=50e-6, num_replicas=2)
    assert st.replicas[0] == ReplicaTime(pytest.approx(12e-6), 0.0)
    assert st.replicas[1].compute_sec == pytest.approx(45e-6)
    assert st.replicas[1].communication_sec == pytest.approx(2e-6)


def test_gpu_timelines_win_over_host_launches():
    space = _space(
        {
            "/host:CPU": {
                "tf_Compute/1": [("model/MatMul:MatMul", 0, 90)],  # the launch, not the work
                "tf_data_iterator_get_next/2": [("IteratorGetNextOp::DoCompute", 0, 5)],
            },
            "/device:GPU:0": {"Stream #7(compute)": [("volta_sgemm_128x64", 10, 30), ("ncclDevKernel_AllReduce", 30, 40)]},
            "/device:GPU:1": {
                "Stream #7(compute)": [("volta_sgemm_128x64", 10, 60)],
                "Stream #9(memcpy)": [("MemcpyP2P", 60, 70)],
            },
        }
    )
    st = steptime.analyze(space, steps=1, wall_sec=100e-6, num_replicas=2, gpu_replicas={0: 0, 1: 1})
    assert st.source == "gpu"
    assert st.compute_sec == pytest.approx(50e-6)  # 10..60
    assert st.communication_sec == pytest.approx(10e-6)  # 60..70; 30..40 overlaps GPU 1's compute
    assert st.input_sec == pytest.approx(5e-6)
    assert [r.compute_sec for r in st.replicas] == pytest.approx([20e-6, 50e-6])
    assert [r.communication_sec for r in st.replicas] == pytest.approx([10e-6, 10e-6])


def test_op_classification():
    assert steptime.classify_op("a/b/MatMul:MatMul") == ("compute", "a/b/MatMul")
    assert steptime.classify_op("a/CollectiveReduceV2:CollectiveReduceV2") == ("communication", "a/CollectiveReduceV2")
    assert steptime.classify_op("IteratorGetNext:IteratorGetNext") == ("input", "IteratorGetNext")
    assert steptime.classify_op("ExecutorState::Process") is None
    assert steptime.classify_op("GroupCrossDeviceControlEdges_0/NoOp:NoOp") is None
    assert steptime.classify_op("multi_step_on_iterator") is None


def test_bad_arguments():
    space = _space({"/host:CPU": {"tf_Compute/1": [("a:MatMul", 0, 1)]}})
    with pytest.raises(ValueError, match=r"Received: steps=0"):
        steptime.analyze(space, steps=0, wall_sec=1.0)
    with pytest.raises(ValueError, match=r"Received: wall_sec=0"):
        steptime.analyze(space, steps=1, wall_sec=0)
    with pytest.raises(ValueError, match=r"no /host:CPU plane"):
        steptime.analyze(_space({"/device:GPU:0": {}}), steps=1, wall_sec=1.0)


def _step(input_sec=0.0, compute=0.0, comm=0.0, replicas=()):
    step = 1.0
    return StepTime(1, step, input_sec, compute, comm, step - input_sec - compute - comm, tuple(replicas), "host")


def test_hints_follow_from_the_numbers():
    assert steptime.verdict(_step(input_sec=0.29, compute=0.5)) == []
    (hint,) = steptime.verdict(_step(input_sec=0.62, compute=0.3))
    assert hint.startswith("input-bound: 62% of each step waits for input")
    (hint,) = steptime.verdict(_step(comm=0.4, compute=0.5))
    assert hint.startswith("communication-bound: 40%")
    slow = [ReplicaTime(0.2, 0.0), ReplicaTime(0.5, 0.0)]
    (hint,) = steptime.verdict(_step(compute=0.5, replicas=slow), ["replica 0 (GPU:0)", "replica 1 (GPU:1)"])
    assert hint.startswith("slow replica: replica 1 (GPU:1) computes 2.5x")


def test_slow_replica_needs_a_clear_and_large_difference():
    assert steptime.slow_replica([ReplicaTime(1.0, 0), ReplicaTime(1.2, 0)], 2.0) is None  # 1.2x
    assert steptime.slow_replica([ReplicaTime(0.01, 0), ReplicaTime(0.03, 0)], 1.0) is None  # 3x, but 2% of the step
    assert steptime.slow_replica([ReplicaTime(0.1, 0), ReplicaTime(0.3, 0), ReplicaTime(0.1, 0)], 1.0) == (1, pytest.approx(3.0))
    assert steptime.slow_replica([ReplicaTime(0.1, 0)], 1.0) is None


def test_a_host_bound_step_points_to_keras_gpu_tune():
    (hint,) = steptime.verdict(StepTime(1, 1.0, 0.0, 0.1, 0.0, 0.9, (), "host", host_sec=0.85))
    assert hint.startswith("host-bound: 85% of each step is host time outside the step function")
    assert hint.endswith("`keras-gpu tune` measures the fixes")
    (hint,) = steptime.verdict(_step(input_sec=0.62, compute=0.3))
    assert hint.startswith("input-bound: 62%") and hint.endswith("`keras-gpu tune` measures the fixes")
