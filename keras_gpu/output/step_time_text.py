"""The step-time text summaries as Markdown, written and read back in this one place.

`StepTimeLogger` writes `input_stage_markdown` as the `step_time/input_stage`
text summary (`keras_gpu.output.tags.STEP_INPUT_STAGE`), `kernels_markdown`
as `step_time/kernels` and `host_work_markdown` as `step_time/host_work`;
`keras-gpu report` reads them back with the `read_*` functions.

Examples:
    >>> from keras_gpu.meters.kernels import KernelTime
    >>> from keras_gpu.output.step_time_text import read_kernels_markdown, table_markdown
    >>> text = table_markdown("kernel", [KernelTime("nvjet_sm90", "matmul", 0.5e-3, 0.25)])
    >>> read_kernels_markdown(text)
    ([], [KernelTime(name='nvjet_sm90', kind='matmul', sec_per_step=0.0005, share=0.25)])
"""

from __future__ import annotations

from collections.abc import Sequence

from keras_gpu.meters.host_work import HostWork
from keras_gpu.meters.kernels import KernelTime
from keras_gpu.meters.step_hints import BOUND_SHARE, input_hint
from keras_gpu.meters.step_record import InputStage, StepTime

__all__ = [
    "host_work_markdown",
    "input_stage_markdown",
    "kernels_markdown",
    "read_host_work_markdown",
    "read_input_stage_markdown",
    "read_kernels_markdown",
    "table_markdown",
]

_KERNEL_COLUMNS = ("class", "ms per step", "share of kernel time")
_HOST_HEADER = "| on the training thread | ms per step | of it waiting for the step's result (ms) |"

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


def table_markdown(first: str, rows: Sequence[KernelTime]) -> str:
    """A kernel-view table: `| <first> | class | ms per step | share of kernel time |`, one row per entry."""
    lines = [f"| {first} | " + " | ".join(_KERNEL_COLUMNS) + " |", "|---|---|---|---|"]
    lines += [f"| {k.name} | {k.kind} | {1e3 * k.sec_per_step:.6g} | {k.share:.1%} |" for k in rows]
    return "\n".join(lines)


def kernels_markdown(step: StepTime) -> str | None:
    """The kernel view as Markdown (the classes' table, then the top kernels'); `None` where the trace has no kernel."""
    if not step.kernel_classes:
        return None
    return table_markdown("kernel class", step.kernel_classes) + "\n\n" + table_markdown("kernel", step.kernels)


def read_kernels_markdown(text: str) -> tuple[list[KernelTime], list[KernelTime]]:
    """`(classes, kernels)`: the rows of the tables `kernels_markdown` wrote, in order; empty for any other text."""
    tables: dict[str, list[KernelTime]] = {"kernel class": [], "kernel": []}
    current = None
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4:
            continue
        if tuple(cells[1:]) == _KERNEL_COLUMNS:
            current = tables.get(cells[0])
            continue
        try:
            row = KernelTime(cells[0], cells[1], float(cells[2]) / 1e3, float(cells[3].rstrip("%")) / 100)
        except ValueError:
            continue
        if current is not None:
            current.append(row)
    return tables["kernel class"], tables["kernel"]


def host_work_markdown(step: StepTime) -> str | None:
    """What the training thread did per step (`StepTime.host_work`) as Markdown; `None` where the trace shows nothing."""
    if not step.host_work:
        return None
    rows = [f"| {w.name} | {1e3 * w.sec_per_step:.6g} | {1e3 * w.wait_sec_per_step:.6g} |" for w in step.host_work]
    return "\n".join([_HOST_HEADER, "|---|---|---|", *rows])


def read_host_work_markdown(text: str) -> list[HostWork]:
    """The `HostWork` rows `host_work_markdown` wrote (seconds per step); empty for any other text."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != _HOST_HEADER:
        return []
    found = []
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        try:
            found.append(HostWork(cells[0], float(cells[1]) / 1e3, float(cells[2]) / 1e3))
        except (IndexError, ValueError):
            continue
    return found
