"""Which Ray node an agent covers and what is lost where none runs (the Cluster page's
Agent column): matched as actions are, by name, else by a single agent's address;
raywatch's own host said correctly; and the API that serves it to viewers shows no token."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from django.contrib.auth.models import User
from django.utils import timezone

from dashboard.agents import tokens
from dashboard.agents.coverage import AGENT_READS, AgentFacts, Local, RayNode, coverage
from dashboard.agents.models import NodeToken
from dashboard.cluster.models import Node
from tests.conftest import token_client

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
STALE_S = 30.0
HEAD = RayNode("a" * 56, "head-1", "10.0.0.1", "ALIVE", True)
WORKER = RayNode("b" * 56, "gpu-7", "10.0.0.7", "ALIVE", False)
EVERYTHING = ["gpus", "trial_logs", "process_state", "stacks", "signals"]


def agent(node: str, node_ip: str = "", heard_s_ago: float | None = 1, **facts) -> AgentFacts:  # type: ignore[no-untyped-def]
    heard = None if heard_s_ago is None else NOW - timedelta(seconds=heard_s_ago)
    return AgentFacts(node=node, node_ip=node_ip, issued_at=NOW - timedelta(days=1),
                      heard_at=heard, reported_at=heard, version="0.1.0", spool_dropped=0,
                      **facts)


def cover(nodes: list[RayNode], agents: list[AgentFacts], local: Local | None = None
          ) -> dict:
    return coverage(nodes, agents, local or Local(host="raywatch-central"), NOW, STALE_S)


def by_node(result: dict) -> dict[str, dict]:
    return {c["hostname"]: c for c in result["nodes"]}


def test_a_node_with_a_reporting_agent_is_connected_and_loses_only_what_agents_lack(
        ) -> None:
    result = by_node(cover([HEAD, WORKER], [agent("gpu-7", gpus=8, processes=50)]))
    worker = result["gpu-7"]
    assert (worker["state"], worker["label"], worker["matched_by"]) == (
        "connected", "agent connected", "name")
    assert worker["agent"]["version"] == "0.1.0" and worker["agent"]["gpus"] == 8
    assert [i["what"] for i in worker["lost"]] == [k for k in EVERYTHING if k not in AGENT_READS]
    assert "gpus" in AGENT_READS and "signals" in AGENT_READS
    head = result["head-1"]
    assert (head["state"], head["label"], head["agent"]) == ("none", "no agent", None)
    assert [item["what"] for item in head["lost"]] == EVERYTHING


def test_an_agent_silent_past_the_stale_window_is_stale_since_its_last_word() -> None:
    [worker] = cover([WORKER], [agent("gpu-7", heard_s_ago=STALE_S + 1)])["nodes"]
    assert worker["state"] == "stale" and worker["label"] == "agent stale"
    assert worker["agent"]["stale_since"] == (NOW - timedelta(seconds=STALE_S + 1)).isoformat()
    assert [item["what"] for item in worker["lost"]] == EVERYTHING
    [fresh] = cover([WORKER], [agent("gpu-7", heard_s_ago=STALE_S - 1)])["nodes"]
    assert fresh["state"] == "connected" and fresh["agent"]["stale_since"] is None


def test_matched_by_address_only_when_one_agent_node_has_it() -> None:
    [by_ip] = cover([WORKER], [agent("node-seven", "10.0.0.7")])["nodes"]
    assert (by_ip["state"], by_ip["matched_by"], by_ip["agent"]["node"]) == (
        "connected", "address", "node-seven")
    # Two agent nodes claim the address: neither is this node's (as actions decide).
    [shared] = cover([WORKER], [agent("x", "10.0.0.7"), agent("y", "10.0.0.7")])["nodes"]
    assert shared["state"] == "none"
    # A live agent wins over a stale one, as an action would use the live one.
    [live] = cover([WORKER], [agent("x", "10.0.0.7", heard_s_ago=600),
                              agent("y", "10.0.0.7")])["nodes"]
    assert (live["state"], live["agent"]["node"]) == ("connected", "y")


def test_raywatch_own_host_keeps_only_its_trial_logs_without_its_agent() -> None:
    # raywatch's central log reader still reads its own host's trial logs; its processes,
    # stacks and signals are that host's agent's, as on every node: lost without it.
    [head] = cover([HEAD], [], Local(host="head-1"))["nodes"]
    assert head["state"] == "none" and head["raywatch_host"] is True
    assert [i["what"] for i in head["lost"]] == ["gpus", "process_state", "stacks", "signals"]
    assert [i["what"] for i in head["covered_here"]] == ["trial_logs"]
    assert {i["by"] for i in head["covered_here"]} == {"raywatch itself (its own host)"}
    # Another node keeps nothing through raywatch's host: all of it needs its own agent.
    [worker] = cover([WORKER], [], Local(host="head-1"))["nodes"]
    assert [i["what"] for i in worker["lost"]] == ["gpus", "trial_logs", "process_state",
                                                  "stacks", "signals"]
    assert worker["covered_here"] == [] and worker["raywatch_host"] is False
    # With the agent `serve` starts for its own host, the head node loses nothing.
    [head] = cover([HEAD], [agent("head-1")], Local(host="head-1"))["nodes"]
    assert (head["state"], head["lost"]) == ("connected", [])


def test_agents_whose_node_is_no_ray_node_are_listed_with_their_state() -> None:
    result = cover([HEAD], [agent("head-1"), agent("gpu-99", "10.0.9.9"),
                            agent("gpu-98", heard_s_ago=None)])
    only = {a["node"]: a for a in result["agent_only"]}
    assert set(only) == {"gpu-99", "gpu-98"}
    assert only["gpu-99"]["state"] == "connected"
    assert only["gpu-98"]["state"] == "none" and "never used" in only["gpu-98"]["problem"]


def test_the_api_serves_viewers_and_shows_no_token(viewer: User) -> None:
    now = timezone.now()
    Node.objects.create(node_id="c" * 56, node_ip="10.0.0.7", hostname="gpu-7", state="ALIVE",
                        last_seen_at=now)
    row, token = tokens.issue("gpu-7", None, now)
    NodeToken.objects.filter(pk=row.pk).update(last_seen_at=now, agent_version="0.1.0",
                                               spool_dropped=3)
    tokens.issue("gpu-quiet", None, now)  # issued, its agent not started yet
    revoked, _ = tokens.issue("gpu-gone", None, now)
    tokens.revoke(revoked, None, now)

    reply = token_client(viewer).get("/api/agents/coverage/")
    assert reply.status_code == 200
    body = reply.json()
    [node] = body["nodes"]
    assert (node["state"], node["agent"]["version"], node["agent"]["spool_dropped"]) == (
        "connected", "0.1.0", 3)
    assert [a["node"] for a in body["agent_only"]] == ["gpu-quiet"]  # revoked: not shown
    text = json.dumps(body)
    assert token not in text and row.token_hash not in text and row.prefix not in text
