"""Capturing the placed graphs of a training step from TensorFlow's run metadata.

TensorFlow decides where each op of a `tf.function` runs when it instantiates
the function: it places the graph, splits it into one partition per device and
joins the partitions with `_Send`/`_Recv` pairs. While graph collection is on,
the eager runtime records those placed partition graphs for every function it
instantiates, and `export_run_metadata()` hands them back as a `RunMetadata`
proto (`function_graphs[i].partition_graphs[j].node[k].device` is where node
*k* ran). That is private TensorFlow API, reached through `keras_gpu.core.tf_private`
(`graph_collection`, `export_run_metadata`), where all of keras-gpu's private
TensorFlow calls live.

Two facts, checked on TensorFlow 2.21, shape the capture:

* Graphs are recorded when a function is *instantiated* (its first call after
  a trace), not on later calls. Collection must therefore be on during the
  first call of a freshly traced training function; a call of an already
  instantiated function records nothing (and costs nothing extra).
* `context.disable_run_metadata()` does not stop graph recording: every
  function instantiated afterwards is still recorded, and the protos pile up
  in the eager context until someone exports them. The graph-collection
  switch (`enable_graph_collection` / `disable_graph_collection`) records the
  same placed partition graphs and does turn off, so `capture_graphs`
  uses it.

The captured graphs are analysed by `keras_gpu.meters.placement`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

from keras_gpu.core.log import logger
from keras_gpu.core.tf_private import export_run_metadata, graph_collection

__all__ = ["STEP_MARKER_OPS", "GraphCapture", "capture_graphs", "step_function_graphs"]

STEP_MARKER_OPS: frozenset[str] = frozenset(
    {"IteratorGetNext", "IteratorGetNextSync", "IteratorGetNextAsOptional", "MultiDeviceIteratorGetNextFromShard"}
)
"""Op types that mark a function graph as a training step: Keras' step pulls its batch from an iterator."""


class GraphCapture:
    """What `capture_graphs` collected.

    Attributes:
        run_metadata: The exported `RunMetadata` proto (set when the block
            exits, also when it raised); `None` if the export failed.
    """

    def __init__(self) -> None:
        self.run_metadata: Any = None

    @property
    def function_graphs(self) -> list[Any]:
        """All recorded `RunMetadata.FunctionGraphs`, in instantiation order."""
        if self.run_metadata is None:
            return []
        return list(self.run_metadata.function_graphs)


@contextlib.contextmanager
def capture_graphs() -> Iterator[GraphCapture]:
    """Record the placed graphs of every function instantiated inside the block.

    Graph collection is switched on for the block only and always switched off
    again, even when the block raises. Anything recorded before the block
    (another tool's pending graphs) is drained first so that it is not
    mistaken for this block's graphs.

    Examples:

    ```python
    with capture_graphs() as captured:
        model.train_function(iterator)
    step = step_function_graphs(captured.function_graphs)
    ```
    """
    capture = GraphCapture()
    export_run_metadata()  # drain whatever is pending
    graph_collection(True)
    try:
        yield capture
    finally:
        try:
            capture.run_metadata = export_run_metadata()
        except Exception as exc:  # noqa: BLE001 - a failed export must not hide the step's own outcome
            logger.warning("keras-gpu: could not export the placed graphs (%s: %s)", type(exc).__name__, exc)
        finally:
            graph_collection(False)


def step_function_graphs(function_graphs: Iterable[Any]) -> list[Any]:
    """The function graphs that are a training step: those that pull a batch from an iterator.

    The first call of a Keras training function also instantiates small helper
    functions (variable creation, `Optional` handling); they are left out.
    """
    return [
        fg
        for fg in function_graphs
        if any(node.op in STEP_MARKER_OPS for pg in fg.partition_graphs for node in pg.node)
    ]
