"""Killing a GPU process that belongs to no Ray worker: admins only, SIGTERM then
SIGKILL after the grace period, through the agent of the node that reported it; refused
for processes Ray owns."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from django.utils import timezone

from dashboard.actions.models import AuditEntry
from tests.agents import node_agent, report_gpus
from tests.conftest import LiveServer, mark_ray_current, token_client, wait_for

pytestmark = [pytest.mark.both_backends, pytest.mark.django_db(transaction=True)]
GiB = 1024**3
NODE, NODE_IP = "gpu-k", "10.9.0.11"
IGNORES_SIGTERM = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                   "print('ready', flush=True); time.sleep(600)")


@pytest.mark.parametrize("cluster", ["", "beta"])
def test_an_admin_kills_an_orphan_that_ignores_sigterm(  # type: ignore[no-untyped-def]
        live_server_asgi: LiveServer, tmp_path: Path, settings, admin, operator,
        cluster: str) -> None:
    """The node's agent may be of another cluster than the default (issue 43, L3): the
    kill's commands go to that node of its cluster, and it fetches them."""
    from dashboard.cluster.models import Cluster, settings_cluster_pk

    if cluster:
        Cluster.objects.create(name=cluster, first_seen_at=timezone.now(),
                               state_since=timezone.now())
    settings.EMBEDDED = True
    settings.TERMINATE_GRACE_S = 1.0
    stranger = subprocess.Popen([sys.executable, "-c", IGNORES_SIGTERM], stdout=subprocess.PIPE,
                                text=True)
    try:
        assert stranger.stdout and stranger.stdout.readline() == "ready\n"
        # The node's agent, whose NVML lists the process on its GPU: only it signals there.
        with node_agent(live_server_asgi.url, tmp_path, node=NODE, node_ip=NODE_IP,
                        pid=stranger.pid, on_gpu=True, memory=20 * GiB, cluster=cluster):
            mark_ray_current()
            url = f"/api/gpus/GPU-{NODE}-0/processes/{stranger.pid}/kill"
            body = {"reason": "left over by a crashed vLLM start"}
            # Operators end trials and jobs; only admins kill processes outside Ray.
            assert token_client(operator).post(url, body, format="json").status_code == 403
            assert stranger.poll() is None
            assert list(AuditEntry.objects.actions().values_list("username", "state")) == [
                (operator.username, "refused")]
            reply = token_client(admin).post(url, body, format="json")
            assert reply.status_code == 202, reply.json()
            action_id = reply.json()["action_id"]
            wait_for(lambda: stranger.poll() is not None, 30, 0.1, "the orphan to be killed")
            api = token_client(admin)
            action = wait_for(lambda: (a := api.get(f"/api/actions/{action_id}/").json())
                              ["state"] == "succeeded" and a, 30, 0.2, "the action to succeed")
        assert [s["step"] for s in action["steps"]] == [
            "requested", "agent_command", "agent_result", "signalled", "forced",
            "agent_command", "agent_result", "succeeded"]
        assert stranger.returncode == -9  # SIGTERM was ignored: SIGKILL ended it
        assert action["target"]["used_memory"] == 20 * GiB
        assert action["target"]["owner"] == "orphan"
        assert action["target"]["cluster"] == (cluster or Cluster.objects.get(
            pk=settings_cluster_pk()).name)
    finally:
        stranger.kill()
        stranger.wait()


def test_a_process_ray_owns_is_not_killed_as_an_orphan(  # type: ignore[no-untyped-def]
        fake_gpus, admin) -> None:
    from dashboard.cluster.models import Actor, Node

    now = timezone.now()
    Node.objects.create(node_id="n1", node_ip="10.0.0.5", state="ALIVE", is_head=True,
                        last_seen_at=now)
    Actor.objects.create(actor_id="a1", state="ALIVE", pid=4242, node_id="n1",
                         class_name="ImplicitFunc", first_seen_at=now, updated_at=now)
    fake_gpus.add_gpu(uuid="GPU-0", processes=[(4242, GiB)])
    mark_ray_current()
    report_gpus()
    reply = token_client(admin).post("/api/gpus/GPU-0/processes/4242/kill", {"reason": "x"},
                               format="json")
    assert reply.status_code == 409 and "not by killing the process" in reply.json()["detail"]
    assert list(AuditEntry.objects.actions().values_list("state", "outcome")) == [
        ("refused", reply.json()["detail"])]
