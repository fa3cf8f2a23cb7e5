"""The trial table of a 1,000-trial search: all rows, sorting and filtering in Chromium."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from playwright.sync_api import expect

from dashboard.trials.models import Experiment, Trial
from tests.conftest import LiveServer, login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def test_thousand_trials_sort_and_filter(page, live_server_asgi: LiveServer, viewer) -> None:  # type: ignore[no-untyped-def]
    experiment = Experiment.objects.create(name="big-asha")
    statuses = ["RUNNING", "TERMINATED", "TERMINATED", "ERROR"]
    Trial.objects.bulk_create([
        Trial(experiment=experiment, trial_id=f"bb{i:03d}_{i:05d}", status=statuses[i % 4],
              iteration=(i * 37) % 1000, best_value=float(i), node_ip=f"10.0.{i % 8}.1",
              last_result_at=NOW - timedelta(seconds=i), last_metrics={"score": float(i)})
        for i in range(1000)
    ])
    login(page, live_server_asgi, viewer, f"/experiments/{experiment.pk}/")
    rows = page.locator("#trials tbody tr")
    expect(rows).to_have_count(1000)
    expect(page.locator("#count")).to_have_text("1000 of 1000 trials")

    page.select_option("#status-filter", "ERROR")
    expect(rows).to_have_count(250)
    page.fill("#filter", "10.0.3.1")
    expect(rows).to_have_count(125)  # ERROR trials are i % 4 == 3, all on 10.0.3.1 or 10.0.7.1
    page.fill("#filter", "")
    page.select_option("#status-filter", "")

    page.click('th[data-sort="iteration"]')
    page.click('th[data-sort="iteration"]')  # descending
    first = rows.first.locator("td").nth(2)
    expect(first).to_have_text("999")
    page.click('th[data-sort="best_value"]')
    expect(rows.first).to_have_attribute("data-trial-id", "bb000_00000")
