"""Launch test worker that fails until a given restart, without TensorFlow.

Usage: flaky_worker.py DIR SUCCEED_AT [SLEEP]

Every worker writes `DIR/a<restart>_w<rank>.json` with its pid, the restart
count and maximum from the launcher, and the ports of its TF_CONFIG. While
`KERAS_GPU_RESTART_COUNT < SUCCEED_AT`, worker 1 exits with status 3 once
every worker of the attempt has written its file; otherwise every worker
sleeps SLEEP seconds (default 0) and exits 0.
"""

import json
import os
import sys
import time

out_dir, succeed_at = sys.argv[1], int(sys.argv[2])
sleep = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
rank = int(os.environ["KERAS_GPU_WORKER_INDEX"])
num = int(os.environ["KERAS_GPU_NUM_WORKERS"])
restart = int(os.environ["KERAS_GPU_RESTART_COUNT"])
info = {
    "pid": os.getpid(),
    "restart": restart,
    "max_restarts": int(os.environ["KERAS_GPU_MAX_RESTARTS"]),
    "ports": [a.rsplit(":", 1)[1] for a in json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"]],
}
tmp = os.path.join(out_dir, f"a{restart}_w{rank}.tmp")
with open(tmp, "w") as f:
    json.dump(info, f)
os.replace(tmp, os.path.join(out_dir, f"a{restart}_w{rank}.json"))

if restart < succeed_at:
    if rank != 1:
        time.sleep(120)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if all(os.path.exists(os.path.join(out_dir, f"a{restart}_w{i}.json")) for i in range(num)):
            break
        time.sleep(0.01)
    sys.exit(3)
time.sleep(sleep)
