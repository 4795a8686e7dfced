"""The commands the docs pages show, and which lines of their output each page shows (`tools/docs_outputs.py`).

A page shows an output with two lines in a code block, and says what it was
checked with by including its scenario's stamp under its title:

    --8<-- "docs/_generated/<scenario>.md"

    ```text
    --8<-- "docs/_generated/<scenario>.<output>.txt"
    ```

To show a new output: add a `Step` (the command exactly as the page shows it)
with an `Output` to the scenario of its page, or a new `Scenario`, then run
`python tools/docs_outputs.py --write <scenario>` and include the files.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from docs_outputs import WIDTH, Output, Scenario, Step

DOCS = Path(__file__).resolve().parents[1] / "docs"

Select = Callable[[list[str]], list[str]]

# The part of a line that follows the machine's load: a StepTimeLogger or report hint.
HINT = r" Hint: .*$"
# The slowest input stage, and the explanation of the first executions' share: both follow the machine's load.
STAGE = r"(?<=the slowest input stage is )\S+(?: \([^)]*\))?"
FIRST_EXECUTIONS = r"(?<=of the training time \(time/first_step_sec\)).*$"
# The cluster view's verdict: a balanced job on a busy machine can have a worker slowed by the machine's other work.
VERDICT = r"(?:no straggler \(imbalance [^)]*\)|worker \d+ is the straggler: .*?\(the others wait for it [^)]*\))(?:; .*?slowed [^.;(]*)?"
# A worker, or the cluster as a whole, slowed against its own best window: follows the machine's load.
SLOWED = r"; (?:worker \d+|the workers) slowed [\d.]+x against (?:its|their) own best windows?(?: \(median\))?"
# The cluster view table's rows of the workers that are not the straggler: their part follows the machine's load.
BYSTANDERS = r"^│ worker \d+ +│.*$"
# `keras-gpu scale`'s causes after the baseline's (their numbers stay): which part grew beyond the run-to-run
# spread follows the load.
CAUSES = r"(?:(?<=^\d\. )|(?<=^\d\d\. ))(?!baseline).*(?:\n(?!\d+\. ).*)*"


def matching(*patterns: str) -> Select:
    """The lines that match any of `patterns` (regexes, searched), in the order printed."""
    compiled = [re.compile(p) for p in patterns]
    return lambda lines: [ln for ln in lines if any(c.search(ln) for c in compiled)]


def first_of_each(*patterns: str) -> Select:
    """The first line that matches each pattern, in the patterns' order (for lines that threads print in any order)."""

    def select(lines: list[str]) -> list[str]:
        out = []
        for pattern in patterns:
            found = next((ln for ln in lines if re.search(pattern, ln)), None)
            if found is None:
                raise RuntimeError(f"no line matches {pattern!r} in:\n" + "\n".join(lines[-40:]))
            out.append(found)
        return out

    return select


def by_worker(select: Select) -> Select:
    """`select`'s lines with each worker's (`[worker i] ...`) together, worker 0 first, the launcher's own last."""

    def key(line: str) -> int:
        match = re.match(r"^\[worker (\d+)\] ", line)
        return int(match.group(1)) if match else 1 << 30

    return lambda lines: sorted(select(lines), key=key)  # stable: each worker's lines keep their order


def block(start: str, stop: str = r"^\s*$") -> Select:
    """The lines from the first that matches `start` up to the next that matches `stop` (left out)."""

    def select(lines: list[str]) -> list[str]:
        begin = next((i for i, ln in enumerate(lines) if re.search(start, ln)), None)
        if begin is None:
            raise RuntimeError(f"no line matches {start!r} in:\n" + "\n".join(lines[-40:]))
        end = next((i for i in range(begin + 1, len(lines)) if re.search(stop, lines[i])), len(lines))
        return lines[begin:end]

    return select


def table(title: str) -> Select:
    """A rich table the command printed: its title line through its bottom rule."""

    def select(lines: list[str]) -> list[str]:
        shown = block(rf"^{re.escape(title)}\b", r"^└")(lines)
        end = lines.index(shown[0]) + len(shown)
        return [*shown, lines[end]] if end < len(lines) else shown

    return select


def report_hints(lines: list[str]) -> list[str]:
    """`keras-gpu report`'s slowest-input-stage lines and its hints, each on one line.

    The report wraps long lines at its width, continuing them at the start of
    the next line: a line that starts with a word, and is neither a section
    title (a table's, or `Hints`) nor the end of the report, continues the
    line before it.
    """
    out: list[str] = []
    taking = False
    for i, line in enumerate(lines):
        next_line = lines[i + 1] if i + 1 < len(lines) else ""
        title = line == "Hints" or next_line.startswith("┏")
        if re.match(r"^  \S+: the slowest input stage is ", line) or (line.startswith("  - ") and taking):
            out.append(line)
            taking = True
        elif taking and line[:1] not in ("", " ") and not title and line[:1] not in "┏┃┡│└":
            out[-1] += " " + line.strip()
        else:
            taking = line == "Hints"
    return out


def from_first(pattern: str) -> Select:
    """The lines from the first that matches `pattern` to the end (a command's report, printed last)."""
    return lambda lines: block(pattern, r"(?!)")(lines)


def both(*selects: Select) -> Select:
    """The lines each of `selects` picks, one after the other."""
    return lambda lines: [line for select in selects for line in select(lines)]


def page_block(page: str, title: str) -> str:
    """The code block of `page` whose title is `title` (```python title="train.py"): a file the page defines."""
    text = (DOCS / page).read_text(encoding="utf-8")
    match = re.search(rf'^```\w+ title="{re.escape(title)}"\n(.*?)^```$', text, re.S | re.M)
    if match is None:
        raise RuntimeError(f'docs/{page} has no code block titled "{title}"')
    return match.group(1)


def usage(lines: list[str]) -> list[str]:
    """argparse's usage block, filled to the page's width the way argparse wraps it: never inside a bracket."""
    text = " ".join(block(r"^usage: ")(lines)).split()
    tokens, depth = [], 0
    for word in text:  # re-join the words of one [...] or (...) group
        if depth:
            tokens[-1] += " " + word
        else:
            tokens.append(word)
        depth += word.count("[") + word.count("(") - word.count("]") - word.count(")")
    indent = " " * (len(tokens[0]) + len(tokens[1]) + len(tokens[2]) + 3)  # under the first argument
    out, line = [], " ".join(tokens[:3])
    for token in tokens[3:]:
        if len(line) + 1 + len(token) > WIDTH:
            out.append(line)
            line = indent + token
        else:
            line += " " + token
    return [*out, line]


def _synopsis(command: str) -> Step:
    """`keras-gpu COMMAND --help`'s usage, as the command-line page shows it."""
    return Step(f"keras-gpu {command} --help", outputs=(Output(command, select=usage, compare="words"),), shown=False)


TUTORIAL_1 = Scenario(
    "measure-a-training-run",
    pages=("tutorials/measure-a-training-run.md", "how-to/find-what-slows-training.md"),
    steps=(
        Step(
            "python examples/add_callbacks.py --log-dir runs/add_callbacks",
            outputs=(
                Output("train", volatile=(HINT,)),
                Output("step-time", select=matching(r"keras-gpu: StepTimeLogger: "), volatile=(HINT,)),
            ),
            timed=True,
        ),
        Step(
            "keras-gpu report runs/add_callbacks",
            outputs=(
                Output("report", select=table("Throughput, wall clock")),
                Output("hints", select=report_hints, volatile=(STAGE, FIRST_EXECUTIONS)),
            ),
        ),
    ),
)

TUTORIAL_2 = Scenario(
    "one-device-to-a-cluster",
    pages=("tutorials/one-device-to-a-cluster.md", "how-to/find-the-straggler.md"),
    steps=(
        Step(
            "python examples/multiworker_fit.py --out runs/single",
            outputs=(Output("single", select=matching(r"^keras-gpu: make_strategy", r"^Epoch ", r"^\d+/\d+ - ")),),
            timed=True,
        ),
        Step(
            "keras-gpu launch -n 2 examples/multiworker_fit.py \\\n    --out runs/multiworker_fit --log-dir runs/multiworker",
            outputs=(
                Output(
                    "launch",
                    select=matching(r"^\[worker 0\] (?:Epoch |\d+/\d+ - |keras-gpu: cluster view)", r"^keras-gpu: all "),
                    volatile=(VERDICT,),
                ),
            ),
            timed=True,
        ),
        Step(
            "keras-gpu report runs/multiworker",
            outputs=(
                Output(
                    "cluster", select=lambda lines: [ln for ln in report_hints(lines) if "cluster:" in ln],
                    volatile=(VERDICT,),
                ),
            ),
        ),
    ),
)

ON_JAX = Scenario(
    "use-on-jax",
    pages=("how-to/use-on-jax.md",),
    backend="jax",
    steps=(
        Step(
            "KERAS_BACKEND=jax python examples/add_callbacks.py --log-dir runs/jax",
            outputs=(
                Output(
                    "train",
                    select=first_of_each(
                        r"^final loss ",
                        r"keras-gpu: MemoryLogger: host peak RSS",
                        r"keras-gpu: ThroughputLogger: wall-clock",
                        r"keras-gpu: StepTimeLogger: ",
                    ),
                    volatile=(HINT,),
                ),
            ),
            timed=True,
        ),
        Step(
            "KERAS_BACKEND=jax keras-gpu launch -n 2 --cpu-replicas 2 train.py",
            files=(("train.py", lambda: page_block("how-to/use-on-jax.md", "train.py")),),
            outputs=(
                Output(
                    "launch",
                    select=by_worker(
                        matching(r"^\[worker \d\] keras-gpu: make_strategy", r"^\[worker \d\] \d+ replicas",
                                 r"^keras-gpu: all ")
                    ),
                ),
            ),
            timed=True,
        ),
    ),
)

ON_PYTORCH = Scenario(
    "use-on-pytorch",
    pages=("how-to/use-on-pytorch.md",),
    backend="torch",
    steps=(
        Step(
            "KERAS_BACKEND=torch python examples/add_callbacks.py --log-dir runs/torch",
            outputs=(
                Output(
                    "train",
                    select=first_of_each(
                        r"^final loss ",
                        r"keras-gpu: MemoryLogger: host peak RSS",
                        r"keras-gpu: ThroughputLogger: wall-clock",
                        r"keras-gpu: StepTimeLogger logs no step-time breakdown",
                    ),
                ),
            ),
            timed=True,
        ),
    ),
)

STRAGGLER = Scenario(
    "find-the-straggler",
    pages=("how-to/find-the-straggler.md",),
    steps=(
        Step(
            "keras-gpu launch -n 2 train.py",
            files=(("train.py", lambda: page_block("how-to/find-the-straggler.md", "train.py")),),
            outputs=(Output("launch", select=matching(r"^\[worker 0\] keras-gpu: cluster view"), volatile=(SLOWED,)),),
            timed=True,
        ),
        Step(
            "keras-gpu report runs/straggler",
            outputs=(
                Output(
                    "report",
                    select=both(
                        table("Cluster view"), lambda lines: [ln for ln in report_hints(lines) if "cluster:" in ln]
                    ),
                    volatile=(SLOWED, BYSTANDERS),
                ),
            ),
        ),
    ),
)


def _scale(backend: str, prefix: str = "") -> Scenario:
    """`keras-gpu scale` over 1 and 2 replicas and workers of the repository's small MLP, as the scale pages show it.

    Shown: the configuration left out (standard error) and the tables and causes
    (standard output), compared by shape; each cause after the baseline's
    follows the machine's load.
    """
    return Scenario(
        f"scale-{backend}",
        pages=("scale.md", "how-to/measure-my-speed-up.md") if backend == "tensorflow" else ("scale.md",),
        backend=backend,
        steps=(
            Step(
                f"{prefix}keras-gpu scale --replicas 1,2 --workers 1,2 \\\n    benchmarks/scale_mlp.py --steps 300",
                outputs=(
                    Output(
                        "table",
                        select=both(matching(r"^keras-gpu scale: leaving out "), from_first(r"^keras-gpu scale\s*$")),
                        volatile=(CAUSES,),
                    ),
                ),
                timed=True,
                fit_seconds=r"(?!)",  # a study of several runs: the time is the whole command's
            ),
        ),
        per_core_count=True,  # 2 workers x 2 replicas runs where there are 4 cores or more
    )


SCALE_TF = _scale("tensorflow")
SCALE_JAX = _scale("jax", prefix="KERAS_BACKEND=jax ")

LOG_THE_NUMBERS = Scenario(
    "log-the-numbers",
    pages=("how-to/log-the-numbers.md",),
    steps=(
        Step(
            "python examples/log_to_csv.py --csv runs/log_to_csv.csv",
            outputs=(Output("csv", select=block(r"^epoch +\d", r"^(?!\S+ +\S+$)")),),
        ),
    ),
)

RESUME = Scenario(
    "resume-after-a-failure",
    pages=("how-to/resume-after-a-failure.md",),
    steps=(
        Step(
            "python examples/resume_after_failure.py --backup-dir runs/backup",
            outputs=(Output("resume", select=matching(r"^finished epoch ", r"^first run stopped"), compare="exact"),),
        ),
    ),
)

TRACE = Scenario(
    "read-a-gpu-trace",
    pages=("how-to/read-a-gpu-trace.md",),
    backend=None,
    slow=False,
    steps=(Step("keras-gpu trace tests/data/gpu_multi_worker.xplane.pb", outputs=(Output("trace", compare="exact"),)),),
)

SLURM = Scenario(
    "run-on-slurm",
    pages=("how-to/run-on-slurm.md",),
    backend=None,
    slow=False,
    steps=(
        Step(
            "python check_task.py",
            files=(("check_task.py", lambda: page_block("how-to/run-on-slurm.md", "check_task.py")),),
            outputs=(Output("task", compare="exact"),),
        ),
    ),
)

KUBERNETES = Scenario(
    "run-on-kubernetes",
    pages=("how-to/run-on-kubernetes.md",),
    backend=None,
    slow=False,
    steps=(
        Step(
            "python check_pod.py",
            files=(("check_pod.py", lambda: page_block("how-to/run-on-kubernetes.md", "check_pod.py")),),
            outputs=(Output("pod", compare="exact"),),
        ),
    ),
)

CLI = Scenario(
    "cli",
    pages=("cli.md",),
    backend=None,
    slow=False,
    steps=tuple(_synopsis(c) for c in ("demo", "launch", "env", "report", "trace", "bench", "scale", "tune")),
)

README_DEMO = Scenario(
    "demo",
    pages=("getting-started.md",),
    steps=(Step("keras-gpu demo", timed=True),),
    checked=False,
    readme=True,
)

SCENARIOS: tuple[Scenario, ...] = (
    TUTORIAL_1, TUTORIAL_2, STRAGGLER, ON_JAX, ON_PYTORCH, SCALE_TF, SCALE_JAX, LOG_THE_NUMBERS, RESUME, TRACE, SLURM,
    KUBERNETES, CLI, README_DEMO,
)
"""Every scenario, in the order `--write` runs them."""
