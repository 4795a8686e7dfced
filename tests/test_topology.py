"""keras_gpu.core.topology: device names, replica devices, logical and physical GPUs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from keras_gpu.core import topology as T
from keras_gpu.core.topology import DeviceName

FULL_GPU0 = "/job:localhost/replica:0/task:0/device:GPU:0"


@pytest.mark.parametrize(
    "name, parsed",
    [
        (FULL_GPU0, DeviceName("localhost", 0, 0, "GPU", 0)),
        ("/job:worker/replica:0/task:3/device:CPU:1", DeviceName("worker", 0, 3, "CPU", 1)),
        ("/device:CPU:0", DeviceName(None, None, None, "CPU", 0)),
        ("/cpu:2", DeviceName(None, None, None, "CPU", 2)),
        ("GPU:3", DeviceName(None, None, None, "GPU", 3)),
        ("/device:GPU:*", DeviceName(None, None, None, "GPU", None)),
        ("/physical_device:GPU:7", DeviceName(None, None, None, "GPU", 7)),
        ("/job:localhost/replica:0/task:0", DeviceName("localhost", 0, 0, "", None)),
        ("", None),
        ("(unplaced)", None),
        ("GPU:x", None),
        ("/job:", None),
        (None, None),
    ],
)
def test_parse_device(name, parsed):
    assert T.parse_device(name) == parsed


@pytest.mark.parametrize(
    "name, label, short, kind",
    [
        (FULL_GPU0, "GPU_0", "GPU:0", "GPU"),
        ("/job:worker/replica:0/task:1/device:GPU:2", "GPU_2", "worker:1/GPU:2", "GPU"),
        ("/device:CPU:1", "CPU_1", "CPU:1", "CPU"),
        ("/job:localhost/replica:0/task:0", "device_0", "/job:localhost/replica:0/task:0", ""),
        ("", "device_0", "(unplaced)", ""),
        ("not a device", "device_0", "not a device", ""),
    ],
)
def test_labels_of_one_device_agree(name, label, short, kind):
    assert T.device_label(name) == label
    assert T.short_device(name) == short
    assert T.device_type(name) == kind


def test_device_sort_key_orders_by_job_task_type_index():
    names = [
        "/job:worker/replica:0/task:1/device:GPU:0",
        "/job:worker/replica:0/task:0/device:GPU:10",
        "/job:worker/replica:0/task:0/device:GPU:2",
        "/job:worker/replica:0/task:0/device:CPU:0",
        "/job:chief/replica:0/task:0/device:GPU:0",
    ]
    assert sorted(names, key=T.device_sort_key) == [
        "/job:chief/replica:0/task:0/device:GPU:0",
        "/job:worker/replica:0/task:0/device:CPU:0",
        "/job:worker/replica:0/task:0/device:GPU:2",
        "/job:worker/replica:0/task:0/device:GPU:10",
        "/job:worker/replica:0/task:1/device:GPU:0",
    ]


def test_allocator_devices_share_one_cpu_allocator_and_keep_gpus_apart():
    devices = [
        "/job:localhost/replica:0/task:0/device:CPU:0",
        "/job:localhost/replica:0/task:0/device:CPU:1",
        "/job:localhost/replica:0/task:0/device:GPU:1",
        "/job:localhost/replica:0/task:0/device:GPU:0",
        "/job:localhost/replica:0/task:0/device:GPU:1",
        "/job:localhost/replica:0/task:0",
    ]
    assert T.allocator_devices(devices) == [("CPU:0", "CPU_0"), ("GPU:1", "GPU_1"), ("GPU:0", "GPU_0")]
    assert T.allocator_devices([]) == []


@pytest.mark.parametrize(
    "layout, logical, expected",
    [
        ([(0, 1), (1, 1)], [0, 1], [0, 1]),
        ([(0, 2), (1, 2)], [0, 1, 2, 3], [0, 1]),  # two logical GPUs on each card
        ([(0, 2), (1, 2)], [2], [1]),
        ([(3, 1), (5, 1)], [1, 0], [5, 3]),  # visible_gpus=[3, 5]: logical order follows the visible order
        ([(0, 1)], [0, 4, -1], [0]),  # out-of-range indices are left out
        ([], [0], []),
    ],
)
def test_logical_to_physical(layout, logical, expected):
    assert T.logical_to_physical(layout, logical) == expected


def test_replica_devices_of_real_strategies():
    tf = pytest.importorskip("tensorflow")
    # This machine has no GPU: the default strategy runs on the CPU.
    if tf.config.list_logical_devices("GPU"):
        pytest.skip("expects a machine without a GPU")
    assert T.replica_devices(tf.distribute.get_strategy()) == ("/job:localhost/replica:0/task:0/device:CPU:0",)
    assert T.replica_devices(None) == ("/job:localhost/replica:0/task:0/device:CPU:0",)
    one = tf.distribute.OneDeviceStrategy("/cpu:0")
    assert T.replica_devices(one) == tuple(one.extended.worker_devices)


_SUBPROCESS = r"""
import json
import keras_gpu
from keras_gpu.core import tf_private as _tf
from keras_gpu.core import topology as T

out = {"layout": T.gpu_layout(), "count": T.visible_gpu_count(), "physical": T.physical_gpus([0, 1])}
out["initialized_after_reads"] = _tf.runtime_initialized()
keras_gpu.configure_devices(cpu_devices=2)
import tensorflow as tf
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
devices = T.replica_devices(strategy)
out["labels"] = [T.device_label(d) for d in devices]
out["short"] = [T.short_device(d) for d in devices]
out["stock"] = [str(d) for d in strategy.extended.worker_devices]
out["devices"] = list(devices)
out["allocators"] = T.allocator_devices(devices)
print("RESULT " + json.dumps(out))
"""


def test_mirrored_over_two_logical_cpus_in_a_fresh_process():
    pytest.importorskip("tensorflow")
    proc = subprocess.run([sys.executable, "-c", _SUBPROCESS], capture_output=True, text=True, timeout=300)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, proc.stderr[-3000:]
    out = json.loads(line[len("RESULT ") :])
    # Reading the GPU layout never starts TensorFlow's runtime (configure_devices still works afterwards).
    assert out["initialized_after_reads"] is False
    assert out["layout"] == [] and out["count"] == 0 and out["physical"] == []
    assert out["devices"] == out["stock"]
    assert out["labels"] == ["CPU_0", "CPU_1"]
    assert out["short"] == ["CPU:0", "CPU:1"]
    assert out["allocators"] == [["CPU:0", "CPU_0"]]
