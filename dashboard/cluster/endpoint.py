"""Where Ray is: its dashboard's HTTP API and its GCS, from settings (or the local
cluster `make run` started). The one place that answers it, for the Ray poll, the
`serve` command and the actions alike."""

from __future__ import annotations

from django.conf import settings

from collectors import rayaddress
from collectors.rayaddress import read_token
from collectors.raykill import GcsActor
from collectors.raystate import RayEndpoint
from dashboard.cluster.models import Cluster


def ray_endpoint(cluster: Cluster | None = None) -> RayEndpoint:
    """Where to reach `cluster` (default: the one RAY_ADDRESS points at). A cluster an
    admin added or that registered itself has its dashboard URL and token stored."""
    if cluster is not None and cluster.address:
        return RayEndpoint(dashboard_url=cluster.address.rstrip("/"),
                           token=cluster.token or None,
                           timeout_s=settings.RAY_HTTP_TIMEOUT_S)
    return RayEndpoint(
        dashboard_url=rayaddress.dashboard_url(
            settings.RAY_ADDRESS, settings.RAY_API_SERVER_ADDRESS, settings.LOCAL_RAY_FILE
        ),
        token=read_token(settings.RAY_AUTH_TOKEN, settings.RAY_AUTH_TOKEN_PATH),
        timeout_s=settings.RAY_HTTP_TIMEOUT_S,
    )


def gcs_address() -> str | None:
    """HOST:PORT of the GCS (for the calls only it answers: killing an actor), or None
    when raywatch was given only the dashboard's URL."""
    return rayaddress.gcs_address(settings.RAY_ADDRESS, settings.RAY_GCS_ADDRESS,
                                  settings.LOCAL_RAY_FILE)


def named(name: str | None) -> Cluster | None:
    """The cluster of this name, None for the one RAY_ADDRESS points at (or no name)."""
    if not name or name == settings.CLUSTER_NAME:
        return None
    return Cluster.objects.filter(name=name).first()


def endpoint_of(name: str | None) -> RayEndpoint:
    """Where the named cluster's dashboard is (an action's target names its cluster)."""
    return ray_endpoint(named(name))


def gcs_of(name: str | None) -> str | None:
    """HOST:PORT of the named cluster's GCS: RAY_ADDRESS's for the one it points at, the
    one an admin gave (`cluster add --gcs`, `cluster approve --gcs`) or its head agent
    announced when it registered the cluster for another (a later announcement only
    claims one: registry.announce)."""
    return _gcs(name, named(name))


def actor_of(name: str | None, actor_id: str | None) -> GcsActor | None:
    """The named cluster's actor as its GCS answers for it, None when the GCS's address
    or the actor is not known (an action then has only the node's agent)."""
    cluster = named(name)
    address = _gcs(name, cluster)
    if not (address and actor_id):
        return None
    return GcsActor(address, ray_endpoint(cluster).token, actor_id)


def _gcs(name: str | None, cluster: Cluster | None) -> str | None:
    if cluster is None:
        return gcs_address() if not name or name == settings.CLUSTER_NAME else None
    return cluster.gcs_address or None
