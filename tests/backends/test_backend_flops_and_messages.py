"""FLOPs of any model on JAX and PyTorch, and messages once per process, in the environment without TensorFlow.

One interpreter per backend runs five `fit` calls, each with a new model and a
new `keras_gpu.callbacks()`: a subclassed MLP, a subclassed VAE with
`add_loss` and a random draw, a functional model of two inputs and two
outputs, and a model whose input has a variable length (counted from array
data, not from a generator). The training FLOPs
per sample each `ThroughputLogger` found are compared with a hand count of the
matmuls (multiply-add = 2 FLOPs, training = 3 x forward, as in
`keras_gpu.meters.flops`).
"""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests._util import run_python
from tests.backends._common import BACKENDS, WITHOUT_TENSORFLOW

pytestmark = WITHOUT_TENSORFLOW

SCRIPT = """
import json, logging
import numpy as np, keras, keras_gpu
from keras_gpu.output.reader import read_scalars

messages = []


class Collect(logging.Handler):
    def emit(self, record):
        messages.append(record.getMessage())


logging.getLogger("keras_gpu").addHandler(Collect(logging.INFO))


class MLP(keras.Model):
    def __init__(self):
        super().__init__(name="mlp")
        self.hidden = keras.layers.Dense(16, activation="relu")
        self.out = keras.layers.Dense(4)

    def call(self, x):
        return self.out(self.hidden(x))


class VAE(keras.Model):
    def __init__(self):
        super().__init__(name="vae")
        self.encoder = keras.layers.Dense(12, activation="relu")
        self.mean = keras.layers.Dense(3)
        self.log_var = keras.layers.Dense(3)
        self.decoder = keras.layers.Dense(10)
        self.seed = keras.random.SeedGenerator(1)

    def call(self, x, training=False):
        h = self.encoder(x)
        mean, log_var = self.mean(h), self.log_var(h)
        z = mean + keras.ops.exp(0.5 * log_var) * keras.random.normal(keras.ops.shape(mean), seed=self.seed)
        self.add_loss(-0.5 * keras.ops.mean(1 + log_var - mean**2 - keras.ops.exp(log_var)))
        return self.decoder(z)


def two_in_two_out():
    a, b = keras.Input((8,), name="a"), keras.Input((6,), name="b")
    h = keras.layers.Dense(5)(keras.layers.Concatenate()([a, b]))
    first = keras.layers.Dense(2, name="first")(h)
    second = keras.layers.Dense(3, name="second")(keras.layers.Dense(7)(b))
    return keras.Model({{"a": a, "b": b}}, [first, second], name="two_in_two_out")


def variable_length():
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    h = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(50, 8)(tokens))
    return keras.Model(tokens, keras.layers.Dense(2)(h), name="variable_length")


rng = np.random.default_rng(0)
f = lambda *shape: rng.random(shape, dtype=np.float32)
cases = [
    (MLP(), f(64, 8), f(64, 4)),
    (VAE(), f(64, 10), f(64, 10)),
    (two_in_two_out(), {{"a": f(64, 8), "b": f(64, 6)}}, [f(64, 2), f(64, 3)]),
    (variable_length(), rng.integers(0, 50, (64, 12)).astype("int32"), f(64, 2)),
]


def batches():  # a generator: the sequence length is not known before training
    while True:
        yield rng.integers(0, 50, (16, 12)).astype("int32"), f(16, 2)


flops, host_steps = {{}}, {{}}
for i, (model, x, y) in enumerate(cases):
    model.compile("sgd", "mse")
    cbs = keras_gpu.callbacks({log_dir!r} + f"/{{i}}", every_s=0.05)
    model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=cbs)
    if model.name == "variable_length":  # counted from the arrays' shape; then from a generator, not at all
        counted = next(c for c in cbs if isinstance(c, keras_gpu.ThroughputLogger)).summary["flops_per_sample"]
        flops["variable_length_arrays"] = counted
        model = variable_length()
        model.compile("sgd", "mse")
        cbs = keras_gpu.callbacks({log_dir!r} + f"/{{i}}b", every_s=0.05)
        model.fit(batches(), steps_per_epoch=4, epochs=1, verbose=0, callbacks=cbs)
    throughput = next(c for c in cbs if isinstance(c, keras_gpu.ThroughputLogger))
    flops[model.name] = throughput.summary["flops_per_sample"]
    scalars = read_scalars({log_dir!r} + f"/{{i}}/train")
    host_steps[model.name] = [step for step, _ in scalars["memory/host/rss_bytes"]]
print("RESULT", json.dumps({{"flops": flops, "messages": messages, "host_steps": host_steps}}))
"""

HAND = {  # 3 x 2 x (inputs x units) summed over the Dense layers
    "mlp": 3 * 2 * (8 * 16 + 16 * 4),
    "vae": 3 * 2 * (10 * 12 + 2 * 12 * 3 + 3 * 10),
    "two_in_two_out": 3 * 2 * ((8 + 6) * 5 + 5 * 2 + 6 * 7 + 7 * 3),
    "variable_length_arrays": 3 * 2 * (8 * 2),  # the embedding lookup and the mean are no matmul
}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = {}
    for name in ("jax", "torch"):
        if importlib.util.find_spec(name) is not None:
            log_dir = str(tmp_path_factory.mktemp(name))
            proc = run_python(SCRIPT.format(log_dir=log_dir), env={"KERAS_BACKEND": name}, timeout=300)
            out[name] = json.loads(proc.stdout.split("RESULT", 1)[1])
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_flops_of_subclassed_add_loss_and_multi_io_models_equal_a_hand_count(results, backend):
    flops = results[backend]["flops"]
    assert {name: flops[name] for name in HAND} == HAND


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_impossible_count_says_why_in_one_line_in_the_factorys_words(results, backend):
    assert results[backend]["flops"]["variable_length"] is None
    (line,) = [m for m in results[backend]["messages"] if "could not count the FLOPs" in m]
    assert "'variable_length'" in line and "known only from the data" in line
    assert "its input 'tokens' has shape (None, None)" in line
    assert "the data's shapes cannot be read before training" in line
    assert "pass `keras_gpu.callbacks(flops_per_sample=...)`" in line


@pytest.mark.parametrize("backend", BACKENDS)
def test_once_per_process_messages_appear_once_in_five_fits(results, backend):
    messages = results[backend]["messages"]
    once = ["logs no throughput/mfu", "placement is logged on the TensorFlow backend only", "MemoryLogger found no GPU",
            "no allocator statistics for"]
    if backend == "torch":
        once.append("StepTimeLogger logs no step-time breakdown on the torch backend")
    for text in once:
        assert sum(text in m for m in messages) == 1, (text, messages)
    (no_mfu,) = [m for m in messages if "logs no throughput/mfu" in m]
    assert "`keras_gpu.callbacks(peak_flops=...)`" in no_mfu
    assert sum("wall-clock training rate" in m for m in messages) == 5  # each fit's own end-of-fit line


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_host_memory_point_per_step(results, backend):
    # Windows of 0.05 s: several pass while the first step compiles, and step 0 still gets one point.
    for name, steps in results[backend]["host_steps"].items():
        assert steps and steps == sorted(set(steps)), (name, steps)
