"""Terminate a trial whose process runs on raywatch's own host (as on `make run`'s local
cluster): the confirm dialog's preview names the GPUs its process tree holds, the
process is gone after SIGTERM sent by this host's agent (a real `python -m
collectors.agent`, as `serve` starts one beside itself: raywatch never signals a process
itself), and the audit keeps every step. Without that agent, and with no GCS to kill the
actor through, the terminate is refused and nothing is signalled. Ray's view of the
trial's actor is written as raywatch's Ray poll stores it (a live node at this host's
address, a live actor with the trial's pid), so this runs on both backends without a
cluster (see test_on_embedded_default.py)."""

from __future__ import annotations

import signal
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from collectors.hostinfo import host_name
from dashboard.actions.models import AuditEntry
from dashboard.cluster.models import Actor, Node
from dashboard.gpus.models import Gpu, GpuProcess
from dashboard.trials.models import Experiment, Trial
from tests.agents import node_agent
from tests.conftest import LiveServer, token_client, wait_for

pytestmark = [pytest.mark.both_backends, pytest.mark.django_db(transaction=True)]
NODE_IP = "127.0.0.1"  # an address of this host: Ray placed the trial here


def hung_trial(pid: int, node_ip: str = NODE_IP, trial_id: str = "t_00000",
               experiment: str = "search", ray: bool = True) -> Trial:
    """A running trial whose results name `pid` on `node_ip`; with `ray`, Ray lists a live
    actor of its trainable with that pid on a live node at that address."""
    now = timezone.now()
    if ray:
        node = Node.objects.get_or_create(node_id=f"node-{node_ip}", defaults=dict(
            node_ip=node_ip, hostname=host_name() if node_ip == NODE_IP else "gpu-b",
            state=Node.ALIVE, last_seen_at=now))[0]
        Actor.objects.create(actor_id=f"actor-{pid}-{node_ip}", state="ALIVE", pid=pid,
                             node_id=node.node_id, repr_name="train", job_id="01000000",
                             start_time=now - timedelta(minutes=30), first_seen_at=now,
                             updated_at=now)
    return Trial.objects.create(
        experiment=Experiment.objects.get_or_create(name=experiment)[0], trial_id=trial_id,
        trainable="train", status=Trial.RUNNING, pid=pid, hostname=host_name(),
        node_ip=node_ip, iteration=4, last_result_at=now - timedelta(minutes=5))


def gpu_process(uuid: str, node_ip: str, pid: int, ancestors: list[int]) -> None:
    now = timezone.now()
    gpu = Gpu.objects.get_or_create(uuid=uuid, defaults=dict(
        node="n1", node_ip=node_ip, index=int(uuid[-1]), first_seen_at=now, at=now))[0]
    GpuProcess.objects.create(gpu=gpu, pid=pid, ancestors=ancestors, used_memory_bytes=2**30,
                              first_seen_at=now, last_seen_at=now)


def test_an_operator_terminates_a_hung_trial_on_this_host(  # type: ignore[no-untyped-def]
        settings, live_server_asgi: LiveServer, tmp_path: Path, operator, hung_process) -> None:
    settings.EMBEDDED = True  # the action runs in this process's background pool
    settings.TERMINATE_GRACE_S = 5.0
    pid = hung_process.pid
    trial = hung_trial(pid)
    gpu_process("GPU-0", NODE_IP, pid, [1])  # the trial's own process
    gpu_process("GPU-1", NODE_IP, pid + 7, [pid, 1])  # a child it started
    gpu_process("GPU-2", NODE_IP, pid + 9, [pid + 1000, 1])  # not of its tree
    gpu_process("GPU-3", "10.0.0.6", pid, [1])  # the same pid on another node
    api = token_client(operator)

    with node_agent(live_server_asgi.url, tmp_path, pid=pid, node_ip=NODE_IP) as log:
        preview = api.get(f"/api/trials/{trial.pk}/terminate")
        assert preview.status_code == 200, preview.content
        held = [(g["uuid"], g["pid"]) for g in preview.json()["target"]["gpus"]]
        assert sorted(held) == [("GPU-0", pid), ("GPU-1", pid + 7)]
        assert preview.json()["target"]["agent_node"] == host_name()

        reply = api.post(f"/api/trials/{trial.pk}/terminate",
                         {"reason": "silent for 5 min", "expected": {"pid": pid}}, format="json")
        assert reply.status_code == 202, reply.content
        wait_for(lambda: hung_process.poll() is not None, 30, 0.2, "the process to end",
                 explain=lambda: log.read_text()[-2000:])
        assert hung_process.returncode == -signal.SIGTERM
        Trial.objects.filter(pk=trial.pk).update(status=Trial.ERROR)  # what Tune then reports
        action = finished(api, reply.json()["action_id"])
    assert [s["step"] for s in action["steps"]] == [
        "requested", "agent_command", "agent_result", "signalled", "gone", "succeeded",
        "errored"]
    steps = {s["step"]: s["detail"] for s in action["steps"]}
    assert f"SIGTERM sent to pid {pid}" in steps["signalled"]
    assert f"by the agent of {host_name()}" in steps["signalled"]
    assert action["state"] == "succeeded" and action["reason"] == "silent for 5 min"


def test_without_its_agent_raywatch_signals_nothing_on_its_own_host(  # type: ignore[no-untyped-def]
        settings, operator, hung_process) -> None:
    """raywatch shares no pid namespace with the cluster: with no agent of its own host
    and no GCS to kill the actor through, the operator is told why, and the process lives."""
    settings.EMBEDDED = True
    settings.RAY_ADDRESS = settings.RAY_GCS_ADDRESS = settings.LOCAL_RAY_FILE = None
    trial = hung_trial(hung_process.pid)
    api = token_client(operator)
    preview = api.get(f"/api/trials/{trial.pk}/terminate")
    assert preview.status_code == 200 and preview.json()["target"]["agent_node"] is None
    reply = api.post(f"/api/trials/{trial.pk}/terminate", {"reason": "silent for 5 min"},
                     format="json")
    assert reply.status_code == 503, reply.content
    detail = reply.json()["detail"]
    assert f"no raywatch agent of {host_name()} has answered lately" in detail
    assert "knows no GCS address" in detail
    [entry] = AuditEntry.objects.actions()
    assert entry.state == AuditEntry.REFUSED and entry.outcome == detail
    assert hung_process.poll() is None  # never signalled


def finished(api: Any, action_id: int) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        action = api.get(f"/api/actions/{action_id}/").json()
        return action if action["steps"][-1]["step"] in ("errored", "failed") else None
    return wait_for(done, 60, 0.2, "Tune's verdict in the audit")  # type: ignore[return-value]
