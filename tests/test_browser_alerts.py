"""In Chromium: an operator watching the alerts page sees a new incident arrive and the
header's open-alert count rise without a reload, acknowledges it there, and every
page's header follows the count live."""

from __future__ import annotations

import re

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from dashboard.incidents.findings import Finding
from dashboard.incidents.models import Incident
from dashboard.incidents.service import sync_findings
from tests.conftest import LiveServer, login, off_the_loop

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def detector_finds(*findings: Finding) -> list[Incident]:
    """What a detector run does: open incidents for what it finds, committed."""
    kinds = {f.kind for f in findings}
    context = {f.subject: {"experiment": "mnist", "node_ip": "10.0.0.5"} for f in findings}
    off_the_loop(sync_findings, kinds, findings, timezone.now(), context)
    return [Incident.objects.get(kind=f.kind, subject=f.subject, state=Incident.FIRING)
            for f in findings]


def stalled(trial: str) -> Finding:
    return Finding("trial_stalled", f"trial:mnist/{trial}", "critical",
                   f"{trial}: no result for 9 min (usually every 20 s)")


def expect_open_count(page, n: int) -> None:  # type: ignore[no-untyped-def]
    badge = page.locator("#alert-count")
    expect(badge).to_have_attribute("data-open", str(n))
    expect(badge).to_have_text(f"{n} open alert{'' if n == 1 else 's'}")


def test_operator_sees_an_incident_arrive_and_acknowledges_it(  # type: ignore[no-untyped-def]
    page, live_server_asgi: LiveServer, operator
) -> None:
    login(page, live_server_asgi, operator, "/alerts/")
    expect(page.locator("#live-state")).to_have_text("live")
    expect(page.locator("#no-alerts")).to_be_visible()
    expect_open_count(page, 0)
    page.evaluate("window.__noReload = true")

    [incident] = detector_finds(stalled("t_0001"))
    row = page.locator(f'#alerts tr[data-incident="{incident.pk}"]')
    expect(row).to_be_visible()
    expect(row.locator("td.state")).to_have_text("firing")
    expect(row).to_contain_text("t_0001: no result for 9 min")
    expect(row).to_contain_text("experiment mnist")
    expect(row.locator("a.silence")).to_have_attribute(
        "href", re.compile(r"^/alerts/silences/\?kind=trial_stalled&subject=trial"))
    expect(page.locator("#no-alerts")).to_be_hidden()
    expect_open_count(page, 1)

    row.locator("button.ack").click()
    expect(row.locator("td.state")).to_have_text("acknowledged")
    expect(row).to_contain_text(f"acknowledged by {operator.username}")
    expect(row.locator("button.ack")).to_have_count(0)
    expect_open_count(page, 0)
    assert page.evaluate("window.__noReload") is True
    incident.refresh_from_db()
    assert incident.acknowledged_by == operator

    # The incident's own page tells the story.
    row.locator(f'a[href="/incidents/{incident.pk}/"]').click()
    page.wait_for_url(f"{live_server_asgi.url}/incidents/{incident.pk}/")
    timeline = page.locator("#timeline li")
    expect(timeline).to_have_count(2)
    expect(timeline.nth(0)).to_have_attribute("data-kind", "opened")
    expect(timeline.nth(1)).to_have_attribute("data-kind", "acknowledged")
    expect(timeline.nth(1)).to_contain_text(f"by {operator.username}")
    expect(page.locator('[data-fact="State"]')).to_have_text("acknowledged")


@pytest.mark.parametrize("path", ["/cluster/", "/alerts/silences/"])
def test_every_page_header_follows_the_open_alert_count(  # type: ignore[no-untyped-def]
    page, live_server_asgi: LiveServer, viewer, path: str
) -> None:
    detector_finds(stalled("t_0001"))
    login(page, live_server_asgi, viewer, path)
    expect_open_count(page, 1)  # as rendered by the server
    expect(page.locator("#live-state")).to_have_text("live")
    page.evaluate("window.__noReload = true")

    detector_finds(stalled("t_0001"), stalled("t_0002"))
    expect_open_count(page, 2)
    off_the_loop(sync_findings, {"trial_stalled"}, [], timezone.now())  # both clear up
    expect_open_count(page, 0)
    assert page.evaluate("window.__noReload") is True


def test_viewer_sees_incidents_but_no_acknowledge_button(  # type: ignore[no-untyped-def]
    page, live_server_asgi: LiveServer, viewer
) -> None:
    [incident] = detector_finds(stalled("t_0001"))
    login(page, live_server_asgi, viewer, "/alerts/")
    row = page.locator(f'#alerts tr[data-incident="{incident.pk}"]')
    expect(row.locator("td.state")).to_have_text("firing")
    expect(row.locator("button.ack")).to_have_count(0)
    expect(row.locator("a.silence")).to_have_count(0)


def test_operator_silences_an_incident_from_its_row(  # type: ignore[no-untyped-def]
    page, live_server_asgi: LiveServer, operator
) -> None:
    [incident] = detector_finds(stalled("t_0001"))
    login(page, live_server_asgi, operator, "/alerts/")
    expect_open_count(page, 1)
    page.locator(f'#alerts tr[data-incident="{incident.pk}"] a.silence').click()
    page.wait_for_url(re.compile(r"/alerts/silences/\?"))
    expect(page.locator("#silence-form select[name=kind]")).to_have_value("trial_stalled")
    expect(page.locator("#silence-form input[name=subject]")).to_have_value(incident.subject)
    page.fill("#silence-form textarea[name=comment]", "restarting the mnist search")
    page.click("#silence-form button[type=submit]")
    page.wait_for_url(f"{live_server_asgi.url}/alerts/silences/")
    expect(page.locator(".messages")).to_contain_text("is on until")
    expect(page.locator("#active-silences tbody tr[data-silence]")).to_contain_text(
        "restarting the mnist search")
    expect_open_count(page, 0)

    page.goto(f"{live_server_asgi.url}/alerts/")
    row = page.locator(f'#alerts tr[data-incident="{incident.pk}"]')
    expect(row.locator("td.state")).to_have_text("silenced")
