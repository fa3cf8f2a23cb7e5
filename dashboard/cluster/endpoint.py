"""Where Ray is: its dashboard's HTTP API and its GCS, from settings (or the local
cluster `make run` started). The one place that answers it, for the Ray poll, the
`serve` command and the actions alike."""

from __future__ import annotations

from django.conf import settings

from collectors import rayaddress
from collectors.raystate import RayEndpoint, read_token


def ray_endpoint() -> RayEndpoint:
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
