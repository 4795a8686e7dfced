"""keras_gpu.core.torch_private against the installed PyTorch: what its operator recorder sees, and its examples."""

from __future__ import annotations

import doctest
import importlib.util

import pytest

pytestmark = [
    pytest.mark.backend,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed"),
]


def test_the_recorder_sees_aten_operators_custom_ops_whole_and_sparse_arguments():
    import torch

    from keras_gpu.core import torch_private

    weight = torch.ones(4, 3)

    def scaled(x):
        return (x @ weight) * 2

    scaled.__annotations__ = {"x": torch.Tensor, "return": torch.Tensor}  # this module's annotations are strings
    scaled = torch.library.custom_op("keras_gpu_private_test::scaled", mutates_args=())(scaled)

    recorder = torch_private.op_recorder()
    x = torch.ones(2, 4)
    with recorder:
        dense = x @ weight
        custom = scaled(x)
        sparse = torch.sparse.mm(weight.t().to_sparse(), x.t())
    seen = [(str(op), op.namespace, is_sparse) for op, is_sparse in recorder.ops]
    assert ("aten.mm.default", "aten", False) in seen
    assert ("keras_gpu_private_test.scaled.default", "keras_gpu_private_test", False) in seen
    assert not any(op == "aten.mul.Tensor" for op, _, _ in seen)  # the custom op's body is not seen
    assert any(is_sparse and "sparse" in op for op, _, is_sparse in seen)
    assert torch.equal(custom, dense * 2) and torch.equal(sparse.t(), dense)  # every call ran unchanged


def test_the_examples_run():
    from keras_gpu.core import torch_private

    failed, attempted = doctest.testmod(torch_private, optionflags=doctest.ELLIPSIS)
    assert attempted > 0 and failed == 0
