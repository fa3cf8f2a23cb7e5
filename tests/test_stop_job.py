"""Stopping a Ray job (an RL/LLM training run submitted through the Jobs API), and
saying so plainly when Ray cannot be reached."""

from __future__ import annotations

import sys

import pytest
from django.test import Client

from collectors.raystate import RayEndpoint
from dashboard.actions.models import AuditEntry
from dashboard.cluster.endpoint import ray_endpoint
from dashboard.cluster.models import Job
from dashboard.cluster.tasks import poll_ray_state
from tests.conftest import PASSWORD, token_client, wait_for

pytestmark = [pytest.mark.ray, pytest.mark.django_db(transaction=True)]


def submit(endpoint: RayEndpoint) -> str:
    from ray.job_submission import JobSubmissionClient

    jobs = JobSubmissionClient(endpoint.dashboard_url, headers=endpoint.headers())
    entrypoint = f'{sys.executable} -c "import ray, time; ray.init(); time.sleep(300)"'

    def attempt() -> str | None:
        try:
            return jobs.submit_job(entrypoint=entrypoint)
        except RuntimeError as exc:  # the job agent has not registered yet
            if "No available agent" in str(exc):
                return None
            raise
    return wait_for(attempt, 60, 2, "Ray's job agent to accept the job")  # type: ignore[return-value]


def test_an_operator_stops_a_running_job(settings, ray_settings, operator, viewer) -> None:  # type: ignore[no-untyped-def]
    settings.EMBEDDED = True
    submission_id = submit(ray_endpoint())

    def running() -> bool:
        poll_ray_state()
        return Job.objects.filter(submission_id=submission_id, status="RUNNING").exists()
    wait_for(running, 90, 1, "the job to run")
    # The jobs page lists the job; it offers operators the Stop button (the page draws it
    # when the table says they may act, and only they get the confirm dialog), viewers not.
    for user, shown in ((operator, True), (viewer, False)):
        page = Client()
        page.login(username=user.username, password=PASSWORD)
        html = page.get("/jobs/").content.decode()
        assert f'"submission_id": "{submission_id}"' in html
        assert ('data-can-act="1"' in html and 'id="action-dialog"' in html) is shown
    api = token_client(operator)
    reply = api.post(f"/api/jobs/{submission_id}/stop",
                     {"reason": "diverged at step 900", "expected": {"status": "RUNNING"}},
                     format="json")
    assert reply.status_code == 202, reply.json()
    action = wait_for(lambda: (a := api.get(f"/api/actions/{reply.json()['action_id']}/").json())
                      ["state"] in ("succeeded", "failed") and a, 60, 0.5, "the stop")
    assert action["state"] == "succeeded", action
    assert action["outcome"] == "Ray reports the job STOPPED"
    poll_ray_state()
    assert Job.objects.get(submission_id=submission_id).status == "STOPPED"
    # Stopping it again: it has ended, there is nothing to stop.
    again = api.post(f"/api/jobs/{submission_id}/stop", {"reason": "again"}, format="json")
    assert again.status_code == 409


def test_an_unreachable_ray_is_a_503_audited_as_refused(settings, operator) -> None:  # type: ignore[no-untyped-def]
    from django.utils import timezone

    now = timezone.now()
    Job.objects.create(key="raysubmit_x", submission_id="raysubmit_x", type="SUBMISSION",
                       status="RUNNING", updated_at=now)
    settings.RAY_ADDRESS = None
    settings.RAY_API_SERVER_ADDRESS = "http://127.0.0.1:9"  # nothing listens there
    reply = token_client(operator).post("/api/jobs/raysubmit_x/stop", {"reason": "stop it"},
                                  format="json")
    assert reply.status_code == 503
    assert "cannot act now" in reply.json()["detail"]
    assert list(AuditEntry.objects.actions().values_list("state", "outcome")) == [
        ("refused", reply.json()["detail"])]
