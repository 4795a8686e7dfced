"""Whether the tasks of a multi-worker job were given the same cluster.

A task whose cluster description differs from its peers' (a 'chief' in one
TF_CONFIG and not another, different worker lists) can create its strategy
and then fail, or hang, in the first collective. `check_cluster_agreement`
compares the descriptions through TensorFlow's coordination service right
after the strategy exists; `cluster_difference` says in words how two
descriptions differ.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from keras_gpu.core.cluster_info import TRAINING_TASK_TYPES, ClusterInfo

__all__ = ["check_cluster_agreement", "cluster_difference"]


# --------------------------------------------------------------------------- agreement between tasks
#
# Checked on TensorFlow 2.21 with two loopback workers: when worker 0's
# TF_CONFIG lists 2 workers and worker 1's lists 3, both create their strategy
# without error (2 and 3 replicas) and only fail, or hang, in the first
# collective. When one config has a chief and the other does not, the task the
# leader does not know gets `Unexpected task registered`, and the leader waits
# for `startup_timeout`.

_AGREEMENT_KEY = "keras_gpu/cluster/{job}:{index}"


def _training_spec(info: ClusterInfo) -> dict[str, list[str]]:
    return {job: list(info.cluster[job]) for job in TRAINING_TASK_TYPES if info.cluster.get(job)}


def _leader(spec: Mapping[str, Sequence[str]]) -> tuple[str, int]:
    return ("chief", 0) if spec.get("chief") else ("worker", 0)


def cluster_difference(mine: Mapping[str, Sequence[str]], theirs: Mapping[str, Sequence[str]], other: str) -> str:
    """In words, how the training jobs of cluster `theirs` (task `other`'s) differ from `mine`; "" when equal."""
    parts = []
    for job in sorted(set(mine) | set(theirs)):
        a, b = list(mine.get(job, ())), list(theirs.get(job, ()))
        if a == b:
            continue
        if not a or not b:
            parts.append(f"a '{job}' job is only in {'this task' if a else other}'s cluster")
        elif len(a) != len(b):
            parts.append(f"'{job}' has {len(a)} task(s) here and {len(b)} in {other}'s")
        else:
            diff = [f"{job}:{i} is {x} here and {y} in {other}'s" for i, (x, y) in enumerate(zip(a, b)) if x != y]
            parts.append(", ".join(diff))
    return "; ".join(parts)


def check_cluster_agreement(info: ClusterInfo, timeout_s: float) -> None:
    """Raise `RuntimeError` when this task's cluster differs from its coordination leader's (or a task's, on the leader).

    Call right after the multi-worker strategy was created, on every task.
    Each task stores its cluster (chief and worker jobs) in the coordination
    service's key-value store; the leader (the chief, else worker 0) reads
    every task's, the others read the leader's. One store and at most one
    read per task, once per process.

    Args:
        info: This task's resolved cluster.
        timeout_s: How long to wait for a peer's entry, in seconds.

    Raises:
        RuntimeError: The clusters differ (naming the difference and the
            task), or a peer stored nothing within `timeout_s`.
    """
    import tensorflow as tf

    from keras_gpu.core.tf_private import coordination_get, coordination_set

    if info.task_type not in TRAINING_TASK_TYPES or not info.is_multi_worker:
        return
    mine = _training_spec(info)
    me = f"{info.task_type}:{info.task_index}"
    coordination_set(_AGREEMENT_KEY.format(job=info.task_type, index=info.task_index), json.dumps(mine, sort_keys=True))
    leader = _leader(mine)
    if (info.task_type, info.task_index) == leader:
        peers = [(job, i) for job in TRAINING_TASK_TYPES for i in range(len(mine.get(job, ()))) if (job, i) != leader]
    else:
        peers = [leader]
    for job, index in peers:
        other = f"{job}:{index}"
        try:
            theirs = json.loads(coordination_get(_AGREEMENT_KEY.format(job=job, index=index), timeout_s))
        except (tf.errors.DeadlineExceededError, tf.errors.UnavailableError, tf.errors.NotFoundError) as exc:
            raise RuntimeError(
                f"make_strategy: {other} did not share its cluster description within {timeout_s:g}s, so this task "
                f"({me}) cannot check that both use the same cluster. Is {other} running keras_gpu.make_strategy? "
                f"TensorFlow said: {str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}"
            ) from None
        difference = cluster_difference(mine, theirs, other)
        if difference:
            raise RuntimeError(
                f"make_strategy: the tasks disagree on the cluster ({info.source} here): {difference}. "
                f"This task ({me}) has {json.dumps(mine)}; {other} has {json.dumps(theirs)}. Give every task the "
                "same cluster (TF_CONFIG's 'cluster' must be identical; only its 'task' differs)."
            )
