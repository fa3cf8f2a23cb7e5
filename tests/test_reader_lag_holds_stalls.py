"""When raywatch's own reading lags (another process is still reading a long history, a
poll that takes minutes), its running trials are not all called stalled at once: their
silence is counted to what was read, the status strip says why, and once the reader
catches up a real silence is still caught. A reader stuck for good (a hung file system)
holds no hang for ever: once its reads stop ending for SILENCE_HOLD_MAX_S, the clock
counts again, and says why; a read that took that long (a first ingest) holds as any.
The mark is one for every raywatch process (a Celery prefork pool's children take turns reading
and each evaluates): a read in another process moves it, and a reader that shows no
progress (hung, killed mid-read) holds nothing longer than a reader here would. The
other reader is a real second process, or a second Postgres session holding its lock."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.db import connection

from collectors.logscan import LogScanner
from dashboard.core.models import SourceHealth
from dashboard.incidents.models import Incident
from dashboard.trials import ingest, lag, tasks
from dashboard.trials.detect import SILENCE_HOLD_MAX_S
from dashboard.trials.ingest import READER_LOCK, IngestStats
from dashboard.trials.tasks import evaluate_and_push, poll_trial_logs
from tests.alerting import database_url
from tests.served import embedded_env, manage
from tests.test_incremental_detection import STALL_MIN_S, Clock, ray_answered, running_search

TRIALS = 40  # the rule holds for any number (bench/running_trials_bench.py times 10,000)


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


def another_reader() -> psycopg.Connection:
    """A second Postgres session, as another raywatch process's reader holds its lock."""
    if connection.vendor != "postgresql":
        pytest.skip("one reader at a time across processes is a Postgres lock")
    params = connection.get_connection_params()
    other = psycopg.connect(**{k: v for k, v in params.items() if k != "cursor_factory"},
                            autocommit=True)
    other.execute("SELECT pg_advisory_lock(%s)", [READER_LOCK])
    return other


def test_stalls_wait_while_another_process_reads_and_are_caught_after(search: Clock) -> None:
    clock = search
    assert stalled(clock) == 0  # read to the end at t0
    other = another_reader()
    try:  # another raywatch process starts a long first ingest and holds the reader
        with lag.reading(clock.now) as progress:  # as its ingest marks it, for all
            clock.now += timedelta(seconds=STALL_MIN_S + 60)
            assert stalled(clock) == 0
            health = SourceHealth.objects.get(source="trial_logs", scope="")
            assert health.state == SourceHealth.DEGRADED  # the status strip says why
            assert "its stalls wait for what it reads" in health.last_error
            for _ in range(3):  # it goes on past SILENCE_HOLD_MAX_S, storing as it reads
                clock.now += timedelta(seconds=SILENCE_HOLD_MAX_S / 2)
                progress()
                assert stalled(clock) == 0
    finally:
        other.close()  # its ingest is done
    clock.now += timedelta(seconds=2)
    assert stalled(clock) == TRIALS  # read to the end again: they really are silent
    summary = Incident.objects.filter(kind="trial_stalled").first().summary
    assert "reported no result for" in summary


def test_another_process_stuck_reading_holds_no_stall_for_ever(search: Clock) -> None:
    """The process that holds the reader hangs in its read (a hung file system) or was
    killed mid-read: no progress for SILENCE_HOLD_MAX_S, and the silence counts again,
    saying why."""
    clock = search
    assert stalled(clock) == 0
    other = another_reader()
    hung = lag.reading(clock.now)
    try:
        hung.__enter__()  # its read began, and never ends
        clock.now += timedelta(seconds=STALL_MIN_S + 60)
        assert stalled(clock) == 0
        clock.now += timedelta(seconds=SILENCE_HOLD_MAX_S)
        assert stalled(clock) == TRIALS
        summary = Incident.objects.filter(kind="trial_stalled").first().summary
        assert "log reader has shown no progress for" in summary, summary
        assert "hung, failed, or its process is gone" in summary, summary
    finally:
        other.close()
        hung.gen.close()


def test_after_a_restart_a_read_in_progress_holds_where_the_last_one_began(
        search: Clock) -> None:
    """raywatch was down for an hour; the first read after its restart (in another of
    its processes) takes minutes: the trials are held where the last read before the
    restart began, not where this one began (to which nothing is read yet)."""
    clock = search
    assert stalled(clock) == 0  # read at t0, then raywatch stopped
    clock.now += timedelta(hours=1)
    other = another_reader()
    try:
        with lag.reading(clock.now) as progress:
            for _ in range(3):
                clock.now += timedelta(seconds=SILENCE_HOLD_MAX_S / 2)
                progress()
                assert evaluated(clock) == 0
    finally:
        other.close()


def test_a_first_ingest_that_fails_keeps_its_trials_held_where_it_began(
        search: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    """No read has ever finished, and the first one fails (the database went away for a
    moment, say) and is begun again: what was read is held to where the first began, for
    SILENCE_HOLD_MAX_S at most (the reads show no progress), not counted to now."""
    clock = search
    read = ingest._reader

    def fails(*args: Any, **kwargs: Any) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(ingest, "_reader", fails)
    assert stalled(clock) == 0
    for _ in range(3):
        clock.now += timedelta(seconds=STALL_MIN_S + 60)
        assert stalled(clock) == 0
    clock.now += timedelta(seconds=SILENCE_HOLD_MAX_S)
    assert stalled(clock) == TRIALS
    summary = Incident.objects.filter(kind="trial_stalled").first().summary
    assert "log reader has shown no progress for" in summary, summary
    monkeypatch.setattr(ingest, "_reader", read)
    assert stalled(clock) == TRIALS  # read at last: they really are silent


def test_a_long_read_shows_progress_as_it_stores(
        search: Clock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One read stores batch after batch for longer than SILENCE_HOLD_MAX_S (a first
    ingest of a long history): evaluations meanwhile (an agent's report asked for them)
    hold the trials as long as it stores."""
    clock = search
    monkeypatch.setattr(ingest.StoreSink, "batch_bytes", 6000)  # a batch every ~60 lines
    assert stalled(clock) == 0
    clock.now += timedelta(seconds=STALL_MIN_S + 60)
    for n in range(40):  # a finished search's history: a batch is about two trials
        trial = tmp_path / "history" / f"train_fn_ab12c_{n:05d}_0_2026-11-21_16-30-01"
        trial.mkdir(parents=True)
        (trial / "params.json").write_text("{}")
        (trial / "result.json").write_text("".join(json.dumps(
            {"training_iteration": i, "trial_id": f"ab12c_{n:05d}", "score": float(i),
             "timestamp": 1795280000 + i}) + "\n" for i in range(1, 12)))
    during: list[int] = []

    def stored(stats: IngestStats) -> None:
        clock.now += timedelta(seconds=SILENCE_HOLD_MAX_S / 3)
        during.append(evaluated(clock))

    monkeypatch.setattr(tasks, "push_points", stored)
    poll_trial_logs()
    assert len(during) >= 6, during  # twice SILENCE_HOLD_MAX_S within the one read
    assert during == [0] * len(during)


def test_a_long_walk_shows_progress_as_it_goes(
        search: Clock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A first walk of a vast history on a slow file system finds directory after
    directory for longer than SILENCE_HOLD_MAX_S before it stores anything: evaluations
    meanwhile hold the trials as long as it walks."""
    clock = search
    assert stalled(clock) == 0
    clock.now += timedelta(seconds=STALL_MIN_S + 60)
    for n in range(40):
        (tmp_path / "history" / f"train_fn_cd34e_{n:05d}_0_2026-11-21_16-30-01").mkdir(
            parents=True)
    listed = LogScanner._list
    during: list[int] = []

    def slow(scanner: LogScanner, directory: Path, *args: Any) -> bool:
        clock.now += timedelta(seconds=SILENCE_HOLD_MAX_S / 5)  # a slow file system
        turned = listed(scanner, directory, *args)
        if "cd34e" in directory.name and int(directory.name.split("_")[3]) % 4 == 3:
            during.append(evaluated(clock))
        return turned

    monkeypatch.setattr(LogScanner, "_list", slow)
    poll_trial_logs()
    assert len(during) >= 6, during  # the walk outlasted SILENCE_HOLD_MAX_S many times
    assert during == [0] * len(during)


def read_in_another_process(at: datetime, log_dir: Path, data_dir: Path) -> None:
    """Another raywatch process (a Celery worker's other child) reads the log dirs at
    `at`, with its own cursors, on this test's database."""
    code = ("import datetime\nfrom pathlib import Path\nfrom django.utils import timezone\n"
            "from dashboard.trials.ingest import ingest_logs\n"
            f"at = datetime.datetime.fromisoformat({at.isoformat()!r})\n"
            "timezone.now = lambda: at\n"
            f"assert not ingest_logs([Path({str(log_dir)!r})], at).busy\n")
    manage({**embedded_env(data_dir), "DATABASE_URL": database_url(),
            "RAYWATCH_LOG_DIRS": str(log_dir)}, "shell", "-v", "0", "-c", code)


def test_a_read_in_another_process_moves_the_mark_every_process_sees(
        search: Clock, tmp_path: Path) -> None:
    """Two children of a worker take turns reading. This one read at t0; the other reads
    when the trials have been silent past their limit, and its stall opens. This one's
    evaluations then count to what the other read, not to its own older read: the stall
    stays open (no incident that opens and resolves poll by poll)."""
    if connection.vendor != "postgresql":
        pytest.skip("one raywatch process on SQLite")
    clock = search
    assert stalled(clock) == 0  # this process read at t0
    clock.now += timedelta(seconds=STALL_MIN_S + 60)
    read_in_another_process(clock.now, tmp_path, tmp_path / "other")
    for _ in range(3):
        clock.now += timedelta(seconds=2)
        assert evaluated(clock) == TRIALS
    assert Incident.objects.filter(kind="trial_stalled").count() == TRIALS  # none flapped
    mark = lag.LogReading.objects.get()
    assert mark.read_from == clock.now - timedelta(seconds=6) and mark.reading_since is None


def evaluated(clock: Clock) -> int:
    """An evaluation no read came before (an agent's report asked for it, say): the
    search's own trials that are stalled."""
    ray_answered(clock.now)
    evaluate_and_push(IngestStats())
    return Incident.objects.filter(kind="trial_stalled", state=Incident.FIRING,
                                   subject__contains="big_asha").count()


def test_a_read_that_took_long_holds_the_clock_to_where_it_began(
        search: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    """This process's own first ingest took longer than SILENCE_HOLD_MAX_S: what it read
    reaches back to its start, and nothing is called stalled for that (as the poll's
    warning says)."""
    clock = search
    assert stalled(clock) == 0
    clock.now += timedelta(seconds=STALL_MIN_S - 10)
    finish = ingest._note_reader  # the read's last step

    def slow(*args: Any) -> Any:
        clock.now += timedelta(seconds=SILENCE_HOLD_MAX_S + 100)
        return finish(*args)

    monkeypatch.setattr(ingest, "_note_reader", slow)
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


def test_reads_that_keep_failing_are_no_progress(search: Clock,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Every poll begins a read and fails at once (the reader's state dir unwritable,
    say): a read begun each poll is not a reader making progress, and the trials wait
    SILENCE_HOLD_MAX_S at most."""
    clock = search
    assert stalled(clock) == 0

    def fails(*args: Any, **kwargs: Any) -> None:
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(ingest, "_reader", fails)
    counts = []
    for _ in range(int(SILENCE_HOLD_MAX_S / 60) + 2):
        clock.now += timedelta(seconds=60)
        counts.append(stalled(clock))
    assert counts[0] == 0  # held at first: the last read that ended is recent
    assert counts[-1] == TRIALS, counts
    health = SourceHealth.objects.get(source="trial_logs", scope="")
    assert "Read-only file system" in health.last_error
    summary = Incident.objects.filter(kind="trial_stalled").first().summary
    assert "log reader has shown no progress for" in summary, summary
