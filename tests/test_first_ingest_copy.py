"""The first ingest of a finished history, large enough to take the bulk path (COPY on
Postgres): every result is stored exactly once, also when a trial is seen in two places
(Tune's live staging copy and its storage copy), when a trial was retried (attempt 2
starts over in the same file), and when the same files are read again; the trials'
facts are those of their last results, and an open trial page still gets the new
points."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from unittest import mock

import pytest

from dashboard.core.push import trial_group
from dashboard.trials import ingest
from dashboard.trials.bulkwrite import COPY_MIN_ROWS
from dashboard.trials.models import StepResult, Trial
from dashboard.trials.tasks import poll_trial_logs

pytestmark = pytest.mark.both_backends

TRIALS, LINES = 24, 60  # 1,440 results: over COPY_MIN_ROWS in one go
STAMP = "2026-11-21_16-30-01"


def trial_id(n: int) -> str:
    return f"ab12c_{n:05d}"


def line(tid: str, iteration: int, pid: int = 100) -> str:
    return json.dumps({"training_iteration": iteration, "trial_id": tid, "pid": pid,
                       "timestamp": 1795280000 + iteration, "time_this_iter_s": 1.0,
                       "score": iteration / 10, "loss": 1 / iteration, "done": False,
                       "node_ip": "10.0.0.5", "hostname": "gpu-5", "config": {"lr": 0.1}}) + "\n"


def write_trial(root: Path, tid: str, text: str) -> Path:
    path = root / f"train_fn_{tid}_0_lr=0.1_{STAMP}"
    path.mkdir(parents=True, exist_ok=True)
    (path / "params.json").write_text('{"lr": 0.1}')
    (path / "result.json").write_text(text)
    return path


@pytest.fixture
def history(settings, tmp_path: Path) -> Path:  # type: ignore[no-untyped-def]
    """TRIALS finished trials in Tune's storage; the first also in the driver's live
    staging copy (a few lines behind); the second retried: attempt 2 (a new pid)
    starts again at iteration 1 in the same file."""
    storage = tmp_path / "storage" / "search"
    live = tmp_path / "staging" / "2026-11-21" / "search" / "driver_artifacts"
    settings.LOG_DIRS = [str(tmp_path / "storage"), str(tmp_path / "staging")]
    for n in range(TRIALS):
        tid = trial_id(n)
        text = "".join(line(tid, i) for i in range(1, LINES + 1))
        if n == 1:
            text += "".join(line(tid, i, pid=200) for i in range(1, 11))
        write_trial(storage, tid, text)
    write_trial(live, trial_id(0), "".join(line(trial_id(0), i) for i in range(1, LINES - 4)))
    return tmp_path


def expected_results() -> int:
    return TRIALS * LINES + 10  # the retried trial's second attempt: 10 more


def test_a_large_first_ingest_stores_every_result_once(db: None, history: Path) -> None:
    assert expected_results() >= COPY_MIN_ROWS
    poll_trial_logs()
    assert StepResult.objects.count() == expected_results()
    keys = StepResult.objects.values_list("trial_id", "attempt", "iteration")
    assert len(set(keys)) == expected_results()
    first = Trial.objects.get(trial_id=trial_id(0))
    assert first.results.count() == LINES  # two copies, stored once
    assert first.iteration == LINES and first.metric_range["score"] == [0.1, LINES / 10]
    assert first.config == {"lr": 0.1} and first.node_ip == "10.0.0.5"


def test_awkward_metric_names_and_values_are_stored_as_read(db: None, history: Path) -> None:
    """COPY's text format gives tab, newline and backslash meanings: metric names with
    them, quotes, non-ASCII, NaN and big numbers are stored as they were read."""
    tid = trial_id(5)
    awkward = {"tab\there": 1.5, "new\nline": 2.0, "back\\slash": 3.0, 'q"uote': 4.0,
               "ünï/kōdé": 5.0, "big": 2**70, "tiny": 1e-300}
    path = next((history / "storage" / "search").glob(f"*{tid}*")) / "result.json"
    with path.open("a") as out:
        out.write(json.dumps({"training_iteration": LINES + 1, "trial_id": tid,
                              "loss": float("nan"), **awkward}) + "\n")
    poll_trial_logs()
    row = StepResult.objects.get(trial__trial_id=tid, iteration=LINES + 1)
    big = row.metrics.pop("big")  # jsonb keeps a number's digits, not its float
    assert big == pytest.approx(2**70, rel=1e-15)
    assert row.metrics == {**{k: v for k, v in awkward.items() if k != "big"}, "loss": None}


def test_a_retried_trial_keeps_both_attempts(db: None, history: Path) -> None:
    poll_trial_logs()
    retried = Trial.objects.get(trial_id=trial_id(1))
    assert retried.attempt == 2 and retried.iteration == 10 and retried.pid == 200
    by_attempt = {a: retried.results.filter(attempt=a).count() for a in (1, 2)}
    assert by_attempt == {1: LINES, 2: 10}


def test_the_same_files_read_again_add_nothing(db: None, history: Path, settings) -> None:  # type: ignore[no-untyped-def]
    poll_trial_logs()
    ingest.forget_reader()
    shutil.rmtree(ingest.state_dir())  # its cursors gone: as if raywatch had never read them
    settings.LOG_DIRS = settings.LOG_DIRS[::-1]  # other roots: a fresh scanner, a full pass
    poll_trial_logs()
    assert StepResult.objects.count() == expected_results()
    assert Trial.objects.get(trial_id=trial_id(0)).results.count() == LINES


def test_an_open_trial_page_gets_every_new_point(db: None, history: Path) -> None:
    with mock.patch("dashboard.trials.push.publish", autospec=True) as publish:
        poll_trial_logs()
    retried = Trial.objects.get(trial_id=trial_id(1))
    points = [c.args[2] for c in publish.call_args_list
              if c.args[0] == trial_group(retried.pk) and c.args[1] == "points"]
    assert len(points) == 1
    assert [(p["attempt"], p["iteration"]) for p in points[0]] == (
        [(1, i) for i in range(1, LINES + 1)] + [(2, i) for i in range(1, 11)])


def test_a_result_another_writer_stored_meanwhile_is_kept_once(db: None, history: Path) -> None:
    """A node's agent may report the same trial while the first ingest runs: its row
    is there, its trial not yet updated; the bulk path must neither fail nor copy it."""
    from django.utils import timezone

    from dashboard.trials.models import Experiment

    experiment = Experiment.objects.create(name="search")
    trial = Trial.objects.create(experiment=experiment, trial_id=trial_id(5))
    StepResult.objects.create(trial=trial, attempt=1, iteration=7, ingested_at=timezone.now(),
                              metrics={"score": 0.7})
    poll_trial_logs()
    assert StepResult.objects.count() == expected_results()
    assert trial.results.count() == LINES and Trial.objects.get(pk=trial.pk).iteration == LINES


def test_a_large_ingest_tells_the_planner(db: None, history: Path) -> None:
    """Postgres plans the detectors' trial query from the table's statistics; after a
    large ingest raywatch gathers them at once (autovacuum may be off, or minutes
    away), so the planner knows the new rows (the index, not a scan of every trial)."""
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("the planner's statistics are Postgres's")

    def known_rows(table: str) -> float:
        with connection.cursor() as cursor:
            cursor.execute("SELECT reltuples FROM pg_class WHERE relname = %s", [table])
            return float(cursor.fetchone()[0])

    with mock.patch("dashboard.trials.planner.ANALYZE_AFTER_RESULTS", 1000):
        poll_trial_logs()
    assert known_rows(Trial._meta.db_table) == TRIALS
    assert known_rows(StepResult._meta.db_table) == expected_results()
