"""In Chromium, against a real Tune search that names its objective
(TuneConfig(metric="reward_mean", mode="max")) and has one trial that hangs:

- the trial table's header names the search's metric and mode, "Best" is the best by
  mode=max (neither the last value nor the lowest), the filter finds a trial by a
  hyperparameter value, the hung trial's health says stalled, and the cross-trial chart
  draws one line per trial;
- the hung trial's page lists its stall incident (linking to the incident page) and the
  tail of what it printed, read through Ray's log API, with a link to its actor in
  Ray's dashboard.

RAYWATCH_SHOTS=DIR saves screenshots of both pages at 1280 and 1440 px for review.
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

import pytest
from playwright.sync_api import expect

from dashboard.incidents.models import Incident
from dashboard.trials.models import Experiment, Trial
from tests.conftest import LiveServer, login, start_search, stop_node, wait_for
from tests.patience import ms
from tests.test_end_to_end import screenshots

pytestmark = [pytest.mark.browser, pytest.mark.ray, pytest.mark.django_db(transaction=True)]


def trial_with(experiment: Experiment, lr: float, **more: object) -> Trial | None:
    return Trial.objects.filter(experiment=experiment, config__lr=lr, **more).first()


def shoot(page, name: str) -> None:  # type: ignore[no-untyped-def]
    if where := os.environ.get("RAYWATCH_SHOTS"):
        screenshots(page, str(Path(where) / name))


def test_trial_table_and_page_follow_a_real_search(  # type: ignore[no-untyped-def]
    page, live_server_asgi: LiveServer, viewer, watched, ray_settings
) -> None:
    name = f"objective-{uuid.uuid4().hex[:6]}"
    search = start_search(ray_settings, watched, name, "objective")
    try:
        experiment = wait_for(
            lambda: Experiment.objects.filter(name=name, metric="reward_mean", mode="max").first(),
            90, 0.5, "the search's metric and mode read from its own files",
            lambda: list(Experiment.objects.values_list("name", "metric", "mode")))
        healthy = wait_for(lambda: trial_with(experiment, 2.0, iteration=8), 90, 0.5,
                           "the lr=2.0 trial's last result")
        slow_one = wait_for(lambda: trial_with(experiment, 0.5, iteration=8), 30, 0.5,
                            "the lr=0.5 trial's last result")
        hung = wait_for(lambda: trial_with(experiment, 3.0, incidents__kind="trial_stalled",
                                           incidents__state=Incident.FIRING), 90, 0.5,
                        "the hung trial's stall incident")

        login(page, live_server_asgi, viewer, f"/experiments/{experiment.pk}/")
        expect(page.locator('#trials th[data-sort="best"]')).to_have_text("Best reward_mean ↑ max")
        expect(page.locator("#objective-source")).to_have_text(
            "the search's own metric and mode (Tune's experiment state)")
        row = page.locator(f'#trials tbody tr[data-trial-id="{healthy.trial_id}"]')
        # reward_mean went 2, 4, 6, 8, 6, 4, 2, 0: best by max is 8, the last 0.
        expect(row.locator("td.best")).to_have_text("8")
        expect(row.locator("td.last")).to_have_text("0")
        expect(page.locator('#trials th[data-sort="hp:lr"]')).to_be_visible()
        hung_row = page.locator(f'#trials tbody tr[data-trial-id="{hung.trial_id}"]')
        expect(hung_row.locator("td.health")).to_contain_text("stalled")

        rows = page.locator("#trials tbody tr")
        page.fill("#filter", "lr=0.5")
        expect(rows).to_have_count(1)
        expect(rows.first).to_have_attribute("data-trial-id", slow_one.trial_id)
        page.fill("#filter", "behaviour=hang")
        expect(rows).to_have_count(1)
        expect(rows.first).to_have_attribute("data-trial-id", hung.trial_id)
        page.fill("#filter", "")
        expect(rows).to_have_count(3)
        expect(page.locator("#curves-chart")).to_have_attribute("data-curves", "3")
        shoot(page, "experiment")

        hung_row.locator("a").click()
        page.wait_for_url(f"**/trials/{hung.pk}/")
        incident = Incident.objects.get(trial=hung, kind="trial_stalled", state=Incident.FIRING)
        listed = page.locator(f'#incidents tbody tr[data-incident="{incident.pk}"]')
        expect(listed.locator("td.state")).to_have_text("firing")
        expect(listed.locator("a").first).to_have_attribute("href", f"/incidents/{incident.pk}/")
        # What the trial printed before it hung, from its worker's log through Ray.
        expect(page.locator("#output-stdout")).to_contain_text("hanging at iteration 5",
                                                               timeout=ms(30))
        expect(page.locator("#output-stdout")).to_contain_text("iteration 4: score 12.0")
        expect(page.locator("#output-source")).to_contain_text("Ray's log API, actor")
        expect(page.locator("#actor-link")).to_have_attribute(
            "href", re.compile(r"^http://127\.0\.0\.1:\d+/#/actors/[0-9a-f]{32}$"))
        # Its stall fired only after STALL_MIN_S (6 s here) without a result.
        expect(page.locator('[data-fact="silent"]')).to_contain_text("silent for")
        expect(page.locator("#best-title")).to_have_text("Best reward_mean ↑ max")
        expect(page.locator('[data-fact="best"]')).to_have_text("12")
        shoot(page, "trial-hung")
        page.goto(f"{live_server_asgi.url}/experiments/")
        listed = page.locator(f'#experiments tr[data-experiment="{name}"]')
        expect(listed).to_contain_text("reward_mean ↑ max")
        shoot(page, "experiments")
    finally:
        stop_node(search)
