"""An agent carries out a command once, for its own node, before it expires, as raywatch
signed it, and only on the process raywatch meant: a replayed, expired, altered or
misdirected command signals nothing and dumps no stack. A stack command gives py-spy's
dump of that process, or says why not (py-spy missing, no ptrace rights). And the agent
imports no Django."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psutil
import pytest

from collectors.agent import wire
from collectors.agent.commands import CommandGuard, Watched, carry_out
from collectors.procstat import ProcessWatcher
from tests.patience import patient
from tests.served import ROOT

TOKEN = "rwa_" + "k" * 43
KEY = wire.command_key(TOKEN)
NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def command(pid: int = 4242, started: float = 1.0, key: str = KEY, **changes: Any
            ) -> dict[str, Any]:
    body = {"id": 7, "kind": "signal", "node": "gpu-b", "action_id": 3, "nonce": "ab" * 16,
            "issued_at": wire.timestamp(NOW), "expires_at": wire.timestamp(NOW + timedelta(
                seconds=30)),
            "payload": {"pid": pid, "signal": "SIGTERM", "create_time": started}, **changes}
    return {**body, "signature": wire.sign_command(key, body)}


def stack_command(pid: int, started: float, **changes: Any) -> dict[str, Any]:
    return command(kind="stack", action_id=None,
                   payload={"pid": pid, "create_time": started}, **changes)


HUNG_PYTHON = """
import time

def wait_for_the_data_loader():
    print("hung", flush=True)
    time.sleep(600)

wait_for_the_data_loader()
"""


@pytest.fixture
def hung_python() -> Iterator[subprocess.Popen]:
    """A Python process hanging in a function of its own, as a hung trial does."""
    # Titled as Ray titles its workers: a trial's process is one.
    process = subprocess.Popen(["ray::train.train", "-c", HUNG_PYTHON],
                               executable=sys.executable, stdout=subprocess.PIPE)
    assert process.stdout is not None and process.stdout.readline() == b"hung\n"
    yield process
    process.kill()
    process.wait()


def guard(tmp_path: Path) -> CommandGuard:
    return CommandGuard("gpu-b", KEY, tmp_path / "commands-seen.json")


def watching(*pids: int) -> Watched:
    """What an agent that reported `pids` (as its GPU processes) may act on."""
    watched = Watched()
    watched.saw(ProcessWatcher().read(pids))
    return watched


def test_a_command_passes_once_and_a_replay_is_refused_even_after_a_restart(
        tmp_path: Path) -> None:
    assert guard(tmp_path).check(command(), NOW) is None
    assert "replay" in (guard(tmp_path).check(command(), NOW) or "")  # a new agent process
    assert "replay" in (guard(tmp_path).check(command(nonce="cd" * 16), NOW) or "")


@pytest.mark.parametrize(("cmd", "at", "why"), [
    (command(), NOW + timedelta(seconds=31), "expired"),
    (command(node="gpu-a"), NOW, "is for node 'gpu-a'"),
    (command(key=wire.command_key("rwa_" + "o" * 43)), NOW, "signature"),
    (stack_command(4242, 1.0, node="gpu-a"), NOW, "is for node 'gpu-a'"),
    ({**stack_command(4242, 1.0), "payload": {"pid": 1234, "create_time": 1.0}}, NOW,
     "signature"),
    ({**command(), "payload": {"pid": 1234, "signal": "SIGTERM", "create_time": 1.0}}, NOW,
     "signature"),  # altered on the way
])
def test_a_stale_misdirected_or_altered_command_is_refused(
        tmp_path: Path, cmd: dict[str, Any], at: datetime, why: str) -> None:
    assert why in (guard(tmp_path).check(cmd, at) or "")


def test_a_reused_pid_is_not_signalled(hung_process: subprocess.Popen) -> None:
    started = psutil.Process(hung_process.pid).create_time()
    watched = watching(hung_process.pid)
    outcome = carry_out(command(hung_process.pid, started - 5), watched)
    assert outcome.outcome == "gone" and "another process" in outcome.detail
    assert hung_process.poll() is None
    assert carry_out({**command(hung_process.pid, started),
                      "payload": {"pid": hung_process.pid, "signal": "SIGSTOP",
                                  "create_time": started}}, watched).outcome == "refused"
    assert carry_out(command(hung_process.pid, started), watched).outcome == "signalled"
    assert hung_process.wait(patient(10)) == -signal.SIGTERM


def test_a_stack_is_taken_of_the_process_raywatch_meant_and_no_other(
        hung_python: subprocess.Popen) -> None:
    started = psutil.Process(hung_python.pid).create_time()
    watched = watching(hung_python.pid)
    taken = carry_out(stack_command(hung_python.pid, started), watched)
    assert taken.outcome == "taken", taken.detail
    assert "wait_for_the_data_loader (<string>:6)" in taken.detail  # the hanging frame

    reused = carry_out(stack_command(hung_python.pid, started - 5), watched)  # another now
    assert reused.outcome == "gone" and "another process" in reused.detail
    ended = carry_out(stack_command(2**22 + 7, started), watched)
    assert ended.outcome == "gone"
    missing = carry_out(stack_command(hung_python.pid, started), watched,
                        py_spy="/nonexistent/py-spy")
    assert missing.outcome == "failed" and "py-spy was not found" in missing.detail
    assert "pip install py-spy" in missing.detail
    assert hung_python.poll() is None  # a stack never ends the process


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                    reason="needs root, to run py-spy as another user")
def test_without_ptrace_rights_the_agent_says_what_it_needs(
        hung_python: subprocess.Popen, tmp_path: Path) -> None:
    """py-spy run as 'nobody' against root's process: what an agent without ptrace rights
    (a container without SYS_PTRACE) meets."""
    py_spy = Path(sys.executable).parent / "py-spy"
    unprivileged = tmp_path / "py-spy-as-nobody"
    unprivileged.write_text(f"#!/bin/sh\nexec setpriv --reuid=65534 --regid=65534 "
                            f"--clear-groups {py_spy} \"$@\"\n")
    unprivileged.chmod(0o755)
    started = psutil.Process(hung_python.pid).create_time()
    outcome = carry_out(stack_command(hung_python.pid, started), watching(hung_python.pid),
                        py_spy=str(unprivileged))
    assert outcome.outcome == "failed"
    assert "ptrace is not allowed" in outcome.detail and "SYS_PTRACE" in outcome.detail


def test_a_slow_stack_does_not_hold_up_a_signal(tmp_path: Path,
                                                 hung_process: subprocess.Popen) -> None:
    """Stacks are taken beside the command loop: a signal that comes after one is sent
    at once."""
    from collectors.agent.config import AgentConfig
    from collectors.agent.main import Agent

    slow = tmp_path / "slow-py-spy"
    slow.write_text("#!/bin/sh\nsleep 5\n")
    slow.chmod(0o755)
    config = AgentConfig(url="http://127.0.0.1:9", token=TOKEN, node_name="gpu-b",
                         node_ip=None, spool_dir=tmp_path, spool_max_bytes=1 << 20, poll_s=1,
                         gpu_source="off", nvml_module="pynvml", log_dirs=(), timeout_s=1,
                         py_spy=str(slow))
    agent = Agent(config, spool=None)  # type: ignore[arg-type]
    agent.stop.set()  # posting results gives up at once: there is no raywatch here
    agent.watched.saw(ProcessWatcher().read([hung_process.pid]))
    now = datetime.now(UTC)
    started = psutil.Process(hung_process.pid).create_time()
    fresh = {"issued_at": wire.timestamp(now),
             "expires_at": wire.timestamp(now + timedelta(seconds=30))}
    checks = guard(tmp_path)
    agent.handle_beside(checks, stack_command(hung_process.pid, started, id=8, **fresh))
    outcome = agent.handle(checks, command(hung_process.pid, started, id=9, **fresh))
    assert outcome.outcome == "signalled"
    assert hung_process.wait(patient(10)) == -signal.SIGTERM
    # Signalled while the stack was still being taken: it did not wait for it.
    assert [t for t in threading.enumerate() if t.name == "stack-8"]


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
    assert {name.split("==")[0] for name in wanted} == {"psutil", "nvidia-ml-py", "py-spy",
                                                        "orjson"}
    assert wanted <= pinned
