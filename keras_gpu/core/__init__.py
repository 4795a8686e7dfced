"""The foundation every layer reads: argument checks, logging, units, private TensorFlow calls, devices and topology, the cluster this process is in, the backend's facts, NVML."""
