"""On Postgres + Redis + Celery, an action runs in a worker that was sent the task by
name (nothing imports actions/tasks.py), and a process on another node is signalled
through that node's agent queue, by name too: the actions reach the processes they end."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.utils import timezone

from dashboard.gpus.models import Agent, GpuProcess
from dashboard.trials.models import Trial
from tests.alerting import start_worker
from tests.conftest import mark_ray_current, token_client, wait_for
from tests.test_terminate_on_this_host import gpu_process, hung_trial

pytestmark = pytest.mark.django_db(transaction=True)  # the worker reads what we commit
AGENT_QUEUE = "agent.gpu-node-7"


@pytest.fixture
def worker(settings, tmp_path, monkeypatch) -> Iterator[subprocess.Popen]:  # type: ignore[no-untyped-def]
    """The notify worker (it runs actions) and, in the same process, a stand-in for the
    agent of another node (its queue); both are on this host, so its pids are ours."""
    settings.EMBEDDED = False
    monkeypatch.setenv("RAYWATCH_TERMINATE_GRACE_S", "20")
    process = start_worker(f"{settings.NOTIFY_QUEUE},{AGENT_QUEUE}", tmp_path)
    yield process
    os.killpg(process.pid, signal.SIGTERM)
    process.wait(30)


def finished(api, action_id: int) -> dict | None:  # type: ignore[no-untyped-def]
    action = api.get(f"/api/actions/{action_id}/").json()
    return action if action["state"] not in ("requested", "signalled") else None


def test_a_trial_is_terminated_by_a_worker(worker, operator, hung_process) -> None:  # type: ignore[no-untyped-def]
    trial = hung_trial(hung_process.pid)
    api = token_client(operator)
    reply = api.post(f"/api/trials/{trial.pk}/terminate",
                     {"reason": "silent for 5 min"}, format="json")
    assert reply.status_code == 202, reply.json()
    wait_for(lambda: hung_process.poll() is not None, 60, 0.2, "the worker to end the process")
    Trial.objects.filter(pk=trial.pk).update(status=Trial.ERROR)
    action = wait_for(lambda: finished(api, reply.json()["action_id"]), 30, 0.2, "the outcome")
    assert action["state"] == "succeeded"
    assert hung_process.returncode == -signal.SIGTERM


def test_a_process_on_another_node_is_signalled_through_its_agent(  # type: ignore[no-untyped-def]
        worker, admin, hung_process) -> None:
    now = timezone.now()
    Agent.objects.create(node="gpu-node-7", node_ip="10.9.0.7", queue=AGENT_QUEUE,
                         source="nvml", registered_at=now - timedelta(hours=1), last_poll_at=now)
    gpu_process("GPU-7", "10.9.0.7", hung_process.pid, [1])
    mark_ray_current()  # Ray's view is current and lists no worker with this pid: an orphan
    api = token_client(admin)
    reply = api.post(f"/api/gpus/GPU-7/processes/{hung_process.pid}/kill",
                     {"reason": "left over by a crashed run"}, format="json")
    assert reply.status_code == 202, reply.json()
    wait_for(lambda: hung_process.poll() is not None, 60, 0.2, "the agent's queue to signal it")
    assert hung_process.returncode == -signal.SIGTERM
    GpuProcess.objects.filter(pid=hung_process.pid).delete()  # the agent's next poll sees it gone
    action = wait_for(lambda: finished(api, reply.json()["action_id"]), 30, 0.2, "the outcome")
    assert action["state"] == "succeeded"
    assert "SIGTERM sent" in action["steps"][1]["detail"]
