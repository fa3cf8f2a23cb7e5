"""A node agent signals, or takes a stack of, only a process it reported itself (a Ray
worker it found, a GPU process NVML listed), checked on its node by pid and start time,
whatever raywatch asks: a command that names any other process of the node (a raywatch
whose database was written to, a bug) is refused, nothing is done to that process, and
the refusal reaches the action's audit as any agent's refusal does."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from django.utils import timezone

from collectors.http import SourceError
from dashboard.actions.models import AuditEntry, AuditStep
from dashboard.actions.remote import RemoteProcess
from dashboard.agents import tokens
from dashboard.agents.commands import create_stack
from dashboard.agents.models import AgentCommand, NodeProcess
from tests.agents import agent_env, running_agent
from tests.conftest import LiveServer, wait_for
from tests.patience import patient

pytestmark = pytest.mark.django_db(transaction=True)
NODE, NODE_IP = "gpu-b", "10.9.0.3"
GiB = 1024**3


@pytest.fixture
def stranger() -> Iterator[subprocess.Popen[bytes]]:
    """A process of the node that is none of the agent's business (an sshd, a database)."""
    process = subprocess.Popen(["sleep", "600"])
    yield process
    process.kill()
    process.wait()


@pytest.fixture
def gpu_user() -> Iterator[subprocess.Popen[bytes]]:
    """A process the node's NVML lists on a GPU: one the agent watches."""
    process = subprocess.Popen(["sleep", "600"])
    yield process
    process.kill()
    process.wait()


def entry_for(pid: int) -> AuditEntry:
    return AuditEntry.objects.create(
        kind=AuditEntry.KILL_PROCESS, target_key=f"process:GPU-{NODE}-0/{pid}",
        target={"pid": pid, "node": NODE}, username="admin", reason="test",
        requested_at=timezone.now())


def answered(command: AgentCommand) -> AgentCommand:
    return wait_for(lambda: (c := AgentCommand.objects.get(pk=command.pk)).done_at and c,
                    40, 0.2, f"the agent's answer to command #{command.pk}")


def test_a_process_the_agent_does_not_watch_is_never_signalled_or_sampled(
        live_server_asgi: LiveServer, tmp_path: Path, stranger: subprocess.Popen[bytes],
        gpu_user: subprocess.Popen[bytes]) -> None:
    _, token = tokens.issue(NODE, None, timezone.now(), NODE_IP)
    env = agent_env(live_server_asgi.url, token, tmp_path, NODE, NODE_IP,
                    processes=[(gpu_user.pid, GiB)])
    log = tmp_path / "agent.log"
    with running_agent(env, log):
        wait_for(lambda: NodeProcess.objects.filter(node=NODE, pid=gpu_user.pid).exists(),
                 60, 0.3, "the agent's snapshot with its GPU process",
                 explain=lambda: log.read_text()[-2000:])
        # raywatch asks for the stranger, by its true pid and start time, signed as every
        # command is: what a raywatch whose database was written to would send.
        started = psutil.Process(stranger.pid).create_time()
        entry = entry_for(stranger.pid)
        with pytest.raises(SourceError, match="refused") as refused:
            RemoteProcess(entry, NODE, stranger.pid, started).send(signal.SIGKILL)
        stack = answered(create_stack(NODE, stranger.pid, started, timezone.now()))

        # The process it does watch is signalled: the agent takes commands, only not those.
        own = entry_for(gpu_user.pid)
        said = RemoteProcess(own, NODE, gpu_user.pid,
                             psutil.Process(gpu_user.pid).create_time()).send(signal.SIGTERM)
        assert gpu_user.wait(patient(20)) == -signal.SIGTERM

    assert stranger.poll() is None  # alive: neither signalled nor stopped by a ptrace
    why = f"pid {stranger.pid} is not a process this agent watches"
    assert why in str(refused.value)
    steps = dict(AuditStep.objects.filter(entry=entry).values_list("step", "detail"))
    assert "SIGKILL to pid" in steps["agent_command"]
    assert f"agent of {NODE}" in steps["agent_result"] and "refused: " + why in (
        steps["agent_result"])
    assert (stack.outcome, why in stack.result) == ("refused", True)
    assert "py-spy" not in stack.result  # no dump was taken
    assert said.startswith(f"SIGTERM sent to pid {gpu_user.pid}")
