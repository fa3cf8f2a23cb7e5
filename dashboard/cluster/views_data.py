"""The cluster as JSON-ready data: what the Cluster page, GET /api/cluster/ and its
pushes carry, the overview of every cluster (GET /api/clusters/, `manage.py cluster
list`), Ray's jobs and its pending demand. Read only: the ingest (state.py, workload.py)
writes, then pushes what this module reads.

Two figures come from the apps above this one, which register them in their
AppConfig.ready() (this app imports neither): the incidents firing in each cluster
(dashboard.incidents) and the GPU-hours its experiments held (dashboard.trials)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import F
from django.utils import timezone

from dashboard.cluster.models import (
    Actor,
    CallStack,
    CallTiming,
    Cluster,
    Demand,
    Job,
    Node,
    RayCall,
)
from dashboard.cluster.serializers import ClusterSerializer, DemandSerializer
from dashboard.cluster.sessions import current_cluster
from dashboard.core.push import jsonable

# How many incidents fire in each cluster, by its pk.
FiringCounts = Callable[[], Mapping[int, int]]
# The GPU-hours each experiment of a cluster held: rows of experiment_id, experiment,
# gpu_hours and trials.
GpuHours = Callable[[Cluster], Iterable[dict[str, Any]]]
_firing_counts: list[FiringCounts] = []
_gpu_hours: list[GpuHours] = []


def register_firing_counts(counts: FiringCounts) -> None:
    if counts not in _firing_counts:
        _firing_counts.append(counts)


def register_gpu_hours(rows: GpuHours) -> None:
    if rows not in _gpu_hours:
        _gpu_hours.append(rows)


def cluster_state(name: str | None = None, history: bool = False) -> dict[str, Any]:
    """The Cluster page's data. Scoped to the cluster `name`: its nodes, totals and
    identity. Unscoped: the one cluster raywatch knows, as it is; with several, every
    cluster's nodes, and the overview of each cluster in place of one identity."""
    everything = not name and Cluster.objects.count() > 1
    cluster = (Cluster.objects.filter(name=name).first() if name
               else None if everything else current_cluster())
    nodes = Node.objects.select_related("cluster")
    if cluster is not None:
        nodes = nodes.filter(cluster=cluster)
    elif name:
        nodes = nodes.none()
    listed = list(nodes)
    return {"totals": totals(listed), "nodes": listed, "identity": cluster,
            "clusters": overview() if everything else [],
            # Not in the pushes (nodes change at every poll): on the page and in the API.
            "history": cluster_history(cluster) if history and cluster is not None else None}


NODE_EVENTS_SHOWN = 2000
GPU_HOURS_SHOWN = 20


def cluster_history(cluster: Cluster) -> dict[str, Any]:
    """Its alive nodes over time (a step at each start and end Ray reported), and the
    GPU-hours its experiments held: each trial's GPUs (what its actor asked Ray for) times
    how long it ran (first seen to its last result), as dashboard.trials reckons them."""
    events: list[tuple[datetime, int]] = []
    for started, first, ended, state in Node.objects.filter(cluster=cluster).values_list(
            "started_at", "first_seen_at", "ended_at", "state"):
        events.append((started or first, 1))
        if state == Node.DEAD:
            events.append((ended or first, -1))
    events.sort(key=lambda e: e[0])
    alive, steps = 0, []
    for at, change in events:
        alive += change
        steps.append({"at": at, "alive": alive})
    gpu_hours = sorted((row for held in _gpu_hours for row in held(cluster)),
                       key=lambda r: -r["gpu_hours"])
    return {"nodes": steps[-NODE_EVENTS_SHOWN:], "gpu_hours": gpu_hours[:GPU_HOURS_SHOWN]}


def overview() -> list[dict[str, Any]]:
    """Every cluster with what an operator checks first: does it answer, how big is it,
    are its GPUs busy, what is on fire ("all clusters")."""
    nodes: dict[int, list[Node]] = {}
    for node in Node.objects.all():
        nodes.setdefault(node.cluster_id, []).append(node)
    firing: Counter[int] = Counter()
    for counts in _firing_counts:
        firing.update(counts())
    rows = []
    for cluster in Cluster.objects.order_by("name"):
        summary = totals(nodes.get(cluster.pk, []))
        rows.append({
            "name": cluster.name, "origin": cluster.origin, "approval": cluster.approval,
            "state": cluster.state, "state_since": cluster.state_since,
            "dashboard_url": cluster.dashboard_url or cluster.address,
            "has_token": bool(cluster.token), "ray_version": cluster.ray_version,
            "last_seen_at": cluster.last_seen_at, "ended_at": cluster.ended_at,
            "end_reason": cluster.end_reason, "last_error": cluster.last_error,
            "kuberay": cluster.kuberay, "gcs_address": cluster.gcs_address,
            "claim": cluster.open_claim(), "nodes_alive": summary["nodes_alive"],
            "gpus": summary["gpu"], "open_incidents": firing.get(cluster.pk, 0),
            "is_default": cluster.name == settings.CLUSTER_NAME,
        })
    return rows


def cluster_payload(name: str | None = None, history: bool = False) -> dict[str, Any]:
    """The cluster as JSON-ready data: what GET /api/cluster/ and the socket carry
    (scoped to the cluster `name`, or unscoped: see cluster_state)."""
    data = dict(ClusterSerializer(cluster_state(name, history)).data)
    if not history:
        del data["history"]  # a push: the page keeps the history it has
    return jsonable(data)


def totals(nodes: list[Node]) -> dict[str, Any]:
    alive = [n for n in nodes if n.state == Node.ALIVE]
    return {
        "nodes_alive": len(alive),
        "nodes_dead": len(nodes) - len(alive),
        "cpu": _resource_total(alive, "CPU"),
        "gpu": _resource_total(alive, "GPU"),
        "memory_bytes": _sum_pair(alive, "mem_total_bytes", "mem_used_bytes"),
        "object_store_bytes": _sum_pair(
            alive, "object_store_total_bytes", "object_store_used_bytes"
        ),
    }


def _resource_total(nodes: list[Node], name: str) -> dict[str, float | None]:
    entries = [n.resources.get(name) for n in nodes if n.resources.get(name)]
    used = [e["used"] for e in entries]
    return {
        "total": sum(e["total"] for e in entries),
        "used": None if any(u is None for u in used) else sum(used),
    }


def _sum_pair(nodes: list[Node], total_field: str, used_field: str) -> dict[str, float | None]:
    totals_ = [getattr(n, total_field) for n in nodes]
    used = [getattr(n, used_field) for n in nodes]
    return {
        "total": sum(t for t in totals_ if t is not None),
        "used": None if any(u is None for u in used) else sum(used),
    }


def demands_payload() -> list[dict[str, Any]]:
    """Pending demand as the API and the demand page show it."""
    data = DemandSerializer(Demand.objects.select_related("cluster"), many=True,
                            context={"now": timezone.now()}).data
    return jsonable(data)


# raywatch's own driver: `make run`'s local cluster is kept up by a process that called
# ray.init() (collectors/localray.py), which Ray lists as a RUNNING job.
INTERNAL_ENTRYPOINT = re.compile(r"collectors[./]localray\b")
JOBS_SHOWN = 200


def jobs_payload(cluster: str | None = None) -> dict[str, Any]:
    """Ray's jobs, newest first, without raywatch's own (counted): the Jobs page (of the
    cluster named `cluster`, else every cluster's)."""
    rows, hidden = [], 0
    jobs = Job.objects.select_related("cluster")
    if cluster:
        jobs = jobs.filter(cluster__name=cluster)
    for job in jobs.order_by(F("start_time").desc(nulls_last=True), "-id")[:JOBS_SHOWN]:
        if INTERNAL_ENTRYPOINT.search(job.entrypoint or ""):
            hidden += 1
            continue
        rows.append({
            "cluster": job.cluster.name,
            "key": job.key, "id": job.submission_id or job.job_id, "type": job.type,
            "status": job.status, "entrypoint": job.entrypoint, "message": job.message,
            "submission_id": job.submission_id, "driver_pid": job.driver_pid,
            "driver_node_ip": job.driver_node_ip,
            "start_time": job.start_time.isoformat() if job.start_time else None,
            "end_time": job.end_time.isoformat() if job.end_time else None})
    return {"jobs": rows, "internal_hidden": hidden, "calls": calls_payload(cluster)}


CALLS_SHOWN = 200
# Running Tune trials by process: (cluster pk, node address, pid) -> (trial pk, trial id)
# for the given pids, registered by the trials app (this app imports none of it).
TrialsByProcess = Callable[[set[int]], dict[tuple[int, str, int], tuple[int, str]]]
_trials_by_process: list[TrialsByProcess] = []


def register_trials_by_process(fn: TrialsByProcess) -> None:
    if fn not in _trials_by_process:
        _trials_by_process.append(fn)


def running_trials_of(pids: set[int]) -> dict[tuple[int, str, int], tuple[int, str]]:
    """The RUNNING trials these pids run, as the trials app says: (cluster pk, node IP,
    pid) -> (trial pk, trial id)."""
    return {key: found for find in _trials_by_process for key, found in find(pids).items()}


def call_places(calls: list[RayCall]) -> tuple[dict[str, str], dict[str, str]]:
    """Where these calls run, as Ray last listed it: node id -> address, actor id -> its
    name (the Jobs page, and call_overdue's summary)."""
    nodes = dict(Node.objects.filter(node_id__in={c.node_id for c in calls if c.node_id})
                 .values_list("node_id", "node_ip"))
    actors = {a.actor_id: a.label for a in Actor.objects.filter(
        actor_id__in={c.actor_id for c in calls if c.actor_id})}
    return nodes, actors


def calls_payload(cluster: str | None = None, *, job: tuple[int, str] | None = None
                  ) -> list[dict[str, Any]]:
    """The Ray calls running now (of the cluster named `cluster`, or of `job`: (cluster
    pk, job id), else every cluster's): the CALLS_SHOWN that have run longest, the
    furthest past their usual duration first. What each step of a run is doing while its
    metrics wait for the step's end. `since` is when raywatch first saw it run."""
    calls = RayCall.objects.select_related("cluster").order_by("first_seen_at", "id")
    if cluster:
        calls = calls.filter(cluster__name=cluster)
    if job is not None:
        calls = calls.filter(cluster_id=job[0], job_id=job[1])
    calls = list(calls[:CALLS_SHOWN])
    timings = CallTiming.usuals((c.cluster_id, c.job_id, c.name) for c in calls)
    nodes, actors = call_places(calls)
    pids = {c.pid for c in calls if c.pid}
    trials = {key: {"id": pk, "trial_id": trial_id}
              for key, (pk, trial_id) in running_trials_of(pids).items()}
    now = timezone.now()
    rows = []
    for c in calls:
        usual = timings.get((c.cluster_id, c.job_id, c.name))
        ran = (now - c.first_seen_at).total_seconds()
        limit = None if usual is None else CallTiming.overdue_after(
            usual, settings.CALL_OVERDUE_FACTOR, settings.CALL_OVERDUE_MIN_S)
        rows.append({"cluster": c.cluster.name, "task_id": c.task_id, "name": c.name,
                     "kind": c.kind, "job_id": c.job_id, "actor_id": c.actor_id,
                     "actor": actors.get(c.actor_id, ""), "node_ip": nodes.get(c.node_id, ""),
                     "pid": c.pid, "since": c.first_seen_at.isoformat(),
                     "trial": trials.get((c.cluster_id, nodes.get(c.node_id, ""), c.pid)),
                     "usual_s": None if usual is None else round(usual, 1),
                     "overdue_after_s": None if limit is None else round(limit),
                     "_order": (ran / limit) if limit else -1.0})
    rows.sort(key=lambda r: -r["_order"])
    return [{k: v for k, v in r.items() if k != "_order"} for r in rows]


def narrow_jobs(_data: Any, cluster: str) -> dict[str, Any]:
    """The Jobs push for a page scoped to one cluster: its jobs (read again: a cluster's
    own newest JOBS_SHOWN, not what is left of every cluster's)."""
    return jobs_payload(cluster)


def call_stack_payload(row: CallStack | None) -> dict[str, Any] | None:
    """An overdue call's stacks as the incident page shows them (static/raywatch/stack.js,
    the shape of a trial's stack, with the verdict)."""
    if row is None:
        return None
    return {"id": row.pk, "state": row.state, "source": row.source, "text": row.text,
            "reason": row.reason, "pid": row.pid, "where": row.node_ip,
            "requested_at": row.requested_at.isoformat(),
            "requested_by": "the call_overdue detector",
            "taken_at": row.taken_at.isoformat() if row.taken_at else None,
            "samples": row.samples, "hung": row.hung, "frame": row.frame,
            "waits_on": row.waits_on, "verdict": row.verdict}


def call_stacks(cluster_id: int, task_ids: Iterable[str]) -> dict[str, CallStack]:
    """The stacks asked of these calls, by task id (one query)."""
    return {row.task_id: row for row in CallStack.objects.filter(
        cluster_id=cluster_id, task_id__in=list(task_ids))}
