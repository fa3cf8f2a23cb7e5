"""Ray's own view of a trial's process, for nodes without a raywatch agent: its per-node
reporter's CPU and memory of each worker (`GET /nodes/{node_id}`), and a py-spy dump
through `GET /worker/traceback` (403 unless the head runs with profiling on).

Only stalled trials are asked about, and one node's reply serves every stalled trial on
it for CACHE_S: a poll never calls Ray once per trial.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime

from django.conf import settings

from collectors.http import SourceError
from collectors.pystack import MAX_CHARS, capped
from collectors.rayworkers import WorkerStats, fetch_traceback, fetch_worker_stats
from dashboard.cluster.endpoint import endpoint_of
from dashboard.cluster.models import Actor, Node
from dashboard.trials.models import Trial
from dashboard.trials.probes import Activity, Stack
from dashboard.trials.process import TrialProcess

CACHE_S = 5.0  # Ray's reporter refreshes a node's workers every few seconds anyway
_cache: dict[str, tuple[float, dict[int, WorkerStats] | str]] = {}
_lock = threading.Lock()


def ray_nodes_of(trial: Trial) -> list[str]:
    """The Ray node ids the trial's process may be on: its actor's node, else every live
    node at its address (two raylets can share a host)."""
    cluster_id = trial.experiment.cluster_id
    at_address = list(Node.objects.filter(cluster_id=cluster_id, node_ip=trial.node_ip,
                                          state="ALIVE")
                      .values_list("node_id", flat=True)) if trial.node_ip else []
    actor_nodes = set(Actor.objects.filter(cluster_id=cluster_id, pid=trial.pid, state="ALIVE",
                                           node_id__in=at_address)
                      .values_list("node_id", flat=True))
    return sorted(actor_nodes) or at_address


def ray_activity(trial: Trial, now: datetime) -> Activity | str | None:
    if trial.pid is None:
        return None
    where = trial.node_ip or trial.hostname or "its node"
    nodes = ray_nodes_of(trial)
    if not nodes:
        return f"Ray lists no live node at {where}"
    for node_id in nodes:
        workers = worker_stats(node_id, trial.experiment.cluster.name)
        if isinstance(workers, str):
            return f"Ray's reporter on {where} could not be read: {workers}"
        if (found := workers.get(trial.pid)) is not None:
            return Activity(source=f"Ray's reporter on {where}", cpu_percent=found.cpu_percent,
                            rss_bytes=found.rss_bytes)
    return f"Ray's reporter on {where} does not list pid {trial.pid}"


def worker_stats(node_id: str, cluster: str = "") -> dict[int, WorkerStats] | str:
    """The node's worker readings (or why they could not be read), at most CACHE_S old;
    asked of its cluster's dashboard (node ids are unique across clusters)."""
    now = time.monotonic()
    with _lock:
        kept = _cache.get(node_id)
        if kept is not None and now - kept[0] < CACHE_S:
            return kept[1]
    try:
        found: dict[int, WorkerStats] | str = fetch_worker_stats(endpoint_of(cluster), node_id)
    except SourceError as exc:
        found = exc.message
    with _lock:
        for stale in [k for k, (at, _) in _cache.items() if now - at >= CACHE_S]:
            del _cache[stale]
        _cache[node_id] = (now, found)
    return found


def ray_stack(trial: Trial, bound: TrialProcess) -> Stack | str | None:
    try:
        text = fetch_traceback(endpoint_of(trial.experiment.cluster.name), bound.pid,
                               node_id=bound.node_id, ip=bound.node_ip,
                               timeout_s=settings.STACK_TIMEOUT_S + 5)
    except SourceError as exc:
        return exc.message
    return Stack(source=f"py-spy by Ray's reporter on {bound.node_ip} "
                        "(/worker/traceback)", text=capped(text, MAX_CHARS))
