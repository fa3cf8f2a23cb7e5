"""A stalled trial seen by its node's HTTP agent: busy or idle from the node's latest
process snapshot, and its Python stack through a `stack` command (py-spy on the node).
Registered with dashboard.trials.probes in AgentsConfig.ready(), ahead of Ray's reporter
(raywatch's own host is a node like any other: its agent answers for it): the trials app
never imports this one."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q

from dashboard.agents.callstacks import sample_process, verdict_of
from dashboard.agents.models import NodeProcess, NodeToken
from dashboard.agents.remote import node_with_agent
from dashboard.trials.models import Trial
from dashboard.trials.probes import Activity, Stack
from dashboard.trials.process import TrialProcess
from dashboard.trials.runs import working_in


def agent_activity(trial: Trial, now: datetime) -> Activity | str | None:
    if trial.pid is None:
        return None
    node = node_with_agent(trial.node_ip, trial.hostname, trial.experiment.cluster.name)
    if node is None:
        return no_agent(trial)
    fact = NodeProcess.objects.filter(cluster_id=trial.experiment.cluster_id, node=node,
                                      pid=trial.pid).exclude(state="Z").first()
    if fact is None:
        return f"the agent of {node} does not list pid {trial.pid}"
    if now - fact.at > timedelta(seconds=settings.AGENT_STALE_S):
        return f"the agent of {node} last saw pid {trial.pid} at {fact.at:%H:%M:%S} UTC"
    return Activity(source=f"the agent of {node}", cpu_percent=fact.cpu_percent,
                    state=fact.state, rss_bytes=fact.rss_bytes)


def no_agent(trial: Trial) -> str:
    where = trial.node_ip or trial.hostname or "the trial's node"
    nothing = Q(pk=None)
    named = Q(node=trial.hostname) if trial.hostname else nothing
    at_address = Q(node_ip=trial.node_ip) if trial.node_ip else nothing
    last = (NodeToken.objects.filter(named | at_address, revoked_at=None)
            .exclude(last_seen_at=None).order_by("-last_seen_at").first())
    if last is not None:
        return (f"the raywatch agent of {last.node} ({where}) last reported at "
                f"{last.last_seen_at:%H:%M:%S} UTC: stale")
    return f"node {where} has no raywatch agent"


def agent_stack(trial: Trial, bound: TrialProcess) -> Stack | str | None:
    """A few stacks of the trial's process, seconds apart, and the verdict they give
    (hung in a frame, or slow and busy there), as an overdue call's
    (dashboard/agents/callstacks.py)."""
    node = node_with_agent(bound.node_ip, bound.hostname, trial.experiment.cluster.name)
    if node is None:
        return no_agent(trial)
    fact = NodeProcess.objects.filter(cluster_id=trial.experiment.cluster_id, node=node,
                                      pid=bound.pid).first()
    if fact is None:
        return f"the agent of {node} does not list pid {bound.pid}: it ended, or is no Ray worker"
    dumps, problem = sample_process(trial.experiment.cluster_id, trial.experiment.cluster.name,
                                    node, bound.pid, fact.create_time)
    if not dumps:
        return problem or "no stack came back"
    # The thread that does the work: a function trainable's, a Train rank's (runs.py).
    verdict = verdict_of(dumps, working_in(trial), trial.experiment.cluster_id, node,
                         bound.pid, bound.node_ip)
    stack = Stack(source=f"py-spy by the agent of {node}", text=dumps[-1], samples=len(dumps))
    if verdict is None:
        return stack
    return replace(stack, hung=verdict.hung, frame=verdict.frame[:500],
                   waits_on=verdict.waits_on[:100], verdict=verdict.words[:500])
