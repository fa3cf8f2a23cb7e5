"""Terminating hung trials of a real Tune search through the API: SIGTERM, grace,
force; Tune's view of it; the rest of the search going on; the audit; refusals
that signal nothing."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psutil
import pytest
from rest_framework.test import APIClient

from collectors.hostinfo import node_ip_address
from dashboard.actions.models import AuditEntry
from dashboard.incidents.models import Incident
from dashboard.trials.models import Trial
from tests.agents import node_agent
from tests.conftest import start_search, stop_node, token_client, wait_for
from tests.patience import patient

pytestmark = [pytest.mark.ray, pytest.mark.django_db(transaction=True)]
# A trial that obeys SIGTERM must be gone (its agent's next report and Ray both say so)
# within the grace: on a loaded 2-core machine a Ray worker's exit took more than 3 s.
GRACE_S = 10.0


@pytest.fixture
def act(settings, ray_cluster):  # type: ignore[no-untyped-def]
    """Actions run in this process's background pool, with a short grace period."""
    settings.EMBEDDED = True
    settings.TERMINATE_GRACE_S = GRACE_S
    settings.RAY_GCS_ADDRESS = ray_cluster.gcs_address
    return settings


def stuck(experiment: str, behaviour: str) -> Trial:
    """The trial of this behaviour once it has stopped reporting (step 4 of 5)."""
    def found() -> Trial | None:
        trial = Trial.objects.filter(experiment__name=experiment, config__behaviour=behaviour,
                                     status=Trial.RUNNING,
                                     iteration=4, pid__isnull=False).first()
        return trial if trial and psutil.pid_exists(trial.pid) else None
    return wait_for(found, 120, 0.5, f"the {behaviour} trial to hang")  # type: ignore[return-value]


def terminate(api: APIClient, trial: Trial, **expected: Any) -> Any:
    return api.post(f"/api/trials/{trial.pk}/terminate",
                    {"reason": "hung in step 5", "expected": expected or {"pid": trial.pid}},
                    format="json")


def finished(api: APIClient, action_id: int, last_step: str | None = None) -> dict[str, Any]:
    """The action once it succeeded or failed (and reached `last_step`), as
    GET /api/actions/{id} shows it."""
    def done() -> dict[str, Any] | None:
        action = api.get(f"/api/actions/{action_id}/").json()
        steps = [s["step"] for s in action["steps"]]
        ended = action["state"] in ("succeeded", "failed")
        return action if ended and (last_step is None or last_step in steps) else None
    return wait_for(done, GRACE_S + 60, 0.2, "the action to finish")  # type: ignore[return-value]


def test_hung_trials_are_terminated_and_the_search_goes_on(  # type: ignore[no-untyped-def]
        watched, act, ray_cluster, operator, viewer, live_server_asgi, tmp_path) -> None:
    name = f"terminate-{uuid.uuid4().hex[:6]}"  # the Ray session's staging dirs hold others
    search = start_search(ray_cluster, watched, name, "terminate")
    # This host's agent, as `serve` starts it: it sends the signals (raywatch never does).
    agent = node_agent(live_server_asgi.url, tmp_path, node_ip=node_ip_address())
    agent.__enter__()
    try:
        hung = watched_by_agent(stuck(name, "hang"))
        # A viewer cannot act: refused (and audited) before anything is signalled.
        assert terminate(token_client(viewer), hung).status_code == 403
        # A page drawn before the process restarted: refused, never acted on blindly.
        stale = terminate(token_client(operator), hung, pid=hung.pid + 1)
        assert stale.status_code == 409 and "changed since the page was drawn" in stale.json()[
            "detail"]
        assert sorted(AuditEntry.objects.actions().values_list("username", "state")) == [
            (operator.username, "refused"), (viewer.username, "refused")]
        assert psutil.pid_exists(hung.pid)

        # A double click, and a second operator tab at the same moment: one action.
        api = token_client(operator)
        with ThreadPoolExecutor(3) as pool:
            replies = list(pool.map(lambda _: terminate(api, hung), range(3)))
        assert {r.status_code for r in replies} == {202}
        assert len({r.json()["action_id"] for r in replies}) == 1
        assert sum(r.json()["created"] for r in replies) == 1
        action = finished(api, replies[0].json()["action_id"], "errored")
        assert action["state"] == "succeeded", action
        assert [s["step"] for s in action["steps"]] == [
            "requested", "agent_command", "agent_result", "signalled", "gone", "succeeded",
            "errored"]  # no force
        assert not psutil.pid_exists(hung.pid)
        assert action["target"]["pid"] == hung.pid and action["username"] == "oscar-operator"
        assert action["reason"] == "hung in step 5"
        ended = wait_for(lambda: Trial.objects.filter(pk=hung.pk, status=Trial.ERROR).first(),
                         60, 0.5, "Tune to record the terminated trial as errored")
        # The operator's own kill is shown as theirs, and pages nobody.
        wait_for(lambda: Trial.objects.get(pk=hung.pk).status_reason ==
                 "terminated by oscar-operator through raywatch", 30, 0.5, "the detectors")
        shown = {t["id"]: t for t in token_client(viewer).get("/api/trials/").json()}
        assert shown[hung.pk]["terminated_by"] == "oscar-operator"
        assert not Incident.objects.filter(trial=ended, kind="trial_errored").exists()

        # A trial that ignores SIGTERM is forced after the grace period.
        stubborn = watched_by_agent(stuck(name, "stubborn"))
        forced = finished(api, terminate(api, stubborn).json()["action_id"], "errored")
        assert forced["state"] == "succeeded", forced
        assert [s["step"] for s in forced["steps"]] == [
            "requested", "agent_command", "agent_result", "signalled", "forced",
            "agent_command", "agent_result", "gone", "succeeded", "errored"]
        assert not psutil.pid_exists(stubborn.pid)

        # The rest of the search went on to the end.
        assert search.wait(patient(180)) == 0
        healthy = Trial.objects.filter(experiment__name=name, config__behaviour="healthy")
        wait_for(lambda: set(healthy.values_list("status", flat=True)) == {Trial.TERMINATED},
                 60, 0.5, "the healthy trials to finish")
        audit = token_client(viewer).get("/api/audit/?kind=terminate_trial").json()
        assert [(a["target"]["trial_id"], a["state"]) for a in audit] == [
            (stubborn.trial_id, "succeeded"), (hung.trial_id, "succeeded"),
            (hung.trial_id, "refused"), (hung.trial_id, "refused")]  # stale, then the viewer
    finally:
        agent.__exit__(None, None, None)
        if search.poll() is None:
            stop_node(search)


def watched_by_agent(trial: Trial) -> Trial:
    """The trial, once this host's agent has reported its process (a Ray worker)."""
    from dashboard.agents.models import NodeProcess

    wait_for(lambda: NodeProcess.objects.filter(pid=trial.pid).exclude(state="Z").exists(),
             60, 0.3, f"this host's agent to report pid {trial.pid}")
    return trial


def test_a_trial_tune_retries_shows_as_retried(  # type: ignore[no-untyped-def]
        watched, act, ray_cluster, operator) -> None:
    name = f"retry-{uuid.uuid4().hex[:6]}"
    search = start_search(ray_cluster, watched, name, "retry")
    try:
        hung = stuck(name, "hang-once")
        api = token_client(operator)
        action = finished(api, terminate(api, hung).json()["action_id"], "retried")
        assert action["state"] == "succeeded", action
        assert action["steps"][-1]["detail"] == "Tune retried the trial: attempt 2"
    finally:
        stop_node(search)
