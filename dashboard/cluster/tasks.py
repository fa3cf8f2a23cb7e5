from __future__ import annotations

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from collectors.http import SourceError
from collectors.raydemand import parse_demands, parse_jobs, parse_placement_groups
from collectors.raystate import (
    ClusterReply,
    fetch_cluster,
    parse_actors,
    parse_nodes,
    parse_session,
    parse_workers,
)
from dashboard.cluster.endpoint import ray_endpoint
from dashboard.cluster.models import Actor, Cluster
from dashboard.cluster.sessions import held, note_answer, note_failure
from dashboard.cluster.state import cluster_payload, ingest_nodes
from dashboard.cluster.workload import (
    ingest_actors,
    ingest_demands,
    ingest_jobs,
    ingest_placement_groups,
    ingest_workers,
)
from dashboard.core.health import source_poll
from dashboard.core.push import CLUSTER_GROUP, publish


@shared_task(name="dashboard.cluster.tasks.poll_ray_state")
def poll_ray_state() -> None:
    with source_poll("ray", settings.POLL_RAY_S) as poll:
        known = Actor.objects.filter(start_time__isnull=False).values_list("actor_id", flat=True)
        endpoint = ray_endpoint()
        try:
            reply = fetch_cluster(endpoint, start_times_known=set(known))
        except SourceError as exc:
            with held(timezone.now()) as cluster:
                if cluster is not None and note_failure(cluster, exc.message, timezone.now()):
                    publish(CLUSTER_GROUP, "cluster", cluster_payload())
            raise
        with held(timezone.now()) as cluster:
            if cluster is not None:  # else another poll of this cluster is storing
                store(cluster, reply, endpoint.dashboard_url, poll.warnings)


def store(cluster: Cluster, reply: ClusterReply, dashboard_url: str,
          warnings: list[str]) -> None:
    session = parse_session(reply)
    if session is None:
        warnings.append("Ray's /api/version names no session: a restarted head cannot be "
                        "told from the one before")
    new_state = session is not None and note_answer(cluster, session, dashboard_url,
                                                    timezone.now())
    records = parse_nodes(reply)
    alive = [r for r in records if r.state == "ALIVE"]
    if alive and all(u.used is None for r in alive for u in r.resources.values()):
        warnings.append("Ray has not reported resource usage yet")
    # Ray cut a list at its row limit and raywatch could not get the rest: say how much.
    warnings += [cut.describe() for cut in reply.truncations] + list(reply.warnings)
    now = timezone.now()
    if not ingest_nodes(records, now) and new_state:  # else ingest_nodes pushed the page
        publish(CLUSTER_GROUP, "cluster", cluster_payload())
    ingest_actors(parse_actors(reply), now, complete=reply.complete("actors"))
    ingest_workers(parse_workers(reply), now, complete=reply.complete("workers"))
    ingest_jobs(parse_jobs(reply), now)
    ingest_placement_groups(parse_placement_groups(reply), now,
                            complete=reply.complete("placement groups"))
    # After nodes and actors: a demand is judged against what they hold now.
    ingest_demands(parse_demands(reply), now)
