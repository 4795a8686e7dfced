"""The step-time text summary: the slowest input stage as Markdown, written and read back in this one place.

`StepTimeLogger` writes `input_stage_markdown` as the
`step_time/input_stage` text summary (`keras_gpu.output.tags.STEP_INPUT_STAGE`);
`keras-gpu report` reads it back with `read_input_stage_markdown`.
"""

from __future__ import annotations

from keras_gpu.meters.step_hints import BOUND_SHARE, input_hint
from keras_gpu.meters.step_record import InputStage, StepTime

__all__ = ["input_stage_markdown", "read_input_stage_markdown"]

_STAGE_HEADER = (
    "| slowest input stage | tf.data iterator or Python function | self time per batch (ms) | input share of the step |"
)
# The header before Python stages were named (runs written by earlier versions), still read.
_OLD_HEADER = "| slowest input stage | tf.data iterator | self time per batch (ms) | input share of the step |"


def input_stage_markdown(step: StepTime) -> str | None:
    """The slowest input stage of a breakdown as Markdown; `None` where the trace shows none.

    A one-row table (the stage, its tf.data iterator or the user's Python
    function that read the data, its self time per batch
    in ms, the input share of the step), then the input-bound hint where the
    step is input-bound. `StepTimeLogger` writes it as the
    `step_time/input_stage` text summary; `read_input_stage_markdown`
    reads it back.
    """
    stage = step.input_stage
    if stage is None:
        return None
    lines = [
        _STAGE_HEADER,
        "|---|---|---|---|",
        f"| {stage.name} | {stage.path} | {1e3 * stage.sec_per_step:.6g} | {step.share('input'):.0%} |",
    ]
    if step.share("input") >= BOUND_SHARE:
        lines += ["", f"{input_hint(step)}."]
    return "\n".join(lines)


def read_input_stage_markdown(text: str) -> InputStage | None:
    """The `InputStage` that `input_stage_markdown` wrote (its
    time per batch in seconds); `None` for any other text."""
    rows = text.splitlines()
    if len(rows) < 3 or rows[0].strip() not in (_STAGE_HEADER, _OLD_HEADER):
        return None
    cells = [c.strip() for c in rows[2].strip().strip("|").split("|")]
    if len(cells) != 4:
        return None
    try:
        sec = float(cells[2]) / 1e3
    except ValueError:
        return None
    return InputStage(cells[0], cells[1], sec) if cells[0] else None
