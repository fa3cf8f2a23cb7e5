"""The trial table of a 1,000-trial search in Chromium: a page of rows the server
filtered and sorted, paging through them, and live rows applied to the page shown."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from playwright.sync_api import expect

from dashboard.trials.models import Experiment, Trial
from dashboard.trials.push import push_updates
from dashboard.trials.store import IngestStats
from tests.conftest import LiveServer, login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def test_thousand_trials_sort_and_filter(page, live_server_asgi: LiveServer, viewer) -> None:  # type: ignore[no-untyped-def]
    experiment = Experiment.objects.create(name="big-asha", metric="score", mode="max")
    statuses = ["RUNNING", "TERMINATED", "TERMINATED", "ERROR"]
    Trial.objects.bulk_create([
        Trial(experiment=experiment, trial_id=f"bb{i:03d}_{i:05d}", status=statuses[i % 4],
              iteration=(i * 37) % 1000, node_ip=f"10.0.{i % 8}.1",
              last_result_at=NOW - timedelta(seconds=i), last_metrics={"score": float(i)},
              metric_range={"score": [float(-i), float(i)]},
              config={"arch": "cnn" if i % 2 else "mlp", "lr": i / 1000, "seed": 7})
        for i in range(1000)
    ])
    login(page, live_server_asgi, viewer, f"/experiments/{experiment.pk}/")
    rows = page.locator("#trials tbody tr")
    count = page.locator("#count")
    expect(rows).to_have_count(100)
    expect(count).to_have_text("1\u2013100 of 1,000 trials")
    expect(page.locator("#page-of")).to_have_text("page 1 of 10")
    # Hyperparameters that differ come first; one the same everywhere comes after.
    heads = page.locator("#trials th.hp")
    expect(heads).to_have_text(["arch", "lr", "seed"])
    page.click("#page-next")
    expect(count).to_have_text("101\u2013200 of 1,000 trials")
    expect(rows.first).to_have_attribute("data-trial-id", "bb100_00100")

    page.select_option("#status-filter", "ERROR")
    expect(count).to_have_text("1\u2013100 of 250 matching (1,000 trials)")  # back to page 1
    page.fill("#filter", "10.0.3.1")
    # ERROR trials are i % 4 == 3, all on 10.0.3.1 or 10.0.7.1
    expect(count).to_have_text("1\u2013100 of 125 matching (1,000 trials)")
    page.select_option("#page-size", "200")
    expect(rows).to_have_count(125)
    assert page.url.endswith("?q=10.0.3.1&status=ERROR&page_size=200")  # a link keeps it
    page.fill("#filter", "")
    page.select_option("#status-filter", "")
    page.fill("#filter", "arch=mlp")  # a config value
    expect(count).to_have_text("1\u2013200 of 500 matching (1,000 trials)")
    page.fill("#filter", "lr=0.123")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-trial-id", "bb123_00123")
    page.fill("#filter", "")

    page.click('th[data-sort="iteration"]')
    page.click('th[data-sort="iteration"]')  # descending
    first = rows.first.locator("td").nth(2)
    expect(first).to_have_text("999")
    # "Best" sorts best first by the search's mode: the highest score for max...
    page.click('th[data-sort="best"]')
    expect(rows.first).to_have_attribute("data-trial-id", "bb999_00999")
    expect(rows.first.locator("td.best")).to_have_text("999")
    # ... and each trial's lowest for min, still best first.
    page.select_option("#mode-select", "min")
    expect(page.locator('th[data-sort="best"]')).to_have_text("Best score ↓ min")
    expect(page.locator("#objective-source")).to_contain_text("picked here")
    expect(rows.first.locator("td.best")).to_have_text("-999")

    # Live: a shown trial's new result lands in its row; a trial on another page stays off.
    shown = Trial.objects.get(trial_id="bb999_00999")
    elsewhere = Trial.objects.get(trial_id="bb000_00000")
    Trial.objects.filter(pk__in=[shown.pk, elsewhere.pk]).update(iteration=4242)
    push_updates(IngestStats(changed_trials={shown.pk, elsewhere.pk}))
    expect(rows.first.locator("td").nth(2)).to_have_text("4242")
    expect(page.locator('#trials tbody tr[data-trial-id="bb000_00000"]')).to_have_count(0)
    expect(rows).to_have_count(200)
