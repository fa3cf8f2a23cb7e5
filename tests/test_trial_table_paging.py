"""The experiment page's table, paged on the server (/api/experiments/<pk>/trials/):
every trial on exactly one page in the order asked, filters that match what the rows
show, and a clear 400 for a query that cannot be used."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from rest_framework.test import APIClient

from dashboard.incidents.findings import Finding
from dashboard.incidents.service import sync_findings
from dashboard.trials.models import Experiment, Trial
from dashboard.trials.table import shown

pytestmark = pytest.mark.django_db
NOW = datetime.now(UTC) - timedelta(minutes=1)


@pytest.fixture
def search() -> Experiment:
    experiment = Experiment.objects.create(name="paged-asha", metric="score", mode="max")
    statuses = ["RUNNING", "TERMINATED", "TERMINATED", "ERROR"]
    Trial.objects.bulk_create([
        Trial(experiment=experiment, trial_id=f"pp{i:03d}_{i:05d}", status=statuses[i % 4],
              iteration=(i * 37) % 250, node_ip=f"10.0.{i % 8}.1",
              last_result_at=NOW - timedelta(seconds=i), last_step_s=float(i % 10),
              # every 10th trial has not reported the metric yet: it sorts last either way
              last_metrics={} if i % 10 == 0 else {"score": float(i)},
              metric_range={} if i % 10 == 0 else {"score": [float(-i), float(i)]},
              config={"model": {"arch": "cnn" if i % 2 else "mlp"}, "lr": i / 1000,
                      "seed": 7})
        for i in range(250)
    ])
    return experiment


def table(user, experiment: Experiment, **params):  # type: ignore[no-untyped-def]
    client = APIClient()
    client.force_authenticate(user)
    return client.get(f"/api/experiments/{experiment.pk}/trials/", params)


def all_pages(user, experiment: Experiment, **params) -> list[dict]:  # type: ignore[no-untyped-def]
    rows, page = [], 1
    while True:
        reply = table(user, experiment, page=page, page_size=40, **params).json()
        rows += reply["trials"]
        if page >= reply["pages"]:
            assert reply["matched"] == len(rows)
            return rows
        page += 1


def test_every_trial_once_in_the_order_asked(viewer, search: Experiment) -> None:  # type: ignore[no-untyped-def]
    by_id = all_pages(viewer, search, sort="best", dir="desc")
    assert len(by_id) == 250 and len({r["trial_id"] for r in by_id}) == 250
    scored = [r for r in by_id if r["best_value"] is not None]
    assert [r["best_value"] for r in scored] == sorted((float(i) for i in range(250)
                                                        if i % 10), reverse=True)
    assert all(r["best_value"] is None for r in by_id[len(scored):])  # no score: last

    # Best by min reads each trial's lowest; still nulls last
    low = all_pages(viewer, search, sort="best", dir="asc", mode="min")
    assert [r["metric_range"]["score"][0] for r in low[:3]] == [-249.0, -248.0, -247.0]

    # A nested hyperparameter, named as the column names it
    arch = all_pages(viewer, search, sort="hp:model/arch")
    assert [r["config"]["model"]["arch"] for r in arch] == ["cnn"] * 125 + ["mlp"] * 125
    lr = all_pages(viewer, search, sort="hp:lr", dir="desc")
    assert lr[0]["trial_id"] == "pp249_00249"

    # The step in progress: a RUNNING trial's keeps growing since its last result
    reply = table(viewer, search, sort="step", dir="desc", page_size=1).json()
    assert reply["trials"][0]["trial_id"] == "pp248_00248"  # the oldest result still running
    iteration = all_pages(viewer, search, sort="iteration")
    assert [r["iteration"] for r in iteration] == sorted(r["iteration"] for r in iteration)


def test_filters_match_what_the_rows_show(viewer, search: Experiment) -> None:  # type: ignore[no-untyped-def]
    reply = table(viewer, search, status="ERROR", q="10.0.3.1").json()
    assert reply["matched"] == 31 and reply["total"] == 250
    assert {r["node_ip"] for r in reply["trials"]} == {"10.0.3.1"}
    assert table(viewer, search, q="model/arch=mlp").json()["matched"] == 125
    [one] = table(viewer, search, q="lr=0.123").json()["trials"]
    assert one["trial_id"] == "pp123_00123"

    hung = Trial.objects.get(trial_id="pp004_00004")
    finding = Finding("trial_stalled", f"trial:{search.name}/{hung.trial_id}", "critical",
                      "no result for 9 min")
    sync_findings({finding.kind}, [finding], NOW, {finding.subject: {"trial": hung}})
    reply = table(viewer, search, unhealthy="1").json()
    assert [r["trial_id"] for r in reply["trials"]] == [hung.trial_id]
    assert reply["trials"][0]["health"] == "stalled"
    assert table(viewer, search, q="stalled").json()["matched"] == 1
    # The columns: hyperparameters that differ first, then the constant one
    assert reply["hp_keys"] == ["lr", "model/arch", "seed"] and reply["metrics"] == ["score"]


def test_a_query_that_cannot_be_used_is_refused_by_name(viewer, search: Experiment) -> None:  # type: ignore[no-untyped-def]
    reply = table(viewer, search, status="BOGUS", sort="nope", dir="up", page="0",
                  page_size="100000")
    assert reply.status_code == 400
    assert set(reply.json()) == {"status", "sort", "dir", "page", "page_size"}
    assert table(viewer, search, page=99).json()["page"] == 3  # past the end: the last (of 100)
    client = APIClient()
    assert client.get(f"/api/experiments/{search.pk}/trials/").status_code in (401, 403)


def test_values_read_as_the_page_writes_them() -> None:
    assert [shown(v) for v in (None, True, 3, 3.0, 0.1234567, 1e-7, [1, 2], {"a": 1})] == [
        "\u2013", "true", "3", "3", "0.12346", "1e-7", "[1,2]", '{"a":1}']
