"""keras_gpu.core.jax_private, and keras_private's Keras-on-JAX functions, against the installed JAX and Keras.

Each check runs in a fresh interpreter on Keras' JAX backend (the changes
they make are process-wide). Skips where JAX is not installed.
"""

from __future__ import annotations

from tests._util import run_python
from tests.backends._common import JAX_ONLY

pytestmark = JAX_ONLY
JAX = {"KERAS_BACKEND": "jax", "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}


def _last_line(code: str) -> str:
    return run_python(code, env=JAX, timeout=300).stdout.strip().splitlines()[-1]


def test_backends_initialized_is_false_until_jax_makes_an_array():
    code = """
        import jax
        from keras_gpu.core import jax_private
        before = jax_private.backends_initialized()
        jax.numpy.zeros(1)
        print(before, jax_private.backends_initialized())
    """
    assert _last_line(code) == "False True"


def test_jax_initialize_rng_sets_kerass_one_seed():
    code = """
        from keras.src.utils import rng_utils
        from keras_gpu.core import keras_private
        before = rng_utils.get_random_seed()
        keras_private.jax_initialize_rng()
        print(before, isinstance(rng_utils.get_random_seed(), int))
    """
    assert _last_line(code) == "None True"


def test_wrapped_data_input_sees_every_batch_of_a_distributed_fit_once():
    code = """
        import functools
        import jax, keras, numpy as np
        from keras_gpu.core import keras_private
        calls = []
        def spy(original, batch, layout, batch_dim_name):
            calls.append(tuple(batch.shape))
            return original(batch, layout, batch_dim_name)
        def wrap(original):
            return functools.partial(spy, original)
        keras_private.wrap_jax_data_input(wrap)
        keras_private.wrap_jax_data_input(wrap)  # again: still one wrap
        keras.distribution.set_distribution(keras.distribution.DataParallel(devices=jax.devices()))
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        x, y = np.zeros((12, 3), "float32"), np.zeros((12, 1), "float32")
        model.fit(x, y, batch_size=4, epochs=1, verbose=0)
        first = len(calls)
        model.fit(x, y, batch_size=4, epochs=2, verbose=0)
        print(sorted(set(calls)), first, len(calls) - first)
    """
    # x and y of each step, once: 3 steps, plus the first batch Keras distributes to build the model;
    # then 6 steps of a built model (a second wrap would double every count)
    assert _last_line(code) == "[(4, 1), (4, 3)] 8 12"


def test_wrapped_predict_function_is_what_predict_calls():
    code = """
        import keras, numpy as np
        from keras_gpu.core import keras_private
        steps = []
        def transform(function):
            def counted(*args, **kwargs):
                steps.append(1)
                return function(*args, **kwargs)
            return counted
        keras_private.wrap_jax_predict_function(transform)
        keras_private.wrap_jax_predict_function(transform)  # again: still one wrap
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, kernel_initializer="ones")])
        out = model.predict(np.ones((8, 3), "float32"), batch_size=4, verbose=0)
        print(len(steps), float(out.sum()))
    """
    assert _last_line(code) == "2 24.0"


def test_flop_counters_primitive_names_are_registered_by_the_installed_jax():
    code = """
        import gc, importlib
        from jax.extend.core import Primitive
        from keras_gpu.core import jax_private
        skipped = set()
        for mod, names in (("jax.experimental.pallas", ()), ("jax.experimental.sparse", ()),
                           ("jax._src.cudnn.fused_attention_stablehlo", ()),
                           ("jax._src.cudnn.scaled_matmul_stablehlo", ()), ("jax._src.tpu_custom_call", ()),
                           ("jax._src.export._export", ()), ("jax.experimental.mosaic.gpu", ("mosaic_gpu_p",)),
                           ("jax._src.pallas.fuser.custom_fusion_lib", ()),
                           ("jax.experimental.jax2tf", ("call_tf",))):  # jax2tf needs TensorFlow
            try:
                importlib.import_module(mod)
            except ImportError:
                skipped.update(names)
        registered = {o.name for o in gc.get_objects() if isinstance(o, Primitive)}
        wanted = jax_private.UNCOUNTABLE_PRIMITIVES | jax_private.CUDNN_ATTENTION_FORWARD
        print(sorted(wanted - registered - skipped))
    """
    assert _last_line(code) == "[]"


def test_cudnn_attention_sizes_reads_both_layouts_of_the_cudnn_primitive():
    code = """
        import jax, jax.numpy as jnp
        from jax._src.cudnn import fused_attention_stablehlo as cudnn
        from keras_gpu.core import jax_private

        def sizes(layout, q, k, v):
            def bind(q, k, v):
                none = jnp.zeros((0,), q.dtype)
                return cudnn._dot_product_attention(q, k, v, none, none, none, none, none, none, none, 1.0, 0, 0.0,
                                                    (False, False), cudnn.MaskType.CAUSAL, layout, None, 90000, False)
            shapes = [jax.ShapeDtypeStruct(s, jnp.bfloat16) for s in (q, k, v)]
            outer = jax.make_jaxpr(bind)(*shapes).jaxpr.eqns[-1]  # custom_vjp_call
            eqn = outer.params["call_jaxpr"].jaxpr.eqns[-1]
            assert eqn.primitive.name in jax_private.CUDNN_ATTENTION_FORWARD, eqn.primitive.name
            return jax_private.cudnn_attention_sizes(eqn)

        # batch 2, 4 query heads, 2 key/value heads, 5 queries, 7 keys, depth 8
        print(sizes(cudnn.AttentionLayout.BTNH.value, (2, 5, 4, 8), (2, 7, 2, 8), (2, 7, 2, 8)),
              sizes(cudnn.AttentionLayout.BNTH.value, (2, 4, 5, 8), (2, 2, 7, 8), (2, 2, 7, 8)))
    """
    assert _last_line(code) == "(2, 4, 5, 7, 8, 8) (2, 4, 5, 7, 8, 8)"


def test_callback_model_leaves_the_training_state_where_callback_model_syncs_it():
    # Keras' `Callback.model` syncs the JAX training state into the variables (racing the step from the pool);
    # `keras_private.callback_model` reads the same model without it.
    code = """
        import numpy as np, keras
        from keras_gpu.core import keras_private

        class Look(keras.callbacks.Callback):
            synced = []
            def on_train_batch_end(self, batch, logs=None):
                model = keras_private.callback_model(self)
                before = model._jax_state_synced
                same = keras_private.callback_model(self) is model
                self.synced.append((before, model._jax_state_synced, same))
                if batch == 1:
                    self.model  # Keras' property: the state sync
                    self.synced.append(("property", model._jax_state_synced, True))

        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        look = Look()
        model.fit(np.ones((8, 3)), np.ones((8, 1)), batch_size=2, epochs=1, verbose=0, callbacks=[look])
        print(look.synced[:3])
    """
    assert _last_line(code) == "[(False, False, True), (False, False, True), ('property', True, True)]"
