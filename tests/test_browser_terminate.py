"""In Chromium: from a stalled-trial alert, an operator terminates the hung trial
through the confirm dialog and watches the outcome arrive live (SIGTERM sent by the
agent of the trial's node: raywatch's own host's, as `serve` starts it); the audit page
shows it."""

from __future__ import annotations

import uuid
from pathlib import Path

import psutil
import pytest
from playwright.sync_api import expect

from collectors.hostinfo import host_name
from dashboard.incidents.models import Incident
from tests.agents import node_agent
from tests.conftest import LiveServer, login, start_search, stop_node, wait_for
from tests.patience import ms, patient

pytestmark = [pytest.mark.beside, pytest.mark.browser, pytest.mark.ray,
              pytest.mark.django_db(transaction=True)]


def test_an_operator_terminates_a_hung_trial_from_its_alert(  # type: ignore[no-untyped-def]
    page, live_server_asgi: LiveServer, operator, watched, ray_settings, settings,
    tmp_path: Path
) -> None:
    settings.EMBEDDED = True  # the action runs in the server's background pool
    settings.TERMINATE_GRACE_S = 3.0
    settings.RAY_GCS_ADDRESS = ray_settings.gcs_address
    name = f"kill-{uuid.uuid4().hex[:6]}"
    node_ip = ray_settings.gcs_address.rpartition(":")[0]  # the Ray node of this host
    search = start_search(ray_settings, watched, name, "terminate")
    try:
        with node_agent(live_server_asgi.url, tmp_path, node_ip=node_ip):
            incident = wait_for(lambda: Incident.objects.filter(
                kind="trial_stalled", state=Incident.FIRING, experiment=name,
                trial__config__behaviour="hang").select_related("trial").first(),
                120, 0.5, "the hung trial's stall alert")
            trial = incident.trial
            login(page, live_server_asgi, operator, f"/incidents/{incident.pk}/")
            page.click("#terminate-trial")
            dialog = page.locator("#action-dialog")
            expect(dialog).to_be_visible()
            # The dialog says exactly what will die.
            # The process as Ray ties it to the trial: its actor, from Ray's own listing.
            expect(dialog.locator('[data-fact="Process"]')).to_contain_text(
                f"pid {trial.pid}: Ray worker of actor trainable ")
            expect(dialog.locator('[data-fact="Trial"]')).to_contain_text(trial.trial_id)
            page.fill("#action-reason", "stalled in step 5, GPUs idle")
            page.click("#action-confirm")
            expect(dialog).to_be_hidden()
            state = page.locator("#action-state")
            expect(state).to_have_text("succeeded", timeout=ms(30))
            expect(page.locator('#action-steps li[data-step="signalled"]')).to_contain_text(
                f"SIGTERM sent to pid {trial.pid}")
            expect(page.locator('#action-steps li[data-step="signalled"]')).to_contain_text(
                f"by the agent of {host_name()}")
            expect(page.locator('#action-steps li[data-step="errored"]')).to_be_visible(
                timeout=ms(40))  # Tune's verdict arrives after the process is gone
            assert not psutil.pid_exists(trial.pid)
            page.goto(f"{live_server_asgi.url}/audit/")
            row = page.locator("#audit tbody tr").first
            expect(row).to_contain_text("oscar-operator")
            expect(row).to_contain_text("stalled in step 5, GPUs idle")
            expect(row).to_contain_text("succeeded")
    finally:
        stop_node(search)


def test_a_viewer_sees_no_terminate_button(  # type: ignore[no-untyped-def]
    page, live_server_asgi: LiveServer, viewer
) -> None:
    from django.utils import timezone

    from dashboard.trials.models import Experiment, Trial

    now = timezone.now()
    trial = Trial.objects.create(experiment=Experiment.objects.create(name="e"),
                                 trial_id="t_1", status="RUNNING", pid=4242)
    Incident.objects.create(kind="trial_stalled", subject="trial:e/t_1", summary="stalled",
                            trial=trial, experiment="e", opened_at=now, updated_at=now)
    login(page, live_server_asgi, viewer, f"/trials/{trial.pk}/")
    expect(page.locator('[data-fact="status"]')).to_have_text("RUNNING")
    assert page.locator("#terminate-trial").count() == 0
    page.goto(f"{live_server_asgi.url}/incidents/{Incident.objects.get().pk}/")
    expect(page.locator('[data-fact="State"]')).to_have_text("firing")
    assert page.locator("#terminate-trial").count() == 0


def test_an_admin_kills_an_orphan_from_the_gpu_page(  # type: ignore[no-untyped-def]
    page, live_server_asgi: LiveServer, admin, settings, tmp_path
) -> None:
    import subprocess

    from tests.agents import node_agent
    from tests.conftest import mark_ray_current, off_the_loop

    settings.EMBEDDED = True
    settings.TERMINATE_GRACE_S = 1.0
    node, node_ip = "gpu-k", "10.9.0.11"
    stranger = subprocess.Popen(["sleep", "600"])
    try:
        # The node's agent lists the process on its GPU; only it can signal it.
        with node_agent(live_server_asgi.url, tmp_path, node=node, node_ip=node_ip,
                        pid=stranger.pid, on_gpu=True, memory=12 * 1024**3):
            off_the_loop(mark_ray_current)
            login(page, live_server_asgi, admin, f"/gpus/GPU-{node}-0/")
            # The agent's reports push the process again every second, a second older:
            # the row is written in place, and the button an admin is about to click
            # stays the element it was (a row rebuilt under the pointer loses the click).
            row = page.locator(f'#processes tr[data-pid="{stranger.pid}"]')
            row.locator("[data-kill-process]").evaluate("b => { b.dataset.seen = 'at first' }")
            age = row.locator('[data-col="age"]')
            expect(age).not_to_have_text(age.inner_text())
            expect(row.locator("[data-kill-process]")).to_have_attribute("data-seen", "at first")
            row.locator("[data-kill-process]").click()
            dialog = page.locator("#action-dialog")
            expect(dialog.locator('[data-fact="Process"]')).to_have_text(f"pid {stranger.pid}")
            expect(dialog.locator('[data-fact="Memory held"]')).to_have_text("12.0 GiB")
            page.fill("#action-reason", "left over by a crashed vLLM start")
            page.click("#action-confirm")
            expect(page.locator("#action-state")).to_have_text("succeeded", timeout=ms(30))
            assert stranger.wait(patient(10)) == -15  # it obeyed SIGTERM
    finally:
        stranger.kill()
        stranger.wait()
