"""A metric or hyperparameter named only by digits ("0", "1": Tune flattens nested
configs into such names; some searches log per-step metrics so) sorts the trial table
and draws the cross-trial chart like any other name, on Postgres and on the embedded
SQLite (tests/test_on_embedded_default.py). Django's JSON key lookup read such a name
as an array index, so every trial showed as having no value."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from rest_framework.test import APIClient

from dashboard.trials.models import Experiment, StepResult, Trial

# On SQLite too: JSON paths: SQLite's JSON_EXTRACT, not jsonb
pytestmark = [pytest.mark.both_backends, pytest.mark.django_db]
NOW = datetime.now(UTC) - timedelta(minutes=1)


@pytest.fixture
def search() -> Experiment:
    experiment = Experiment.objects.create(name="digits", metric="0", mode="max")
    for i, score in enumerate([3.0, 9.0, 1.0, 5.0]):
        trial = Trial.objects.create(
            experiment=experiment, trial_id=f"dd{i:03d}_{i:05d}", status="RUNNING",
            iteration=2, last_result_at=NOW,
            last_metrics={"0": score, "1": -score},
            metric_range={"0": [score - 1, score], "1": [-score, -score + 1]},
            config={"7": 10 - i, "layers": {"0": 64 * (i + 1)}, "lr": 0.1})
        StepResult.objects.bulk_create([
            StepResult(trial=trial, attempt=1, iteration=it, at=NOW, ingested_at=NOW,
                       metrics={"0": score - 2 + it}) for it in (1, 2)])
    return experiment


def ordered(user, experiment: Experiment, **params) -> list[str]:  # type: ignore[no-untyped-def]
    client = APIClient()
    client.force_authenticate(user)
    reply = client.get(f"/api/experiments/{experiment.pk}/trials/", params)
    assert reply.status_code == 200, reply.content
    return [row["trial_id"][:5] for row in reply.json()["trials"]]


def test_the_table_sorts_by_digit_named_metrics_and_hyperparameters(  # type: ignore[no-untyped-def]
        viewer, search: Experiment) -> None:
    assert ordered(viewer, search, sort="best", dir="desc") == ["dd001", "dd003", "dd000",
                                                                 "dd002"]
    assert ordered(viewer, search, sort="best", dir="asc", mode="min") == [
        "dd002", "dd000", "dd003", "dd001"]
    assert ordered(viewer, search, sort="last", dir="asc", metric="1") == [
        "dd001", "dd003", "dd000", "dd002"]
    assert ordered(viewer, search, sort="hp:7") == ["dd003", "dd002", "dd001", "dd000"]
    assert ordered(viewer, search, sort="hp:layers/0", dir="desc") == [
        "dd003", "dd002", "dd001", "dd000"]


def test_the_chart_draws_a_digit_named_metric(viewer, search: Experiment) -> None:  # type: ignore[no-untyped-def]
    client = APIClient()
    client.force_authenticate(viewer)
    body = client.get(f"/api/experiments/{search.pk}/curves/?metric=0&trials=2").json()
    assert {c["trial_id"][:5]: c["y"] for c in body["curves"]} == {
        "dd001": [8.0, 9.0], "dd003": [4.0, 5.0]}
