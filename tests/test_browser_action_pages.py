"""In Chromium: every page that offers an action (trial, incident, GPU, jobs) loads the
confirm dialog's script after the live-update script it builds on, so its buttons work
(on the trial page they once did nothing: "Cannot read properties of undefined")."""

from __future__ import annotations

import pytest
from django.utils import timezone

from dashboard.incidents.models import Incident
from tests.conftest import LiveServer, login, off_the_loop
from tests.test_terminate_on_this_host import gpu_process, hung_trial

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def pages() -> list[str]:
    trial = hung_trial(4242)
    now = timezone.now()
    incident = Incident.objects.create(kind="trial_stalled", subject=f"trial:{trial.pk}",
                                       summary="silent for 5 min", trial=trial,
                                       opened_at=now, updated_at=now)
    gpu_process("GPU-0", "10.0.0.5", 4343, [1])
    return [f"/trials/{trial.pk}/", f"/incidents/{incident.pk}/", "/gpus/GPU-0/", "/jobs/"]


def test_every_page_with_an_action_has_a_working_dialog(  # type: ignore[no-untyped-def]
        page, live_server_asgi: LiveServer, admin) -> None:
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    paths = off_the_loop(pages)
    login(page, live_server_asgi, admin, paths[0])
    for path in paths:
        page.goto(live_server_asgi.url + path)
        page.wait_for_load_state("load")
        assert page.evaluate("typeof (window.raywatch || {}).actions") == "object", path
        assert page.locator("#action-dialog").count() == 1, path
    assert errors == []
