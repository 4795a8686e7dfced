"""Run the corpus on one backend, with and without keras-gpu, and the five checks every program must pass.

Imports no backend: the test files use it while collecting. The two
variants run in two fresh interpreters at once (`tests.corpus.runner`), each
fitting every program of the backend in turn from the same seeds; one
program's state cannot reach the next one's result differently in the two
variants, because both run the same programs in the same order.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

from tests._util import subprocess_env
from tests.corpus import names_for

__all__ = ["CHECKS", "FIT_RETURN_SEC", "cases", "ruled_out", "run_corpus"]

#: Seconds `fit` may take past its last batch because of keras-gpu (Build 1 of the corpus's issue).
FIT_RETURN_SEC = 1.0

#: Hints that one process on one CPU device rules out on every backend: it has no peers, no second
#: replica, no GPU and no reduction.
_EVERYWHERE = ("communication-bound", "slow replica", "cluster:", "straggler", "NVML saw GPU", "sit on GPUs")
#: Off TensorFlow there is no tf.data to tune.
_NO_TF_DATA = ("tf.data", "num_parallel_calls", "interleave")
#: Without a generator or a PyDataset there is neither to advise on.
_NO_PYTHON_READER = ("generator", "PyDataset", "one element at a time")


def ruled_out(backend: str, kind: str) -> tuple[str, ...]:
    """Phrases no hint may hold for a program on `backend` fed by `kind` (see `tests.corpus._common.Built`)."""
    out = _EVERYWHERE
    if backend != "tensorflow":
        out += _NO_TF_DATA
    if kind not in ("generator", "pydataset"):
        out += _NO_PYTHON_READER
    return out


def run_corpus(backend: str, log_dir: str, timeout: float = 1500) -> dict[str, dict[str, dict]]:
    """`{"plain": {name: result}, "keras_gpu": {name: result}}` for every program of `backend`.

    The results are also written to `log_dir/results.json`.
    """
    names = names_for(backend)
    procs = {}
    for variant in ("plain", "keras_gpu"):
        procs[variant] = subprocess.Popen(
            [sys.executable, "-m", "tests.corpus.runner", variant, f"{log_dir}/{variant}", *names],
            env=subprocess_env({"KERAS_BACKEND": backend}),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    out = {}
    for variant, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=timeout)
        if proc.returncode != 0 or "RESULT" not in stdout:
            raise AssertionError(f"the {variant} corpus run exited {proc.returncode}\n{stdout[-3000:]}\n{stderr[-6000:]}")
        out[variant] = json.loads(stdout.split("RESULT", 1)[1])
    with open(f"{log_dir}/results.json", "w") as f:  # beside the runs, to read when a check fails
        json.dump(out, f, indent=1)
    return out


def _ran(result: dict) -> dict:
    assert "error" not in result, result.get("traceback", result.get("error"))
    return result


def identical(plain: dict, kg: dict, backend: str) -> None:
    """The epoch losses and the final weights are bit-identical with and without `keras_gpu.callbacks()`."""
    assert _ran(kg)["losses"] == _ran(plain)["losses"], "the losses differ with keras-gpu"
    assert kg["weights"] == plain["weights"], "the final weights differ with keras-gpu"


def samples(plain: dict, kg: dict, backend: str) -> None:
    """The model trained on the samples the data holds, and keras-gpu logged exactly those."""
    kg = _ran(kg)
    assert kg["trained"] == kg["expected"]
    assert kg["samples"] == kg["trained"], "ThroughputLogger.summary['samples']"
    assert round(kg["implied"]) == kg["trained"] and abs(kg["implied"] - kg["trained"]) < 0.01, "the event file"


def flops(plain: dict, kg: dict, backend: str) -> None:
    """The training FLOPs per sample keras-gpu found equal 3 x the hand-counted forward FLOPs within 1%."""
    kg = _ran(kg)
    counted = kg["flops"]
    why = [m for m in kg["messages"] if "could not count the FLOPs" in m]
    assert counted is not None, why
    assert abs(counted - kg["hand_flops"]) <= 0.01 * kg["hand_flops"], (counted, kg["hand_flops"])


def hints(plain: dict, kg: dict, backend: str) -> None:
    """No hint, and no input advice keras-gpu holds for the measured input stage, says what the setup rules out."""
    kg = _ran(kg)
    banned = ruled_out(backend, kg["input"])
    fired = [h for h in kg["hints"] if any(p in h for p in banned)]
    assert not fired, fired
    advice = [a for a in kg["input_advice"] if any(p in a for p in banned)]
    assert not advice, advice


def fit_returns(plain: dict, kg: dict, backend: str) -> None:
    """`fit` returns within `FIT_RETURN_SEC` of its last batch because of keras-gpu.

    What is bounded is keras-gpu's own work after the last batch: its last
    `on_train_batch_end`, last `on_epoch_end` and `on_train_end`, each timed
    between a callback placed before keras-gpu's and one placed right after
    them, in the same process and at the instants they happen. That is the
    time keras-gpu adds to the tail of `fit`, and the part it controls; the
    rest of the tail is Keras' own epoch and train end, the same with or
    without keras-gpu. The whole tail is not compared with the plain run's:
    that run is another process at another moment, and on a machine at load
    9 to 13 the same Keras tail was measured from 0.04 s to over 1 s.
    """
    kg = _ran(kg)
    assert kg["keras_gpu_tail_sec"] < FIT_RETURN_SEC, kg["keras_gpu_tail_sec"]


CHECKS: dict[str, Callable[[dict, dict, str], None]] = {
    "identical": identical,
    "samples": samples,
    "flops": flops,
    "hints": hints,
    "fit_returns": fit_returns,
}


def cases(
    backend: str, known: dict[tuple[str, str], str], by_load: dict[tuple[str, str], str] | None = None
) -> list:
    """`pytest.param(name, check)` for every program of `backend` and every check.

    A check that a known defect fails (`known`) is a strict xfail naming it;
    one that the defect fails or not depending on the machine's load
    (`by_load`) is a non-strict one.
    """
    import pytest

    out = []
    for name in names_for(backend):
        for check in CHECKS:
            marks = []
            if (name, check) in known:
                marks.append(pytest.mark.xfail(strict=True, reason=known[name, check]))
            elif by_load and (name, check) in by_load:
                marks.append(pytest.mark.xfail(strict=False, reason=by_load[name, check]))
            out.append(pytest.param(name, check, marks=marks, id=f"{name}-{check}"))
    return out
