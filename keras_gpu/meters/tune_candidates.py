"""The changes `keras-gpu tune` tries, each the line a user would write, and where each one applies.

A candidate's `change` is what `keras_gpu.hooks.tune_private` applies in the
run (`change_for` fills in what the baseline's record says: the map calls to
make parallel); `line` is the code to write; `skip_reason` reads the
baseline's record and says why a candidate does not apply to this script, or
`None` where it does. Each candidate either keeps the results (the same
arithmetic, so the same losses step for step: `steps_per_execution`,
prefetch, a deterministic parallel map, PyDataset workers, tf.data's
options) or changes the training, with its `caveat` (a bigger batch: the
learning rate; mixed precision and XLA: the precision of the arithmetic).

Examples:
    >>> c = by_name("spe16")
    >>> c.line
    'model.compile(..., steps_per_execution=16)'
    >>> skip_reason(c, {"backend": "torch", "facts": {}})
    "Keras' PyTorch backend runs one step per call (steps_per_execution must be 1 there)"
    >>> by_name("batch2").keeps_results, by_name("batch2").caveat
    (False, 'the learning rate may need scaling with the batch')
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = ["CANDIDATES", "Candidate", "by_name", "change_for", "combine", "for_script", "line_for", "skip_reason"]


@dataclass(frozen=True)
class Candidate:
    """One change to try.

    Attributes:
        name: Its name in `--try` and in the table.
        family: Candidates of one family are alternatives (the combination takes the best of each).
        change: What the run applies (keys: see `keras_gpu.hooks.tune_private`).
        line: The code the user writes for it.
        keeps_results: Whether the arithmetic stays, so the losses must equal the baseline's step for step.
        caveat: What a change of the training costs (the learning rate with a bigger batch, the precision).
    """

    name: str
    family: str
    change: Mapping[str, Any] = field(default_factory=dict)
    line: str = ""
    keeps_results: bool = True
    caveat: str = ""


_LR = "the learning rate may need scaling with the batch"
_PRECISION = "the model computes in 16 bits: check that it still converges"
_XLA = "XLA fuses and reorders the arithmetic: the losses differ in their last digits"
CANDIDATES: tuple[Candidate, ...] = (
    *(Candidate(f"spe{k}", "steps_per_execution", {"steps_per_execution": k},
                f"model.compile(..., steps_per_execution={k})") for k in (4, 16, 64)),
    Candidate("jit", "jit_compile", {"jit_compile": True}, "model.compile(..., jit_compile=True)",
              keeps_results=False, caveat=_XLA),
    Candidate("bf16", "precision", {"policy": "mixed_bfloat16"},
              'keras.mixed_precision.set_global_policy("mixed_bfloat16")  # before building the model',
              keeps_results=False, caveat=_PRECISION),
    Candidate("fp16", "precision", {"policy": "mixed_float16"},
              'keras.mixed_precision.set_global_policy("mixed_float16")  # before building the model',
              keeps_results=False, caveat=_PRECISION),
    Candidate("batch2", "batch", {"batch_factor": 2}, "model.fit(..., batch_size={batch})",
              keeps_results=False, caveat=_LR),
    Candidate("batch4", "batch", {"batch_factor": 4}, "model.fit(..., batch_size={batch})",
              keeps_results=False, caveat=_LR),
    Candidate("prefetch", "prefetch", {"prefetch": True}, "dataset = dataset.prefetch(tf.data.AUTOTUNE)  # last"),
    Candidate("map", "parallel_map", {"parallel_map": []},
              "dataset.map(f, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)  # {sites}"),
    Candidate("autotune", "tf_data_options", {"tf_data_autotune": True},
              "options.autotune.enabled = options.experimental_optimization.map_parallelization = "
              "options.experimental_optimization.inject_prefetch = True"),
    Candidate("workers", "workers", {"workers": 4}, "super().__init__(workers=4, **kwargs)  # in the PyDataset"),
)
"""Every candidate, in the order the table shows them."""

_BY_NAME = {c.name: c for c in CANDIDATES}


def by_name(name: str) -> Candidate:
    """The candidate called `name`.

    Raises:
        ValueError: No candidate has that name.
    """
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"no candidate {name!r}: use one of {', '.join(_BY_NAME)}. Received: --try {name}") from None


def skip_reason(candidate: Candidate, record: Mapping[str, Any]) -> str | None:
    """Why `candidate` does not apply to the script the baseline `record` describes; `None` where it does."""
    backend = record.get("backend", "")
    facts = record.get("facts", {})
    family = candidate.family
    if family == "steps_per_execution":
        if backend == "torch":
            return "Keras' PyTorch backend runs one step per call (steps_per_execution must be 1 there)"
        have = int(record.get("steps_per_execution", 1))
        if have >= candidate.change["steps_per_execution"]:
            return f"the script has steps_per_execution={have} already"
        return None
    if family == "jit_compile":
        if backend == "torch":
            return "jit_compile on PyTorch is torch.compile, which keras-gpu does not try"
        return "the script runs with jit_compile on already" if record.get("jit_compile") else None
    if family == "precision":
        return _precision_skip(candidate, record)
    if family == "batch":
        if facts.get("fit_input") != "arrays":
            return f"fit is given {facts.get('fit_input', 'no input')}, not arrays with batch_size"
        return None
    return _input_skip(candidate, facts)


def _precision_skip(candidate: Candidate, record: Mapping[str, Any]) -> str | None:
    policy = str(record.get("policy", "float32"))
    if policy != "float32":
        return f"the model computes in the {policy} policy already"
    bf16 = record.get("bf16_gpu")
    if candidate.change["policy"] == "mixed_float16" and bf16 is not False:
        return "mixed_bfloat16 is tried instead (float16 is for GPUs without bfloat16)"
    if candidate.change["policy"] == "mixed_bfloat16" and bf16 is False:
        return "the GPU computes no bfloat16 (mixed_float16 is tried instead)"
    return None


def _input_skip(candidate: Candidate, facts: Mapping[str, Any]) -> str | None:
    kind = facts.get("fit_input", "no input")
    family = candidate.family
    if family == "workers":
        if kind != "PyDataset":
            return f"fit is given {kind}, not a PyDataset"
        workers = int(facts.get("pydataset_workers", 1))
        return f"the PyDataset has workers={workers} already" if workers >= candidate.change["workers"] else None
    if kind != "tf.data":
        return f"fit is given {kind}, not a tf.data.Dataset"
    if family == "parallel_map":
        return None if facts.get("sequential_maps", 0) else "the dataset given to fit has no map without num_parallel_calls"
    if family == "prefetch":
        return "the dataset given to fit prefetches already" if facts.get("prefetches", 0) else None
    keys = ("tf_data_autotune", "tf_data_map_parallelization", "tf_data_inject_prefetch")
    return None if not all(facts.get(k, True) for k in keys) else "the dataset's autotune options are on already"


def combine(candidates: Sequence[Candidate]) -> Candidate:
    """One candidate that applies all of `candidates` (each from a different family) together."""
    change: dict[str, Any] = {}
    for c in candidates:
        change.update(c.change)
    caveats = sorted({c.caveat for c in candidates if c.caveat})
    return Candidate(
        " + ".join(c.name for c in candidates), "combined", change,
        "; ".join(c.line.split("  #")[0] for c in candidates),  # one line: each change without its comment
        keeps_results=all(c.keeps_results for c in candidates), caveat="; ".join(caveats),
    )


_SHUFFLED = ("fit shuffles the PyDataset's batches, and with workers Keras draws their order in its queue's thread: "
             "the same batches in another order")


def for_script(candidate: Candidate, record: Mapping[str, Any]) -> Candidate:
    """`candidate` as it applies to the script the baseline `record` describes.

    PyDataset workers keep the batches and their order, so the results,
    unless `fit` shuffles the batches (its default): Keras then draws the
    order in its queue's thread, from the same random stream but at another
    point, so the workers' run trains on the same batches in another order.
    """
    facts = record.get("facts", {})
    if candidate.family == "workers" and facts.get("shuffle"):
        return replace(candidate, keeps_results=False, caveat=_SHUFFLED)
    if candidate.family == "combined" and "workers" in candidate.change and facts.get("shuffle"):
        caveats = candidate.caveat if _SHUFFLED in candidate.caveat else "; ".join(c for c in (candidate.caveat, _SHUFFLED) if c)
        return replace(candidate, keeps_results=False, caveat=caveats)
    return candidate


def change_for(candidate: Candidate, record: Mapping[str, Any]) -> dict[str, Any]:
    """What the run of `candidate` applies, for the script the baseline `record` describes.

    A parallel map names the sequential `map` calls that built the dataset
    given to `fit` in the baseline (`facts["map_sites"]`): those calls, and
    no other, are made parallel.
    """
    change = dict(candidate.change)
    if "parallel_map" in change:
        change["parallel_map"] = [list(site) for site in record.get("facts", {}).get("map_sites", [])]
    return change


def line_for(candidate: Candidate, record: Mapping[str, Any]) -> str:
    """`candidate.line` for the script the baseline `record` describes (the batch size and the map calls filled in)."""
    facts = record.get("facts", {})
    batch = int(facts.get("batch_size") or 0) * int(candidate.change.get("batch_factor", 1))
    sites = ", ".join(dict.fromkeys(f"{str(f).rsplit('/', 1)[-1]}:{line}" for f, line, _ in facts.get("map_sites", [])))
    return candidate.line.replace("{batch}", str(batch) if batch else "<batch size> * " + str(
        candidate.change.get("batch_factor", 1))).replace("{sites}", sites or "each map of fit's dataset")
