"""What the other apps ask the agents app of a node's processes: which node's HTTP agent
answers for an address (the actions executor, the trial probes), and when that agent
saw a process start."""

from __future__ import annotations

from django.db.models import QuerySet

from dashboard.agents.models import NodeProcess
from dashboard.agents.tokens import live_tokens


def node_with_agent(node_ip: str, node: str = "", cluster: str = "") -> str | None:
    """The node (by name, else by address when one node there has one) whose HTTP agent
    reported lately, or None: then the action goes another way. `cluster`: of that cluster
    only (two clusters may reuse an address)."""
    tokens = live_tokens()
    if cluster:
        tokens = tokens.filter(cluster__name=cluster)
    if node and tokens.filter(node=node).exists():
        return node
    named = set(tokens.filter(node_ip=node_ip).values_list("node", flat=True)) if node_ip else ()
    return next(iter(named)) if len(named) == 1 else None


def reported_start(node: str, pid: int, cluster: str = "") -> float | None:
    """When `pid` started, as the node's agent last reported it (None: not one it watches,
    or gone): what an action on it is pinned to when the operator confirms. `cluster`: the
    node of that cluster (a GPU's process names none: its node's, whichever cluster)."""
    fact = of_node(node, cluster).filter(pid=pid).first()
    return fact.create_time if fact else None


def of_node(node: str, cluster: str = "") -> QuerySet[NodeProcess]:
    """The processes the node's agent last listed; of that cluster's node when named."""
    rows = NodeProcess.objects.filter(node=node)
    return rows.filter(cluster__name=cluster) if cluster else rows
