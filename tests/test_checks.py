"""keras_gpu.core.checks: one message form for every argument check, and each check's accept/reject rule."""

from __future__ import annotations

import math
import pathlib
import re

import pytest

from keras_gpu.core import checks as C

# "`name` must <requirement>. Received: name=<repr>." plus " (type T)" before the final dot for a TypeError.
_FORM = re.compile(r"^`(?P<name>\w+)` must (?P<req>.+)\. Received: (?P=name)=(?P<value>.*?)(?: \(type (?P<type>\w+)\))?\.$")


def _raised(call, *args, **kwargs) -> tuple[type, re.Match]:
    with pytest.raises((TypeError, ValueError)) as info:
        call(*args, **kwargs)
    match = _FORM.match(str(info.value))
    assert match, f"message does not follow the form: {info.value}"
    return info.type, match


REJECTED = [
    # (check, args, kwargs, exception, name, received repr)
    (C.check_bool, ("xla", "yes"), {}, TypeError, "xla", "'yes'"),
    (C.check_bool, ("xla", None), {}, TypeError, "xla", "None"),
    (C.check_choice, ("kind", "mirror", ("auto", "mirrored")), {}, ValueError, "kind", "'mirror'"),
    (C.check_choice, ("kind", None, ("auto",)), {}, ValueError, "kind", "None"),
    (C.check_choice, ("mode", 16, ("a", "b")), {"allow_none": True}, TypeError, "mode", "16"),
    (C.check_positive, ("every_s", 0), {}, ValueError, "every_s", "0"),
    (C.check_positive, ("every_s", math.inf), {}, ValueError, "every_s", "inf"),
    (C.check_positive, ("every_s", math.nan), {}, ValueError, "every_s", "nan"),
    (C.check_positive, ("every_s", True), {}, TypeError, "every_s", "True"),
    (C.check_positive, ("every_s", 10**400), {}, ValueError, "every_s", str(10**400)),
    (C.check_positive, ("n", 2.5), {"integer": True}, TypeError, "n", "2.5"),
    (C.check_positive, ("dt", 0.0005), {"minimum": 0.001}, ValueError, "dt", "0.0005"),
    (C.check_seconds, ("interval_s", -1), {}, ValueError, "interval_s", "-1"),
    (C.check_seconds, ("interval_s", "1"), {}, TypeError, "interval_s", "'1'"),
    (C.check_seconds, ("interval_s", None), {}, TypeError, "interval_s", "None"),
    (C.check_index, ("tf_gpu_index", 1.0, "a GPU index"), {}, TypeError, "tf_gpu_index", "1.0"),
    (C.check_index, ("tf_gpu_index", False, "a GPU index"), {}, TypeError, "tf_gpu_index", "False"),
    (C.check_index, ("tf_gpu_index", -1, "a GPU index"), {}, ValueError, "tf_gpu_index", "-1"),
    (C.check_indices, ("gpus", "01", "GPU indices"), {"none_means": "all"}, TypeError, "gpus", "'01'"),
    (C.check_indices, ("gpus", [0, True], "GPU indices"), {"none_means": "all"}, ValueError, "gpus", "[0, True]"),
    (C.check_indices, ("gpus", [1, 1], "GPU indices"), {"none_means": "all"}, ValueError, "gpus", "[1, 1]"),
    (C.check_log_dir, (3,), {}, TypeError, "log_dir", "3"),
    (C.check_log_dir, ("  ",), {}, ValueError, "log_dir", "'  '"),
]


@pytest.mark.parametrize("check, args, kwargs, exc, name, received", REJECTED)
def test_every_rejection_names_the_argument_and_echoes_the_value(check, args, kwargs, exc, name, received):
    raised, match = _raised(check, *args, **kwargs)
    assert raised is exc
    assert match["name"] == name
    assert match["value"] == received
    # a TypeError names the type received; a ValueError does not
    assert (match["type"] is not None) == (exc is TypeError)
    if exc is TypeError:
        assert match["type"] == type(args[1] if len(args) > 1 else args[0]).__name__


def test_accepted_values_come_back_normalised():
    assert C.check_bool("x", False) is False
    assert C.check_bool("x", None, allow_none=True) is None
    assert C.check_choice("k", "b", ["a", "b"]) == "b"
    assert C.check_choice("k", None, ["a"], allow_none=True) is None
    assert C.check_positive("n", 3, integer=True) == 3
    assert C.check_positive("s", 0.001, minimum=0.001) == 0.001
    assert C.check_positive("s", None, allow_none=True) is None
    assert C.check_seconds("s", 2) == 2.0 and isinstance(C.check_seconds("s", 2), float)
    assert C.check_seconds("s", None, allow_none=True) is None
    assert C.check_index("i", 0, "an index") == 0
    assert C.check_indices("g", [2, 0], "GPU indices", none_means="all") == (2, 0)
    assert C.check_indices("g", None, "GPU indices", none_means="all") is None
    assert C.check_log_dir(pathlib.Path("runs") / "a") == str(pathlib.Path("runs") / "a")


def test_the_requirement_text_says_what_is_allowed():
    _, match = _raised(C.check_choice, "policy", "fp16", ("mixed_float16", "float32"))
    assert match["req"] == "be one of ['mixed_float16', 'float32']"
    _, match = _raised(C.check_positive, "every_s", -1, allow_none=True)
    assert match["req"] == "be a positive, finite number or None"
    _, match = _raised(C.check_positive, "n", 0, integer=True)
    assert match["req"] == "be a positive integer"


def test_public_callers_use_the_shared_form():
    """configure_devices, make_strategy's plan, the NVML sampler and the callbacks raise through _checks."""
    from keras_gpu.core.nvml_sampler import GpuSampler
    from keras_gpu.setup.devices import configure_devices
    from keras_gpu.setup.strategy import plan_strategy

    for call, exc in [
        (lambda: configure_devices(xla="on"), TypeError),
        (lambda: configure_devices(mixed_precision="fp8"), ValueError),
        (lambda: plan_strategy("mirror"), ValueError),
        (lambda: GpuSampler(interval_s=0), ValueError),
        (lambda: GpuSampler(indices=[0, 0]), ValueError),
    ]:
        with pytest.raises(exc) as info:
            call()
        assert _FORM.match(str(info.value)), str(info.value)


def test_a_wrong_type_is_a_type_error_at_the_public_callers(tmp_path):
    import keras_gpu

    with pytest.raises(TypeError) as info:
        keras_gpu.callbacks(tmp_path, batch_size="64")
    assert _FORM.match(str(info.value)), str(info.value)
    assert "`batch_size` must" in str(info.value) and "Received: batch_size='64'" in str(info.value)
    with pytest.raises(ValueError, match="Received: batch_size=0"):
        keras_gpu.callbacks(tmp_path, batch_size=0)
