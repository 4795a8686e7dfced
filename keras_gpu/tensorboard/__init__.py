"""The keras-gpu tab in TensorBoard: the plugin, its data (the report's reader, the charts' series) and its frontend."""
