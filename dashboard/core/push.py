"""Live push: collectors publish to Channels groups only after the database commit.

The channel layer is at-most-once; pages therefore always re-read current state
on (re)connect, and nothing that must not be lost (alerts) relies on it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)

# The Channels groups, named once. Each group carries topics of the same name (and a few
# more: "points" to a trial's page, "deliveries" to the alerts group).
HEALTH_GROUP = "health"  # the status strip, on every page
ALERTS_GROUP = "alerts"  # the header's incident count, on every page; the alert pages
ACTIONS_GROUP = "actions"  # progress of terminate/stop/kill actions, on every page
CLUSTER_GROUP = "cluster"
DEMANDS_GROUP = "demands"
GPUS_GROUP = "gpus"
EXPERIMENTS_GROUP = "experiments"
JOBS_GROUP = "jobs"


def experiment_group(pk: int) -> str:
    return f"experiment-{pk}"


def trial_group(pk: int) -> str:
    return f"trial-{pk}"


# What every page shows live besides its own topics, by group: the current state a page
# gets on connect. The app that owns it registers it in its AppConfig.ready(), so core
# serves the header without importing the apps above it.
EVERY_PAGE: dict[str, Callable[[], Any]] = {}

# Topics whose rows belong to clusters: how a page scoped to one cluster (the header's
# switcher) narrows a pushed payload to it, given the cluster's name. Registered by the
# app that owns the topic, as EVERY_PAGE is.
SCOPED: dict[str, Callable[[Any, str], Any]] = {}


def rows_in_cluster(rows: Any, name: str) -> Any:
    """The narrower of a payload that is a list of rows carrying "cluster"."""
    return [r for r in rows if isinstance(r, dict) and r.get("cluster") == name]


def publish(group: str, topic: str, data: Any) -> None:
    """Send `data` to every socket in `group` once the current transaction commits.

    `data` may be a callable that builds the payload then, from committed state.
    """
    transaction.on_commit(
        lambda: send_now(group, topic, data() if callable(data) else data), robust=True
    )


def send_now(group: str, topic: str, data: Any) -> bool:
    layer = get_channel_layer()
    if layer is None:
        return False
    try:
        async_to_sync(layer.group_send)(group, {"type": "push", "topic": topic, "data": data})
    except Exception as exc:
        log.warning("live push to %s failed: %s", group, exc)
        return False
    return True
