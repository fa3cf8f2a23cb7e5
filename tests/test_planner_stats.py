"""The planner hears of results stored in bulk, whoever stored them, and a steady trickle
does not ANALYZE every poll: once 10,000 results (or a tenth of the table) arrived."""

from __future__ import annotations

from unittest import mock

import pytest
from django.db import connection
from django.utils import timezone

from dashboard.trials import planner
from dashboard.trials.models import Experiment, StepResult, Trial


def known_rows() -> float:
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples FROM pg_class WHERE relname = %s",
                       [StepResult._meta.db_table])
        return float(cursor.fetchone()[0])


def add_results(trial: Trial, start: int, count: int) -> int:
    now = timezone.now()
    StepResult.objects.bulk_create(
        StepResult(trial=trial, attempt=1, iteration=i, ingested_at=now, metrics={"x": 1.0})
        for i in range(start, start + count))
    return count


def test_analyze_follows_what_was_stored_not_each_poll(db: None) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the planner's statistics are Postgres's")
    trial = Trial.objects.create(experiment=Experiment.objects.create(name="e"), trial_id="t")
    with mock.patch.object(planner, "ANALYZE_AFTER_RESULTS", 100), \
            mock.patch.dict(planner._pending, {"results": 0, "threshold": 0}):
        assert not planner.stored(add_results(trial, 1, 60))  # 60 of 100
        assert planner.stored(add_results(trial, 61, 1940))  # 2,000: analyzed
        assert known_rows() == 2000
        # Now a tenth of the table (200) must arrive before the next ANALYZE.
        assert not planner.stored(add_results(trial, 2001, 150))
        assert known_rows() == 2000
        assert planner.stored(add_results(trial, 2151, 50))
        assert known_rows() == 2200
