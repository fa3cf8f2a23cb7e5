"""On Postgres + Redis + Celery, an action runs in a worker that was sent the task by
name (nothing imports actions/tasks.py), and a process is signalled through its node's
agent (`python -m collectors.agent`, which the worker asks through raywatch), on
raywatch's own host as on another node: the actions reach the processes they end."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db.models import F

from collectors.hostinfo import host_name
from dashboard.trials.models import Trial
from tests.agents import node_agent
from tests.alerting import start_worker
from tests.conftest import LiveServer, mark_ray_current, token_client, wait_for
from tests.patience import patient
from tests.test_terminate_on_this_host import hung_trial

pytestmark = pytest.mark.django_db(transaction=True)  # the worker reads what we commit
NODE, NODE_IP = "gpu-node-7", "10.9.0.7"
GiB = 1024**3


@pytest.fixture
def worker(settings, tmp_path, monkeypatch) -> Iterator[subprocess.Popen]:  # type: ignore[no-untyped-def]
    """The notify worker: it runs actions."""
    settings.EMBEDDED = False
    monkeypatch.setenv("RAYWATCH_TERMINATE_GRACE_S", "20")
    # It signs the agents' commands with the key this process sealed at issue: the same
    # secret, as serve's processes share their data dir's (its own data dir is tmp_path).
    monkeypatch.setenv("RAYWATCH_AGENT_COMMAND_SECRET", settings.AGENT_COMMAND_SECRET)
    process = start_worker(settings.NOTIFY_QUEUE, tmp_path)
    yield process
    with contextlib.suppress(ProcessLookupError):  # a test may have stopped it
        os.killpg(process.pid, signal.SIGTERM)
    process.wait(patient(30))


def finished(api, action_id: int) -> dict | None:  # type: ignore[no-untyped-def]
    action = api.get(f"/api/actions/{action_id}/").json()
    return action if action["state"] not in ("requested", "signalled") else None


def told_by_tune(api, action_id: int) -> dict[str, str] | None:  # type: ignore[no-untyped-def]
    """The action's steps once it holds what Tune made of the trial."""
    steps = {s["step"]: s["detail"]
             for s in api.get(f"/api/actions/{action_id}/").json()["steps"]}
    return steps if {"retried", "errored", "ended", "unknown"} & set(steps) else None


def test_a_trial_is_terminated_by_a_worker(  # type: ignore[no-untyped-def]
        worker, live_server_asgi: LiveServer, tmp_path: Path, operator, hung_process) -> None:
    trial = hung_trial(hung_process.pid)  # on this host: its agent signals it
    api = token_client(operator)
    with node_agent(live_server_asgi.url, tmp_path, pid=hung_process.pid) as log:
        reply = api.post(f"/api/trials/{trial.pk}/terminate",
                         {"reason": "silent for 5 min"}, format="json")
        assert reply.status_code == 202, reply.json()
        wait_for(lambda: hung_process.poll() is not None, 60, 0.2,
                 "the worker to end the process", explain=lambda: log.read_text()[-2000:])
        action = wait_for(lambda: finished(api, reply.json()["action_id"]), 30, 0.2,
                          "the outcome")
        # Tune starts the trial's next attempt: the worker writes down what Tune made of
        # it (it waits up to 20 s for that, and a worker that is stopped waits with it).
        Trial.objects.filter(pk=trial.pk).update(attempt=F("attempt") + 1)
        steps = wait_for(lambda: told_by_tune(api, reply.json()["action_id"]), 30, 0.2,
                         "what Tune made of it")
    assert action["state"] == "succeeded"
    assert hung_process.returncode == -signal.SIGTERM
    assert f"by the agent of {host_name()}" in steps["signalled"]
    assert steps["retried"] == f"Tune retried the trial: attempt {trial.attempt + 1}"


def test_a_process_on_another_node_is_signalled_through_its_agent(  # type: ignore[no-untyped-def]
        worker, live_server_asgi: LiveServer, tmp_path: Path, admin, hung_process) -> None:
    # The node's agent, whose NVML lists the process on its GPU (both on this host, so
    # its pids are ours).
    with node_agent(live_server_asgi.url, tmp_path, node=NODE, node_ip=NODE_IP,
                    pid=hung_process.pid, on_gpu=True) as log:
        mark_ray_current()  # Ray's view is current and lists no worker with this pid: an orphan
        api = token_client(admin)
        reply = api.post(f"/api/gpus/GPU-{NODE}-0/processes/{hung_process.pid}/kill",
                         {"reason": "left over by a crashed run"}, format="json")
        assert reply.status_code == 202, reply.json()
        wait_for(lambda: hung_process.poll() is not None, 60, 0.2, "the node's agent to signal it",
                 explain=lambda: (api.get(f"/api/actions/{reply.json()['action_id']}/").json(),
                                  log.read_text()[-2000:]))
        assert hung_process.returncode == -signal.SIGTERM
        # The agent's next snapshot no longer lists the process: the worker sees it gone.
        action = wait_for(lambda: finished(api, reply.json()["action_id"]), 30, 0.2,
                          "the outcome", explain=lambda: log.read_text()[-2000:])
    assert action["state"] == "succeeded"
    steps = {s["step"]: s["detail"] for s in action["steps"]}
    assert "SIGTERM sent" in steps["signalled"]
    assert steps["agent_result"].startswith(f"agent of {NODE}")
    assert "SIGTERM sent to pid" in steps["agent_result"]


def test_a_worker_stopped_while_waiting_on_tune_writes_why_and_exits(  # type: ignore[no-untyped-def]
        worker, live_server_asgi: LiveServer, tmp_path: Path, operator, hung_process) -> None:
    """A warm shutdown (SIGTERM, as docker stop and serve's Ctrl-C send) waits for the
    running action, which by then waits only for Tune's word on the trial (up to 20 s):
    it stops waiting, says so in the audit, and the worker exits."""
    trial = hung_trial(hung_process.pid)
    api = token_client(operator)
    with node_agent(live_server_asgi.url, tmp_path, pid=hung_process.pid) as log:
        reply = api.post(f"/api/trials/{trial.pk}/terminate",
                         {"reason": "silent for 5 min"}, format="json")
        assert reply.status_code == 202, reply.json()
        action = wait_for(lambda: finished(api, reply.json()["action_id"]), 60, 0.2,
                          "the outcome", explain=lambda: log.read_text()[-2000:])
        assert action["state"] == "succeeded"
        os.killpg(worker.pid, signal.SIGTERM)  # Tune has said nothing of the trial yet
        worker.wait(patient(60))
        steps = told_by_tune(api, reply.json()["action_id"])
    assert steps is not None, "the worker exited without writing down Tune's outcome"
    assert steps["unknown"] == "raywatch stopped before Tune reported the trial's new state"
