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

from collectors.pystack import rank_place, straggler_words
from dashboard.agents.callstacks import sample_processes, verdict_of
from dashboard.agents.models import NodeProcess, NodeToken
from dashboard.agents.remote import node_with_agent
from dashboard.cluster.models import Cluster
from dashboard.trials.models import Trial
from dashboard.trials.probes import Activity, Stack
from dashboard.trials.process import TrialProcess
from dashboard.trials.ranks import Rank, run_ranks
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
    (dashboard/agents/callstacks.py); a multi-rank run's other ranks sampled beside it,
    in the same rounds (with_ranks)."""
    cluster = trial.experiment.cluster
    node = node_with_agent(bound.node_ip, bound.hostname, cluster.name)
    if node is None:
        return no_agent(trial)
    fact = NodeProcess.objects.filter(cluster=cluster, node=node, pid=bound.pid).first()
    if fact is None:
        return f"the agent of {node} does not list pid {bound.pid}: it ended, or is no Ray worker"
    world, ranks = run_ranks(trial)
    mine = next((r for r in ranks if r.pid == bound.pid), None)
    others = rank_targets(cluster, [r for r in ranks if r.pid != bound.pid]) if mine else []
    taken = sample_processes(cluster.name, [(node, bound.pid, fact.create_time)]
                             + [(a, r.pid, t) for r, a, t in others])
    dumps, problem = taken[0]
    if not dumps:
        return problem or "no stack came back"
    # The thread that does the work: a function trainable's, a Train rank's (runs.py).
    verdict = verdict_of(dumps, working_in(trial), cluster.pk, node, bound.pid,
                         bound.node_ip)
    stack = Stack(source=f"py-spy by the agent of {node}", text=dumps[-1], samples=len(dumps))
    if verdict is not None:
        stack = replace(stack, hung=verdict.hung, frame=verdict.frame[:500],
                        waits_on=verdict.waits_on[:100], verdict=verdict.words[:500])
    if mine is None or not others:
        return stack
    return with_ranks(trial, max(world, len(ranks)), (mine, node, dumps), stack,
                      [(r, a, d) for (r, a, _), (d, _) in zip(others, taken[1:], strict=True)])


RANK_TEXT = 16_000  # of each other rank's last dump kept with the stack's text


def rank_targets(cluster: Cluster, ranks: list[Rank]) -> list[tuple[Rank, str, float | None]]:
    """The ranks whose node's agent lists their process: (rank, agent, start time)."""
    found = []
    for rank in ranks:
        agent = node_with_agent(rank.node_ip, rank.hostname, cluster.name)
        fact = NodeProcess.objects.filter(cluster=cluster, node=agent, pid=rank.pid
                                          ).first() if agent else None
        if agent is not None and fact is not None:
            found.append((rank, agent, fact.create_time))
    return found


def with_ranks(trial: Trial, world: int, mine: tuple[Rank, str, list[str]], stack: Stack,
               others: list[tuple[Rank, str, list[str]]]) -> Stack:
    """A multi-rank run's stack with its other ranks' beside it (rank, agent, dumps): when
    some ranks wait in a collective and others do not, the verdict names the ranks that
    do not, where each stands, and whether the first of them is hung or busy (its own
    stacks, CPU, GPUs). Every rank sampled in a collective is said beside the run's own
    verdict; no rank in one leaves that verdict as it was."""
    function = working_in(trial)
    every = [mine, *others]
    places = {rank.rank: place for rank, _, dumps in every
              if (place := rank_place(dumps, function)) is not None}
    stragglers, words = straggler_words(places, world)
    text = stack.text + "".join(
        f"\n\n--- rank {rank.rank} (pid {rank.pid} on {rank.hostname or rank.node_ip}) ---\n"
        + dumps[-1][:RANK_TEXT] for rank, _, dumps in others if dumps)
    stack = replace(stack, text=text)
    if not words:
        return stack
    if not stragglers:  # every rank sampled waits: said beside the run's own verdict
        return replace(stack, verdict=f"{words}; {stack.verdict}"[:500])
    rank, agent, dumps = next(x for x in every if x[0].rank == stragglers[0])
    own = verdict_of(dumps, function, trial.experiment.cluster_id, agent, rank.pid,
                     rank.node_ip)
    if own is None:
        return replace(stack, verdict=words[:500])
    return replace(stack, hung=own.hung, frame=own.frame[:500], waits_on=own.waits_on[:100],
                   verdict=f"{words} (rank {rank.rank}: {own.words})"[:500])
