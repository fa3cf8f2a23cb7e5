from __future__ import annotations

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from collectors.rayaddress import dashboard_url
from collectors.raystate import RayEndpoint, fetch_cluster, parse_actors, parse_nodes, read_token
from dashboard.cluster.state import ingest_actors, ingest_nodes
from dashboard.core.health import source_poll


def ray_endpoint() -> RayEndpoint:
    """Where the Ray dashboard is, from settings (or the local cluster `make run` started)."""
    return RayEndpoint(
        dashboard_url=dashboard_url(
            settings.RAY_ADDRESS, settings.RAY_API_SERVER_ADDRESS, settings.LOCAL_RAY_FILE
        ),
        token=read_token(settings.RAY_AUTH_TOKEN, settings.RAY_AUTH_TOKEN_PATH),
        timeout_s=settings.RAY_HTTP_TIMEOUT_S,
    )


@shared_task(name="dashboard.cluster.tasks.poll_ray_state")
def poll_ray_state() -> None:
    with source_poll("ray", settings.POLL_RAY_S) as poll:
        reply = fetch_cluster(ray_endpoint())
        records = parse_nodes(reply)
        actors = parse_actors(reply)
        alive = [r for r in records if r.state == "ALIVE"]
        if alive and all(u.used is None for r in alive for u in r.resources.values()):
            poll.warnings.append("Ray has not reported resource usage yet")
        now = timezone.now()
        ingest_nodes(records, now)
        ingest_actors(actors, now)
