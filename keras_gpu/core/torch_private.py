"""Every private PyTorch API keras-gpu uses, behind small named functions.

PyTorch's private modules (`torch._*`, `torch.utils._*`) are touched here and
nowhere else in keras-gpu (`tests/test_private_fence.py` keeps it so);
`tests/backends/test_torch_private.py` checks every function here against
the installed PyTorch. Each function imports PyTorch lazily: importing this
module imports nothing.
"""

from __future__ import annotations

from typing import Any

__all__ = ["op_recorder"]


def op_recorder() -> Any:
    """A context manager that records every operator dispatched inside it, as it runs.

    It is a `TorchDispatchMode` (checked on PyTorch 2.13:
    `torch.utils._python_dispatch`), so it sees the operators after autograd
    and after composite ops were decomposed: ATen's (`aten.mm`), and custom
    ops (`torch.library.custom_op`) whole, never the operators their body
    runs. Each call runs unchanged. After the block, its `ops` attribute is
    the list of `(operator, any_sparse)`: the `OpOverload`, and whether a
    tensor argument has a sparse layout.

    Examples:
        >>> import torch
        >>> recorder = op_recorder()
        >>> with recorder:
        ...     _ = torch.ones(2, 3) @ torch.ones(3, 4)
        >>> [str(op) for op, sparse in recorder.ops]
        ['aten.ones.default', 'aten.ones.default', 'aten.mm.default']
    """
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    class OpRecorder(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: list[tuple[Any, bool]] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            sparse = any(
                isinstance(leaf, torch.Tensor) and leaf.layout != torch.strided for leaf in tree_leaves((args, kwargs))
            )
            self.ops.append((func, sparse))
            return func(*args, **kwargs)

    return OpRecorder()
