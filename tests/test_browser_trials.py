"""In Chromium: while a real Tune search runs, the trial page's charts grow without a
reload, and the experiment's trial table shows the trials live."""

from __future__ import annotations

import uuid

import pytest
from playwright.sync_api import expect

from dashboard.trials.models import Trial
from tests.conftest import LiveServer, login, search_said, start_search, stop_node, wait_for
from tests.patience import ms

pytestmark = [pytest.mark.browser, pytest.mark.ray, pytest.mark.django_db(transaction=True)]


def points(page) -> int:  # type: ignore[no-untyped-def]
    return int(page.locator("#metric-charts").get_attribute("data-points") or 0)


def test_trial_charts_grow_while_tune_runs(  # type: ignore[no-untyped-def]
    page, live_server_asgi: LiveServer, viewer, watched, ray_settings
) -> None:
    name = f"live-{uuid.uuid4().hex[:6]}"
    search = start_search(ray_settings, watched, name, "mixed")
    try:
        healthy = wait_for(lambda: Trial.objects.filter(experiment__name=name,
                                                        config__behaviour="healthy",
                                                        iteration__gte=2).first(),
                           180, 0.5, "the healthy trial's first results",
                           lambda: (list(Trial.objects.filter(experiment__name=name).values_list(
                               "trial_id", "status", "iteration")), search_said(search)))
        login(page, live_server_asgi, viewer, f"/experiments/{healthy.experiment_id}/")
        row = page.locator(f'#trials tbody tr[data-trial-id="{healthy.trial_id}"]')
        expect(row).to_be_visible()
        expect(page.locator("#trials tbody tr")).to_have_count(4, timeout=ms(30))

        row.locator("a").click()
        page.wait_for_url(f"**/trials/{healthy.pk}/")
        page.evaluate("window.__noReload = true")
        expect(page.locator('[data-fact="status"]')).to_have_text("RUNNING")
        first = points(page)
        assert page.locator('#metric-picker input[data-metric="score"]').is_checked()
        wait_for(lambda: points(page) >= first + 5, 30, 0.3, "the chart to grow")
        # One panel per metric: score and loss do not share a y-axis.
        expect(page.locator('#metric-charts figure[data-metric="score"] .main-svg').first
               ).to_be_visible()
        expect(page.locator('#metric-charts figure[data-metric="loss"]')).to_be_visible()
        # The stacked phase chart carries every step; no second chart repeats it.
        phase_names = page.evaluate(
            "document.getElementById('phases-chart').data.map(t => t.name)")
        # (plus the step's time outside them, when the busy machine made that a share)
        assert set(phase_names) - {"outside the phases"} == {"timing_s/gen", "timing_s/reward"}
        steps = page.evaluate("document.getElementById('phases-chart').data[0].x.length")
        assert steps >= first + 5
        assert page.locator("#steptime-chart").count() == 0
        assert page.evaluate("window.__noReload") is True
    finally:
        stop_node(search)
