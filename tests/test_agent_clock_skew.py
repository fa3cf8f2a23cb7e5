"""An agent's clock is not raywatch's: what it sends is dated on raywatch's clock (the
report says when the agent sent it, by its clock; raywatch knows when it came), never in
the future, and a large skew is shown on the Cluster page. Before, one snapshot from a
node whose clock ran an hour ahead held that node's process table still for the hour
after its clock was put right: every later snapshot looked older."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from dashboard.agents import tokens
from dashboard.agents.coverage_data import coverage_payload
from dashboard.agents.models import NodeProcess
from dashboard.gpus.models import GpuSample
from tests.agents import agent_env, running_agent
from tests.conftest import LiveServer, wait_for

pytestmark = pytest.mark.django_db(transaction=True)
NODE, NODE_IP = "gpu-b", "10.9.0.3"
HOUR = 3600


@pytest.fixture
def workers() -> Iterator[Callable[[str], subprocess.Popen[bytes]]]:
    """Start processes titled as Ray titles its workers (the agent watches them)."""
    started: list[subprocess.Popen[bytes]] = []

    def start(name: str) -> subprocess.Popen[bytes]:
        started.append(subprocess.Popen(["bash", "-c", f"exec -a ray::{name} sleep 600"]))
        return started[-1]

    yield start
    for process in started:
        process.kill()
        process.wait()


def watched() -> set[int]:
    return set(NodeProcess.objects.filter(node=NODE).values_list("pid", flat=True))


def agent_problems() -> list[str]:
    agents = coverage_payload(timezone.now())["agent_only"]
    return agents[0]["problems"] if agents else []


def test_an_agent_an_hour_ahead_neither_dates_the_future_nor_freezes_its_table(
        live_server_asgi: LiveServer, tmp_path: Path,
        workers: Callable[[str], subprocess.Popen[bytes]]) -> None:
    _, token = tokens.issue(NODE, None, timezone.now(), NODE_IP)
    env = agent_env(live_server_asgi.url, token, tmp_path, NODE, NODE_IP)
    log = tmp_path / "agent.log"
    first = workers("Trainable.first")
    with running_agent(env, log, clock_ahead_s=HOUR):
        wait_for(lambda: first.pid in watched(), 60, 0.3, "the skewed agent's snapshot",
                 explain=lambda: log.read_text()[-2000:])
        skew = wait_for(lambda: [p for p in agent_problems() if "ahead of raywatch" in p],
                        30, 0.3, "the skew on the coverage", explain=agent_problems)
        latest = timezone.now() + timedelta(seconds=1)
        assert not GpuSample.objects.filter(at__gt=latest).exists()
        assert not NodeProcess.objects.filter(at__gt=latest).exists()

    # Its clock put right (NTP, a restart): its next snapshots still count.
    second = workers("Trainable.second")
    first.kill()
    first.wait()
    with running_agent(env, log):
        wait_for(lambda: second.pid in watched() and first.pid not in watched(), 60, 0.3,
                 "the process table to follow the node again",
                 explain=lambda: (watched(), log.read_text()[-2000:]))
        wait_for(lambda: not [p for p in agent_problems() if "clock" in p], 30, 0.3,
                 "the skew to leave the coverage", explain=agent_problems)
    said = re.search(r"its clock is (\d+) s ahead of raywatch's", skew[0])
    assert said and abs(int(said[1]) - HOUR) <= 2, skew  # the agent started a moment late
