"""The facts coverage.py works on, read from the database: Ray's nodes, the node tokens
neither revoked nor expired with what their agents last sent, and raywatch's own host."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import Count, Max

from collectors.hostinfo import host_name
from dashboard.agents import sealing
from dashboard.agents.coverage import AgentFacts, Local, RayNode, coverage
from dashboard.agents.models import NodeProcess
from dashboard.agents.tokens import usable
from dashboard.cluster.models import Node
from dashboard.core.health import effective_state
from dashboard.core.models import SourceHealth
from dashboard.gpus.models import Gpu


def coverage_payload(now: datetime) -> dict[str, Any]:
    stale_s = float(settings.AGENT_STALE_S)
    payload = coverage(ray_nodes(), agent_facts(now), local_facts(), now, stale_s)
    # The page refreshes this often: a silent agent shows stale within the window.
    payload["refresh_s"] = max(1.0, min(5.0, stale_s / 4))
    return payload


def ray_nodes() -> list[RayNode]:
    return [RayNode(n.node_id, n.hostname, n.node_ip, n.state, n.is_head, n.cluster.name)
            for n in Node.objects.select_related("cluster").only(
                "node_id", "hostname", "node_ip", "state", "is_head", "cluster__name")]


def agent_facts(now: datetime) -> list[AgentFacts]:
    tokens = list(usable(now).select_related("cluster")
                  .annotate(reported_at=Max("streams__updated_at")).order_by("node", "pk"))
    nodes = [t.node for t in tokens]
    gpus = _count_by_node(Gpu.objects.filter(node__in=nodes))
    processes = _count_by_node(NodeProcess.objects.filter(node__in=nodes))
    nvml = {row.scope: effective_state(row, now) for row in
            SourceHealth.objects.filter(source="nvml", scope__in=nodes)}
    return [AgentFacts(
        node=t.node, node_ip=t.node_ip, issued_at=t.created_at,
        heard_at=_latest(t.last_seen_at, t.reported_at), reported_at=t.reported_at,
        version=t.agent_version, spool_dropped=t.spool_dropped, gpus=gpus.get(t.node, 0),
        processes=processes.get(t.node, 0),
        nvml_error=_nvml_error(nvml.get(t.node)), cluster=t.cluster.name,
        problems=tuple(p for p in t.agent_problems if isinstance(p, str)),
        clock_skew_s=t.clock_skew_s,
        can_command=sealing.unseal(t.command_key_sealed) is not None) for t in tokens]


def local_facts() -> Local:
    return Local(host=host_name(), cluster=settings.CLUSTER_NAME)


def _count_by_node(rows: Any) -> dict[str, int]:
    return dict(rows.values("node").annotate(n=Count("pk")).values_list("node", "n"))


def _latest(*times: datetime | None) -> datetime | None:
    known = [t for t in times if t is not None]
    return max(known) if known else None


def _nvml_error(health: tuple[str, str] | None) -> str | None:
    if health is None or health[0] == SourceHealth.HEALTHY:
        return None
    return health[1] or health[0]
