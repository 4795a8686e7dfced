"""Launch test worker: writes numbered lines to stdout and stderr in pieces, then exits 0.

Each line is written in two flushed halves so that the launcher sees partial
lines; the last stdout output has no trailing newline.
"""

import json
import os
import sys
import time

rank = int(os.environ["KERAS_GPU_WORKER_INDEX"])
lines = int(sys.argv[1])
print(
    "info "
    + json.dumps(
        {
            "rank": rank,
            "num_workers": os.environ["KERAS_GPU_NUM_WORKERS"],
            "tf_config": json.loads(os.environ["TF_CONFIG"]),
            "argv": sys.argv,
        }
    ),
    flush=True,
)
for k in range(lines):
    for stream, tag in ((sys.stdout, "out"), (sys.stderr, "err")):
        stream.write(f"{tag} {rank} ")
        stream.flush()
        time.sleep(0.0005)
        stream.write(f"{k}\n")
        stream.flush()
sys.stdout.write(f"tail {rank} without newline")
sys.stdout.flush()
