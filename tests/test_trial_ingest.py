"""Trial-log ingest into the database: resume after a restart, both copies of a trial
counted once, parse errors kept on the trial, error.txt and retries reflected."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from dashboard.core.models import SourceHealth
from dashboard.incidents.models import Incident
from dashboard.trials import ingest
from dashboard.trials.models import StepResult, Trial
from dashboard.trials.tasks import poll_trial_logs

pytestmark = pytest.mark.both_backends

TRIAL = "train_fn_ab12c_00000_0_lr=0.1_2026-11-21_16-30-01"


def line(iteration: int, pid: int = 100) -> str:
    return json.dumps({"training_iteration": iteration, "trial_id": "ab12c_00000", "pid": pid,
                       "timestamp": 1795280000 + iteration, "time_this_iter_s": 1.0,
                       "score": float(iteration), "timing_s/gen": 0.4,
                       "node_ip": "10.0.0.5", "hostname": "gpu-5"}) + "\n"


@pytest.fixture
def logs(settings, tmp_path: Path) -> Path:  # type: ignore[no-untyped-def]
    settings.LOG_DIRS = [str(tmp_path / "storage"), str(tmp_path / "staging")]
    stored = tmp_path / "storage" / "search" / TRIAL
    live = tmp_path / "staging" / "2026-11-21" / "search" / "driver_artifacts" / TRIAL
    for directory in (stored, live):
        directory.mkdir(parents=True)
        (directory / "params.json").write_text('{"lr": 0.1}')
    return tmp_path


def write(path: Path, text: str, mode: str = "a") -> None:
    with path.open(mode) as out:
        out.write(text)


def copies(root: Path) -> tuple[Path, Path]:
    return (root / "storage" / "search" / TRIAL / "result.json",
            root / "staging" / "2026-11-21" / "search" / "driver_artifacts" / TRIAL / "result.json")


def test_both_copies_count_once_and_a_restart_resumes(db: None, logs: Path) -> None:
    stored, live = copies(logs)
    write(live, line(1) + line(2) + line(3))
    write(stored, line(1) + line(2))  # the storage copy lags behind
    poll_trial_logs()
    trial = Trial.objects.get(trial_id="ab12c_00000")
    assert trial.experiment.name == "search" and trial.config == {"lr": 0.1}
    assert trial.iteration == 3 and trial.pid == 100 and trial.node_ip == "10.0.0.5"
    assert StepResult.objects.filter(trial=trial).count() == 3
    with sqlite3.connect(ingest.state_dir() / "cursors.sqlite3") as kept:
        assert kept.execute("SELECT count(*) FROM files").fetchone()[0] == 2
    assert SourceHealth.objects.get(source="trial_logs").state == "healthy"

    write(live, line(4))
    write(stored, line(3) + line(4), mode="a")
    ingest.forget_reader()  # as after a restart: the cursors come from their store
    poll_trial_logs()
    assert sorted(StepResult.objects.filter(trial=trial).values_list("iteration", flat=True)) \
        == [1, 2, 3, 4]


def test_parse_errors_are_kept_on_the_trial(db: None, logs: Path) -> None:
    _, live = copies(logs)
    write(live, line(1) + "{broken\n" + line(2))
    poll_trial_logs()
    trial = Trial.objects.get(trial_id="ab12c_00000")
    assert trial.parse_errors == 1 and "not JSON" in trial.last_parse_error
    assert trial.iteration == 2


def test_error_file_makes_the_trial_errored_until_a_retry(db: None, logs: Path) -> None:
    _, live = copies(logs)
    write(live, line(1) + line(2))
    poll_trial_logs()
    write(live.parent / "error.txt", "Failure # 1\nTraceback...\nValueError: reward NaN\n", "w")
    poll_trial_logs()
    trial = Trial.objects.get(trial_id="ab12c_00000")
    assert trial.status == "ERROR"
    incident = Incident.objects.get(kind="trial_errored", state="firing")
    assert "ValueError: reward NaN" in incident.summary and incident.trial == trial

    write(live, line(1, pid=200) + line(2, pid=200))  # Tune retried it
    poll_trial_logs()
    trial.refresh_from_db()
    assert trial.attempt == 2 and trial.status != "ERROR"
    assert StepResult.objects.filter(trial=trial, attempt=2).count() == 2
    assert Incident.objects.get(pk=incident.pk).state == "resolved"


def test_missing_log_dirs_degrade_the_source_with_the_reason(db: None, settings,
                                                            tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    settings.LOG_DIRS = [str(tmp_path / "nowhere")]
    poll_trial_logs()
    row = SourceHealth.objects.get(source="trial_logs")
    assert row.state == "degraded" and "no log directory exists yet" in row.last_error


def test_a_history_longer_than_one_read_is_read_whole_over_polls(db: None, logs: Path) -> None:
    """A finished trial's result.json of 12 MB (more than a read takes, 8 MiB): the rest
    is read at the next poll though the file does not change again."""
    _, live = copies(logs)
    padding = "x" * 1000
    write(live, "".join(line(i).replace('"score"', f'"pad": "{padding}", "score"')
                        for i in range(1, 12_001)))
    poll_trial_logs()
    poll_trial_logs()
    trial = Trial.objects.get(trial_id="ab12c_00000")
    assert StepResult.objects.filter(trial=trial).count() == 12_000 and trial.iteration == 12_000


def test_processes_taking_turns_at_the_reading_neither_lose_nor_double_a_line(
        db: None, logs: Path) -> None:
    """A Celery worker's children take turns at the polls: each reads on from where the
    other left the cursors, not from where it last read itself."""
    _, live = copies(logs)
    write(live, line(1) + "{broken\n" + line(2))
    poll_trial_logs()  # process A
    first = ingest._HELD.pop("reader")
    write(live, line(3) + "{broken again\n" + line(4))
    poll_trial_logs()  # process B reads lines 3 and 4
    second = ingest._HELD.pop("reader")
    ingest._HELD["reader"] = first  # A's turn again: its memory says it read to line 2
    write(live, line(5))
    poll_trial_logs()
    trial = Trial.objects.get(trial_id="ab12c_00000")
    assert sorted(StepResult.objects.filter(trial=trial).values_list("iteration", flat=True)) \
        == [1, 2, 3, 4, 5]
    assert trial.parse_errors == 2  # each broken line counted once, by whoever read it
    second.close()
