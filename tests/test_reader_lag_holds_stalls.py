"""When raywatch's own reading lags (another process is still reading a long history, a
poll that takes minutes), 300 running trials are not all called stalled at once: their
silence is counted to what was read, the status strip says why, and once the reader
catches up a real silence is still caught. A reader stuck for good (a hung file system)
holds no hang for ever: once its reads stop ending for SILENCE_HOLD_MAX_S, the clock
counts again, and says why; a read that took that long (a first ingest) holds as any.
The other reader is a real second Postgres session holding the reader's lock."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.db import connection

from dashboard.core.models import SourceHealth
from dashboard.incidents.models import Incident
from dashboard.trials import tasks
from dashboard.trials.detect import SILENCE_HOLD_MAX_S
from dashboard.trials.ingest import READER_LOCK, IngestStats
from dashboard.trials.tasks import evaluate_and_push, poll_trial_logs
from tests.test_incremental_detection import STALL_MIN_S, Clock, ray_answered, running_search

TRIALS = 300


@pytest.fixture
def search(transactional_db: None, settings: Any, tmp_path: Path,
           monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    clock = next(running := running_search(TRIALS, settings, monkeypatch))
    settings.CENTRAL_LOGS, settings.LOG_DIRS = True, [str(tmp_path)]  # read here, centrally
    yield clock
    next(running, None)


def stalled(clock: Clock) -> int:
    ray_answered(clock.now)
    poll_trial_logs()
    return Incident.objects.filter(kind="trial_stalled", state=Incident.FIRING).count()


def test_stalls_wait_while_another_process_reads_and_are_caught_after(search: Clock) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("one reader at a time across processes is a Postgres lock")
    clock = search
    assert stalled(clock) == 0  # read to the end at t0
    params = connection.get_connection_params()
    other = psycopg.connect(**{k: v for k, v in params.items() if k != "cursor_factory"},
                            autocommit=True)
    try:  # another raywatch process starts a long first ingest and holds the reader
        other.execute("SELECT pg_advisory_lock(%s)", [READER_LOCK])
        clock.now += timedelta(seconds=STALL_MIN_S + 60)
        assert stalled(clock) == 0
        health = SourceHealth.objects.get(source="trial_logs", scope="")
        assert health.state == SourceHealth.DEGRADED  # the status strip says why
        assert "its stalls wait for what it reads" in health.last_error
    finally:
        other.close()  # its ingest is done
    clock.now += timedelta(seconds=2)
    assert stalled(clock) == TRIALS  # read to the end again: they really are silent
    summary = Incident.objects.filter(kind="trial_stalled").first().summary
    assert "reported no result for" in summary


def evaluated(clock: Clock) -> int:
    """An evaluation no read came before (an agent's report asked for it, say)."""
    ray_answered(clock.now)
    evaluate_and_push(IngestStats())
    return Incident.objects.filter(kind="trial_stalled", state=Incident.FIRING).count()


def test_a_read_that_took_long_holds_the_clock_to_where_it_began(
        search: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    """This process's own first ingest took longer than SILENCE_HOLD_MAX_S: what it read
    reaches back to its start, and nothing is called stalled for that (as the poll's
    warning says)."""
    clock = search
    assert stalled(clock) == 0
    clock.now += timedelta(seconds=STALL_MIN_S - 10)
    read = tasks.ingest_logs

    def slow(*args: Any, **kwargs: Any) -> Any:
        done = read(*args, **kwargs)
        clock.now += timedelta(seconds=SILENCE_HOLD_MAX_S + 100)
        return done

    monkeypatch.setattr(tasks, "ingest_logs", slow)
    assert stalled(clock) == 0
    health = SourceHealth.objects.get(source="trial_logs", scope="")
    assert "stalls are counted to what it read" in health.last_error


def test_reads_that_stop_ending_hold_no_stall_for_ever(search: Clock) -> None:
    """The reader's polls stop ending (a hung file system) while evaluations go on: the
    trials wait for it SILENCE_HOLD_MAX_S at most, then their silence counts, and says
    why."""
    clock = search
    assert stalled(clock) == 0
    clock.now += timedelta(seconds=STALL_MIN_S + 60)
    assert evaluated(clock) == 0  # held: the reader is behind
    clock.now += timedelta(seconds=SILENCE_HOLD_MAX_S)
    assert evaluated(clock) == TRIALS
    summary = Incident.objects.filter(kind="trial_stalled").first().summary
    assert "log reader has finished no read of the log dirs for" in summary, summary
