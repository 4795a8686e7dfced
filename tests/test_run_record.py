"""`RunRecord` keeps the script's dispatch: exact losses when Keras runs its batch ends on a pool, out of order."""

from __future__ import annotations

import concurrent.futures
import random

import keras

from keras_gpu.hooks.run_record import RunRecord


def test_batch_ends_out_of_order_on_a_pool_give_every_loss_in_step_order():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse", steps_per_execution=4)
    record = RunRecord()
    assert record.async_safe is True
    record.set_model(model)
    record.on_train_begin()
    rng = random.Random(0)
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        for epoch in range(2):
            ends = list(range(10))
            rng.shuffle(ends)
            for f in [pool.submit(record.on_train_batch_end, b, {"loss": epoch * 10 + b + 0.5}) for b in ends]:
                f.result()  # Keras waits for every batch end before the epoch's end
            record.on_epoch_end(epoch)
    described = record.describe(model)
    assert described["losses"] == [[step, step - 0.5] for step in range(1, 21)]
    assert (described["steps_per_execution"], described["policy"]) == (4, "float32")
    assert described["peak_memory_bytes"] > 0 and described["memory_kind"]
