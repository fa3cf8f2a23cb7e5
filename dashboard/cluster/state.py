"""Ingest Ray node records and describe the cluster, for the page, the API and pushes."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from rest_framework.utils.encoders import JSONEncoder

from collectors.records import NodeRecord
from dashboard.cluster.models import Cluster, Node, settings_cluster_pk
from dashboard.cluster.serializers import ClusterSerializer
from dashboard.cluster.sessions import current_cluster
from dashboard.core.models import SourceHealth
from dashboard.core.push import CLUSTER_GROUP, publish
from dashboard.incidents.models import Incident
from dashboard.trials.models import Trial

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
    how long it ran (first seen to its last result)."""
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
    hours: dict[tuple[int, str], list[float]] = {}
    for exp_id, exp_name, gpus, first, last, updated in Trial.objects.filter(
            experiment__cluster=cluster, gpus__gt=0).values_list(
            "experiment_id", "experiment__name", "gpus", "first_seen_at", "last_result_at",
            "updated_at"):
        ran = max(0.0, ((last or updated) - first).total_seconds())
        row = hours.setdefault((exp_id, exp_name), [0.0, 0])
        row[0] += gpus * ran / 3600
        row[1] += 1
    gpu_hours = sorted(({"experiment_id": k[0], "experiment": k[1], "gpu_hours": round(v[0], 2),
                         "trials": int(v[1])} for k, v in hours.items()),
                       key=lambda r: -r["gpu_hours"])
    return {"nodes": steps[-NODE_EVENTS_SHOWN:], "gpu_hours": gpu_hours[:GPU_HOURS_SHOWN]}


def overview() -> list[dict[str, Any]]:
    """Every cluster with what an operator checks first: does it answer, how big is it,
    are its GPUs busy, what is on fire ("all clusters")."""
    nodes: dict[int, list[Node]] = {}
    for node in Node.objects.all():
        nodes.setdefault(node.cluster_id, []).append(node)
    firing = Counter(Incident.objects.filter(state=Incident.FIRING)
                     .values_list("cluster_id", flat=True))
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
    # Round-trip through DRF's encoder: datetimes to ISO strings, as the API does.
    return json.loads(json.dumps(data, cls=JSONEncoder))


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
    from django.utils import timezone

    from dashboard.cluster.models import Demand
    from dashboard.cluster.serializers import DemandSerializer

    data = DemandSerializer(Demand.objects.select_related("cluster"), many=True,
                            context={"now": timezone.now()}).data
    return json.loads(json.dumps(data, cls=JSONEncoder))
