"""Test worker: create a multi-worker strategy from TF_CONFIG and let any error end the process, as a user's script would.

Usage: disagree_worker.py STARTUP_TIMEOUT

Prints `IMPORTED` once TensorFlow is imported (the start-up wait begins
after it) and `CREATED` when the strategy exists. An error in
`make_strategy` is not caught: the process exits 1 with the traceback, whose
last line is the error, on stderr.
"""

import sys

import tensorflow  # noqa: F401  (imported first: its import time is not the wait under test)

import keras_gpu

print("IMPORTED", flush=True)
keras_gpu.make_strategy("multiworker", startup_timeout=float(sys.argv[1]))
print("CREATED", flush=True)
