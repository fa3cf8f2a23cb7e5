"""How current what node agents sent is: how far the data stored of each reaches.

A trial whose results only agents send looks silent when its agents stop reporting (the
agent stopped, the network between, raywatch restarting before the agents reconnect).
The trial detectors judge such a trial's silence up to its agents' last report, for a
while: agents_silence() is registered with dashboard.trials.detect in AppConfig.ready()."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import Max
from django.db.models.functions import Coalesce

from dashboard.agents.models import AgentStream
from dashboard.trials.detect import SILENCE_HOLD_MAX_S
from dashboard.trials.models import Trial

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
    """How far what each (cluster pk, agent node) sent reaches: when the newest batch
    stored was polled (an agent sending a backlog after an outage is that far behind),
    or, from an agent that does not date its reports, when its last report was stored;
    the newest of its tokens' streams, revoked tokens left out. A node never heard from
    is absent."""
    wanted = set(cluster_nodes)
    if not wanted:
        return {}
    rows = (AgentStream.objects
            .filter(token__node__in={n for _, n in wanted}, token__revoked_at__isnull=True)
            .values("token__cluster_id", "token__node")
            .annotate(at=Max(Coalesce("data_at", "updated_at"))))
    return {(r["token__cluster_id"], r["token__node"]): r["at"] for r in rows
            if (r["token__cluster_id"], r["token__node"]) in wanted}


def agents_silence(trials: list[Trial], now: datetime) -> dict[int, dict[str, Any]]:
    """TrialSnapshot fields (data_until, agent_note) of the running trials whose results
    only agents send, all of them silent for more than AGENT_STALE_S; others absent."""
    fed = {t.pk: (t.experiment.cluster_id, nodes) for t in trials
           if (nodes := agent_nodes(t.experiment.paths, settings.CENTRAL_LOGS))}
    heard = last_reports({(c, n) for c, nodes in fed.values() for n in nodes})
    out: dict[int, dict[str, Any]] = {}
    for pk, (cluster, nodes) in fed.items():
        last = max((heard[(cluster, n)] for n in nodes if (cluster, n) in heard), default=None)
        silent = (now - last).total_seconds() if last else 0.0
        if silent <= settings.AGENT_STALE_S:
            continue
        if silent < SILENCE_HOLD_MAX_S:  # then the clock counts again, saying why
            out[pk] = {"data_until": last}
        else:
            out[pk] = {"agent_note": f"its node agent ({', '.join(sorted(nodes))}) has sent "
                                     f"nothing newer than {silent:.0f} s ago"}
    return out
