"""The corpus of real-program shapes (`tests.corpus`) on TensorFlow: keras-gpu changes nothing and says only what holds.

Every TensorFlow program of the corpus is fitted twice, each variant in a
fresh interpreter from the same seeds: without keras-gpu, and with
`keras_gpu.callbacks()`. For each program (`tests.corpus.checks`):

* `identical`: the epoch losses and the final weights are bit-identical;
* `samples`: the model trained on the samples the data holds (counted in the
  step), and keras-gpu's summary and event file say exactly those;
* `flops`: the training FLOPs per sample keras-gpu counted equal 3 x the
  program's hand count within 1%;
* `hints`: no hint says what the setup rules out (one CPU device: no
  communication, replica or GPU verdicts; no generator advice without a
  generator or PyDataset), and neither does the advice held for the input
  stage measured, whatever share of the step the load gives it;
* `fit_returns`: keras-gpu's work after the last batch takes under 1 s.

A check that fails because of a known defect is a strict xfail naming it;
where the failure depends on the machine's load (`fit` held up by a trace
parse whose length the load sets) it is not strict.
"""

from __future__ import annotations

import pytest

from tests.corpus.checks import CHECKS, cases, run_corpus

KNOWN: dict[tuple[str, str], str] = {}
BY_LOAD: dict[tuple[str, str], str] = {}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return run_corpus("tensorflow", str(tmp_path_factory.mktemp("corpus")))


@pytest.mark.slow
@pytest.mark.timeout(1800)  # the first test runs the whole corpus: minutes at load 9
@pytest.mark.parametrize(("name", "check"), cases("tensorflow", KNOWN, BY_LOAD))
def test_corpus_program(corpus, name, check):
    CHECKS[check](corpus["plain"][name], corpus["keras_gpu"][name], "tensorflow")
