"""Which Ray nodes a node agent covers, and what raywatch cannot see on those it does
not: the Cluster page's "Agent" column and /api/agents/coverage/.

A Ray node is matched to agents as the actions are (remote.node_with_agent): by node
name, else by address when one agent node has that address; the agents heard from
within AGENT_STALE_S first, so "agent connected" here is exactly when an action goes
through the agent. Pure functions over plain facts; coverage_data.py reads them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

CONNECTED, STALE, NONE = "connected", "stale", "none"
LABELS = {CONNECTED: "agent connected", STALE: "agent stale", NONE: "no agent"}

# What raywatch reads of a node only on that node, so what is lost there without an agent
# (unless noted below), in the order shown: (key, short text, what it means).
LOSSES: tuple[tuple[str, str, str], ...] = (
    ("gpus", "GPU data",
     "NVML is read on the node itself: no utilisation, memory or GPU processes from here"),
    ("trial_logs", "trial logs written here",
     "Tune writes a trial's live result.json on its driver's node: experiments driven "
     "from this node are not seen"),
    ("process_state", "process state",
     "the R/S/D/Z state and threads of a stalled trial's process (busy or idle still "
     "comes from Ray's reporter, by its CPU)"),
    ("stacks", "stacks",
     "a hung trial's Python stack (through Ray only when its head runs with "
     "RAY_DASHBOARD_ENABLE_PROFILING=1)"),
    ("signals", "signals",
     "terminate and kill through the node's agent (a trial's terminate goes through "
     "Ray's GCS instead)"),
)
# What this version's agent reads and does of those.
AGENT_READS = frozenset({"gpus", "trial_logs", "process_state", "stacks", "signals"})
RAYWATCH_HOST = "raywatch itself (its own host)"
SKEW_SHOWN_S = 10  # an agent's clock this far from raywatch's is said on the page


@dataclass(frozen=True)
class RayNode:
    node_id: str
    hostname: str
    node_ip: str
    state: str
    is_head: bool
    cluster: str = ""  # its cluster's name: an agent of another cluster is never its own


@dataclass(frozen=True)
class AgentFacts:
    """One node token that is not revoked, and what its agent last said."""

    node: str
    node_ip: str
    issued_at: datetime
    heard_at: datetime | None  # its last request of any kind
    reported_at: datetime | None  # its last report stored
    version: str
    spool_dropped: int
    gpus: int = 0
    processes: int = 0
    nvml_error: str | None = None
    cluster: str = ""  # the cluster its token is for
    problems: tuple[str, ...] = ()  # what the agent said it cannot do
    clock_skew_s: int | None = None  # its clock less raywatch's, at its last report
    can_command: bool = True  # raywatch has a command key for its token

    def fresh(self, now: datetime, stale_s: float) -> bool:
        return self.heard_at is not None and now - self.heard_at <= timedelta(seconds=stale_s)


@dataclass(frozen=True)
class Local:
    """raywatch's own host: its central log reader reads trial logs there (its processes,
    stacks and signals are its agent's, as on every node)."""

    host: str
    # The cluster RAY_ADDRESS points at: raywatch's own readers count for its nodes only.
    cluster: str = ""

    def serves(self, node: RayNode) -> bool:
        return not (self.cluster and node.cluster) or node.cluster == self.cluster


def match(node: RayNode, agents: Sequence[AgentFacts], now: datetime, stale_s: float
          ) -> tuple[list[AgentFacts], str | None]:
    """The agents of `node` and how they matched ("name" or "address")."""
    live = [a for a in agents if a.fresh(now, stale_s)]
    for pool in (live, agents):
        found, how = _match_in(node, pool)
        if found:
            return found, how
    return [], None


def _match_in(node: RayNode, agents: Sequence[AgentFacts]) -> tuple[list[AgentFacts], str | None]:
    # Two clusters may reuse a host name or an address: only the node's cluster's agents.
    agents = [a for a in agents if not (a.cluster and node.cluster) or a.cluster == node.cluster]
    named = [a for a in agents if node.hostname and a.node == node.hostname]
    if named:
        return named, "name"
    at = [a for a in agents if node.node_ip and a.node_ip == node.node_ip]
    return (at, "address") if len({a.node for a in at}) == 1 else ([], None)


def state_of(agents: Iterable[AgentFacts], now: datetime, stale_s: float) -> str:
    heard = [a for a in agents if a.heard_at is not None]
    if any(a.fresh(now, stale_s) for a in heard):
        return CONNECTED
    return STALE if heard else NONE


def node_coverage(node: RayNode, agents: Sequence[AgentFacts], local: Local, now: datetime,
                  stale_s: float) -> dict[str, Any]:
    found, how = match(node, agents, now, stale_s)
    state = state_of(found, now, stale_s)
    covered = _covered_here(node, local)
    read = AGENT_READS if state == CONNECTED else frozenset()
    lost = [{"what": key, "text": text, "detail": detail} for key, text, detail in LOSSES
            if key not in covered and key not in read]
    kept = [{"what": key, "text": text, "detail": detail, "by": covered[key]}
            for key, text, detail in LOSSES if key in covered]
    return {
        "node_id": node.node_id, "hostname": node.hostname, "node_ip": node.node_ip,
        "is_head": node.is_head, "ray_state": node.state,
        "state": state, "label": LABELS[state], "matched_by": how,
        "agent": agent_payload(_freshest(found), now, stale_s) if found else None,
        "raywatch_host": bool(local.host) and node.hostname == local.host
        and local.serves(node),
        "covered_here": kept,
        "lost": lost,
    }


def _covered_here(node: RayNode, local: Local) -> dict[str, str]:
    """What raywatch reads on this node without an HTTP agent, and how."""
    covered: dict[str, str] = {}
    if local.host and node.hostname == local.host and local.serves(node):
        # The central trial-log reader (RAYWATCH_LOG_DIRS, else ~/ray_results and the Ray
        # temp dir) reads raywatch's host. Its processes, stacks and signals are its
        # agent's alone (`serve` starts it): without it they are lost there too.
        covered["trial_logs"] = RAYWATCH_HOST
    return covered


def _freshest(agents: Sequence[AgentFacts]) -> AgentFacts:
    return max(agents, key=lambda a: (a.heard_at is not None, a.heard_at or a.issued_at))


def agent_payload(agent: AgentFacts, now: datetime, stale_s: float) -> dict[str, Any]:
    state = state_of([agent], now, stale_s)
    silent = None if state == CONNECTED or agent.heard_at is None else agent.heard_at
    return {
        "node": agent.node, "node_ip": agent.node_ip or None, "state": state,
        "label": LABELS[state], "version": agent.version or None,
        "issued_at": _iso(agent.issued_at), "last_heard_at": _iso(agent.heard_at),
        "last_report_at": _iso(agent.reported_at), "stale_since": _iso(silent),
        "spool_dropped": agent.spool_dropped, "gpus": agent.gpus,
        "processes": agent.processes, "nvml_error": agent.nvml_error,
        "problem": _problem(agent, state, now, stale_s),
        "problems": _problems(agent), "clock_skew_s": agent.clock_skew_s,
    }


def _problems(agent: AgentFacts) -> list[str]:
    """What the agent cannot do, as it said it, and what raywatch knows of it."""
    found = list(agent.problems)
    if not agent.can_command:
        found.append("raywatch sends this agent no commands (signals, stacks): its token "
                     "has no command key (issued before command keys). Rotate this token: "
                     f"Agents page, or manage.py agent_token {agent.node} --rotate")
    skew = agent.clock_skew_s
    if skew is not None and abs(skew) >= SKEW_SHOWN_S:
        expired = ("; past a command's lifetime (RAYWATCH_AGENT_COMMAND_TTL_S) ahead, "
                   "every command reaches it expired by its clock" if skew > 0 else "")
        found.append(f"its clock is {abs(skew)} s {'ahead of' if skew > 0 else 'behind'} "
                     f"raywatch's: what it sends is dated on raywatch's clock{expired} "
                     "(sync it: NTP)")
    return found


def _problem(agent: AgentFacts, state: str, now: datetime, stale_s: float) -> str | None:
    if agent.heard_at is None:
        return "token issued, never used: is the agent started with it?"
    if state == CONNECTED and (agent.reported_at is None or
                               now - agent.reported_at > timedelta(seconds=stale_s)):
        return "heard from, but no report stored lately: see the agent's log"
    return None


def unmatched(nodes: Sequence[RayNode], agents: Sequence[AgentFacts], now: datetime,
              stale_s: float) -> list[dict[str, Any]]:
    """Agents whose node is no Ray node raywatch knows (by name or address)."""
    used = {id(a) for node in nodes for a in match(node, agents, now, stale_s)[0]}
    return [agent_payload(a, now, stale_s) for a in agents if id(a) not in used]


def coverage(nodes: Sequence[RayNode], agents: Sequence[AgentFacts], local: Local,
             now: datetime, stale_s: float) -> dict[str, Any]:
    return {
        "server_time": _iso(now), "stale_after_s": stale_s,
        "nodes": [node_coverage(n, agents, local, now, stale_s) for n in nodes],
        "agent_only": unmatched(nodes, agents, now, stale_s),
    }


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at else None
