"""`PlacementLogger`: where the real training step ran, logged once per traced step."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any

from keras_gpu.core import keras_private
from keras_gpu.core.backend import require_tensorflow_backend
from keras_gpu.core.checks import check_bool, check_positive
from keras_gpu.core.log import log_once, logger
from keras_gpu.hooks._base import LoggingCallback
from keras_gpu.meters import flops as _flops
from keras_gpu.meters import placement as _placement
from keras_gpu.meters import placement_capture as _capture
from keras_gpu.meters import placement_report as _records
from keras_gpu.output.placement_markdown import render as _render_markdown

__all__ = ["PlacementLogger"]

JSON_NAME = "placement.json"


_ANALYSIS_ATTR = "_keras_gpu_placement_analysis"


@dataclass
class _Analysis:
    """The placement analysis of one traced training function.

    It is kept on that function (`model.train_function`), so that every
    `PlacementLogger` that trains the model reuses it (the same instance on a
    later `fit`, or a new instance: users often build the callback list anew
    for each `fit`) until Keras retraces the step, which makes a new function.
    """

    report: _records.PlacementReport
    graph_def: Any = None
    written_to: set[str] = field(default_factory=set)


def _analysis_of(function: Any) -> _Analysis | None:
    analysis = getattr(function, _ANALYSIS_ATTR, None)
    return analysis if isinstance(analysis, _Analysis) else None


@dataclass
class _PlacementFit:
    """What one `PlacementLogger` holds during one `fit`."""

    model: Any
    wrapped: tuple[Any, Any] | None = None  # (original train_function, the wrapper standing in for it)
    forced: Any = None  # the train_function this fit retraced to see its placement


class PlacementLogger(LoggingCallback):
    """Logs where the training step really ran: strategy, variables, ops, copies and CPU fallbacks.

    The analysis reads the placed, partitioned graphs TensorFlow builds for
    the training step (see `keras_gpu.meters.placement` for every definition), so it
    shows real placement, not the devices requested in Python. It runs once per
    traced training function, right after that function's first step: on the
    first `fit`, and again only when Keras retraces the step (a new input
    shape, a new `compile`). A later `fit` on the same model reuses the
    analysis. The callback defines no batch hook; it wraps
    `model.train_function` for the first call of each `fit` only and puts the
    original back before that call runs.

    Logged to this worker's run directory, at the global step of the analysis:

    * The `placement/` group of the [tag reference](../tags.md#placement),
      with each tag's unit and meaning: Markdown tables in the Text
      dashboard (cut at `max_rows` rows), and counts of ops per training
      step as scalars.
    * The run graph (Graphs dashboard): all placed partitions merged, each
      node with its device ("Color by device"); `_Recv` nodes are linked to
      their `_Send`.
    * `placement.json` in the run directory: the same content, machine
      readable (`keras_gpu.meters.placement_report.read_json`), written atomically.

    With `run_eagerly=True` there is no traced step: strategy and variables
    are logged, op placement is marked unavailable. If the model's training
    function was compiled before this callback was first attached to it, the
    capture sees nothing; the callback then asks Keras to retrace the step
    once (`model.make_train_function(force=True)`) and captures the next
    call. The capture switches TensorFlow's graph collection on and off around
    that first call, so a `tf.summary.trace_on(graph=True)` left running
    across it loses its graphs.

    Args:
        log_dir: The TensorBoard log directory shared by all workers.
        max_rows: Rows per Markdown table before "... and N more".
        write_graph: Write the placed graph to the Graphs dashboard.
        per_worker_runs: Whether a worker other than the chief writes its own
            run (`log_dir/worker_k/train`). `None`: yes in jobs of up to 16
            workers; above that only the chief writes.

    Raises:
        TypeError: An argument has the wrong type (e.g. `max_rows=2.5`, or a
            `log_dir` that is not a path).
        ValueError: `max_rows` is below 1, or the `log_dir` is empty.
        ImportError: TensorFlow is not installed.
        RuntimeError: Keras runs on another backend than TensorFlow.

    Attributes:
        report: The latest `keras_gpu.meters.placement_report.PlacementReport`, or `None`.
        analysis_count: Analyses this instance made (captures of a newly
            traced step).
        overhead_s: Seconds spent in this callback during the last `fit`,
            the training step itself excluded.
        last_analysis_s: Seconds the last analysis and its writing took.

    Examples:
        >>> import os, tempfile
        >>> import numpy as np
        >>> import keras
        >>> import keras_gpu
        >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        >>> model.compile(optimizer="sgd", loss="mse")
        >>> x, y = np.zeros((16, 4), "float32"), np.zeros((16, 1), "float32")
        >>> with tempfile.TemporaryDirectory() as log_dir:
        ...     placement = keras_gpu.PlacementLogger(log_dir, write_graph=False)
        ...     _ = model.fit(x, y, batch_size=4, epochs=1, callbacks=[placement], verbose=0)
        ...     print(os.path.exists(os.path.join(log_dir, "train", "placement.json")))
        True
        >>> placement.analysis_count, placement.report.strategy.kind
        (1, 'default')
    """

    def __init__(
        self,
        log_dir: str | os.PathLike,
        *,
        max_rows: int = 50,
        write_graph: bool = True,
        per_worker_runs: bool | None = None,
    ) -> None:
        require_tensorflow_backend("keras_gpu.PlacementLogger")
        super().__init__(log_dir, per_worker_runs)
        self.max_rows = check_positive("max_rows", max_rows, integer=True)
        self.write_graph = check_bool("write_graph", write_graph)
        self.report: _records.PlacementReport | None = None
        self.analysis_count = 0
        self.overhead_s = 0.0
        self.last_analysis_s: float | None = None
        self._fit: _PlacementFit | None = None
        self._unattached: tuple[Any, _Analysis] | None = None  # (function, analysis) for a function without attributes

    # ------------------------------------------------------------------ hooks

    def on_train_begin(self, logs=None):
        start = time.perf_counter()
        self.overhead_s = 0.0
        self._unwrap()  # left over from a `fit` that raised before its first step
        self._fit = _PlacementFit(self.model)
        if self._open() is not None:  # a worker that writes no run does no analysis
            self._wrap()
        self.overhead_s += time.perf_counter() - start

    def on_train_end(self, logs=None):
        start = time.perf_counter()
        self._unwrap()
        self._fit = None
        self._close()
        self.overhead_s += time.perf_counter() - start

    # ------------------------------------------------------------------ wrapping

    def _wrap(self) -> None:
        fit = self._fit
        model = fit.model
        original = getattr(model, "train_function", None)
        if original is None or not callable(original):
            log_once(
                logging.WARNING,
                "placement-no-train-function",
                "keras-gpu: PlacementLogger found no `model.train_function` at the start of `fit` (a custom "
                "training loop?); placement is not logged.",
            )
            return
        if getattr(original, "_keras_gpu_placement", False):
            log_once(
                logging.WARNING,
                "placement-twice",
                "keras-gpu: two PlacementLoggers are attached to the same `fit`; only the first one logs placement.",
            )
            return
        capture = not getattr(model, "run_eagerly", False)

        def first_call(*args: Any, **kwargs: Any) -> Any:
            # Put the original back before running it, so that nothing of this
            # wrapper survives the call, even if the step raises.
            self._unwrap()
            if not capture:
                result = original(*args, **kwargs)
                self._guarded(self._after_first_call, original, None)
                return result
            with _capture.capture_graphs() as captured:
                result = original(*args, **kwargs)
            self._guarded(self._after_first_call, original, captured)
            return result

        first_call.__wrapped__ = original  # type: ignore[attr-defined]
        first_call._keras_gpu_placement = True  # type: ignore[attr-defined]  # noqa: SLF001 - keras-gpu's own mark
        keras_private.set_train_function(model, first_call)
        fit.wrapped = (original, first_call)

    def _unwrap(self) -> None:
        fit = self._fit
        if fit is None or fit.wrapped is None:
            return
        original, wrapper = fit.wrapped
        fit.wrapped = None
        if getattr(fit.model, "train_function", None) is wrapper:
            keras_private.set_train_function(fit.model, original)

    def _guarded(self, fn, *args) -> None:
        start = time.perf_counter()
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 - the analysis must never stop training
            logger.error(
                "keras-gpu: the placement analysis failed (%s: %s); training continues without it.",
                type(exc).__name__,
                exc,
                exc_info=logger.isEnabledFor(logging.DEBUG),
            )
        self.overhead_s += time.perf_counter() - start

    # ------------------------------------------------------------------ analysis

    def _after_first_call(self, original: Any, captured: _capture.GraphCapture | None) -> None:
        fit = self._fit
        known = self._known(original)
        if captured is None:  # run_eagerly
            if known is None:
                reason = "`run_eagerly=True`: there is no traced training step; each op is placed on its own as it runs"
                known = self._remember(original, self._build(None, reason), None)
            self._publish(known)
            return
        step_graphs = _capture.step_function_graphs(captured.function_graphs)
        if step_graphs:
            started = time.perf_counter()
            report = self._build(step_graphs, None)
            graph_def = _placement.placed_graph_def(step_graphs) if self.write_graph else None
            analysis = self._remember(original, report, graph_def)
            self.analysis_count += 1
            self._publish(analysis)
            self.last_analysis_s = time.perf_counter() - started
            logger.debug("keras-gpu: placement analysed in %.3f s", self.last_analysis_s)
            return
        if known is not None:
            self._publish(known)  # nothing retraced: reuse the analysis
            return
        random = _flops.random_ops(fit.model) if fit.forced is not original else []
        if fit.forced is not original and random == []:
            # The step was compiled before this callback could watch it: retrace once
            # (only a step without random ops: a retrace would give it new random streams).
            logger.info(
                "keras-gpu: the training step was compiled before PlacementLogger was attached; retracing it "
                "once to capture its placement."
            )
            fit.model.make_train_function(force=True)
            fit.forced = fit.model.train_function
            self._wrap()
            return
        reason = "the training step was compiled before it could be captured"
        if random:
            reason += (f"; it was not retraced because its random ops ({', '.join(random)}) would then draw other "
                       "numbers than without keras-gpu (attach the callbacks to the model's first `fit`)")
        elif random is None:
            reason += "; it was not retraced because its random ops could not be listed"
        report = self._build(None, reason)
        self._publish(self._remember(original, report, None))

    def _build(self, step_graphs: list[Any] | None, reason: str | None) -> _records.PlacementReport:
        strategy = _placement.strategy_info(self._strategy(), self._task)
        ops = _placement.analyze_ops(step_graphs, strategy.replica_devices) if step_graphs is not None else None
        report = _records.PlacementReport(
            step=self._initial_step(),
            strategy=strategy,
            variables=_placement.variable_info(self.model),
            ops=ops,
            ops_unavailable_reason=reason,
        )
        self.report = report
        return report

    def _known(self, function: Any) -> _Analysis | None:
        """The analysis already made of `function`, by any PlacementLogger, or None."""
        known = _analysis_of(function)
        if known is None and self._unattached is not None and self._unattached[0] is function:
            known = self._unattached[1]
        return known

    def _remember(self, function: Any, report: _records.PlacementReport, graph_def: Any) -> _Analysis:
        """Keep the analysis with `function`; on this callback too, if the function takes no attributes."""
        analysis = _Analysis(report=report, graph_def=graph_def)
        try:
            setattr(function, _ANALYSIS_ATTR, analysis)
            self._unattached = None
        except (AttributeError, TypeError):  # e.g. a bound method: reuse is then limited to this callback
            self._unattached = (function, analysis)
        return analysis

    # ------------------------------------------------------------------ output

    def _publish(self, analysis: _Analysis) -> None:
        """Write `analysis.report` to this run directory unless it is already there."""
        self.report = analysis.report
        if self.run_dir is None or self._writer is None or self.run_dir in analysis.written_to:
            return
        report, writer = analysis.report, self._writer
        for tag, markdown in _render_markdown(report, self.max_rows).items():
            writer.text(tag, markdown, report.step)
        writer.scalars(report.scalars(), report.step)
        if analysis.graph_def is not None:
            writer.graph(analysis.graph_def)
        writer.flush()
        path = os.path.join(self.run_dir, JSON_NAME)
        try:
            _records.write_json(report, path)
        except Exception as exc:  # noqa: BLE001 - storage failures must not stop training
            logger.error("keras-gpu: could not write %s (%s: %s); training continues.", path, type(exc).__name__, exc)
        analysis.written_to.add(self.run_dir)
