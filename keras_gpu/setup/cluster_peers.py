"""Tasks that describe the cluster differently fail fast, told so by their peers' own TensorFlow servers.

While `make_strategy` creates a multi-worker strategy, each task waits inside
TensorFlow (in native code that holds the GIL) until every task of *its own*
cluster description has registered with *its own* coordination leader (the
chief, else worker 0). When the tasks' descriptions disagree, that wait has no
end before `startup_timeout`:

- worker lists in a different order on each task, each task at index 0: every
  task is the leader of its own cluster and waits for the others;
- two tasks given the same index: one cannot take the port, the other waits
  for a peer that never comes;
- a task the leader's description does not have: the leader refuses it at
  once, then waits for the task it expected.

Each such case leaves a task that can *see* the disagreement, because
TensorFlow's server of every started task answers while it waits:

- a short-lived watcher process (`PeerWatch`, started just before the
  blocking call) asks each peer's server which task it is
  (`WorkerService/GetStatus`) and compares that with its own description;
- a task whose port is taken asks the server that holds it
  (`explain_taken_port`); a task the leader refused knows it already
  (`report_refused`).

That task stores a one-line description of the disagreement in its leader's
coordination key-value store and cancels the leader's registration barrier:
every task waiting there, the leader included, stops waiting at once.
`startup_guard` then raises the description as a `RuntimeError` on each
of them. Only TensorFlow's own services are used (`keras_gpu.core.tf_private`); nothing
new listens anywhere.

Measured on TensorFlow 2.21, two CPU workers on loopback: see the README's
troubleshooting section.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

from keras_gpu.core.cluster import ClusterInfo, TaskNotInClusterError
from keras_gpu.core.log import logger
from keras_gpu.core.tf_private import (
    cancel_registration,
    server_task,
    service_insert,
    service_try_get,
)
from keras_gpu.setup.startup_wait import wait_interval, waiting_line

__all__ = [
    "DISAGREEMENT_KEY",
    "UNLISTED_WAIT_S",
    "PeerWatch",
    "explain_taken_port",
    "report_refused",
    "report_unlisted",
    "startup_guard",
    "view_difference",
]

DISAGREEMENT_KEY = "keras_gpu/cluster_disagreement"
"""Key, in the coordination leader's key-value store, of the first disagreement a task reported."""

_TRAINING = ("chief", "worker")
_POLL_S = 0.5  # between rounds of questions to the peers that have not answered yet
_RPC_S = 2.0  # one question's deadline
_MARK = "DISAGREEMENT "  # the watcher's stdout line
T = TypeVar("T")

UNLISTED_WAIT_S = 20.0
"""Seconds a task that is not in its own cluster description keeps trying to tell its leader before it fails."""


def _name(task: tuple[str, int]) -> str:
    return f"{task[0]}:{task[1]}"


def _me(info: ClusterInfo) -> tuple[str, int]:
    return info.task_type, info.task_index


def _leader(info: ClusterInfo) -> tuple[tuple[str, int], str]:
    """This task's coordination leader, `((job, index), address)`, in this task's own description."""
    job = "chief" if info.cluster.get("chief") else "worker"
    return (job, 0), info.cluster[job][0]


def _expected(info: ClusterInfo) -> dict[str, tuple[str, int]]:
    """Address to `(job, index)` of every training task in this task's description."""
    return {a: (job, i) for job in _TRAINING for i, a in enumerate(info.cluster.get(job, ()))}


def _fix(info: ClusterInfo) -> str:
    if info.source == "tf_config":
        where = "TF_CONFIG's 'cluster' must be identical on every task, and its 'task' index the task's own place in it"
    elif info.source == "slurm":
        where = "every task of the SLURM step must resolve the same cluster"
    else:
        where = "pass the same `cluster` to every task, and each task's own place in it as `task_index`"
    return f"Give every task the same cluster description ({where})."


def _applies(info: ClusterInfo) -> bool:
    return info.task_type in _TRAINING and info.is_multi_worker and info.address is not None


def view_difference(info: ClusterInfo, address: str, found: tuple[str, int]) -> str | None:
    """The one-line disagreement when the task at `address` says it is `found`, or None when this task agrees.

    Args:
        info: This task's resolved cluster.
        address: A peer's `host:port` from this task's description.
        found: `(job, index)` that the peer's own server reports.
    """
    expected = _expected(info).get(address)
    if expected is None or expected == found:
        return None
    hint = ""
    if expected[0] == found[0]:
        hint = f" (e.g. the {found[0]} list in a different order on each task, or a wrong task index)"
    return (
        f"make_strategy: the tasks disagree on the cluster: the task at {address} is {_name(found)} in its own "
        f"cluster description, but {_name(_me(info))} at {info.address} ({info.source}) lists {address} as "
        f"{_name(expected)}{hint}. {_fix(info)}"
    )


_reported_here: list[str] = []  # what this process reported: its own error already says it


def _report(info: ClusterInfo, message: str) -> bool | None:
    """Tell this task's leader: store `message` (the first report wins) and cancel its registration barrier."""
    _, address = _leader(info)
    _reported_here.append(message)
    service_insert(address, DISAGREEMENT_KEY, message, _RPC_S)
    return cancel_registration(address, *_me(info), timeout_s=_RPC_S)


def explain_taken_port(info: ClusterInfo) -> str | None:
    """When a TensorFlow task holds this task's own port: the disagreement, reported to the leader; else None.

    Call when this task's port is taken. A task that says it is this very
    task means two tasks were given the same index (or a worker of an earlier
    run still holds the port); another name means the descriptions disagree.
    Either way the leader's registration is cancelled, so the task that holds
    the port stops waiting too.
    """
    if not _applies(info):
        return None
    found = server_task(info.address, _RPC_S)
    if found is None:
        return None
    me = _me(info)
    if found == me:
        message = (
            f"make_strategy: two tasks were started as {_name(me)} ({info.address}): a TensorFlow task already "
            f"listens there as {_name(me)} when another one starts as {_name(me)}, e.g. the same task index given "
            f"to two tasks, or a worker left over from an earlier run. {_fix(info)} Stop any old worker."
        )
    else:
        message = (
            f"make_strategy: the tasks disagree on the cluster: the task at {info.address} is {_name(found)} in its "
            f"own cluster description, but another task was started there as {_name(me)} ({info.source}). "
            f"{_fix(info)}"
        )
    _report(info, message)
    return message


def report_refused(info: ClusterInfo) -> None:
    """This task's leader refused it ("Unexpected task registered"): tell the leader why, so it stops waiting."""
    if not _applies(info):
        return
    _, address = _leader(info)
    sizes = " and ".join(f"{len(info.cluster[j])} '{j}'" for j in _TRAINING if info.cluster.get(j))
    _report(
        info,
        f"make_strategy: the tasks disagree on the cluster: {_name(_me(info))} at {info.address} tried to join, but "
        f"the coordination leader at {address} has no such task in its cluster description (the joining task's "
        f"description, from {info.source}, has {sizes} task(s)), e.g. a 'chief' in one description and not the other, or "
        f"lists of different lengths. {_fix(info)}",
    )


def report_unlisted(plan: Callable[..., T]) -> Callable[..., T]:
    """Wrap a planner of checked `StrategyOptions`: when this task is not in its own cluster, tell the leader, then raise.

    Such a task fails before TensorFlow starts, and only it knows; the
    leader would wait for the task it expected until `startup_timeout`. So
    before the `TaskNotInClusterError` propagates, the disagreement is stored
    with the leader of this task's description and its registration is
    cancelled, retrying every 0.5 s while the leader's server does not
    answer yet, for at most `UNLISTED_WAIT_S` seconds. Only for a
    multi-worker plan (`kind` "auto" or "multiworker") of a TF_CONFIG or
    explicit cluster.
    """

    @functools.wraps(plan)
    def wrapper(options: Any, *args: Any, **kwargs: Any) -> T:
        try:
            return plan(options, *args, **kwargs)
        except TaskNotInClusterError as exc:
            info = exc.cluster_info
            if options.kind in ("auto", "multiworker") and info.task_type in _TRAINING and len(_expected(info)) > 1:
                _tell_leader_unlisted(info, str(exc))
            raise

    return wrapper


def _tell_leader_unlisted(info: ClusterInfo, detail: str) -> None:
    (job, index), address = _leader(info)
    message = (
        f"make_strategy: the tasks disagree on the cluster: a task started as {_name(_me(info))} ({info.source}), "
        f"which its own cluster description does not have: {detail} {_fix(info)}"
    )
    logger.warning(
        "make_strategy: this task is not in its cluster description; telling the coordination leader at %s (up to %gs).",
        address,
        UNLISTED_WAIT_S,
    )
    deadline = time.monotonic() + UNLISTED_WAIT_S
    while True:
        service_insert(address, DISAGREEMENT_KEY, message, _RPC_S)
        if cancel_registration(address, job, index, _RPC_S) is not None or time.monotonic() >= deadline:
            return
        time.sleep(_POLL_S)


class PeerWatch:
    """A watcher process that asks the peers' TensorFlow servers who they are while this task waits for them.

    Start it right before the blocking strategy constructor and stop it right
    after. It polls every peer of this task's description that has not
    answered yet (`WorkerService/GetStatus`, every 0.5 s, 2 s deadline per
    question, up to 16 at once) until each has answered once. At the first
    peer that names itself differently from this task's description it
    reports the disagreement to this task's leader (ending the wait there)
    and prints it. It exits by itself after `timeout_s`, or within a second
    of its parent's end.
    """

    def __init__(self, process: subprocess.Popen | None) -> None:
        self._process = process

    @classmethod
    def start(cls, info: ClusterInfo, timeout_s: float) -> PeerWatch:
        """Start watching the peers of `info` for `timeout_s` seconds (a no-op watch where there are none)."""
        if not _applies(info) or len(_expected(info)) < 2:
            return cls(None)
        spec = {
            "cluster": {k: list(v) for k, v in info.cluster.items()},
            "task_type": info.task_type,
            "task_index": info.task_index,
            "source": info.source,
            "timeout_s": timeout_s,
            "parent": os.getpid(),
            "wait_log_s": wait_interval(),
        }
        notice = _dup_stderr()
        spec["notice_fd"] = notice
        package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
        env.setdefault("GRPC_VERBOSITY", "ERROR")
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", "keras_gpu.setup.cluster_peers", json.dumps(spec)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                text=True,
                pass_fds=() if notice is None else (notice,),
            )
        except OSError as exc:  # pragma: no cover - no interpreter to start: the startup timeout still bounds the wait
            logger.debug("make_strategy: the peer watcher did not start: %s", exc)
            return cls(None)
        finally:
            if notice is not None:
                os.close(notice)
        return cls(process)

    def stop(self) -> str | None:
        """Stop the watcher; the disagreement it found, or None."""
        process, self._process = self._process, None
        if process is None:
            return None
        if process.poll() is None:
            process.terminate()
        try:
            out, err = process.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            out, err = process.communicate()
        found = [line[len(_MARK) :] for line in out.splitlines() if line.startswith(_MARK)]
        if process.returncode not in (0, -15) and err.strip():
            logger.debug("make_strategy: the peer watcher failed: %s", err.strip().splitlines()[-1])
        return found[0] if found else None


@contextmanager
def startup_guard(info: ClusterInfo, timeout_s: float) -> Iterator[None]:
    """Watch the peers while the block runs; when it fails and a task reported a disagreement, raise that.

    The `RuntimeError` raised carries the disagreement this task's watcher
    found, else the one some task stored with this task's leader; it is
    chained to the block's own error. Without a reported disagreement, or
    when this process reported it itself (its error already says so), the
    block's error passes unchanged.
    """
    _reported_here.clear()
    watch = PeerWatch.start(info, timeout_s)
    try:
        yield
    except Exception as exc:
        message = watch.stop()
        if message is None and _applies(info) and not _reported_here:
            message = service_try_get(_leader(info)[1], DISAGREEMENT_KEY, _RPC_S)
            if message:
                message = f"{message} (This task: {_name(_me(info))} at {info.address}.)"
        if message:
            raise RuntimeError(message) from exc
        raise
    else:
        watch.stop()


def _dup_stderr() -> int | None:
    """A copy of this process's stderr for the watcher's waiting lines, or None without one."""
    try:
        return os.dup(sys.stderr.fileno())
    except (OSError, ValueError, AttributeError):
        return None


def _watch(
    info: ClusterInfo, timeout_s: float, parent: int, notice: Callable[[str], None] | None = None, every_s: float = 30.0
) -> str | None:
    """Poll the peers until one disagrees (returned), all agree, the parent ends, or time runs out.

    While peers have not answered, `notice` gets a waiting line naming them
    every `every_s` seconds.
    """
    from concurrent.futures import ThreadPoolExecutor

    pending = {a: t for a, t in _expected(info).items() if a != info.address}
    started = time.monotonic()
    deadline = started + timeout_s
    next_note = started + every_s
    with ThreadPoolExecutor(max_workers=min(16, len(pending))) as pool:
        while pending and time.monotonic() < deadline and os.getppid() == parent:
            if notice is not None and time.monotonic() >= next_note:
                next_note += every_s
                names = ", ".join(f"{_name(t)} at {a}" for a, t in pending.items())
                notice(waiting_line(names, time.monotonic() - started, timeout_s))
            addresses = list(pending)
            for address, found in zip(addresses, pool.map(lambda a: server_task(a, _RPC_S), addresses)):
                if found is None:
                    continue
                message = view_difference(info, address, found)
                if message is not None:
                    return message
                pending.pop(address)
            time.sleep(_POLL_S)
    return None


def _main(argv: list[str]) -> int:
    spec: Mapping = json.loads(argv[0])
    cluster = {k: tuple(v) for k, v in spec["cluster"].items()}
    info = ClusterInfo(spec["source"], cluster, spec["task_type"], int(spec["task_index"]))
    notice = None
    if spec.get("notice_fd") is not None:
        stream = os.fdopen(int(spec["notice_fd"]), "w", buffering=1)

        def notice(line: str) -> None:
            try:
                stream.write(f"keras-gpu: {line}\n")
            except (OSError, ValueError):
                pass

    message = _watch(info, float(spec["timeout_s"]), int(spec["parent"]), notice, float(spec.get("wait_log_s", 30.0)))
    if message is not None:
        print(_MARK + message, flush=True)  # before the report, which ends the parent's wait
        _report(info, message)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
