"""The launcher's bootstrap adds one `keras_gpu.Heartbeat` to every fit/evaluate/predict on JAX and PyTorch too.

Runs where the backend is installed (CI's environment without TensorFlow);
elsewhere it skips with the reason.
"""

from __future__ import annotations

import importlib.util

import pytest

from tests.test_reliability_hang import auto_heartbeat_result

pytestmark = [pytest.mark.backend]


@pytest.mark.parametrize(
    "backend",
    [
        pytest.param(name, marks=pytest.mark.skipif(importlib.util.find_spec(name) is None, reason=f"{name} is not installed"))
        for name in ("jax", "torch")
    ],
)
def test_one_heartbeat_in_every_callback_list(tmp_path, backend):
    result = auto_heartbeat_result(tmp_path, env={"KERAS_BACKEND": backend})
    assert result["backend"] == backend
    assert result["steps"] == 32 + 8 + 8 + 8, result  # as on TensorFlow: fit with validation, evaluate, predict, fit
    assert result["user_list"] == 1
    assert result["by_hand"] == ["Mine", "Heartbeat"] and result["with_one"] == ["Heartbeat"]
