"""`keras_gpu.core.backend` on the TensorFlow backend, and the TensorFlow-only parts on another backend.

The JAX and PyTorch sides are tested in `tests/backends/` (an environment without TensorFlow).
"""

from __future__ import annotations

import json

from tests._util import run_python


def test_tensorflow_facts_come_from_the_strategy():
    proc = run_python(
        """
        import json
        import tensorflow as tf
        import keras
        from keras_gpu.core import backend
        from keras_gpu.meters import flops, model_flops
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        with strategy.scope():
            model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(16), keras.layers.Dense(4)])
            model.compile("sgd", "mse")
        print(json.dumps({
            "name": backend.name(),
            "devices": list(backend.replica_devices(model)),
            "strategy_devices": list(strategy.extended.worker_devices),
            "replicas": backend.num_replicas(model),
            "allocators": [list(a) for a in backend.allocators(model)],
            "gpus": backend.physical_gpus(model),
            "peak": list(model_flops.gpu_peak_flops(model, "float32")),
            "flops": model_flops.training_flops_per_sample(model),
            "flops_module": flops.training_flops_per_sample(model),
            "task": backend.task_info(model).is_chief,
        }))
        """,
        timeout=240,
        logical_cpus=2,
    )
    facts = json.loads(proc.stdout.strip().splitlines()[-1])
    assert facts["name"] == "tensorflow"
    assert facts["devices"] == facts["strategy_devices"] and len(facts["devices"]) == 2
    assert facts["replicas"] == 2
    assert facts["allocators"] == [["CPU:0", "CPU_0", True]]  # logical CPUs share one allocator
    assert facts["gpus"] == [] and facts["peak"] == [None, []]
    assert facts["flops"] == facts["flops_module"] == 3 * 2 * (32 * 16 + 16 * 4)
    assert facts["task"] is True


def test_on_another_backend_placement_is_left_out_or_refused(monkeypatch, caplog):
    # TensorFlow is installed here but Keras runs on another backend (as `KERAS_BACKEND=jax` would make it).
    import logging

    import pytest

    import keras_gpu
    from keras_gpu.core import backend
    from keras_gpu.core import log as _log

    monkeypatch.setattr(backend, "name", lambda: "jax")
    monkeypatch.setattr(_log, "_process", _log.Once())
    caplog.set_level(logging.INFO, logger="keras_gpu")
    names = sorted(type(c).__name__ for c in keras_gpu.callbacks("logs", step_time=False))
    assert names == ["MemoryLogger", "ThroughputLogger"]
    assert [r.getMessage() for r in caplog.records].count(
        "keras-gpu: placement is logged on the TensorFlow backend only; on the jax backend "
        "keras_gpu.callbacks() leaves PlacementLogger out."
    ) == 1
    with pytest.raises(RuntimeError, match=r"TensorFlow backend only: .* Received: backend='jax'$"):
        keras_gpu.PlacementLogger("logs")
    with pytest.raises(ValueError, match="placement is TensorFlow-only"):
        keras_gpu.callbacks("logs", throughput=False, memory=False, step_time=False)
