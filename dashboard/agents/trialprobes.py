"""A stalled trial seen by its node's HTTP agent: busy or idle from the node's latest
process snapshot, and its Python stack through a `stack` command (py-spy on the node).
Registered with dashboard.trials.probes in AgentsConfig.ready(), ahead of Ray's reporter
(raywatch's own host is a node like any other: its agent answers for it): the trials app
never imports this one."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from dashboard.agents.commands import create_stack
from dashboard.agents.models import AgentCommand, NodeProcess, NodeToken
from dashboard.agents.remote import node_with_agent
from dashboard.trials.models import Trial
from dashboard.trials.probes import Activity, Stack
from dashboard.trials.process import TrialProcess

POLL_S = 0.2
ANSWER_GRACE_S = 10.0  # after py-spy's own timeout, for the answer to come back


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
    node = node_with_agent(bound.node_ip, bound.hostname, trial.experiment.cluster.name)
    if node is None:
        return no_agent(trial)
    fact = NodeProcess.objects.filter(cluster_id=trial.experiment.cluster_id, node=node,
                                      pid=bound.pid).first()
    if fact is None:
        return f"the agent of {node} does not list pid {bound.pid}: it ended, or is no Ray worker"
    command = wait_for_answer(create_stack(node, bound.pid, fact.create_time, timezone.now(),
                                           trial.experiment.cluster.name))
    if isinstance(command, str):
        return command
    if command.outcome == "taken":
        return Stack(source=f"py-spy by the agent of {node}", text=command.result)
    return f"the agent of {node} {command.outcome or 'answered'}: {command.result}"


def wait_for_answer(command: AgentCommand) -> AgentCommand | str:
    """The command once answered, or why no answer came (in a worker, never a poll)."""
    answer_by = command.expires_at
    while True:
        command.refresh_from_db()
        if command.done_at is not None:
            return command
        if command.fetched_at is not None:
            answer_by = max(command.expires_at, command.fetched_at + timedelta(
                seconds=settings.STACK_TIMEOUT_S + ANSWER_GRACE_S))
        if timezone.now() >= answer_by:
            break
        time.sleep(POLL_S)
    if command.fetched_at is None:
        return (f"the agent of {command.node} did not fetch command #{command.pk} before it "
                "expired: is it running?")
    return f"the agent of {command.node} took command #{command.pk} but did not answer"
