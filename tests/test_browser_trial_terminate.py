"""In Chromium, on the TRIAL page: the Terminate button opens the confirm dialog and
ends the process (through the agent of its node: raywatch's own host's, as `serve`
starts it); when the API refuses (the process went, or changed since the dialog opened)
the dialog says why, in the API's words."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect

from collectors.hostinfo import host_name
from dashboard.actions.models import AuditEntry
from dashboard.agents.models import NodeProcess
from dashboard.trials.models import Trial
from tests.agents import node_agent
from tests.conftest import LiveServer, login, off_the_loop, wait_for
from tests.patience import ms
from tests.test_terminate_on_this_host import hung_trial

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def embedded(settings):  # type: ignore[no-untyped-def]
    settings.EMBEDDED = True  # the action runs in the server's background pool
    settings.TERMINATE_GRACE_S = 3.0
    return settings


def open_dialog(page, server: LiveServer, user, trial: Trial):  # type: ignore[no-untyped-def]
    login(page, server, user, f"/trials/{trial.pk}/")
    page.click("#terminate-trial")
    dialog = page.locator("#action-dialog")
    expect(dialog).to_be_visible()
    return dialog


def test_terminate_from_the_trial_page(  # type: ignore[no-untyped-def]
        page, live_server_asgi: LiveServer, operator, embedded, tmp_path: Path,
        hung_process) -> None:
    trial = hung_trial(hung_process.pid)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    with node_agent(live_server_asgi.url, tmp_path, pid=hung_process.pid):
        dialog = open_dialog(page, live_server_asgi, operator, trial)
        # The process as Ray knows it, and where: never as a result line names it.
        expect(dialog.locator('[data-fact="Process"]')).to_contain_text(
            f"pid {hung_process.pid}: Ray worker of actor train ")
        expect(dialog.locator('[data-fact="Cluster"]')).to_have_text(
            trial.experiment.cluster.name)
        expect(dialog.locator('[data-fact="Node"]')).to_have_text(
            f"{host_name()} 127.0.0.1 (its agent signals)")
        expect(dialog.locator('[data-fact="Trial"]')).to_contain_text("t_00000 of search")
        page.fill("#action-reason", "silent for 5 min")
        page.click("#action-confirm")
        expect(dialog).to_be_hidden()
        wait_for(lambda: hung_process.poll() is not None, 30, 0.2, "the process to end")
        off_the_loop(lambda: Trial.objects.filter(pk=trial.pk).update(status=Trial.ERROR))
        expect(page.locator("#action-state")).to_have_text("succeeded", timeout=ms(30))
    expect(page.locator('#action-steps li[data-step="signalled"]')).to_contain_text(
        f"SIGTERM sent to pid {hung_process.pid}")
    expect(page.locator('#action-steps li[data-step="errored"]')).to_be_visible(timeout=ms(40))
    assert errors == []


def test_the_dialog_says_why_the_preview_failed(  # type: ignore[no-untyped-def]
        page, live_server_asgi: LiveServer, operator, embedded, tmp_path: Path,
        hung_process) -> None:
    trial = hung_trial(hung_process.pid)
    with node_agent(live_server_asgi.url, tmp_path, pid=hung_process.pid):
        login(page, live_server_asgi, operator, f"/trials/{trial.pk}/")
        hung_process.kill()  # it ended between drawing the page and the click
        hung_process.wait()
        wait_for(lambda: not NodeProcess.objects.filter(pid=hung_process.pid).exists(), 30, 0.2,
                 "this host's agent to see the process gone")
        page.click("#terminate-trial")
        dialog = page.locator("#action-dialog")
        expect(dialog).to_be_visible()
        expect(dialog.locator("#action-error")).to_have_text(
            f"the agent of {host_name()} does not list pid {hung_process.pid}: it ended, or is "
            "not a process the agent watches")
        expect(dialog.locator("#action-confirm")).to_be_disabled()


def test_the_dialog_says_why_the_action_was_refused(  # type: ignore[no-untyped-def]
        page, live_server_asgi: LiveServer, operator, embedded, hung_process) -> None:
    trial = hung_trial(hung_process.pid)
    dialog = open_dialog(page, live_server_asgi, operator, trial)
    # Tune restarted the trial in a new process while the dialog was open.
    off_the_loop(lambda: Trial.objects.filter(pk=trial.pk).update(pid=1, attempt=2))
    page.fill("#action-reason", "silent for 5 min")
    page.click("#action-confirm")
    expect(dialog.locator("#action-error")).to_contain_text(
        "changed since the page was drawn: pid was")
    expect(dialog).to_be_visible()
    assert hung_process.poll() is None  # nothing was signalled
    refused = off_the_loop(lambda: list(AuditEntry.objects.actions().values("state", "outcome")))
    assert len(refused) == 1 and refused[0]["state"] == "refused"
    assert "changed since the page was drawn" in refused[0]["outcome"]


def test_a_reply_that_is_not_json_is_still_explained(  # type: ignore[no-untyped-def]
        page, live_server_asgi: LiveServer, operator, embedded, hung_process) -> None:
    trial = hung_trial(hung_process.pid)
    dialog = open_dialog(page, live_server_asgi, operator, trial)
    # A proxy in front of raywatch answers with an HTML error page.
    page.route("**/terminate", lambda route: route.fulfill(
        status=502, content_type="text/html", body="<html><h1>Bad Gateway</h1></html>")
        if route.request.method == "POST" else route.continue_())
    page.fill("#action-reason", "silent for 5 min")
    page.click("#action-confirm")
    expect(dialog.locator("#action-error")).to_contain_text("the server answered HTTP 502")
    expect(dialog).to_be_visible()
