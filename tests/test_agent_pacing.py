"""A web process that hears from more agents than it wants reports a second asks each to
gather several polls a report (`send_s` in the report's answer); agents follow that
unless their own RAYWATCH_AGENT_SEND_S says otherwise, and nothing is lost either way
(dashboard/agents/pacing.py, docs/agent-protocol.md)."""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from dashboard.agents import tokens
from dashboard.gpus.models import GpuSample
from tests.agents import agent_env, gpu_record, report, running_agent
from tests.conftest import LiveServer, wait_for
from tests.patience import patient

pytestmark = pytest.mark.django_db(transaction=True)


def issue(node: str) -> str:
    return tokens.issue(node, None, timezone.now(), "")[1]


def test_many_agents_are_asked_to_gather_and_gone_ones_stop_counting(
        live_server_asgi: LiveServer, settings: Any) -> None:
    settings.AGENT_REPORTS_PER_S = 2  # 10 agents: 5 s a report each
    # Long enough for ten reports and the recount on a loaded machine (with 3 s, a CI run
    # once took so long to send the ten that the first ones had gone stale: 4.0 != 5.0).
    settings.AGENT_STALE_S = 8
    url = live_server_asgi.url
    nodes = [f"gpu-{i}" for i in range(10)]
    node_tokens = {node: issue(node) for node in nodes}

    def send(node: str, seq: int) -> dict[str, Any]:
        reply = report(url, node_tokens[node], seq, [gpu_record(f"GPU-{node}")])
        assert reply.status == 200, reply.detail
        return reply.body

    first = send(nodes[0], 1)
    assert first["send_s"] == 0  # one agent: send every poll
    for node in nodes[1:]:
        send(node, 1)
    last_sent = time.monotonic()
    time.sleep(1.1)  # the count is taken again at most once a second
    assert send(nodes[0], 2)["send_s"] == 5.0
    # the other nine went silent for longer than AGENT_STALE_S
    time.sleep(max(0.0, last_sent + settings.AGENT_STALE_S + 0.2 - time.monotonic()))
    assert send(nodes[0], 3)["send_s"] == 0
    assert GpuSample.objects.count() == 12  # every report stored


def test_an_agent_follows_the_advice_unless_told_otherwise(
        live_server_asgi: LiveServer, settings: Any, tmp_path: Path) -> None:
    """Two agents at a target of half a report a second: raywatch asks for a report
    every 4 s. The agent without RAYWATCH_AGENT_SEND_S sends ~4 polls a report; the one
    with RAYWATCH_AGENT_SEND_S=0 keeps sending every poll. Every poll of both is stored."""
    settings.AGENT_REPORTS_PER_S = 0.5
    url = live_server_asgi.url
    follows = agent_env(url, issue("gpu-f"), tmp_path, "gpu-f", "10.9.0.8", gpus=1)
    own = agent_env(url, issue("gpu-o"), tmp_path, "gpu-o", "10.9.0.9", gpus=1,
                    RAYWATCH_AGENT_SEND_S="0")
    seen: dict[str, list[int]] = {"gpu-f": [], "gpu-o": []}

    def samples(node: str) -> int:
        return GpuSample.objects.filter(gpu__uuid=f"GPU-{node}-0").count()

    with running_agent(follows, tmp_path / "f.log"), running_agent(own, tmp_path / "o.log"):
        wait_for(lambda: samples("gpu-f") > 0 and samples("gpu-o") > 0, 60, 0.1,
                 "both agents' first reports",
                 explain=lambda: (tmp_path / "f.log").read_text()[-2000:])
        # Three reports of the gathering agent after its first, nine of the other (about
        # 14 s; longer on a loaded machine, where the agents' sends wait on a busy server).
        deadline = time.monotonic() + patient(90)
        while (len(seen["gpu-f"]) < 4 or len(seen["gpu-o"]) < 10) \
                and time.monotonic() < deadline:
            for node, counts in seen.items():
                count = samples(node)
                if not counts or count != counts[-1]:
                    counts.append(count)
            time.sleep(0.05)
    gathered = [b - a for a, b in itertools.pairwise(seen["gpu-f"])]
    every_poll = [b - a for a, b in itertools.pairwise(seen["gpu-o"])]
    # The first report after the advice changed may be short; the rest gather ~4 polls.
    assert len(gathered) >= 2 and min(gathered[1:]) >= 3, seen["gpu-f"]
    assert len(every_poll) >= 9 and max(every_poll) <= 2, seen["gpu-o"]
    assert "raywatch asks for a report every 4.0 s" in (tmp_path / "f.log").read_text()
    for node in seen:
        times = list(GpuSample.objects.filter(gpu__uuid=f"GPU-{node}-0").order_by("at")
                     .values_list("at", flat=True))
        gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(times)]
        assert max(gaps) < 1.9, (node, gaps)  # a poll a second, every one stored
