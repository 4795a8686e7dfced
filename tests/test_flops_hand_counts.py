"""Training FLOPs per sample found by `ThroughputLogger` on TensorFlow equal a hand count, layer by layer.

The same cases and hand counts (written out in `tests/_flops_models.py`) are
checked on JAX and PyTorch by `tests/backends/test_backend_flops_hand_counts.py`,
so the three backends agree exactly.
"""

from __future__ import annotations

import pytest

from tests._flops_models import HAND, train_flops

pytest.importorskip("tensorflow")


@pytest.mark.parametrize("name", sorted(HAND))
def test_training_flops_equal_three_times_the_hand_counted_forward_pass(name, tmp_path):
    assert train_flops(name, str(tmp_path)) == 3 * HAND[name]
