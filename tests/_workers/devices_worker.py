"""Launch test worker: prints one `devices {json}` line about its TensorFlow devices and startup."""

import json
import os
import sys

import tensorflow as tf

print(
    "devices "
    + json.dumps(
        {
            "rank": int(os.environ["KERAS_GPU_WORKER_INDEX"]),
            "logical_cpus": len(tf.config.list_logical_devices("CPU")),
            "argv": sys.argv,
            "path0": sys.path[0],
            "name": __name__,
        }
    ),
    flush=True,
)
