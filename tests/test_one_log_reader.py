"""A Celery worker's children each take the next trial-log poll, and a first ingest of a
long history outlasts many polls: only one process reads the log dirs at a time, the
others say so in the status strip and read nothing, and nothing is lost or doubled."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from dashboard.core.models import SourceHealth
from dashboard.trials.ingest import READER_LOCK
from dashboard.trials.models import StepResult, Trial
from dashboard.trials.tasks import poll_trial_logs

LINES = 5


def write_trial(root: Path) -> None:
    path = root / "search" / "train_fn_ab12c_00001_1_lr=0.1_2026-11-21_16-30-01"
    path.mkdir(parents=True)
    (path / "result.json").write_text("".join(json.dumps({
        "training_iteration": i, "trial_id": "ab12c_00001", "timestamp": 1795280000 + i,
        "score": i / 10}) + "\n" for i in range(1, LINES + 1)))


def another_process() -> psycopg.Connection:
    """A connection of its own to the test database, as another worker child has."""
    params = connection.get_connection_params()
    return psycopg.connect(**{k: v for k, v in params.items()
                              if k in ("dbname", "user", "host", "port", "password")},
                           autocommit=True)


def test_a_poll_leaves_the_reading_to_the_process_already_reading(
        db: None, settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    if connection.vendor != "postgresql":
        pytest.skip("one process reads on SQLite: the embedded default")
    settings.LOG_DIRS = [str(tmp_path)]
    write_trial(tmp_path)
    with another_process() as other:
        assert other.execute("SELECT pg_try_advisory_lock(%s)", [READER_LOCK]).fetchone()[0]
        poll_trial_logs()
        assert not Trial.objects.exists()
        health = SourceHealth.objects.get(source="trial_logs")
        assert "another raywatch process is still reading" in health.last_error
        other.execute("SELECT pg_advisory_unlock(%s)", [READER_LOCK])
    poll_trial_logs()
    assert StepResult.objects.filter(trial__trial_id="ab12c_00001").count() == LINES
    assert "another raywatch" not in SourceHealth.objects.get(source="trial_logs").last_error
