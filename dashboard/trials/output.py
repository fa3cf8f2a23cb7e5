"""A trial's recent output: the tail of its Ray worker's stdout and stderr, through
Ray's log API (collectors.raylogs), so an operator sees what it printed last before
deciding to terminate it. Its actor (and a link to it in Ray's dashboard) is found as
detection finds its process: a Ray actor with the trial's pid on the trial's node."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from collectors.http import SourceError
from collectors.raylogs import SUFFIXES, fetch_log_tail
from dashboard.cluster.endpoint import endpoint_of
from dashboard.cluster.models import Actor, Node
from dashboard.trials.models import Trial

# Ray's log monitor marks whose lines follow; they are not the trial's output.
RAY_MARKERS = (":job_id:", ":actor_name:", ":task_name:")


@dataclass(frozen=True)
class TrialOutput:
    stdout: str | None
    stderr: str | None
    reason: str | None  # why there is no output (or only part of it)
    source: str  # where it came from, in words
    actor_id: str | None
    actor_url: str | None  # the actor in Ray's dashboard

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def trial_actor(trial: Trial) -> Actor | None:
    """The Ray actor that runs (or ran) the trial's current attempt: its pid on its node;
    the newest such actor, a dead one included (Ray keeps its logs)."""
    if trial.pid is None or not trial.node_ip:
        return None
    cluster_id = trial.experiment.cluster_id
    nodes = Node.objects.filter(cluster_id=cluster_id, node_ip=trial.node_ip
                                ).values_list("node_id", flat=True)
    return (Actor.objects.filter(cluster_id=cluster_id, pid=trial.pid, node_id__in=list(nodes))
            .order_by("-first_seen_at").first())


def trial_output(trial: Trial, lines: int) -> TrialOutput:
    actor = trial_actor(trial)
    actor_id = actor.actor_id if actor else None
    if trial.pid is None:
        return TrialOutput(None, None, "the trial has not reported a process yet (no result "
                           "with a pid)", "", actor_id, None)
    try:
        endpoint = endpoint_of(trial.experiment.cluster.name)
    except SourceError as exc:
        return TrialOutput(None, None, f"Ray's dashboard is not reachable: {exc.message}", "",
                           actor_id, None)
    node_id = actor.node_id if actor else _node_at(trial.node_ip, trial.experiment.cluster_id)
    if not actor_id and not node_id:
        return TrialOutput(None, None, f"Ray lists no actor with pid {trial.pid} and no node "
                           f"at {trial.node_ip or 'its address'}", "", None, None)
    texts: dict[str, str | None] = {}
    reasons = []
    for suffix, name in zip(SUFFIXES, ("stdout", "stderr"), strict=True):
        try:
            texts[suffix] = without_markers(fetch_log_tail(
                endpoint, suffix, lines, actor_id=actor_id or "", pid=trial.pid, node_id=node_id))
        except SourceError as exc:
            texts[suffix] = None
            reasons.append(f"{name}: {exc.message}")
    source = (f"Ray's log API, actor {actor_id}" if actor_id else
              f"Ray's log API, pid {trial.pid} on node {node_id}")
    url = f"{endpoint.dashboard_url}/#/actors/{actor_id}" if actor_id else None
    return TrialOutput(texts["out"], texts["err"], "; ".join(reasons) or None, source,
                       actor_id, url)


def _node_at(node_ip: str, cluster_id: int) -> str:
    if not node_ip:
        return ""
    return (Node.objects.filter(cluster_id=cluster_id, node_ip=node_ip)
            .order_by("state", "-started_at")  # ALIVE first
            .values_list("node_id", flat=True).first() or "")


def without_markers(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.startswith(RAY_MARKERS))
