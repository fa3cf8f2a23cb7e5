"""In Chromium at 1,280 px: the alerts page with long incident summaries stays as wide
as the window, summaries wrap inside their column, and every row's Acknowledge and
Silence stay in view and work. Incidents nobody was told about say so. Times read the
same everywhere: UTC with an age, or the viewer's own zone when the setting asks."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from dashboard.alerts.models import Silence
from dashboard.incidents.findings import Finding
from dashboard.incidents.models import Incident
from dashboard.incidents.service import sync_findings
from tests.conftest import LiveServer, browser_context, login, off_the_loop

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
WIDTH = 1280
GPU = "GPU-3f9a1c2e-7b4d-4e8f-9a0b-1c2d3e4f5a6b"
LONG = (f"trial grpo_7f3a2_00017 (node 10.0.0.5, pid 412983): no result for 9 min 41 s, "
        f"usually every 20 s; the step in progress is 'reward_model_scoring'; {GPU} idle at 0% "
        f"for 8 min; last log line: /mnt/checkpoints/grpo_sweep_long_experiment_name/"
        f"trial_7f3a2_00017/rollouts/batch_1884_of_2048_generated_with_vllm_engine.jsonl; "
        + "the python stack shows the process waiting on a futex in torch.distributed " * 6)
STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC(just now|\d+ (s|min|h|d) ago)$")


@pytest.fixture
def narrow(browser) -> Iterator[object]:  # type: ignore[no-untyped-def]
    context = browser_context(browser, viewport={"width": WIDTH, "height": 800})
    yield context.new_page()
    context.close()


def open_incidents(at: datetime | None = None) -> list[Incident]:
    findings = [Finding("trial_stalled", f"trial:grpo_sweep_long_experiment_name/7f3a2_0001{n}",
                        "critical", LONG if n % 2 == 0 else f"7f3a2_0001{n}: no result for 9 min")
                for n in range(3)]
    context = {f.subject: {"experiment": "grpo_sweep_long_experiment_name",
                           "node_ip": "10.0.0.5"} for f in findings}
    sync_findings({"trial_stalled"}, findings, at or timezone.now(), context)
    return list(Incident.objects.filter(state=Incident.FIRING).order_by("pk"))


def in_view(page, locator) -> bool:  # type: ignore[no-untyped-def]
    box = locator.bounding_box()
    return box is not None and box["x"] >= 0 and box["x"] + box["width"] <= WIDTH


def test_long_summaries_wrap_and_the_buttons_stay_in_view(  # type: ignore[no-untyped-def]
    narrow, live_server_asgi: LiveServer, operator
) -> None:
    incidents = off_the_loop(open_incidents)
    login(narrow, live_server_asgi, operator, "/alerts/")
    rows = narrow.locator("#alerts tbody tr")
    expect(rows).to_have_count(3)
    assert narrow.evaluate("document.documentElement.scrollWidth") <= WIDTH
    for row in rows.all():
        what = row.locator("td.what")
        # The summary wraps inside its cell: nothing spills over the Where column.
        assert what.evaluate("td => td.scrollWidth <= td.clientWidth")
        assert in_view(narrow, row.locator("button.ack")), "Acknowledge is off-screen"
        assert in_view(narrow, row.locator("a.silence")), "Silence… is off-screen"
        assert STAMP.match(row.locator("td.since").inner_text().replace("\n", ""))
    longest = narrow.locator(f'#alerts tr[data-incident="{incidents[2].pk}"]')
    assert longest.locator("td.what").bounding_box()["height"] > 100  # it did wrap
    longest.locator("button.ack").click()
    expect(longest.locator("td.state")).to_have_text("acknowledged")
    assert Incident.objects.get(pk=incidents[2].pk).acknowledged_by == operator


def test_an_incident_nobody_was_told_about_says_so(  # type: ignore[no-untyped-def]
    narrow, live_server_asgi: LiveServer, viewer
) -> None:
    incident = off_the_loop(open_incidents)[0]
    login(narrow, live_server_asgi, viewer, "/alerts/")
    row = narrow.locator(f'#alerts tr[data-incident="{incident.pk}"]')
    expect(row.locator(".nobody-told")).to_have_text("no channel configured: nobody was told")
    narrow.goto(f"{live_server_asgi.url}/incidents/{incident.pk}/")
    expect(narrow.locator('[data-fact="Told"]')).to_have_text(
        "no channel configured: nobody was told")


def test_times_show_in_the_viewers_zone_when_asked(  # type: ignore[no-untyped-def]
    browser, live_server_asgi: LiveServer, viewer, settings
) -> None:
    settings.TIME_DISPLAY = "local"
    opened = datetime(2026, 3, 2, 10, 0, 0, tzinfo=UTC)
    incident = off_the_loop(open_incidents, opened)[0]
    context = browser_context(browser, viewport={"width": WIDTH, "height": 800},
                                  timezone_id="Asia/Kolkata")  # UTC+5:30, no summer time
    page = context.new_page()
    try:
        login(page, live_server_asgi, viewer, f"/incidents/{incident.pk}/")
        opened_fact = page.locator('[data-fact="Opened"] time')
        expect(opened_fact).to_contain_text("2026-03-02 15:30:00 GMT+5:30")
        expect(opened_fact).to_have_attribute("title", "2026-03-02 10:00:00 UTC")
        # A time the server rendered into the page follows the setting too.
        off_the_loop(lambda: Silence.objects.create(
            kind="gpu_*", starts_at=opened, ends_at=datetime(2099, 1, 1, tzinfo=UTC),
            comment="known", created_by=viewer))
        page.goto(f"{live_server_asgi.url}/alerts/silences/")
        expect(page.locator("#active-silences td.when time")).to_contain_text(
            "2099-01-01 05:30:00 GMT+5:30")
    finally:
        context.close()


def test_a_storm_of_incidents_is_paged(narrow, live_server_asgi: LiveServer, viewer) -> None:  # type: ignore[no-untyped-def]
    """250 open incidents: a hundred a page, every one reachable, none twice."""
    def storm() -> None:
        findings = [Finding("trial_stalled", f"trial:storm/t_{n:03d}", "critical",
                            f"t_{n:03d}: no result for 9 min") for n in range(250)]
        sync_findings({"trial_stalled"}, findings, timezone.now(), {})

    off_the_loop(storm)
    login(narrow, live_server_asgi, viewer, "/alerts/")
    rows = narrow.locator("#alerts tbody tr")
    total = narrow.locator("#alert-total")
    expect(total).to_have_text("1\u2013100 of 250")
    seen: list[str] = []
    for shown in ("1\u2013100 of 250", "101\u2013200 of 250", "201\u2013250 of 250"):
        expect(total).to_have_text(shown)
        expect(narrow.locator("#alerts-page-of")).to_contain_text(" of 3")
        seen += [row.get_attribute("data-incident") for row in rows.all()]
        if not shown.startswith("201"):
            narrow.click("#alerts-next")
    assert len(seen) == 250 and len(set(seen)) == 250
    expect(narrow.locator("#alerts-next")).to_be_disabled()
    narrow.click("#alerts-prev")
    expect(total).to_have_text("101\u2013200 of 250")



def test_an_older_read_answering_last_does_not_show_the_wrong_page(  # type: ignore[no-untyped-def]
        narrow, live_server_asgi: LiveServer, viewer) -> None:
    """A push's re-read of page 1 still on its way when the operator goes to page 2 (an
    incident storm while paging) answers after page 2's: page 2 stays, rows and label."""
    def open_(count: int, first: int = 0) -> None:
        sync_findings({"trial_stalled"}, [
            Finding("trial_stalled", f"trial:storm/t_{n:03d}", "critical",
                    f"t_{n:03d}: no result for 9 min") for n in range(first, first + count)],
            timezone.now(), {})

    off_the_loop(open_, 150)
    login(narrow, live_server_asgi, viewer, "/alerts/")
    rows = narrow.locator("#alerts tbody tr")
    total = narrow.locator("#alert-total")
    expect(total).to_have_text("1\u2013100 of 150")
    first_page = {row.get_attribute("data-incident") for row in rows.all()}
    held: list = []

    def hold(route) -> None:  # type: ignore[no-untyped-def]
        held.append(route)  # (Playwright wants a function of its own, not a bound method)

    narrow.route(re.compile(r".*/api/alerts/\?(?!.*page=).*"), hold)  # page 1's reads
    off_the_loop(open_, 1, 150)  # a push: the page reads page 1 again
    for _ in range(100):
        if held:
            break
        narrow.wait_for_timeout(100)
    assert held, "the push's re-read of page 1"
    narrow.click("#alerts-next")
    expect(total).to_have_text("101\u2013151 of 151")
    second_page = [row.get_attribute("data-incident") for row in rows.all()]
    with narrow.expect_response(lambda r: r.request == held[0].request):
        held[0].continue_()
    narrow.wait_for_timeout(500)  # the old answer's rendering, had it been let through
    expect(total).to_have_text("101\u2013151 of 151")
    assert [row.get_attribute("data-incident") for row in rows.all()] == second_page
    assert second_page == [str(i["id"]) for i in narrow.request.get(live_server_asgi.url +
        "/api/alerts/?page_size=100&page=2").json()]
    assert len(first_page - set(second_page)) == 99  # the new incident moved one over
