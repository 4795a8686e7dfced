"""Output: the tag schema, the event-file writer, the TensorBoard layout, and the reader behind `keras-gpu report`."""
