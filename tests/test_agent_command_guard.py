"""An agent carries out a command once, for its own node, before it expires, as raywatch
signed it, and only on the process raywatch meant: a replayed, expired, altered or
misdirected command signals nothing. And the agent imports no Django."""

from __future__ import annotations

import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psutil
import pytest

from collectors.agent import wire
from collectors.agent.commands import CommandGuard, carry_out
from tests.served import ROOT

TOKEN = "rwa_" + "k" * 43
KEY = wire.token_key(TOKEN)
NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def command(pid: int = 4242, started: float = 1.0, key: str = KEY, **changes: Any
            ) -> dict[str, Any]:
    body = {"id": 7, "kind": "signal", "node": "gpu-b", "action_id": 3, "nonce": "ab" * 16,
            "issued_at": wire.timestamp(NOW), "expires_at": wire.timestamp(NOW + timedelta(
                seconds=30)),
            "payload": {"pid": pid, "signal": "SIGTERM", "create_time": started}, **changes}
    return {**body, "signature": wire.sign_command(key, body)}


def guard(tmp_path: Path) -> CommandGuard:
    return CommandGuard("gpu-b", KEY, tmp_path / "commands-seen.json")


def test_a_command_passes_once_and_a_replay_is_refused_even_after_a_restart(
        tmp_path: Path) -> None:
    assert guard(tmp_path).check(command(), NOW) is None
    assert "replay" in (guard(tmp_path).check(command(), NOW) or "")  # a new agent process
    assert "replay" in (guard(tmp_path).check(command(nonce="cd" * 16), NOW) or "")


@pytest.mark.parametrize(("cmd", "at", "why"), [
    (command(), NOW + timedelta(seconds=31), "expired"),
    (command(node="gpu-a"), NOW, "is for node 'gpu-a'"),
    (command(key=wire.token_key("rwa_" + "o" * 43)), NOW, "signature"),
    ({**command(), "payload": {"pid": 1234, "signal": "SIGTERM", "create_time": 1.0}}, NOW,
     "signature"),  # altered on the way
])
def test_a_stale_misdirected_or_altered_command_is_refused(
        tmp_path: Path, cmd: dict[str, Any], at: datetime, why: str) -> None:
    assert why in (guard(tmp_path).check(cmd, at) or "")


def test_a_reused_pid_is_not_signalled(hung_process: subprocess.Popen) -> None:
    started = psutil.Process(hung_process.pid).create_time()
    outcome = carry_out(command(hung_process.pid, started - 5))
    assert outcome.outcome == "gone" and "another process" in outcome.detail
    assert hung_process.poll() is None
    assert carry_out({**command(hung_process.pid, started),
                      "payload": {"pid": hung_process.pid, "signal": "SIGSTOP",
                                  "create_time": started}}).outcome == "refused"
    assert carry_out(command(hung_process.pid, started)).outcome == "signalled"
    assert hung_process.wait(10) == -signal.SIGTERM


def test_the_agent_imports_no_django() -> None:
    code = ("import sys, collectors.agent.main; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('django', 'psycopg', 'redis', 'celery', 'ray')))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_agent_installs_light_with_the_projects_pins() -> None:
    """`make agent` installs agent-requirements.txt only: the pins raywatch is tested with."""
    import tomllib

    wanted = {line.strip() for line in (ROOT / "agent-requirements.txt").read_text().splitlines()
              if line.strip() and not line.startswith("#")}
    pinned = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"])
    assert {name.split("==")[0] for name in wanted} == {"psutil", "nvidia-ml-py"}
    assert wanted <= pinned
