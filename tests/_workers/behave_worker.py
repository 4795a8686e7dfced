"""Launch test worker whose behaviour is chosen by its first argument.

Usage: behave_worker.py MODE PIDDIR [FAIL_RANK]

Every worker first sets itself up, starts a `sleep` grandchild (except in
mode `nochild`), writes `PIDDIR/<rank>.pid` (its pid and the grandchild's),
and waits until every worker has written one. Then worker FAIL_RANK (default 1):

- `fail`: exits with status 3;
- `sigkill`: kills itself with SIGKILL;
- `ignore-term`: exits with status 3, while the other workers ignore SIGTERM;
- `sleep`, `nochild`: sleeps like every other worker.

All other workers sleep for 120 s.
"""

import os
import signal
import subprocess
import sys
import time

mode, piddir = sys.argv[1], sys.argv[2]
fail_rank = int(sys.argv[3]) if len(sys.argv) > 3 else 1
rank = int(os.environ["KERAS_GPU_WORKER_INDEX"])
num = int(os.environ["KERAS_GPU_NUM_WORKERS"])

if mode == "ignore-term" and rank != fail_rank:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
pids = [os.getpid()]
if mode != "nochild":
    pids.append(subprocess.Popen(["sleep", "120"]).pid)
tmp = os.path.join(piddir, f"{rank}.tmp")
with open(tmp, "w") as f:
    f.write(" ".join(map(str, pids)))
os.replace(tmp, os.path.join(piddir, f"{rank}.pid"))
print(f"ready {rank}", flush=True)

deadline = time.monotonic() + 30
while len([n for n in os.listdir(piddir) if n.endswith(".pid")]) < num and time.monotonic() < deadline:
    time.sleep(0.01)

if rank == fail_rank:
    if mode in ("fail", "ignore-term"):
        sys.exit(3)
    if mode == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
time.sleep(120)
