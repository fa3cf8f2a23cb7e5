"""An action outlives the process that runs it: a worker killed mid-terminate, or one that
never took the task, leaves an action that ends failed with an audited outcome saying
what is known, and a new terminate of the same trial then works. A task taken late is
not run (its target has moved on since it was confirmed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from dashboard.actions import executor
from dashboard.actions.models import AuditEntry
from tests.agents import node_agent
from tests.alerting import start_worker
from tests.conftest import LiveServer, token_client, wait_for
from tests.patience import patient
from tests.test_terminate_on_this_host import hung_trial

pytestmark = pytest.mark.django_db(transaction=True)  # the worker reads what we commit
DEAF = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', " \
       "flush=True); time.sleep(600)"


@pytest.fixture
def deaf_worker_process() -> Iterator[subprocess.Popen]:
    """A trial's Ray worker that ignores SIGTERM: only the forced kill ends it."""
    process = subprocess.Popen(["ray::train.train", "-c", DEAF], executable=sys.executable,
                               stdout=subprocess.PIPE)
    assert process.stdout is not None and process.stdout.readline() == b"up\n"
    yield process
    process.kill()
    process.wait()


def stop(worker: subprocess.Popen, sig: int) -> None:
    os.killpg(worker.pid, sig)
    worker.wait(patient(30))


def terminate(api, trial):  # type: ignore[no-untyped-def]
    return api.post(f"/api/trials/{trial.pk}/terminate", {"reason": "hung in step 5"},
                    format="json")


def state_of(api, action_id: int) -> dict:  # type: ignore[no-untyped-def]
    return api.get(f"/api/actions/{action_id}/").json()


def test_a_worker_killed_mid_terminate_leaves_an_audited_outcome_and_a_free_target(  # type: ignore[no-untyped-def]
        settings, live_server_asgi: LiveServer, tmp_path, monkeypatch, operator,
        deaf_worker_process) -> None:
    settings.EMBEDDED = False
    monkeypatch.setenv("RAYWATCH_TERMINATE_GRACE_S", "60")  # the first worker waits here
    # The workers sign this host's agent's commands with the key this process sealed.
    monkeypatch.setenv("RAYWATCH_AGENT_COMMAND_SECRET", settings.AGENT_COMMAND_SECRET)
    # The second request is made 5 min ahead: this host's agent still counts as heard from.
    settings.AGENT_STALE_S = 3600.0
    trial = hung_trial(deaf_worker_process.pid)  # on this host: its agent signals it
    api = token_client(operator)
    with node_agent(live_server_asgi.url, tmp_path, pid=deaf_worker_process.pid):
        first = start_worker(settings.NOTIFY_QUEUE, tmp_path / "w1")
        try:
            reply = terminate(api, trial)
            assert reply.status_code == 202, reply.content
            lost = reply.json()["action_id"]
            wait_for(lambda: state_of(api, lost)["state"] == "signalled", 60, 0.2,
                     "the SIGTERM to be sent")
        finally:
            stop(first, signal.SIGKILL)  # the worker dies in the grace period
        assert deaf_worker_process.poll() is None
        # While it could still be running, the action holds its target: one at a time.
        assert terminate(api, trial).json() == {"action_id": lost, "state": "signalled",
                                                "created": False}

        monkeypatch.setenv("RAYWATCH_TERMINATE_GRACE_S", "1")
        second = start_worker(settings.NOTIFY_QUEUE, tmp_path / "w2")
        try:
            # Past the longest an executor can take: the lost action ends, and a new one runs.
            with time_machine.travel(timezone.now() + timedelta(minutes=5), tick=True):
                again = terminate(api, trial)
            assert again.status_code == 202 and again.json()["created"] is True, again.content
            wait_for(lambda: deaf_worker_process.poll() is not None, 60, 0.2,
                     "the new action to force the process")
            assert deaf_worker_process.returncode == -signal.SIGKILL
        finally:
            stop(second, signal.SIGTERM)
    action = state_of(api, lost)
    assert action["state"] == "failed"
    assert "the executor stopped mid-action" in action["outcome"]
    assert "A signal was sent: whether the target ended is not known" in action["outcome"]
    assert [s["step"] for s in action["steps"]] == [
        "requested", "agent_command", "agent_result", "signalled", "failed"]


def test_an_action_no_worker_took_fails_and_a_late_worker_does_not_run_it(  # type: ignore[no-untyped-def]
        settings, operator, hung_process) -> None:
    settings.EMBEDDED = False
    trial = hung_trial(hung_process.pid)
    api = token_client(operator)
    entry = AuditEntry.objects.create(
        kind=AuditEntry.TERMINATE_TRIAL, target_key=f"trial:{trial.experiment.cluster.name}/"
        f"search/{trial.trial_id}", target={"pid": hung_process.pid}, username="oscar",
        reason="hung", requested_at=timezone.now() - timedelta(  # its worker was down
            seconds=settings.ACTION_QUEUE_S + 15))
    executor.run(entry.pk)  # a worker takes the task late: it must not act
    entry.refresh_from_db()
    assert entry.state == AuditEntry.FAILED and entry.started_at is None
    assert f"no executor took the action within {settings.ACTION_QUEUE_S:g} s" in entry.outcome
    assert "nothing was signalled" in entry.outcome
    assert hung_process.poll() is None
    preview = api.get(f"/api/trials/{trial.pk}/terminate").json()
    assert preview["active_action"] is None  # the target is free again
