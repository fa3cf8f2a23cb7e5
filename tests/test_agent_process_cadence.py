"""The agent's process snapshots: every RAYWATCH_AGENT_PROCESSES_S (5 s) on a quiet node,
which keeps its CPU low, and at every GPU poll for a while after it signalled a process,
so raywatch sees a terminated process leave at once."""

from __future__ import annotations

import subprocess
from pathlib import Path

import psutil
import pytest

from collectors.agent import main as agent_main
from collectors.agent import wire
from collectors.agent.commands import CommandGuard
from collectors.agent.config import AgentConfig
from collectors.agent.spool import Spool
from collectors.procstat import ProcessWatcher
from tests.agents import agent_env
from tests.patience import patient


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def kinds(records: list[dict]) -> list[str]:
    return [r["kind"] for r in records]


def test_snapshots_every_5_s_and_every_poll_after_a_signal(  # type: ignore[no-untyped-def]
        tmp_path: Path, monkeypatch) -> None:
    clock = Clock()
    monkeypatch.setattr(agent_main.time, "monotonic", clock)
    env = agent_env("http://127.0.0.1:9", "rwa_" + "x" * 40, tmp_path, "gpu-b", "10.9.0.3")
    del env["RAYWATCH_AGENT_PROCESSES_S"]  # the default
    agent = agent_main.Agent(AgentConfig.from_env(env), Spool(tmp_path / "spool", 1 << 20))
    source, watcher = agent._gpu_source(), ProcessWatcher()

    seen = []
    for _ in range(11):  # 11 polls a second apart: snapshots at 0, 5 and 10 s
        seen.append("processes" in kinds(agent.collect(source, watcher)))
        clock.now += 1
    assert seen == [True, False, False, False, False, True, False, False, False, False, True]
    assert all(wire.GPU_POLL in kinds(agent.collect(source, watcher)) for _ in range(3))

    # A signal the agent carried out: a snapshot at every poll for the next 30 s.
    victim = subprocess.Popen(["sleep", "60"])
    try:
        started = psutil.Process(victim.pid).create_time()
        agent.watched.saw(ProcessWatcher().read([victim.pid]))  # one of its GPU processes
        guard = CommandGuard("gpu-b", wire.command_key(agent.config.token),
                             tmp_path / "seen.json")
        monkeypatch.setattr(agent, "_post_result", lambda command, outcome: None)
        monkeypatch.setattr(guard, "check", lambda command, now: None)
        outcome = agent.handle(guard, {"id": 1, "kind": wire.SIGNAL, "payload": {
            "pid": victim.pid, "create_time": started, "signal": "SIGTERM"}})
        assert outcome.outcome != "refused", outcome
        assert victim.wait(patient(10)) == -15
    finally:
        victim.kill()
    fast = []
    for _ in range(30):
        clock.now += 1
        fast.append("processes" in kinds(agent.collect(source, watcher)))
    assert all(fast[:29]), fast
    # Past the 30 s: back to one every 5 s.
    later = []
    for _ in range(10):
        clock.now += 1
        later.append("processes" in kinds(agent.collect(source, watcher)))
    assert later == [False, False, False, True, False, False, False, False, True, False]


@pytest.mark.parametrize("value", ["0", "-1", "soon"])
def test_a_bad_snapshot_interval_stops_the_agent(value: str, tmp_path: Path) -> None:
    from collectors.agent.config import ConfigError

    env = agent_env("http://127.0.0.1:9", "rwa_" + "x" * 40, tmp_path, "gpu-b", "10.9.0.3",
                    RAYWATCH_AGENT_PROCESSES_S=value)
    with pytest.raises(ConfigError, match="RAYWATCH_AGENT_PROCESSES_S"):
        AgentConfig.from_env(env)


@pytest.mark.parametrize(("name", "value", "why"), [
    ("RAYWATCH_AGENT_SEND_S", "-1", "at least 0"),
    ("RAYWATCH_AGENT_SEND_S", "90", "at most 60"),
    ("RAYWATCH_AGENT_SEND_S", "soon", "expected a number"),
    ("RAYWATCH_LOG_RESCAN_PER_POLL", "0", "at least 1"),
    ("RAYWATCH_LOG_RESCAN_PER_POLL", "2.5", "whole number"),
    ("RAYWATCH_LOG_RESCAN_PER_POLL", "many", "expected a number"),
    ("RAYWATCH_AGENT_BACKOFF_CAP_S", "0", "at least 1"),
])
def test_a_bad_gather_time_or_rescan_share_stops_the_agent(name: str, value: str, why: str,
                                                            tmp_path: Path) -> None:
    from collectors.agent.config import ConfigError

    env = agent_env("http://127.0.0.1:9", "rwa_" + "x" * 40, tmp_path, "gpu-b", "10.9.0.3",
                    **{name: value})
    with pytest.raises(ConfigError, match=f"{name}.*{why}"):
        AgentConfig.from_env(env)


def test_an_agent_that_cannot_reach_raywatch_tries_again_at_most_its_cap_apart(
        tmp_path: Path) -> None:
    """While raywatch does not answer, the waits double from 1 s up to
    RAYWATCH_AGENT_BACKOFF_CAP_S (jitter of a fifth either way); a Retry-After wins."""
    env = agent_env("http://127.0.0.1:9", "rwa_" + "x" * 40, tmp_path, "gpu-b", "10.9.0.3",
                    RAYWATCH_AGENT_BACKOFF_CAP_S="8")
    backoff = agent_main.Backoff(AgentConfig.from_env(env).backoff_cap_s)
    waits = [backoff.next() for _ in range(8)]
    for wait, base in zip(waits, [1, 2, 4, 8, 8, 8, 8, 8], strict=True):
        assert 0.8 * base <= wait <= 1.2 * base, waits
    assert backoff.next(retry_after=90) == 90
    del env["RAYWATCH_AGENT_BACKOFF_CAP_S"]  # the default: half a minute
    default = agent_main.Backoff(AgentConfig.from_env(env).backoff_cap_s)
    assert 24 <= [default.next() for _ in range(8)][-1] <= 36
