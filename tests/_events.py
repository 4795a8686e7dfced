"""The tests' one reader of event files: TensorBoard's own `EventAccumulator`, independent of keras-gpu's reader."""

from __future__ import annotations

import os

__all__ = ["accumulator", "read_scalars"]


def accumulator(run_dir: str | os.PathLike):
    """A loaded `EventAccumulator` of `run_dir` that keeps every point (TF2 scalars are tensor summaries)."""
    from tensorboard.backend.event_processing import event_accumulator as ea

    acc = ea.EventAccumulator(str(run_dir), size_guidance={ea.TENSORS: 0, ea.SCALARS: 0, ea.GRAPH: 0})
    acc.Reload()
    return acc


def read_scalars(run_dir: str | os.PathLike, prefixes: tuple[str, ...] = ()) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of `run_dir` (those under `prefixes`, where given) as `tag -> [(step, value), ...]`, in write order."""
    from tensorboard.util.tensor_util import make_ndarray

    acc = accumulator(run_dir)
    return {
        tag: [(e.step, float(make_ndarray(e.tensor_proto))) for e in acc.Tensors(tag)]
        for tag in acc.Tags()["tensors"]
        if acc.SummaryMetadata(tag).plugin_data.plugin_name == "scalars" and tag.startswith(prefixes or ("",))
    }
