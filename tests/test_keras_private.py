"""keras_gpu.core.keras_private against the installed Keras: each private read or change still does what keras-gpu relies on.

Run these first after a Keras upgrade: a failure names the private API that
moved. The JAX-only functions are checked in `tests/backends/test_jax_private.py`.
"""

from __future__ import annotations

import numpy as np
import pytest

keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

from keras.src.trainers.epoch_iterator import EpochIterator

from keras_gpu.core import keras_private
from tests._util import run_python


def _data(n: int = 10) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.random((n, 3), dtype=np.float32), rng.random((n, 1), dtype=np.float32)


def _model() -> keras.Model:
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    return model


def test_array_adapter_knows_its_samples_and_arrays():
    x, y = _data(10)
    adapter = EpochIterator(x=x, y=y, batch_size=4).data_adapter
    assert type(adapter).__name__ == "ArrayDataAdapter"
    assert keras_private.array_adapter_num_samples(adapter) == 10
    inputs = keras_private.array_adapter_inputs(adapter)
    np.testing.assert_array_equal(np.asarray(inputs[0]), x)
    np.testing.assert_array_equal(np.asarray(inputs[1]), y)


def test_tf_dataset_adapter_holds_the_dataset_it_reads():
    x, y = _data(8)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(4)
    adapter = EpochIterator(x=dataset).data_adapter
    assert type(adapter).__name__ == "TFDatasetAdapter"
    held = keras_private.tf_dataset_adapter_dataset(adapter)
    assert isinstance(held, tf.data.Dataset)
    assert int(held.cardinality()) == 2


def test_readers_answer_none_on_objects_without_the_state():
    for reader in (
        keras_private.array_adapter_num_samples,
        keras_private.array_adapter_inputs,
        keras_private.tf_dataset_adapter_dataset,
        keras_private.inputs_struct,
        keras_private.optimizer_trainable_variables,
        keras_private.callback_model,
    ):
        assert reader(object()) is None
    assert keras_private.call_has_training_arg(object()) is True


def test_wrapped_epoch_iterator_hands_every_batch_through_the_wrap():
    x, y = _data(10)
    iterator = EpochIterator(x=x, y=y, batch_size=4, shuffle=False)
    seen = []

    def wrap(batches):
        for batch in batches:
            seen.append(int(np.shape(batch[0])[0]))
            yield batch

    assert keras_private.wrap_epoch_iterator(iterator, wrap) is True
    for _ in range(2):  # two passes: each pass's iterator is made anew through the wrap
        for _begin, _end, _batches in iterator.enumerate_epoch():
            pass
    assert seen == [4, 4, 2, 4, 4, 2]
    assert keras_private.wrap_epoch_iterator(object(), wrap) is False


def test_callback_model_is_the_model_the_callback_was_set_to():
    callback, model = keras.callbacks.Callback(), _model()
    callback.set_model(model)
    assert keras_private.callback_model(callback) is model is callback.model


def test_inputs_struct_is_the_functional_models_inputs_as_defined():
    a, b = keras.Input((2,), name="a"), keras.Input((3,), name="b")
    model = keras.Model({"a": a, "b": b}, keras.layers.Dense(1)(keras.layers.Concatenate()([a, b])))
    struct = keras_private.inputs_struct(model)
    assert isinstance(struct, dict) and sorted(struct) == ["a", "b"]
    assert tuple(struct["b"].shape) == (None, 3)


def test_call_has_training_arg_follows_the_call_signature():
    class WithTraining(keras.Model):
        def call(self, x, training=False):
            return x

    class Without(keras.Model):
        def call(self, x):
            return x

    assert keras_private.call_has_training_arg(WithTraining()) is True
    assert keras_private.call_has_training_arg(Without()) is False


def test_optimizer_trainable_variables_are_the_models_after_fit():
    model = _model()
    x, y = _data(4)
    model.fit(x, y, batch_size=4, epochs=1, verbose=0)
    held = keras_private.optimizer_trainable_variables(model.optimizer)
    assert [v.path for v in held] == [v.path for v in model.trainable_variables]


def test_a_replaced_train_step_and_apply_are_what_the_next_train_function_traces():
    model = _model()
    x, y = _data(8)
    model.fit(x, y, batch_size=4, epochs=1, verbose=0)
    assert model.train_function is not None
    calls = {"step": 0, "apply": 0}
    original_step, original_apply = model.train_step, model.optimizer.apply

    def step(data):
        calls["step"] += 1
        return original_step(data)

    def apply(*args, **kwargs):
        calls["apply"] += 1
        return original_apply(*args, **kwargs)

    keras_private.set_train_step(model, step)
    keras_private.set_optimizer_apply(model.optimizer, apply)
    keras_private.drop_train_function(model)
    assert model.train_function is None
    assert keras_private.patched_train_step(model) is step
    model.fit(x, y, batch_size=4, epochs=1, verbose=0)
    assert calls["step"] >= 1 and calls["apply"] >= 1  # traced (a tf.function calls Python at trace time)

    keras_private.restore_train_step(model, original_step)  # the class's own method: the instance's goes
    assert keras_private.patched_train_step(model) is None
    assert "train_step" not in vars(model)

    keras_private.set_train_step(model, step)
    keras_private.restore_train_step(model, step)  # not the class's method: set on the instance
    assert keras_private.patched_train_step(model) is step


def test_a_train_function_replaced_at_train_begin_runs_every_step():
    model = _model()
    x, y = _data(12)
    calls = []

    class Replace(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            original = self.model.train_function

            def counted(*args, **kwargs):
                calls.append(1)
                return original(*args, **kwargs)

            keras_private.set_train_function(self.model, counted)

    model.fit(x, y, batch_size=4, epochs=2, verbose=0, callbacks=[Replace()])
    assert len(calls) == 6  # 3 steps x 2 epochs


def test_wrap_callback_lists_reaches_lists_built_before_and_after_keras_is_imported():
    code = """
        import sys
        from keras_gpu.core import keras_private
        seen = []
        def wrap(callbacks):
            seen.append(len(callbacks or []))
            return callbacks
        keras_private.wrap_callback_lists(wrap)
        keras_private.wrap_callback_lists(wrap)  # again: one finder, one wrap
        assert keras_private.CALLBACK_LIST_MODULE not in sys.modules
        import keras
        keras.callbacks.CallbackList([keras.callbacks.History()])
        keras_private.wrap_callback_lists(wrap)  # now on the imported class: still one wrap
        keras.callbacks.CallbackList([])
        print(seen)
    """
    out = run_python(code, timeout=300)
    assert out.stdout.strip().splitlines()[-1] == "[1, 0]"


_FINDERS = """
    import importlib.machinery, sys
    from keras_gpu.core import keras_private

    class DirFinder:  # a finder for a folder that is not on sys.path, as an editable install's finder is
        def __init__(self, folder):
            self.folder = folder
        def find_spec(self, name, path, target=None):
            return importlib.machinery.PathFinder.find_spec(name, [self.folder]) if name == "shadow_mod" else None
"""


def test_patch_on_import_reaches_a_module_another_finder_finds_and_then_leaves(tmp_path):
    (tmp_path / "shadow_mod.py").write_text("VALUE = 1\n")
    code = _FINDERS + f"""
    sys.meta_path.append(DirFinder({str(tmp_path)!r}))
    keras_private.patch_on_import("shadow_mod", lambda m: setattr(m, "VALUE", m.VALUE + 10))
    keras_private.patch_on_import("shadow_mod", lambda m: setattr(m, "VALUE", 0))  # same key: one patch
    keras_private.patch_on_import("shadow_mod", lambda m: setattr(m, "OTHER", 2), key="other")
    hooks = [type(f).__name__ for f in sys.meta_path].count("_PatchOnImport")
    import shadow_mod
    print(shadow_mod.VALUE, shadow_mod.OTHER, hooks, [type(f).__name__ for f in sys.meta_path].count("_PatchOnImport"),
          keras_private.missed_import("shadow_mod"))
    """
    out = run_python(code, timeout=120)
    # Patched once per key, one hook for the module, and the hook gone once it patched.
    assert out.stdout.split() == ["11", "2", "1", "0", "None"]


def test_a_module_imported_past_the_hook_is_said_to_be_missed(tmp_path):
    (tmp_path / "shadow_mod.py").write_text("VALUE = 1\n")
    code = _FINDERS + f"""
    keras_private.patch_on_import("shadow_mod", lambda m: setattr(m, "VALUE", 11))
    print(keras_private.missed_import("shadow_mod"))  # not imported yet: nothing missed
    sys.meta_path.insert(0, DirFinder({str(tmp_path)!r}))  # ahead of keras-gpu's hook
    import shadow_mod
    print(shadow_mod.VALUE)
    print(keras_private.missed_import("shadow_mod"))
    """
    lines = run_python(code, timeout=120).stdout.strip().splitlines()
    assert lines[:2] == ["None", "1"]
    assert lines[2] == ("`shadow_mod` was imported past keras-gpu's import hook (loaded by SourceFileLoader, found by "
                        "a finder ahead of the hook in sys.meta_path)")


def test_wrap_fit_reaches_every_models_fit_and_names_an_override():
    code = """
    from keras_gpu.core import keras_private
    seen = []
    def wrap(original):
        def fit(self, *args, **kwargs):
            seen.append(type(self).__name__)
            return original(self, *args, **kwargs)
        return fit
    keras_private.wrap_fit(wrap)
    import numpy as np, keras
    keras_private.wrap_fit(wrap)  # again, on the imported class: still one wrap

    class Logged(keras.Model):
        def fit(self, *args, **kwargs):
            return super().fit(*args, **kwargs)

    inputs = keras.Input((2,))
    for model in (keras.Sequential([inputs, keras.layers.Dense(1)]), Logged(inputs, keras.layers.Dense(1)(inputs))):
        model.compile(optimizer="sgd", loss="mse")
        model.fit(np.zeros((4, 2)), np.zeros((4, 1)), verbose=0)
        print(keras_private.fit_override(model))
    print(seen)
    """
    lines = run_python(code, timeout=300).stdout.strip().splitlines()
    assert lines[-3:] == ["None", "Logged.fit", "['Sequential', 'Logged']"]
