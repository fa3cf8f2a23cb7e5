"""The clusters raywatch watches besides the one RAY_ADDRESS points at: added by an admin
(`manage.py cluster add`, POST /api/clusters/)."""

from __future__ import annotations

import logging
import re
from datetime import datetime
from urllib.parse import urlparse

from django.conf import settings
from django.db import IntegrityError, transaction

from dashboard.cluster.models import Cluster
from dashboard.core.errors import ApiError

log = logging.getLogger(__name__)
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def add_cluster(name: str, address: str, token: str, now: datetime, by: str = "",
                gcs_address: str = "") -> Cluster:
    """A cluster an admin adds: its name (as pages, alerts and /metrics show it), its
    dashboard's URL (http://HEAD:8265), Ray's auth token if it wants one, and its GCS
    (HOST:PORT) if raywatch is to kill its actors (a trial on a node with no agent).
    Polled from the next Ray poll on."""
    name, address, token = name.strip(), address.strip().rstrip("/"), token.strip()
    gcs_address = gcs_address.strip()
    host, _, port = gcs_address.rpartition(":")
    if gcs_address and (not host or not port.isdigit()):
        raise ApiError(f"GCS address {gcs_address!r}: HOST:PORT, as RAY_ADDRESS takes it")
    if not NAME.match(name):
        raise ApiError(f"cluster name {name!r}: 1-100 letters, digits, '.', '_' or '-', "
                       "starting with a letter or digit")
    parsed = urlparse(address)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ApiError(f"address {address!r}: the cluster's dashboard URL, as "
                       "http://HEAD:8265 (Ray's Jobs CLI takes the same)")
    if name == settings.CLUSTER_NAME:
        raise ApiError(f"{name!r} is the cluster RAY_ADDRESS points at "
                       "(RAYWATCH_CLUSTER_NAME): give the other cluster a name of its own")
    try:
        with transaction.atomic():
            cluster = Cluster.objects.create(
                name=name, origin=Cluster.ADMIN, approval=Cluster.APPROVED, address=address,
                token=token, gcs_address=gcs_address, first_seen_at=now, state_since=now)
    except IntegrityError:
        raise ApiError(f"a cluster named {name!r} exists already") from None
    log.warning("cluster %s (%s) added by %s", name, address, by or "a command")
    return cluster
