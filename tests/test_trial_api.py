"""The trials and alerts API, and hostile names on every trial page."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client
from playwright.sync_api import expect

from dashboard.incidents.models import Incident
from dashboard.trials.models import Experiment, StepResult, Trial
from tests.conftest import PASSWORD, LiveServer, api_token, login

pytestmark = pytest.mark.both_backends

EVIL = '<script>alert("x")</script><img src=x onerror=alert(2)>'
NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


@pytest.fixture
def search(db: None) -> Trial:
    experiment = Experiment.objects.create(name=f"exp {EVIL}")
    trial = Trial.objects.create(
        experiment=experiment, trial_id="ab12c_00001", status="RUNNING", iteration=3, pid=4321,
        node_ip="10.0.0.9", last_result_at=NOW, config={"lr": 0.1, EVIL: EVIL},
        last_metrics={EVIL: 1.0, "score": 3.0},
        metric_range={EVIL: [1.0, 1.0], "score": [1.0, 3.0]},
    )
    for i in (1, 2, 3):
        StepResult.objects.create(trial=trial, iteration=i, at=NOW + timedelta(seconds=i),
                                  ingested_at=NOW, time_this_iter_s=1.0,
                                  metrics={"score": float(i), EVIL: 1.0, "timing_s/gen": 0.5})
    Incident.objects.create(kind="trial_stalled", subject="trial:exp/ab12c_00001",
                            summary=f"stalled {EVIL}", trial=trial, opened_at=NOW,
                            updated_at=NOW, severity="critical")
    Incident.objects.create(kind="node_dead", subject="node:x", summary="gone",
                            state="resolved", opened_at=NOW - timedelta(hours=1),
                            updated_at=NOW, resolved_at=NOW)
    return trial


def api(user) -> Client:  # type: ignore[no-untyped-def]
    return Client(HTTP_AUTHORIZATION=f"Token {api_token(user)}")


def test_trials_list_fields_and_filters(search, viewer) -> None:  # type: ignore[no-untyped-def]
    rows = api(viewer).get("/api/trials/").json()
    assert len(rows) == 1
    row = rows[0]
    for field in ("trial_id", "experiment", "status", "iteration", "last_result_at", "pid",
                  "node_ip", "health"):
        assert field in row
    assert row["health"] == "stalled" and row["pid"] == 4321
    assert api(viewer).get("/api/trials/?status=ERROR").json() == []
    bad = api(viewer).get("/api/trials/?status=bogus")
    assert bad.status_code == 400 and "status" in bad.json()


def test_trial_results_in_order(search, viewer) -> None:  # type: ignore[no-untyped-def]
    pk = Trial.objects.get(trial_id="ab12c_00001").pk
    results = api(viewer).get(f"/api/trials/{pk}/results/").json()
    assert [r["iteration"] for r in results] == [1, 2, 3]
    assert results[0]["metrics"]["timing_s/gen"] == 0.5
    assert api(viewer).get("/api/trials/999999/results/").status_code == 404
    assert api(viewer).get(f"/api/trials/{pk}/results/?limit=x").status_code == 400


def test_alerts_list_and_state_filter(search, viewer) -> None:  # type: ignore[no-untyped-def]
    everything = api(viewer).get("/api/alerts/").json()
    assert [a["state"] for a in everything] == ["firing", "resolved"]  # firing first
    firing = api(viewer).get("/api/alerts/?state=firing").json()
    assert len(firing) == 1
    alert = firing[0]
    assert alert["kind"] == "trial_stalled" and alert["trial_id"] == "ab12c_00001"
    for field in ("id", "severity", "subject", "summary", "opened_at", "resolved_at"):
        assert field in alert
    assert api(viewer).get("/api/alerts/?state=open").status_code == 400


@pytest.mark.parametrize("path", ["/experiments/", "/experiments/{exp}/", "/trials/{trial}/"])
def test_pages_escape_hostile_names(search, viewer, path: str) -> None:  # type: ignore[no-untyped-def]
    client = Client()
    client.login(username=viewer.username, password=PASSWORD)
    html = client.get(path.format(exp=search.experiment_id, trial=search.pk)).content.decode()
    assert "<script>alert" not in html and "<img src=x" not in html


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_hostile_names_render_as_text_in_the_browser(page, live_server_asgi: LiveServer,
                                                     viewer, search) -> None:  # type: ignore[no-untyped-def]
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    login(page, live_server_asgi, viewer, f"/trials/{search.pk}/")
    expect(page.locator('#metric-picker input[data-metric="score"]')).to_be_checked()
    expect(page.locator("#config")).to_contain_text(EVIL)
    page.goto(f"{live_server_asgi.url}/experiments/{search.experiment_id}/")
    expect(page.locator("#trials tbody tr")).to_have_count(1)
    page.goto(f"{live_server_asgi.url}/experiments/")
    expect(page.locator("#experiments tbody")).to_contain_text("exp <script>")
    assert dialogs == []
    assert page.locator("img[src=x]").count() == 0
