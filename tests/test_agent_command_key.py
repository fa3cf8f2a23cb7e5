"""The key that signs an agent's commands is not in raywatch's database: the agent
derives it from its token, raywatch keeps it sealed with a key from its settings. So
whoever reads the database (a backup, a read-only role) and can reach an agent (by
standing in for raywatch's address) still has it signal nothing; a replayed genuine
command is refused too. A token issued before command keys keeps reporting, and every
command for its node is refused at once, saying to rotate the token: in the action's
audit, on the Cluster page's coverage and on the Agents page."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from collectors.agent import wire
from collectors.http import SourceError
from dashboard.actions.models import AuditEntry, AuditStep
from dashboard.actions.remote import RemoteProcess
from dashboard.agents import tokens
from dashboard.agents.commands import create_signal, hand_out
from dashboard.agents.coverage_data import coverage_payload
from dashboard.agents.models import AgentCommand, NodeToken
from tests.agents import agent_env, commands, gpu_record, report, running_agent
from tests.conftest import LiveServer, wait_for
from tests.patience import patient
from tests.receivers import AgentApiStandIn, signed_command

pytestmark = pytest.mark.django_db(transaction=True)
NODE, NODE_IP = "gpu-b", "10.9.0.3"


@pytest.fixture
def stand_in() -> Iterator[AgentApiStandIn]:
    """Whoever answers at raywatch's address in its place: it speaks the protocol and hands
    the agent the commands it is given."""
    server = AgentApiStandIn(NODE, NODE_IP)
    yield server
    server.stop()


@pytest.fixture
def ray_worker() -> Iterator[subprocess.Popen[bytes]]:
    """A process the agent watches (titled as Ray titles its workers)."""
    process = subprocess.Popen(["bash", "-c", "exec -a ray::Victim.train sleep 600"])
    yield process
    process.kill()
    process.wait()


def signal_command(pk: int, pid: int, key: str) -> dict[str, Any]:
    return signed_command(key, pk, wire.SIGNAL, NODE, {
        "pid": pid, "signal": "SIGKILL", "create_time": psutil.Process(pid).create_time()})


def test_what_the_database_holds_signs_no_command_the_agent_accepts(
        stand_in: AgentApiStandIn, tmp_path: Path, ray_worker: subprocess.Popen[bytes]) -> None:
    row, token = tokens.issue(NODE, None, timezone.now(), NODE_IP)
    stored = {k: str(v) for k, v in NodeToken.objects.values().get(pk=row.pk).items()}
    assert wire.command_key(token) not in " ".join(stored.values())
    env = agent_env(stand_in.url, token, tmp_path, NODE, NODE_IP)
    log = tmp_path / "agent.log"
    with running_agent(env, log):
        wait_for(lambda: "for node gpu-b" in log.read_text(), 60, 0.2, "the agent's hello",
                 explain=lambda: log.read_text()[-2000:])
        # Each column of the token's row as the key (its hash signed commands before).
        forged = [signal_command(pk, ray_worker.pid, key)
                  for pk, key in enumerate(stored.values(), start=100)]
        for command in forged:
            stand_in.send(command)
        refusals = [stand_in.result(c["id"]) for c in forged]
        assert ray_worker.poll() is None

        genuine = signal_command(7, ray_worker.pid, wire.command_key(token))
        stand_in.send(genuine)
        assert stand_in.result(7)["outcome"] == "signalled"
        assert ray_worker.wait(patient(20)) == -signal.SIGKILL
        stand_in.send({**genuine, "id": 7})  # the same command again, as recorded
        stand_in.forget(7)
        replayed = stand_in.result(7)

    assert {(r["outcome"], "signature does not match" in r["detail"]) for r in refusals} == {
        ("refused", True)}
    assert replayed["outcome"] == "refused" and "replay" in replayed["detail"]


def test_a_token_from_before_command_keys_reports_and_is_told_to_rotate(
        live_server_asgi: LiveServer, admin: User) -> None:
    url, now = live_server_asgi.url, timezone.now()
    row, token = tokens.issue(NODE, None, now, NODE_IP)
    NodeToken.objects.filter(pk=row.pk).update(command_key_sealed="")  # as migrated
    assert report(url, token, 1, [gpu_record(f"GPU-{NODE}-0")]).status == 200

    entry = AuditEntry.objects.create(
        kind=AuditEntry.KILL_PROCESS, target_key=f"process:GPU-{NODE}-0/4242",
        target={"pid": 4242}, username=admin.username, reason="test", requested_at=now)
    with pytest.raises(SourceError, match="Rotate this token"):
        RemoteProcess(entry, NODE, 4242, 1.0).send(signal.SIGTERM)  # at once: no 30 s wait
    result = AuditStep.objects.get(entry=entry, step="agent_result").detail
    assert "refused" in result and f"agent_token {NODE} --rotate" in result
    assert commands(url, token).body["commands"] == []  # it is handed none

    [agent] = coverage_payload(timezone.now())["agent_only"]
    assert any("Rotate this token" in p for p in agent["problems"]), agent
    page = Client()
    page.force_login(admin)
    assert "rotate this token" in page.get("/agents/").content.decode()

    # Rotated: the new token's agent is handed the node's commands, signed with its key.
    new, new_token = tokens.rotate(row, admin, timezone.now())
    assert report(url, new_token, 2, [gpu_record(f"GPU-{NODE}-0")]).status == 200
    command = create_signal(None, NODE, 4242, "SIGTERM", 1.0, timezone.now())
    assert AgentCommand.objects.get(pk=command.pk).done_at is None
    [handed] = hand_out(NodeToken.objects.get(pk=new.pk), timezone.now())
    assert wire.signature_ok(wire.command_key(new_token), handed)
