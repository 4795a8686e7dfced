"""Tests for `keras_gpu.setup.devices`: validation and planning on fake machines, and the real thing in subprocesses."""

from __future__ import annotations

import dataclasses
import inspect
import json
import logging
import math
import os
import sys
import types

import pytest

from keras_gpu.setup import (
    device_plan,
    device_request,
    device_settings,
    device_snapshot,
    devices,
)
from keras_gpu.setup.devices import DeviceConfig, configure_devices
from tests._util import run_python, subprocess_env

ARGS = tuple(inspect.signature(configure_devices).parameters)
GIB = 1 << 30


# --------------------------------------------------------------------------- #
# Helpers: fake machines
# --------------------------------------------------------------------------- #


def cpu_only(**overrides):
    base = dict(
        initialized=False,
        gpu_count=0,
        cpu_count=1,
        gpu_memory_bytes={},
        visible_gpus=(),
        memory_growth=(),
        gpu_logical_mb=(),
        cpu_logical_devices=None,
        intra_op_threads=0,
        inter_op_threads=0,
        soft_placement=True,
        log_placement=False,
        xla=False,
        tf32=True,
        mixed_precision="float32",
        env={},
    )
    base.update(overrides)
    return device_snapshot.Snapshot(**base)


def with_gpus(n, memory=16 * GIB, **overrides):
    base = dict(
        gpu_count=n,
        visible_gpus=tuple(range(n)),
        memory_growth=(None,) * n,
        gpu_logical_mb=(None,) * n,
        gpu_memory_bytes=dict.fromkeys(range(n), memory),
    )
    base.update(overrides)
    return cpu_only(**base)


def parse(**kwargs):
    full = dict.fromkeys(ARGS)
    full.update(kwargs)
    return device_request.parse_request(device_request.DeviceArguments(**full))


def plan(snapshot, **kwargs):
    return device_plan.make_plan(parse(**kwargs), snapshot)


def changes(p):
    return {c.setting: c for c in p.changes}


# --------------------------------------------------------------------------- #
# Argument validation (machine independent)
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    ("kwargs", "error", "needles"),
    [
        # memory growth cannot be combined with limits or splits
        (dict(memory_growth=True, memory_limit_mb=1024), ValueError, ["memory_growth=True", "memory_limit_mb=1024"]),
        (dict(memory_growth=True, memory_fraction=0.5), ValueError, ["memory_growth=True", "memory_fraction=0.5"]),
        (dict(memory_growth=True, logical_gpus=[512, 512]), ValueError, ["memory_growth=True", "logical_gpus"]),
        # memory limits
        (dict(memory_limit_mb=-1), ValueError, ["memory_limit_mb", "Received: memory_limit_mb=-1"]),
        (dict(memory_limit_mb=0), ValueError, ["Received: memory_limit_mb=0"]),
        (dict(memory_limit_mb=0.5), ValueError, ["at least 1", "Received: memory_limit_mb=0.5"]),
        (dict(memory_limit_mb=math.nan), ValueError, ["Received: memory_limit_mb=nan"]),
        (dict(memory_limit_mb=math.inf), ValueError, ["Received: memory_limit_mb=inf"]),
        (dict(memory_limit_mb=True), TypeError, ["Received: memory_limit_mb=True"]),
        (dict(memory_limit_mb="4096"), TypeError, ["Received: memory_limit_mb='4096'"]),
        (dict(memory_limit_mb={0: -5}), ValueError, ["memory_limit_mb[0]", "-5"]),
        (dict(memory_limit_mb={"0": 1024}), TypeError, ["memory_limit_mb keys", "'0'"]),
        (dict(memory_limit_mb={-1: 1024}), ValueError, ["memory_limit_mb keys", "-1"]),
        (dict(memory_limit_mb={}), ValueError, ["empty", "None"]),
        # fractions
        (dict(memory_fraction=0), ValueError, ["(0, 1]", "Received: memory_fraction=0"]),
        (dict(memory_fraction=1.5), ValueError, ["(0, 1]", "Received: memory_fraction=1.5"]),
        (dict(memory_fraction=-0.2), ValueError, ["Received: memory_fraction=-0.2"]),
        (dict(memory_fraction=math.nan), ValueError, ["Received: memory_fraction=nan"]),
        (dict(memory_fraction=True), TypeError, ["Received: memory_fraction=True"]),
        (dict(memory_fraction={1: 2.0}), ValueError, ["memory_fraction[1]"]),
        (dict(memory_limit_mb=1024, memory_fraction=0.5), ValueError, ["memory_limit_mb", "memory_fraction", "same GPU"]),
        (dict(memory_limit_mb={0: 1024}, memory_fraction=0.5), ValueError, ["same GPU"]),
        (dict(memory_limit_mb={0: 1024}, memory_fraction={0: 0.5}), ValueError, ["same GPU"]),
        # logical GPUs
        (dict(logical_gpus=0), ValueError, ["logical_gpus", "Received: logical_gpus=0"]),
        (dict(logical_gpus=2.0), TypeError, ["Received: logical_gpus=2.0"]),
        (dict(logical_gpus=True), TypeError, ["Received: logical_gpus=True"]),
        (dict(logical_gpus=[]), ValueError, ["empty", "Received: logical_gpus=[]"]),
        (dict(logical_gpus=[1024, -1]), ValueError, ["logical_gpus[1]", "-1"]),
        (dict(logical_gpus=2), ValueError, ["memory_limit_mb", "memory_fraction", "Received: logical_gpus=2"]),
        (dict(logical_gpus={0: 2}), ValueError, ["needs `memory_limit_mb`"]),
        (dict(logical_gpus={1: 2}, memory_limit_mb={0: 512}), ValueError, ["GPU 1", "no memory limit is given"]),
        (dict(logical_gpus=[1024, 1024], memory_limit_mb=4096), ValueError, ["list of MB sizes", "logical_gpus=N"]),
        (dict(logical_gpus={0: [1024]}, memory_limit_mb={0: 2048}), ValueError, ["list of MB sizes"]),
        (dict(logical_gpus=[1024], memory_fraction={1: 0.5}), ValueError, ["list of MB sizes"]),
        # placement of other options
        (dict(cpu_devices=0), ValueError, ["cpu_devices", "Received: cpu_devices=0"]),
        (dict(cpu_devices=1.5), TypeError, ["Received: cpu_devices=1.5"]),
        (dict(cpu_devices=True), TypeError, ["Received: cpu_devices=True"]),
        (dict(intra_op_threads=2.0), TypeError, ["intra_op_threads", "Received: intra_op_threads=2.0"]),
        (dict(inter_op_threads="4"), TypeError, ["Received: inter_op_threads='4'"]),
        (dict(intra_op_threads=True), TypeError, ["Received: intra_op_threads=True"]),
        (dict(inter_op_threads=-1), ValueError, ["Received: inter_op_threads=-1"]),
        (dict(mixed_precision="float16"), ValueError, ["mixed_float16", "mixed_bfloat16", "Received: mixed_precision='float16'"]),
        (dict(mixed_precision=16), TypeError, ["Received: mixed_precision=16"]),
        (dict(gpu_thread_mode="private"), ValueError, ["gpu_private", "Received: gpu_thread_mode='private'"]),
        (dict(gpu_thread_count=2), ValueError, ["gpu_thread_mode", "Received: gpu_thread_count=2"]),
        (dict(gpu_thread_count=2, gpu_thread_mode="global"), ValueError, ["gpu_thread_mode='global'"]),
        (dict(gpu_thread_count=0, gpu_thread_mode="gpu_private"), ValueError, ["Received: gpu_thread_count=0"]),
        (dict(soft_placement="yes"), TypeError, ["Received: soft_placement='yes'"]),
        (dict(xla=1), TypeError, ["Received: xla=1"]),
        (dict(tf32=None, log_placement=0), TypeError, ["Received: log_placement=0"]),
        (dict(memory_growth="true"), TypeError, ["Received: memory_growth='true'"]),
        # visible GPUs
        (dict(visible_gpus=0), TypeError, ["[0]", "Received: visible_gpus=0"]),
        (dict(visible_gpus="first"), ValueError, ['"all"', "Received: visible_gpus='first'"]),
        (dict(visible_gpus=[0, 0]), ValueError, ["more than once", "Received: visible_gpus=[0, 0]"]),
        (dict(visible_gpus=[-1]), ValueError, ["-1"]),
        (dict(visible_gpus=[True]), TypeError, ["True"]),
    ],
)
def test_bad_arguments_raise_before_looking_at_the_machine(kwargs, error, needles):
    with pytest.raises(error) as info:
        parse(**kwargs)
    message = str(info.value)
    for needle in needles:
        assert needle in message, f"{needle!r} not in {message!r}"


def test_unknown_keyword_and_positional_arguments_are_rejected():
    with pytest.raises(TypeError, match=r"^configure_devices\(\) got an unexpected keyword argument 'memory_grow'\. "
                       r"It takes visible_gpus, memory_growth, .*Received: memory_grow=True$"):
        configure_devices(memory_grow=True)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        configure_devices(True)  # type: ignore[misc]


def test_valid_arguments_are_normalised():
    req = parse(
        visible_gpus=[1, 0],
        memory_limit_mb={1: 2048},
        memory_fraction={0: 1},
        logical_gpus={1: 2},
        intra_op_threads=0,
        gpu_thread_mode="gpu_private",
        gpu_thread_count=1,
    )
    assert req.visible_gpus == (0, 1)
    assert dict(req.memory_limit_mb) == {1: 2048.0}
    assert dict(req.memory_fraction) == {0: 1.0}
    assert dict(req.logical_gpus) == {1: 2}
    assert req.intra_op_threads == 0
    assert parse(logical_gpus=(1024, 512.9)).logical_gpus == (1024.0, 512.9)
    assert parse(visible_gpus=[]).visible_gpus == ()


def test_every_argument_defaults_to_none_and_is_keyword_only():
    params = inspect.signature(configure_devices).parameters.values()
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is None for p in params)
    assert set(ARGS) == {f.name for f in dataclasses.fields(device_request.Request)}
    # Declared once: the signature is DeviceArguments', in its order, with its annotations.
    declared = dataclasses.fields(device_request.DeviceArguments)
    assert [(p.name, p.annotation) for p in params] == [(f.name, f.type) for f in declared]


# --------------------------------------------------------------------------- #
# Planning on fake machines
# --------------------------------------------------------------------------- #


def test_gpu_index_out_of_range_is_an_error_when_gpus_exist():
    with pytest.raises(ValueError, match=r"GPU 2.*2 GPU\(s\).*Received: visible_gpus=\[0, 2\]"):
        plan(with_gpus(2), visible_gpus=[0, 2])


def test_per_gpu_settings_must_name_visible_gpus():
    with pytest.raises(ValueError, match=r"GPU 3, which is not visible.*memory_limit_mb="):
        plan(with_gpus(2), memory_limit_mb={3: 1024})
    with pytest.raises(ValueError, match=r"GPU 1, which is not visible"):
        plan(with_gpus(2), visible_gpus=[0], logical_gpus={1: [512]})


def test_without_gpus_gpu_options_are_skipped_and_cpu_options_planned():
    p = plan(
        cpu_only(),
        visible_gpus=[7],
        memory_growth=False,
        logical_gpus=[1024],
        gpu_thread_mode="gpu_private",
        gpu_thread_count=2,
        cpu_devices=2,
    )
    assert dict(p.skipped) == dict.fromkeys(("visible_gpus", "memory_growth", "logical_gpus", "gpu_thread_mode", "gpu_thread_count"), "no GPU visible to TensorFlow")
    assert [c.setting for c in p.changes] == ["cpu_devices"]
    assert changes(p)["cpu_devices"].target == 2


def test_hiding_every_gpu_skips_the_other_gpu_options():
    p = plan(with_gpus(2), visible_gpus=[], memory_growth=True)
    assert changes(p)["visible_gpus"].target == ()
    assert changes(p)["visible_gpus"].restore == (0, 1)
    assert dict(p.skipped) == {"memory_growth": "`visible_gpus=[]` hides every GPU"}


def test_memory_fraction_uses_the_card_memory():
    snap = with_gpus(2, gpu_memory_bytes={0: 16 * GIB, 1: 8 * GIB})
    p = plan(snap, memory_fraction=0.5)
    assert dict(changes(p)["gpu_memory_limits_mb"].target) == {0: (8192,), 1: (4096,)}
    p = plan(snap, memory_fraction={1: 0.25}, memory_limit_mb={0: 1000.9})
    assert dict(changes(p)["gpu_memory_limits_mb"].target) == {0: (1000,), 1: (2048,)}


def test_memory_fraction_with_unknown_card_memory_says_to_pass_a_limit():
    snap = with_gpus(2, gpu_memory_bytes={0: 16 * GIB, 1: None})
    with pytest.raises(RuntimeError, match=r"GPU 1.*NVML.*memory_limit_mb"):
        plan(snap, memory_fraction=0.5)
    # Only the GPUs that use a fraction need their memory.
    p = plan(snap, memory_fraction={0: 0.5})
    assert dict(changes(p)["gpu_memory_limits_mb"].target) == {0: (8192,)}


def test_logical_split_sizes():
    snap = with_gpus(2)
    p = plan(snap, logical_gpus=2, memory_limit_mb=8000)
    assert dict(changes(p)["gpu_memory_limits_mb"].target) == {0: (4000, 4000), 1: (4000, 4000)}
    p = plan(snap, logical_gpus=3, memory_limit_mb=1000)
    assert changes(p)["gpu_memory_limits_mb"].target[0] == (333, 333, 333)
    p = plan(snap, logical_gpus=[1024, 2048.7])
    assert changes(p)["gpu_memory_limits_mb"].target[1] == (1024, 2048)
    p = plan(snap, logical_gpus=2, memory_fraction=0.5)  # 8 GiB split two ways
    assert changes(p)["gpu_memory_limits_mb"].target[0] == (4096, 4096)
    p = plan(snap, logical_gpus={0: 2}, memory_limit_mb={0: 4096})
    assert dict(changes(p)["gpu_memory_limits_mb"].target) == {0: (2048, 2048)}
    p = plan(snap, logical_gpus={1: [100, 200]}, memory_limit_mb={0: 4096})
    assert dict(changes(p)["gpu_memory_limits_mb"].target) == {0: (4096,), 1: (100, 200)}


def test_logical_split_without_a_size_for_some_gpu_is_an_error():
    with pytest.raises(ValueError, match=r"logical_gpus=2` for GPU 1 needs a memory size"):
        plan(with_gpus(2), logical_gpus=2, memory_limit_mb={0: 4096})
    with pytest.raises(ValueError, match=r"less than 1 MB"):
        plan(with_gpus(1), logical_gpus=4, memory_limit_mb=2)
    with pytest.raises(ValueError, match=r"less than 1 MB"):
        plan(with_gpus(1, memory=GIB // 2), memory_fraction=1e-9)


def test_memory_growth_applies_to_every_visible_gpu_and_checks_existing_splits():
    p = plan(with_gpus(3, visible_gpus=(0, 2)), memory_growth=True)
    change = changes(p)["memory_growth"]
    assert change.value is True
    assert dict(change.target) == {0: True, 2: True}
    assert dict(change.restore) == {0: None, 2: None}
    with pytest.raises(ValueError, match=r"GPU 1 has a memory limit.*\[2048\]"):
        plan(with_gpus(2, gpu_logical_mb=(None, (2048,))), memory_growth=True)


def test_memory_growth_in_force_cases():
    assert plan(with_gpus(2, memory_growth=(True, True)), memory_growth=True).in_force == {"memory_growth": True}
    # Never set means off, unless TF_FORCE_GPU_ALLOW_GROWTH=true turns it on.
    assert plan(with_gpus(2), memory_growth=False).in_force == {"memory_growth": False}
    forced = with_gpus(2, env={"TF_FORCE_GPU_ALLOW_GROWTH": "true"})
    assert plan(forced, memory_growth=True).in_force == {"memory_growth": True}
    # One GPU differs: the change targets both, so TensorFlow sees one value.
    p = plan(with_gpus(2, memory_growth=(True, None)), memory_growth=True)
    assert dict(changes(p)["memory_growth"].target) == {0: True, 1: True}


def test_memory_growth_off_with_a_limit_leaves_limited_gpus_alone():
    p = plan(with_gpus(2, memory_growth=(True, True)), memory_growth=False, memory_limit_mb={0: 1024})
    assert dict(changes(p)["memory_growth"].target) == {1: False}
    assert [c.setting for c in p.changes] == ["memory_growth", "gpu_memory_limits_mb"]


def test_settings_already_in_force_are_not_changed():
    snap = with_gpus(
        2,
        gpu_logical_mb=((512, 512), None),
        cpu_logical_devices=4,
        intra_op_threads=2,
        xla=True,
        env={"TF_GPU_THREAD_MODE": "gpu_private", "TF_GPU_THREAD_COUNT": "2"},
    )
    p = plan(
        snap,
        visible_gpus="all",
        logical_gpus={0: [512, 512]},
        cpu_devices=4,
        intra_op_threads=2,
        xla=True,
        tf32=True,
        gpu_thread_mode="gpu_private",
        gpu_thread_count=2,
    )
    assert p.changes == ()
    assert dict(p.in_force) == {
        "gpu_thread_mode": "gpu_private",
        "gpu_thread_count": 2,
        "visible_gpus": (0, 1),
        "gpu_memory_limits_mb": {0: (512, 512)},
        "cpu_devices": 4,
        "intra_op_threads": 2,
        "xla": True,
        "tf32": True,
    }
    assert plan(cpu_only(), cpu_devices=1).in_force == {"cpu_devices": 1}
    assert plan(with_gpus(1), gpu_thread_mode="global").in_force == {"gpu_thread_mode": "global"}


def test_changes_are_ordered_init_only_first_with_restore_values():
    snap = cpu_only(intra_op_threads=3, soft_placement=True, mixed_precision="float32")
    p = plan(snap, mixed_precision="mixed_float16", soft_placement=False, cpu_devices=2, intra_op_threads=1)
    assert [c.setting for c in p.changes] == ["cpu_devices", "intra_op_threads", "soft_placement", "mixed_precision"]
    assert [c.restore for c in p.changes] == [None, 3, True, "float32"]


def test_after_initialisation_late_changes_raise_with_the_fix():
    snap = cpu_only(initialized=True, intra_op_threads=2)
    with pytest.raises(RuntimeError) as info:
        plan(snap, cpu_devices=4, intra_op_threads=8, soft_placement=False)
    message = str(info.value)
    assert "cpu_devices (in force: 1, asked: 4)" in message
    assert "intra_op_threads (in force: 2, asked: 8)" in message
    assert "soft_placement" not in message
    assert "Nothing was changed" in message
    assert "before any tensor, model or strategy is created" in message


def test_after_initialisation_gpu_changes_raise_and_same_values_pass():
    snap = with_gpus(2, initialized=True, gpu_logical_mb=((1024,), None), memory_growth=(None, None))
    with pytest.raises(RuntimeError, match=r"gpu_memory_limits_mb \(in force: \{0: \[1024\]\}, asked: \{0: \[2048\]\}\)"):
        plan(snap, memory_limit_mb={0: 2048})
    with pytest.raises(RuntimeError, match=r"visible_gpus \(in force: \[0, 1\], asked: \[0\]\)"):
        plan(snap, visible_gpus=[0])
    p = plan(snap, memory_limit_mb={0: 1024}, visible_gpus="all", xla=True)
    assert [c.setting for c in p.changes] == ["xla"]
    assert set(p.in_force) == {"visible_gpus", "gpu_memory_limits_mb"}


def test_after_initialisation_any_time_settings_still_change():
    snap = cpu_only(initialized=True)
    p = plan(snap, soft_placement=False, log_placement=True, xla=True, tf32=False, mixed_precision="mixed_bfloat16")
    assert [c.setting for c in p.changes] == ["soft_placement", "log_placement", "xla", "tf32", "mixed_precision"]


def test_gpu_thread_mode_after_initialisation():
    snap = with_gpus(1, initialized=True, env={"TF_GPU_THREAD_MODE": "gpu_private"})
    with pytest.raises(RuntimeError, match=r"gpu_thread_mode \(in force: 'gpu_private', asked: 'global'\)"):
        plan(snap, gpu_thread_mode="global")
    assert plan(snap, gpu_thread_mode="gpu_private").changes == ()


# --------------------------------------------------------------------------- #
# Applying, with fake setters (no TensorFlow)
# --------------------------------------------------------------------------- #


def test_apply_restores_what_was_applied_when_a_step_fails(monkeypatch, caplog):
    calls = []

    def recorder(name, fail_on=None, fail_restore=False):
        def setter(value):
            calls.append((name, value))
            if value == fail_on:
                raise OSError(f"{name} failed")
            if fail_restore and value == "old":
                raise RuntimeError("cannot undo")

        return setter

    monkeypatch.setitem(device_settings.SETTERS, "cpu_devices", recorder("cpu_devices"))
    monkeypatch.setitem(device_settings.SETTERS, "soft_placement", recorder("soft_placement", fail_restore=True))
    monkeypatch.setitem(device_settings.SETTERS, "xla", recorder("xla", fail_on="new"))
    monkeypatch.setitem(device_settings.SETTERS, "tf32", recorder("tf32"))
    the_plan = device_settings.Plan(
        changes=tuple(device_settings.Change(s, "new", "old", "new", "old") for s in ("cpu_devices", "soft_placement", "xla", "tf32")),
        in_force={},
        skipped={},
    )
    with caplog.at_level(logging.WARNING, logger="keras_gpu"), pytest.raises(OSError, match="xla failed"):
        device_settings.apply(the_plan)
    assert calls == [
        ("cpu_devices", "new"),
        ("soft_placement", "new"),
        ("xla", "new"),
        ("xla", "old"),
        ("soft_placement", "old"),
        ("cpu_devices", "old"),
    ]
    assert any("could not restore soft_placement" in r.getMessage() for r in caplog.records)


def test_apply_explains_a_runtime_that_started_midway(monkeypatch):
    calls = []

    def started(value):
        calls.append(("cpu_devices", value))
        if value == 4:
            raise RuntimeError("Virtual devices cannot be modified after being initialized")

    monkeypatch.setitem(device_settings.SETTERS, "cpu_devices", started)
    with pytest.raises(RuntimeError, match=r"while configure_devices\(\) was setting cpu_devices.*before any tensor") as info:
        device_settings.apply(plan(cpu_only(), cpu_devices=4))
    assert "Virtual devices cannot be modified" in str(info.value.__cause__)
    assert calls == [("cpu_devices", 4), ("cpu_devices", None)]


def test_apply_runs_every_change_in_order(monkeypatch):
    calls = []
    for name in ("cpu_devices", "mixed_precision"):
        monkeypatch.setitem(device_settings.SETTERS, name, lambda v, n=name: calls.append((n, v)))
    p = plan(cpu_only(), mixed_precision="mixed_float16", cpu_devices=3)
    device_settings.apply(p)
    assert calls == [("cpu_devices", 3), ("mixed_precision", "mixed_float16")]


def test_gpu_total_bytes_reads_the_nvml_module(monkeypatch):
    seen = []
    fake = types.ModuleType("keras_gpu.core.nvml")

    def memory_total_bytes(index):
        seen.append(index)
        return {0: 24 * GIB, 1: None, 2: 0}.get(index)

    fake.memory_total_bytes = memory_total_bytes
    monkeypatch.setitem(sys.modules, "keras_gpu.core.nvml", fake)
    assert device_snapshot.gpu_total_bytes(0) == 24 * GIB
    assert device_snapshot.gpu_total_bytes(1) is None
    assert device_snapshot.gpu_total_bytes(2) is None  # nonsense from NVML counts as unknown
    assert seen == [0, 1, 2]
    monkeypatch.setitem(sys.modules, "keras_gpu.core.nvml", None)  # import fails
    assert device_snapshot.gpu_total_bytes(0) is None


# --------------------------------------------------------------------------- #
# The record
# --------------------------------------------------------------------------- #


def test_device_config_is_immutable_printable_and_json_ready():
    record = DeviceConfig(
        applied={"cpu_devices": 4, "gpu_memory_limits_mb": {0: [2048, 2048]}},
        in_force={"xla": False},
        skipped={"memory_growth": "no GPU visible to TensorFlow"},
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.applied = {}  # type: ignore[misc]
    with pytest.raises(TypeError):
        record.applied["cpu_devices"] = 1  # type: ignore[index]
    with pytest.raises(TypeError):
        record.applied["gpu_memory_limits_mb"][0] = (1,)  # type: ignore[index]
    assert record.applied["gpu_memory_limits_mb"][0] == (2048, 2048)
    assert str(record).splitlines() == [
        "DeviceConfig",
        "  applied:  cpu_devices=4, gpu_memory_limits_mb={0: [2048, 2048]}",
        "  in force: xla=False",
        "  skipped:  memory_growth (no GPU visible to TensorFlow)",
    ]
    data = record.as_dict()
    assert json.loads(json.dumps(data)) == {
        "applied": {"cpu_devices": 4, "gpu_memory_limits_mb": {"0": [2048, 2048]}},
        "in_force": {"xla": False},
        "skipped": {"memory_growth": "no GPU visible to TensorFlow"},
    }
    assert dict(record.settings) == {"gpu_memory_limits_mb": {0: (2048, 2048)}, "cpu_devices": 4, "xla": False}
    assert record == DeviceConfig(
        applied={"cpu_devices": 4, "gpu_memory_limits_mb": {0: (2048, 2048)}},
        in_force={"xla": False},
        skipped={"memory_growth": "no GPU visible to TensorFlow"},
    )
    assert str(DeviceConfig({}, {}, {})).count("nothing") == 3


def test_public_names():
    import keras_gpu

    assert devices.__all__ == ["DeviceConfig", "configure_devices"]
    assert keras_gpu.configure_devices is configure_devices
    assert keras_gpu.DeviceConfig is DeviceConfig


# --------------------------------------------------------------------------- #
# The real thing on CPU, in fresh processes
# --------------------------------------------------------------------------- #

_READ_BACK = """
def read_back():
    import keras
    import tensorflow as tf
    return {
        "cpus": len(tf.config.list_logical_devices("CPU")),
        "intra": tf.config.threading.get_intra_op_parallelism_threads(),
        "inter": tf.config.threading.get_inter_op_parallelism_threads(),
        "soft": tf.config.get_soft_device_placement(),
        "log": tf.debugging.get_log_device_placement(),
        "xla": tf.config.optimizer.get_jit(),
        "tf32": tf.config.experimental.tensor_float_32_execution_enabled(),
        "policy": keras.mixed_precision.global_policy().name,
    }
"""

_CPU_SCRIPT = (
    """
import json, logging, os, sys
messages = []
class Keep(logging.Handler):
    def emit(self, record):
        messages.append((record.levelname, record.getMessage()))
log = logging.getLogger("keras_gpu")
log.addHandler(Keep())
log.setLevel(logging.INFO)

import keras_gpu.setup.devices as d
from keras_gpu.core.tf_private import runtime_initialized
out = {"tf_imported_by_import": "tensorflow" in sys.modules}
"""
    + _READ_BACK
    + """
import tensorflow as tf
out["init_after_tf_import"] = runtime_initialized()
ask = dict(cpu_devices=4, intra_op_threads=2, inter_op_threads=3, soft_placement=False, log_placement=True,
           xla=True, tf32=False, mixed_precision="mixed_bfloat16",
           memory_growth=True, visible_gpus="all", gpu_thread_mode="gpu_private", gpu_thread_count=2)
first = d.configure_devices(**ask)
out["first"] = first.as_dict()
out["first_str"] = str(first)
out["first_logs"] = list(messages)
out["init_after_configure"] = runtime_initialized()
out["env_mode"] = os.environ.get("TF_GPU_THREAD_MODE")
out["after_first"] = read_back()
out["init_after_read"] = runtime_initialized()
with tf.device("/CPU:3"):
    out["cpu3_device"] = (tf.constant(2.0) * 3.0).device
del messages[:]
out["second"] = d.configure_devices(**ask).as_dict()
out["second_logs"] = list(messages)
try:
    d.configure_devices(cpu_devices=2, soft_placement=True, xla=False, mixed_precision="float32", tf32=True)
except RuntimeError as exc:
    out["late_error"] = str(exc)
out["after_late"] = read_back()
try:
    d.configure_devices(intra_op_threads=1, log_placement=False)
except RuntimeError as exc:
    out["late_threads_error"] = str(exc)
out["after_late_threads"] = read_back()
third = d.configure_devices(soft_placement=True, tf32=True, log_placement=False, mixed_precision="float32", cpu_devices=4)
out["third"] = third.as_dict()
out["after_third"] = read_back()
print("RESULT" + json.dumps(out))
"""
)

_ROLLBACK_SCRIPT = (
    _READ_BACK
    + """
import json
import tensorflow as tf
import keras_gpu.setup.devices as d
from keras_gpu.core.tf_private import runtime_initialized
out = {"fresh": runtime_initialized()}
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.list_physical_devices("GPU")
tf.config.get_visible_devices()
tf.config.get_logical_device_configuration(cpu)
tf.config.threading.get_intra_op_parallelism_threads()
tf.config.get_soft_device_placement()
tf.config.optimizer.get_jit()
tf.config.experimental.tensor_float_32_execution_enabled()
out["after_queries"] = runtime_initialized()

import keras_gpu.setup.device_settings as settings
original = settings.SETTERS["mixed_precision"]
def fail(value):
    raise OSError("injected failure")
settings.SETTERS["mixed_precision"] = fail
try:
    d.configure_devices(cpu_devices=3, intra_op_threads=2, inter_op_threads=1, soft_placement=False, xla=True,
                        tf32=False, mixed_precision="mixed_float16")
except OSError as exc:
    out["error"] = str(exc)
settings.SETTERS["mixed_precision"] = original
out["cpu_config_after_failure"] = tf.config.get_logical_device_configuration(cpu)
out["init_after_failure"] = runtime_initialized()
out["after_failure"] = read_back()   # initialises the runtime
out["init_after_read"] = runtime_initialized()
print("RESULT" + json.dumps(out, default=repr))
"""
)


def _result(proc):
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT")]
    assert lines, f"no result line\n--- stdout ---\n{proc.stdout[-3000:]}\n--- stderr ---\n{proc.stderr[-3000:]}"
    return json.loads(lines[-1][len("RESULT") :])


@pytest.fixture(scope="module")
def cpu_run():
    return _result(run_python(_CPU_SCRIPT))


@pytest.fixture(scope="module")
def rollback_run():
    return _result(run_python(_ROLLBACK_SCRIPT))


def test_import_and_listing_do_not_initialise_devices(cpu_run, rollback_run):
    assert cpu_run["tf_imported_by_import"] is False
    assert cpu_run["init_after_tf_import"] is False
    assert rollback_run["fresh"] is False
    assert rollback_run["after_queries"] is False
    # configure_devices itself does not start the runtime; the first logical-device query does.
    assert cpu_run["init_after_configure"] is False
    assert cpu_run["init_after_read"] is True


def test_cpu_settings_are_applied_and_read_back(cpu_run):
    assert cpu_run["after_first"] == {
        "cpus": 4,
        "intra": 2,
        "inter": 3,
        "soft": False,
        "log": True,
        "xla": "autoclustering",
        "tf32": False,
        "policy": "mixed_bfloat16",
    }
    assert cpu_run["cpu3_device"].endswith("/device:CPU:3")
    assert cpu_run["first"]["applied"] == {
        "cpu_devices": 4,
        "intra_op_threads": 2,
        "inter_op_threads": 3,
        "soft_placement": False,
        "log_placement": True,
        "xla": True,
        "tf32": False,
        "mixed_precision": "mixed_bfloat16",
    }
    assert "applied:  cpu_devices=4" in cpu_run["first_str"]


def test_gpu_options_are_skipped_with_one_info_line_on_a_gpu_less_machine(cpu_run):
    skipped = ["visible_gpus", "memory_growth", "gpu_thread_mode", "gpu_thread_count"]
    assert cpu_run["first"]["skipped"] == dict.fromkeys(skipped, "no GPU visible to TensorFlow")
    info = [m for level, m in cpu_run["first_logs"] if level == "INFO"]
    assert info == [
        "configure_devices: no GPU visible to TensorFlow; skipped GPU options: "
        "visible_gpus, memory_growth, gpu_thread_mode, gpu_thread_count"
    ]
    assert cpu_run["env_mode"] is None  # the skipped thread mode left the environment alone


def test_same_settings_after_initialisation_are_a_no_op(cpu_run):
    second = cpu_run["second"]
    assert second["applied"] == {}
    assert second["in_force"] == cpu_run["first"]["applied"]
    assert next(m for level, m in cpu_run["second_logs"] if level == "INFO").startswith("configure_devices: no GPU")


def test_late_change_raises_with_advice_and_changes_nothing(cpu_run):
    message = cpu_run["late_error"]
    assert "cpu_devices (in force: 4, asked: 2)" in message
    assert "before any tensor, model or strategy is created" in message
    # The any-time settings passed in the same call were not applied either.
    assert cpu_run["after_late"] == cpu_run["after_first"]
    assert "intra_op_threads (in force: 2, asked: 1)" in cpu_run["late_threads_error"]
    assert cpu_run["after_late_threads"] == cpu_run["after_first"]


def test_any_time_settings_change_after_initialisation(cpu_run):
    assert cpu_run["third"]["applied"] == {
        "soft_placement": True,
        "log_placement": False,
        "tf32": True,
        "mixed_precision": "float32",
    }
    assert cpu_run["third"]["in_force"] == {"cpu_devices": 4}
    assert cpu_run["after_third"] == {
        **cpu_run["after_first"],
        "soft": True,
        "log": False,
        "tf32": True,
        "policy": "float32",
    }


def test_failure_midway_restores_what_was_applied(rollback_run):
    assert rollback_run["error"] == "injected failure"
    assert rollback_run["cpu_config_after_failure"] is None
    assert rollback_run["init_after_failure"] is False
    assert rollback_run["after_failure"] == {
        "cpus": 1,
        "intra": 0,
        "inter": 0,
        "soft": True,
        "log": False,
        "xla": "",
        "tf32": True,
        "policy": "float32",
    }
    assert rollback_run["init_after_read"] is True


# --------------------------------------------------------------------------- #
# A real GPU
# --------------------------------------------------------------------------- #


def _gpu_env():
    env = subprocess_env()
    if "CUDA_VISIBLE_DEVICES" not in os.environ:
        env.pop("CUDA_VISIBLE_DEVICES", None)  # subprocess_env hides GPUs by default
    return env


def _run_gpu(code):
    import subprocess
    import textwrap

    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=_gpu_env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, f"--- stdout ---\n{proc.stdout[-3000:]}\n--- stderr ---\n{proc.stderr[-4000:]}"
    return _result(proc)


@pytest.fixture(scope="module")
def tf_gpu_count():
    count = _run_gpu(
        "import json, tensorflow as tf; print('RESULT' + json.dumps(len(tf.config.list_physical_devices('GPU'))))"
    )
    if count == 0:
        pytest.skip("NVML sees a GPU but this TensorFlow build does not (CPU-only build or missing CUDA libraries)")
    return count


@pytest.mark.gpu
def test_memory_growth_on_a_real_gpu(tf_gpu_count):
    out = _run_gpu(
        """
        import json, tensorflow as tf
        import keras_gpu.setup.devices as d
        rec = d.configure_devices(memory_growth=True)
        gpus = tf.config.list_physical_devices("GPU")
        out = {"applied": rec.as_dict()["applied"], "growth": [tf.config.experimental.get_memory_growth(g) for g in gpus]}
        with tf.device("/GPU:0"):
            x = tf.ones((256, 256)) @ tf.ones((256, 256))
        out["device"] = x.device
        out["again"] = d.configure_devices(memory_growth=True).as_dict()
        try:
            d.configure_devices(memory_growth=False)
        except RuntimeError as exc:
            out["late"] = str(exc)
        print("RESULT" + json.dumps(out))
        """
    )
    assert out["applied"] == {"memory_growth": True}
    assert out["growth"] == [True] * tf_gpu_count
    assert out["device"].endswith("GPU:0")
    assert out["again"]["applied"] == {} and out["again"]["in_force"] == {"memory_growth": True}
    assert "memory_growth (in force:" in out["late"]


@pytest.mark.gpu
def test_memory_fraction_and_logical_split_on_a_real_gpu(tf_gpu_count):
    out = _run_gpu(
        """
        import json, tensorflow as tf
        import keras_gpu.setup.devices as d
        from keras_gpu.core.nvml import memory_total_bytes
        total = memory_total_bytes(0)
        rec = d.configure_devices(visible_gpus=[0], memory_fraction=0.1, logical_gpus=2)
        gpu0 = tf.config.list_physical_devices("GPU")[0]
        out = {
            "total": total,
            "applied": rec.as_dict()["applied"],
            "config": [c.memory_limit for c in tf.config.get_logical_device_configuration(gpu0)],
            "logical": [dev.name for dev in tf.config.list_logical_devices("GPU")],
        }
        with tf.device("/GPU:1"):
            out["device"] = (tf.ones((64, 64)) * 2.0).device
        print("RESULT" + json.dumps(out))
        """
    )
    share = int(0.1 * out["total"] // (1 << 20)) // 2
    assert out["applied"]["gpu_memory_limits_mb"] == {"0": [share, share]}
    assert out["config"] == [share, share]
    assert out["logical"] == ["/device:GPU:0", "/device:GPU:1"]
    assert out["device"].endswith("GPU:1")
    if tf_gpu_count > 1:
        assert out["applied"]["visible_gpus"] == [0]


def test_on_the_pytorch_backend_it_refuses_and_changes_nothing():
    # TensorFlow is installed, but Keras trains on PyTorch: configuring TensorFlow's devices would do nothing useful.
    code = """
        import keras_gpu
        from keras_gpu.core import tf_private
        try:
            keras_gpu.configure_devices(memory_growth=True)
        except RuntimeError as exc:
            print("REFUSED", exc)
        print("RUNTIME", tf_private.runtime_initialized())
    """
    proc = run_python(code, env={"KERAS_BACKEND": "torch"})
    assert "REFUSED keras_gpu.configure_devices()" in proc.stdout
    assert "set KERAS_BACKEND=tensorflow or KERAS_BACKEND=jax" in proc.stdout
    assert "Received: backend='torch'" in proc.stdout
    assert "RUNTIME False" in proc.stdout
