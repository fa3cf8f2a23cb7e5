"""How current what node agents sent is: when raywatch last stored a report of each.

A trial whose results only agents send looks silent when its agents stop reporting (the
agent stopped, the network between, raywatch restarting before the agents reconnect).
The trial detectors judge such a trial's silence up to its agents' last report, for a
while (dashboard/trials/detect.py)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db.models import Max

from dashboard.agents.models import AgentStream

AGENT_PLACE_SEP = ":/"  # an agent's experiment_dir: "<node>:/<its path on the node>"


def agent_nodes(paths: Iterable[str], central: bool) -> frozenset[str] | None:
    """The agent nodes an experiment's directories were reported by; None when raywatch
    reads one of them itself (`central`: RAYWATCH_CENTRAL_LOGS) or none is an agent's."""
    nodes = set()
    for path in paths:
        node, sep, _ = str(path).partition(AGENT_PLACE_SEP)
        if sep and node and not node.startswith("/"):
            nodes.add(node)
        elif central:
            return None
    return frozenset(nodes) or None


def last_reports(cluster_nodes: Iterable[tuple[int, str]]) -> dict[tuple[int, str], datetime]:
    """When a report of each (cluster pk, agent node) was last stored (the newest of its
    tokens' streams, revoked tokens left out); a node never heard from is absent."""
    wanted = set(cluster_nodes)
    if not wanted:
        return {}
    rows = (AgentStream.objects
            .filter(token__node__in={n for _, n in wanted}, token__revoked_at__isnull=True)
            .values("token__cluster_id", "token__node").annotate(at=Max("updated_at")))
    return {(r["token__cluster_id"], r["token__node"]): r["at"] for r in rows
            if (r["token__cluster_id"], r["token__node"]) in wanted}
