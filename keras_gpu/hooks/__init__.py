"""The hooks: Keras callbacks (thin: they time and count, and feed the meters and the writer), the step probe, and the `keras_gpu.callbacks()` factory (`keras_gpu.hooks.factory`)."""
