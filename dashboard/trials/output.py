"""A trial's recent output: the tail of its Ray worker's stdout and stderr, through
Ray's log API (collectors.raylogs), so an operator sees what it printed last before
deciding to terminate it. Its actor (and a link to it in Ray's dashboard) is found as
actions find its process: a Ray actor that runs the trial, with the trial's pid on its
node (issue 43, M6: a forged pid in a result line no longer shows another job's output)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from collectors.http import SourceError
from collectors.raylogs import SUFFIXES, fetch_log_tail
from dashboard.cluster.endpoint import endpoint_of
from dashboard.cluster.models import Actor, Node
from dashboard.trials.models import Trial
from dashboard.trials.process import claimed_by_another, runs

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
    """The Ray actor that runs (or ran) the trial's current attempt, as actions find its
    process (dashboard/trials/process.py): an actor Ray lists with the trial's pid on the
    trial's node that runs the trial's trainable (or is its run's trainer), and no other
    unfinished trial names; the newest such actor, a dead one included (Ray keeps its
    logs). None otherwise: the pid and node a result line says pick among Ray's actors,
    never another job's output."""
    if trial.pid is None or not trial.node_ip:
        return None
    cluster_id = trial.experiment.cluster_id
    nodes = {n.node_id: n for n in Node.objects.filter(cluster_id=cluster_id,
                                                       node_ip=trial.node_ip)}
    actor = next((a for a in Actor.objects.filter(
        cluster_id=cluster_id, pid=trial.pid, node_id__in=list(nodes)).order_by(
        "-first_seen_at") if runs(a, trial)), None)
    if actor is None or claimed_by_another(trial, nodes[actor.node_id]):
        return None
    return actor


def trial_output(trial: Trial, lines: int) -> TrialOutput:
    if trial.pid is None:
        return TrialOutput(None, None, "the trial has not reported a process yet (no result "
                           "with a pid)", "", None, None)
    try:
        endpoint = endpoint_of(trial.experiment.cluster.name)
    except SourceError as exc:
        return TrialOutput(None, None, f"Ray's dashboard is not reachable: {exc.message}", "",
                           None, None)
    actor = trial_actor(trial)
    if actor is None:
        return TrialOutput(None, None, (
            f"Ray lists no {trial.trainable or 'trial'} actor with pid {trial.pid} on "
            f"{trial.node_ip or 'its node'} (the process its results name) that runs this "
            "trial alone: raywatch shows only the output of a process Ray runs for it"),
            "", None, None)
    texts: dict[str, str | None] = {}
    reasons = []
    for suffix, name in zip(SUFFIXES, ("stdout", "stderr"), strict=True):
        try:
            texts[suffix] = without_markers(fetch_log_tail(
                endpoint, suffix, lines, actor_id=actor.actor_id))
        except SourceError as exc:
            texts[suffix] = None
            reasons.append(f"{name}: {exc.message}")
    return TrialOutput(texts["out"], texts["err"], "; ".join(reasons) or None,
                       f"Ray's log API, actor {actor.actor_id}", actor.actor_id,
                       f"{endpoint.dashboard_url}/#/actors/{actor.actor_id}")


def without_markers(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.startswith(RAY_MARKERS))
