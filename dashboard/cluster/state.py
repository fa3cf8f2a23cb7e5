"""Ingest Ray node records and push the Cluster page (its data: views_data.py); and
whether the stored view of Ray is fresh enough to conclude that something is gone."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction

from collectors.records import NodeRecord
from dashboard.cluster.models import Cluster, Node, settings_cluster_pk
from dashboard.cluster.views_data import cluster_payload
from dashboard.core.models import SourceHealth
from dashboard.core.push import CLUSTER_GROUP, publish

_FIELDS = (
    "node_ip", "hostname", "is_head", "state", "state_message", "started_at", "ended_at",
    "resources", "labels", "cpu_percent", "mem_total_bytes", "mem_used_bytes",
    "object_store_total_bytes", "object_store_used_bytes", "object_store_spilled_bytes",
    "object_store_restored_bytes",
)


def _values(record: NodeRecord) -> dict[str, Any]:
    return {
        "node_ip": record.node_ip,
        "hostname": record.hostname or "",
        "is_head": record.is_head,
        "state": record.state,
        "state_message": record.state_message or "",
        "started_at": record.started_at,
        "ended_at": record.ended_at,
        "resources": {name: asdict(use) for name, use in record.resources.items()},
        "labels": record.labels,
        "cpu_percent": record.cpu_percent,
        "mem_total_bytes": record.mem_total_bytes,
        "mem_used_bytes": record.mem_used_bytes,
        "object_store_total_bytes": record.object_store_total_bytes,
        "object_store_used_bytes": record.object_store_used_bytes,
        "object_store_spilled_bytes": record.object_store_spilled_bytes,
        "object_store_restored_bytes": record.object_store_restored_bytes,
    }


def ingest_nodes(records: Iterable[NodeRecord], now: datetime,
                 cluster: Cluster | None = None) -> bool:
    """Store the nodes Ray listed of `cluster` (default: the one RAY_ADDRESS points at);
    returns whether anything an operator sees changed.

    A node Ray no longer lists (it forgets dead nodes after a while) is kept,
    marked DEAD, so that a vanished node never silently disappears from the page.
    """
    incoming = {r.node_id: _values(r) for r in records}
    changed: list[Node] = []
    created = False
    cluster_pk = cluster.pk if cluster is not None else settings_cluster_pk()
    with transaction.atomic():
        existing = {n.node_id: n
                    for n in Node.objects.select_for_update().filter(cluster_id=cluster_pk)}
        for node_id, values in incoming.items():
            node = existing.get(node_id)
            if node is None:
                Node.objects.create(node_id=node_id, cluster_id=cluster_pk, last_seen_at=now,
                                    **values)
                created = True
                continue
            _keep_last_known_usage(node, values)
            _note_spill(node, values["object_store_spilled_bytes"], now)
            if any(getattr(node, f) != v for f, v in values.items()):
                for field, value in values.items():
                    setattr(node, field, value)
                changed.append(node)
        for node_id, node in existing.items():
            if node_id not in incoming and node.state != Node.DEAD:
                node.state = Node.DEAD
                node.state_message = "no longer listed by Ray"
                node.ended_at = node.ended_at or now
                changed.append(node)
        # Only what changed is rewritten; "still listed" is one cheap UPDATE.
        Node.objects.filter(cluster_id=cluster_pk, node_id__in=list(incoming)
                            ).update(last_seen_at=now)
        for node in changed:
            node.updated_at = now  # bulk_update does not apply auto_now
        Node.objects.bulk_update(changed, [*_FIELDS, "updated_at", "spilled_changed_at"])
        if changed or created:
            publish(CLUSTER_GROUP, "cluster", cluster_payload())
    return bool(changed or created)


def _note_spill(node: Node, spilled: int | None, now: datetime) -> None:
    """Remember when the spilled total last grew: spilling now, not long ago."""
    if spilled is not None and node.object_store_spilled_bytes is not None \
            and spilled > node.object_store_spilled_bytes:
        node.spilled_changed_at = now


def _keep_last_known_usage(node: Node, values: dict[str, Any]) -> None:
    """Ray's usage report skips a node now and then; keep the last figure meanwhile."""
    if values["state"] != Node.ALIVE or node.state != Node.ALIVE:
        return
    for name, use in values["resources"].items():
        previous = node.resources.get(name)
        if use["used"] is None and previous and previous.get("used") is not None:
            use["used"] = previous["used"]


def ray_is_current(now: datetime) -> bool:
    """Whether the stored view of Ray is fresh enough to conclude that something is gone."""
    health = SourceHealth.objects.filter(source="ray", scope="").first()
    if not health or not health.last_success_at:
        return False
    return now - health.last_success_at <= timedelta(seconds=max(3 * health.interval_s, 10))


def current_clusters(now: datetime) -> set[int]:
    """The clusters (pks) whose stored view of Ray is fresh enough to conclude that
    something is gone: the "ray" source's health, scoped "" for the one RAY_ADDRESS points
    at and by name for the others."""
    names = {("" if name == settings.CLUSTER_NAME else name): pk
             for pk, name in Cluster.objects.values_list("pk", "name")}
    fresh = set()
    for health in SourceHealth.objects.filter(source="ray", scope__in=list(names),
                                              last_success_at__isnull=False):
        window = timedelta(seconds=max(3 * health.interval_s, 10))
        if now - health.last_success_at <= window:
            fresh.add(names[health.scope])
    return fresh
