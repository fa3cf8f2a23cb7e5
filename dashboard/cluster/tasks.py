from __future__ import annotations

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from collectors.raydemand import parse_demands, parse_jobs, parse_placement_groups
from collectors.raystate import fetch_cluster, parse_actors, parse_nodes, parse_workers
from dashboard.cluster.endpoint import ray_endpoint
from dashboard.cluster.models import Actor
from dashboard.cluster.state import ingest_nodes
from dashboard.cluster.workload import (
    ingest_actors,
    ingest_demands,
    ingest_jobs,
    ingest_placement_groups,
    ingest_workers,
)
from dashboard.core.health import source_poll


@shared_task(name="dashboard.cluster.tasks.poll_ray_state")
def poll_ray_state() -> None:
    with source_poll("ray", settings.POLL_RAY_S) as poll:
        known = Actor.objects.filter(start_time__isnull=False).values_list("actor_id", flat=True)
        reply = fetch_cluster(ray_endpoint(), start_times_known=set(known))
        records = parse_nodes(reply)
        alive = [r for r in records if r.state == "ALIVE"]
        if alive and all(u.used is None for r in alive for u in r.resources.values()):
            poll.warnings.append("Ray has not reported resource usage yet")
        now = timezone.now()
        ingest_nodes(records, now)
        ingest_actors(parse_actors(reply), now)
        ingest_workers(parse_workers(reply), now)
        ingest_jobs(parse_jobs(reply), now)
        ingest_placement_groups(parse_placement_groups(reply), now)
        # After nodes and actors: a demand is judged against what they hold now.
        ingest_demands(parse_demands(reply), now)
