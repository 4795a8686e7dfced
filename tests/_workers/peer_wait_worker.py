"""Launch test worker: worker 0 creates a multi-worker strategy whose peer never comes.

Usage: peer_wait_worker.py OUT

Every worker writes `OUT/pid_w<rank>`. Worker 1 only sleeps, so worker 0
waits inside `keras_gpu.make_strategy` (startup_timeout 300 s) for a peer
that never registers, and writes `OUT/waiting` just before it.
"""

import os
import sys
import time

out = sys.argv[1]
rank = int(os.environ["KERAS_GPU_WORKER_INDEX"])
with open(os.path.join(out, f"pid_w{rank}"), "w") as f:
    f.write(str(os.getpid()))
if rank != 0:
    time.sleep(300)
    raise SystemExit(0)

import tensorflow  # noqa: F401  (imported before `waiting`: the wait starts right after it)

import keras_gpu

with open(os.path.join(out, "waiting"), "w") as f:
    f.write(repr(time.time()))
keras_gpu.make_strategy("multiworker", startup_timeout=300)
print("created: the peer was expected never to come", flush=True)
