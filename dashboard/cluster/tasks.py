from __future__ import annotations

import threading
from datetime import datetime

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from collectors.http import SourceError
from collectors.raydemand import parse_demands, parse_jobs, parse_placement_groups
from collectors.raystate import (
    ClusterReply,
    fetch_cluster,
    parse_actors,
    parse_calls,
    parse_nodes,
    parse_session,
    parse_workers,
)
from dashboard.cluster.calls import dropped_lately, ingest_calls
from dashboard.cluster.endpoint import ray_endpoint
from dashboard.cluster.failures import note_deaths, note_failures
from dashboard.cluster.models import Actor, Cluster
from dashboard.cluster.sessions import added_clusters, held, note_answer, note_failure
from dashboard.cluster.state import ingest_nodes
from dashboard.cluster.trainruns import ingest_train_runs, train_due
from dashboard.cluster.views_data import cluster_payload
from dashboard.cluster.workload import (
    ingest_actors,
    ingest_demands,
    ingest_jobs,
    ingest_placement_groups,
    ingest_workers,
)
from dashboard.core.background import run_soon
from dashboard.core.health import source_poll
from dashboard.core.push import CLUSTER_GROUP, publish


@shared_task(name="dashboard.cluster.tasks.poll_ray_state")
def poll_ray_state() -> None:
    """Poll every cluster: the others are sent off first, each on its own (a Celery task,
    or a thread of the embedded pool), so one slow or unreachable cluster never holds up
    another; then the one RAY_ADDRESS points at, here."""
    for cluster in added_clusters():
        if _start(cluster.pk):
            run_soon(poll_cluster, cluster.pk, expires=max(settings.POLL_RAY_S * 2, 5))
    poll_one(None)


@shared_task(name="dashboard.cluster.tasks.poll_cluster")
def poll_cluster(pk: int) -> None:
    """One poll of a cluster an admin added or that registered itself."""
    try:
        cluster = Cluster.objects.filter(pk=pk, approval=Cluster.APPROVED).first()
        if cluster is not None and cluster.address:
            poll_one(cluster)
    finally:
        _done(pk)


def poll_one(cluster: Cluster | None) -> None:
    """Poll a cluster (None: the one RAY_ADDRESS points at) and store what it answered.
    Its source health is the "ray" source's, scoped to its name for an added cluster."""
    name = cluster.name if cluster is not None else settings.CLUSTER_NAME
    scope = "" if cluster is None else cluster.name
    with source_poll("ray", settings.POLL_RAY_S, scope=scope) as poll:
        known = Actor.objects.filter(start_time__isnull=False, cluster__name=name
                                     ).values_list("actor_id", flat=True)
        endpoint = ray_endpoint(cluster)
        # Ray's answer counts from when it was asked: a poll that took seconds (a loaded
        # machine, thousands of actors) says nothing of what happened while it ran, such as
        # the error.txt a dying driver wrote as its head went down (trials/detect.awaits_ray).
        asked = timezone.now()
        try:
            reply = fetch_cluster(endpoint, start_times_known=set(known),
                                  train=train_due(name, asked))
        except SourceError as exc:
            with held(timezone.now(), name) as row:
                if row is not None and note_failure(row, exc.message, timezone.now()):
                    publish(CLUSTER_GROUP, "cluster", cluster_payload())
            raise
        with held(timezone.now(), name) as row:
            if row is not None:  # else another poll of this cluster is storing
                store(row, reply, endpoint.dashboard_url, poll.warnings, asked)
        if row is not None:  # outside the poll's transaction: a request to Ray
            note_failures(endpoint, row.pk, timezone.now())
            note_deaths(endpoint, row.pk, timezone.now())


# Added clusters whose poll runs in this process: a slow one is not sent again until its
# poll ends (Celery's `expires` does the same for a worker).
_RUNNING: set[int] = set()
_RUNNING_LOCK = threading.Lock()


def _start(pk: int) -> bool:
    if not settings.EMBEDDED:
        return True
    with _RUNNING_LOCK:
        if pk in _RUNNING:
            return False
        _RUNNING.add(pk)
        return True


def _done(pk: int) -> None:
    with _RUNNING_LOCK:
        _RUNNING.discard(pk)


def store(cluster: Cluster, reply: ClusterReply, dashboard_url: str,
          warnings: list[str], asked: datetime) -> None:
    session = parse_session(reply)
    previous = cluster.last_seen_at  # its answer before this one
    if session is None:
        warnings.append("Ray's /api/version names no session: a restarted head cannot be "
                        "told from the one before")
    new_state = session is not None and note_answer(cluster, session, dashboard_url, asked)
    records = parse_nodes(reply)
    alive = [r for r in records if r.state == "ALIVE"]
    if alive and all(u.used is None for r in alive for u in r.resources.values()):
        warnings.append("Ray has not reported resource usage yet")
    # Ray cut a list at its row limit and raywatch could not get the rest: say how much.
    warnings += [cut.describe() for cut in reply.truncations] + list(reply.warnings)
    now = timezone.now()
    if not ingest_nodes(records, now, cluster) and new_state:  # else ingest_nodes pushed the page
        publish(CLUSTER_GROUP, "cluster", cluster_payload())
    ingest_actors(parse_actors(reply), now, cluster, complete=reply.complete("actors"))
    ingest_workers(parse_workers(reply), now, cluster, complete=reply.complete("workers"))
    # After the actors: a live Train controller whose run is not listed says tracking is off.
    warnings += ingest_train_runs(reply.train, now, cluster)
    ingest_calls(parse_calls(reply), now, cluster, complete=reply.complete("running calls"),
                 new_session=new_state, previous_poll=previous)
    warnings += dropped_lately(cluster, reply.calls, now)
    ingest_jobs(parse_jobs(reply), now, cluster)
    ingest_placement_groups(parse_placement_groups(reply), now, cluster,
                            complete=reply.complete("placement groups"))
    # After nodes and actors: a demand is judged against what they hold now.
    ingest_demands(parse_demands(reply), now, cluster)


@shared_task(name="dashboard.cluster.tasks.forget_ended_clusters")
def forget_ended_clusters() -> list[str]:
    """Delete ended clusters kept past their retention (dashboard/cluster/retention.py)."""
    from dashboard.cluster.retention import forget_ended

    return forget_ended(timezone.now())
