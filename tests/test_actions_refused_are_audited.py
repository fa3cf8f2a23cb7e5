"""A refused action is audited with its reason, and signals nothing: a stale target
(409), no permission (403), an unreachable node (503), the rate limit (429, once per
window so a loop of requests cannot fill the audit). A run that fails keeps why. The
audit API and page show both."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from dashboard.actions.models import AuditEntry
from dashboard.cluster.models import Job
from tests.conftest import PASSWORD, token_client, wait_for
from tests.receivers import JsonHandler, serve
from tests.test_terminate_on_this_host import hung_trial

pytestmark = pytest.mark.django_db(transaction=True)


def terminate(user, trial_pk: int, **expected: Any):  # type: ignore[no-untyped-def]
    return token_client(user).post(f"/api/trials/{trial_pk}/terminate",
                                   {"reason": "silent for 5 min", "expected": expected},
                                   format="json")


def audited(**filters: str) -> list[dict[str, Any]]:
    return list(AuditEntry.objects.actions().filter(**filters).order_by("id").values(
        "username", "state", "outcome", "finished_at"))


def test_a_stale_target_is_refused_and_audited(operator, hung_process) -> None:  # type: ignore[no-untyped-def]
    trial = hung_trial(hung_process.pid)
    reply = terminate(operator, trial.pk, pid=hung_process.pid + 1, attempt=0)
    assert reply.status_code == 409
    assert "changed since the page was drawn" in reply.json()["detail"]
    assert hung_process.poll() is None  # nothing was signalled
    [entry] = token_client(operator).get("/api/audit/?state=refused").json()
    assert entry["state"] == "refused" and entry["outcome"] == reply.json()["detail"]
    assert entry["reason"] == "silent for 5 min" and entry["target"]["pid"] == hung_process.pid
    assert [s["step"] for s in entry["steps"]] == ["requested", "refused"]
    assert "HTTP 409" in entry["steps"][1]["detail"]
    page = Client()
    page.login(username=operator.username, password=PASSWORD)
    html = page.get("/audit/?state=refused").content.decode()
    assert "changed since the page was drawn" in html


def test_a_viewer_is_refused_and_audited(viewer, hung_process) -> None:  # type: ignore[no-untyped-def]
    trial = hung_trial(hung_process.pid)
    reply = terminate(viewer, trial.pk)
    assert reply.status_code == 403
    [entry] = audited()
    assert (entry["username"], entry["state"]) == (viewer.username, "refused")
    assert entry["outcome"] == "this needs the operator role" == reply.json()["detail"]
    assert entry["finished_at"] is not None
    assert hung_process.poll() is None


def test_an_unreachable_node_is_refused_and_audited(settings, operator) -> None:  # type: ignore[no-untyped-def]
    settings.RAY_ADDRESS = settings.RAY_GCS_ADDRESS = None
    settings.LOCAL_RAY_FILE = None
    trial = hung_trial(4242, node_ip="10.0.0.9")  # no agent there: only Ray's GCS could end it
    reply = terminate(operator, trial.pk)
    assert reply.status_code == 503
    [entry] = audited()
    assert entry["state"] == "refused" and "knows no GCS address" in entry["outcome"]


def test_the_rate_limit_is_audited_once_per_window(settings, operator, hung_process) -> None:  # type: ignore[no-untyped-def]
    settings.ACTION_RATE, settings.ACTION_RATE_WINDOW_S = 2, 600
    trial = hung_trial(hung_process.pid)
    stale = {"pid": hung_process.pid + 1}
    assert [terminate(operator, trial.pk, **stale).status_code for _ in range(4)] == [
        409, 409, 429, 429]  # refusals count: a loop of them is itself limited
    outcomes = [e["outcome"] for e in audited()]
    assert len(outcomes) == 3 and outcomes[2].startswith("too many actions")
    assert hung_process.poll() is None


@pytest.fixture
def jobs_api() -> Iterator[str]:
    """Ray's Jobs API on loopback as it answers when its job manager breaks mid-way: the
    job reads RUNNING, the stop fails with a 500."""

    class Handler(JsonHandler):
        def do_GET(self) -> None:
            self.answer({"status": "RUNNING"})

        def do_POST(self) -> None:
            self.answer({"detail": "job manager crashed"}, 500)

    server = serve(Handler)
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_failed_run_keeps_its_reason(settings, operator, jobs_api) -> None:  # type: ignore[no-untyped-def]
    settings.EMBEDDED = True  # the action runs in this process's background pool
    settings.RAY_ADDRESS, settings.RAY_API_SERVER_ADDRESS = None, jobs_api
    Job.objects.create(key="raysubmit_x", submission_id="raysubmit_x", type="SUBMISSION",
                       status="RUNNING", updated_at=timezone.now())
    api = token_client(operator)
    reply = api.post("/api/jobs/raysubmit_x/stop", {"reason": "stop it"}, format="json")
    assert reply.status_code == 202, reply.json()
    action = wait_for(lambda: (a := api.get(f"/api/actions/{reply.json()['action_id']}/")
                               .json())["state"] == "failed" and a, 30, 0.2, "the failure")
    assert "answered HTTP 500" in action["outcome"]
    assert [s["step"] for s in action["steps"]] == ["requested", "failed"]
    assert api.get("/api/audit/?state=failed").json()[0]["outcome"] == action["outcome"]
