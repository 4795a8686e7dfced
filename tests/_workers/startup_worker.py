"""Reliability test worker: create a multi-worker strategy from TF_CONFIG and report how that went.

Usage: startup_worker.py STARTUP_TIMEOUT [--late S] [--hold-port] [--exit-after-create] [--collective-timeout S]

- `--late S`: start only S seconds after worker 0 listens on its port (a late peer);
- `--hold-port`: listen on this task's own port first, like a stray process;
- `--exit-after-create`: exit right after the strategy exists (a peer that dies);
- `--collective-timeout S`: passed to `make_strategy`.

Prints one line, `RESULT {json}`, with `created` (bool), `error` (`"Type:
message"` or null), `create_s` (seconds in `make_strategy`), `sum` (an
all-reduce of 1.0 over every replica, or null) and `reduce_error`.
"""

import argparse
import json
import os
import socket
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("startup_timeout", type=float)
parser.add_argument("--late", type=float, default=None)
parser.add_argument("--hold-port", action="store_true")
parser.add_argument("--exit-after-create", action="store_true")
parser.add_argument("--collective-timeout", type=float, default=None)
args = parser.parse_args()

config = json.loads(os.environ["TF_CONFIG"])
if args.late is not None:
    host, port = config["cluster"]["worker"][0].rsplit(":", 1)
    while True:
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    time.sleep(args.late)
if args.hold_port:
    port = int(config["cluster"]["worker"][config["task"]["index"]].rsplit(":", 1)[1])
    holder = socket.socket()
    holder.bind(("127.0.0.1", port))
    holder.listen()

import tensorflow as tf  # imported before the clock starts: `create_s` times make_strategy alone

import keras_gpu

out = {"created": False, "error": None, "sum": None, "reduce_error": None}
start = time.monotonic()
try:
    strategy = keras_gpu.make_strategy(
        "multiworker", startup_timeout=args.startup_timeout, collective_timeout=args.collective_timeout
    )
    out["created"] = True
except Exception as exc:  # noqa: BLE001 - reported, not raised: the test reads the type and message
    out["error"] = f"{type(exc).__name__}: {exc}"
out["create_s"] = time.monotonic() - start
if out["created"] and args.exit_after_create:
    print("RESULT " + json.dumps(out), flush=True)
    os._exit(0)
if out["created"]:
    start = time.monotonic()
    try:
        value = strategy.run(tf.function(lambda: tf.distribute.get_replica_context().all_reduce("SUM", tf.constant(1.0))))
        out["sum"] = float(strategy.experimental_local_results(value)[0])
    except Exception as exc:  # noqa: BLE001 - reported in the RESULT line
        out["reduce_error"] = f"{type(exc).__name__}: {exc}"
    out["reduce_s"] = time.monotonic() - start
print("RESULT " + json.dumps(out), flush=True)
sys.stdout.flush()
