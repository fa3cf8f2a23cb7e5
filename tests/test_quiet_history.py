"""Months of finished searches under the log roots cost a poll almost nothing, and what
is new among them is still found: a new trial in an old experiment, a new experiment,
lines added to an old trial (Tune's storage copy rewriting it, or a slow rescan)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from django.db import OperationalError, connection

from dashboard.incidents.models import Incident
from dashboard.trials.models import StepResult, Trial
from dashboard.trials.tasks import poll_trial_logs

pytestmark = pytest.mark.both_backends

EXPERIMENTS, TRIALS_PER_EXPERIMENT, LINES = 4, 40, 3
QUIET_TRIALS = EXPERIMENTS * TRIALS_PER_EXPERIMENT
ERRORED_EVERY = 2  # in failed_history: 80 failed trials
STAMP = "2026-11-21_16-30-01"


def trial_id(exp: int, n: int) -> str:
    return f"{0xAB000 + exp:05x}_{n:05d}"


def result_line(tid: str, iteration: int) -> str:
    return json.dumps({
        "score": iteration / 10, "timing_s/gen": 0.4, "timestamp": 1795280000 + iteration,
        "checkpoint_dir_name": None, "done": False, "training_iteration": iteration,
        "trial_id": tid, "date": "2026-11-21_16-30-01", "time_this_iter_s": 1.0,
        "time_total_s": float(iteration), "pid": 4000, "hostname": "gpu-1",
        "node_ip": "10.0.0.5", "config": {"lr": 0.1}, "time_since_restore": float(iteration),
        "iterations_since_restore": iteration,
    }) + "\n"


def write_trial(exp_dir: Path, tid: str, lines: int = LINES) -> Path:
    path = exp_dir / f"train_fn_{tid}_0_lr=0.1_{STAMP}"
    path.mkdir(parents=True)
    (path / "params.json").write_text('{"lr": 0.1}')
    (path / "result.json").write_text("".join(result_line(tid, i) for i in range(1, lines + 1)))
    return path


def write_state(exp_dir: Path, tids: list[str], status: str = "TERMINATED",
                errored: frozenset[str] = frozenset()) -> None:
    """experiment_state-*.json as Tune writes it: rewritten whole at each snapshot."""
    data = [[json.dumps({"trial_id": t, "status": "ERROR" if t in errored else status}),
             json.dumps({"num_failures": int(t in errored), "last_result_time": 1795280000})]
            for t in tids]
    (exp_dir / f"experiment_state-{STAMP}.json").write_text(json.dumps({"trial_data": data}))


def errored(tid: str) -> bool:
    return int(tid[-5:]) % ERRORED_EVERY == 0


def write_history(root: Path, failures: bool) -> None:
    """Finished searches; with `failures`, one trial in ERRORED_EVERY failed (error.txt)."""
    for exp in range(EXPERIMENTS):
        tids = [trial_id(exp, n) for n in range(TRIALS_PER_EXPERIMENT)]
        failed = frozenset(t for t in tids if failures and errored(t))
        for tid in tids:
            path = write_trial(root / f"search_{exp}", tid)
            if tid in failed:
                (path / "error.txt").write_text(f"Failure # 1\nRuntimeError: {tid} ran out\n")
        write_state(root / f"search_{exp}", tids, errored=failed)


def ingested(root: Path, settings, failures: bool = False) -> Path:  # type: ignore[no-untyped-def]
    """`root` of finished searches, ingested, then left alone until they are settled."""
    settings.LOG_DIRS = [str(root)]
    settings.LOG_QUIET_S = 0.0  # finished and unchanged: stop watching at the next poll
    settings.LOG_RESCAN_S = 3600.0
    write_history(root, failures)
    poll_trial_logs()
    assert Trial.objects.filter(status__in=Trial.FINISHED).count() == QUIET_TRIALS
    poll_trial_logs()  # the finished trials are settled
    return root


@pytest.fixture
def history(db: None, settings, tmp_path: Path) -> Path:  # type: ignore[no-untyped-def]
    return ingested(tmp_path / "ray_results", settings)


@pytest.fixture
def failed_history(db: None, settings, tmp_path: Path) -> Path:  # type: ignore[no-untyped-def]
    """The same, with one finished trial in ERRORED_EVERY failed: each has its incident."""
    root = ingested(tmp_path / "ray_results", settings, failures=True)
    assert firing_errors() == QUIET_TRIALS // ERRORED_EVERY
    return root


def firing_errors() -> int:
    return Incident.objects.filter(kind="trial_errored", state=Incident.FIRING).count()


@contextmanager
def counting(root: Path, tables: tuple[str, ...] = ("trials_trial",), cursors: bool = True,
             ) -> Iterator[dict[str, int]]:
    """Counts, during a poll, the stat and listing calls under `root` and the rows read
    from `tables` (by default the trial table) and, with `cursors`, from the reader's
    cursor store (a file's cursor, a trial dir's sent state)."""
    from collectors.agent.cursors import CursorStore

    counts = {"fs": 0, "rows": 0}
    real_file, real_trial = CursorStore.file, CursorStore.trial

    def looked_up(real: Callable[..., Any]) -> Callable[..., Any]:
        def call(self: Any, path: str) -> Any:
            found = real(self, path)
            counts["rows"] += found is not None
            return found
        return call
    real_stat, real_scandir = os.stat, os.scandir

    def fs(real: Callable[..., Any]) -> Callable[..., Any]:
        def call(path: Any, *args: Any, **kwargs: Any) -> Any:
            counts["fs"] += str(path).startswith(str(root))
            return real(path, *args, **kwargs)
        return call

    def rows(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        result = execute(sql, params, many, context)
        if sql.startswith("SELECT") and any(f'FROM "{t}"' in sql for t in tables):
            counts["rows"] += max(0, context["cursor"].rowcount)
        return result

    with mock.patch("os.stat", fs(real_stat)), mock.patch("os.scandir", fs(real_scandir)), \
            mock.patch.object(CursorStore, "file", looked_up(real_file) if cursors
                              else real_file), \
            mock.patch.object(CursorStore, "trial", looked_up(real_trial) if cursors
                              else real_trial), \
            connection.execute_wrapper(rows):
        yield counts


def test_a_poll_over_quiet_history_stats_and_loads_almost_nothing(history: Path) -> None:
    with counting(history) as counts:
        poll_trial_logs()
    # The root, each experiment's directory and state file, a share for the slow rescan:
    # not every trial directory and file (3 a trial), nor every trial's rows.
    assert counts["fs"] < QUIET_TRIALS // 4, counts
    assert counts["rows"] < QUIET_TRIALS // 4, counts


def test_the_slow_rescan_stats_quiet_trials_but_loads_none_that_did_not_change(
        history: Path, settings) -> None:  # type: ignore[no-untyped-def]
    settings.LOG_RESCAN_S = 1e-6  # the whole rescan falls due at once
    settings.LOG_RESCAN_PER_POLL = QUIET_TRIALS
    with counting(history) as counts:
        poll_trial_logs()
    assert counts["fs"] >= QUIET_TRIALS, counts  # every trial dir was looked at
    assert counts["rows"] < QUIET_TRIALS // 4, counts


def test_the_slow_rescan_checks_its_share_a_poll_and_still_reaches_every_trial(
        history: Path, settings) -> None:  # type: ignore[no-untyped-def]
    """However large the history, a poll's rescan checks at most LOG_RESCAN_PER_POLL
    quiet trial dirs: the lap takes longer, and a change no mtime shows is still read."""
    tid = trial_id(3, 5)
    result = next((history / "search_3").glob(f"*{tid}*")) / "result.json"
    with result.open("a") as out:
        out.write(result_line(tid, LINES + 1))
    settings.LOG_RESCAN_S = 1e-6  # the whole rescan is due ...
    settings.LOG_RESCAN_PER_POLL = 16  # ... but 16 trial dirs a poll
    with counting(history) as counts:
        poll_trial_logs()
    assert counts["fs"] < QUIET_TRIALS // 2, counts  # not all 160, as uncapped
    for _ in range(QUIET_TRIALS // 16 - 1):  # one lap in all
        poll_trial_logs()
    trial = Trial.objects.get(trial_id=tid)
    assert trial.iteration == LINES + 1
    assert StepResult.objects.filter(trial=trial).count() == LINES + 1


def test_lines_a_failed_store_could_not_keep_are_read_at_the_next_poll(history: Path) -> None:
    """A poll that fails halfway (SQLite busy, say) loses nothing: the scanner had
    already taken in the new file sizes, and hands those dirs over again."""
    tid = trial_id(0, 3)
    write_trial(history / "search_0", trial_id(0, 900), lines=2)  # new, so watched
    result = next((history / "search_0").glob(f"*{trial_id(0, 900)}*")) / "result.json"
    with result.open("a") as out:
        out.write(result_line(trial_id(0, 900), 3))
    busy = OperationalError("database is locked")
    with mock.patch("dashboard.trials.store.write_results", autospec=True, side_effect=busy):
        poll_trial_logs()
    assert not Trial.objects.filter(trial_id=trial_id(0, 900)).exclude(iteration=None).exists()
    poll_trial_logs()
    assert Trial.objects.get(trial_id=trial_id(0, 900)).iteration == 3
    assert Trial.objects.get(trial_id=tid).iteration == LINES  # the others untouched


def test_failed_history_costs_a_poll_no_rows_per_failed_trial(failed_history: Path) -> None:
    """Failed trials keep their incident, but a poll neither reloads them nor their
    incidents to find that out again."""
    with counting(failed_history, ("trials_trial", "incidents_incident"), cursors=False
                  ) as counts:
        poll_trial_logs()
    assert counts["rows"] < QUIET_TRIALS // ERRORED_EVERY // 4, counts
    assert firing_errors() == QUIET_TRIALS // ERRORED_EVERY


def test_a_quiet_failed_trial_whose_error_changes_updates_its_incident(
        failed_history: Path, settings) -> None:  # type: ignore[no-untyped-def]
    tid = trial_id(1, 0)
    trial_dir = next((failed_history / "search_1").glob(f"*{tid}*"))
    (trial_dir / "error.txt").write_text("Failure # 2\nValueError: loss is NaN\n")
    settings.LOG_RESCAN_S = 1e-6  # the whole rescan falls due at once
    settings.LOG_RESCAN_PER_POLL = QUIET_TRIALS
    poll_trial_logs()
    incident = Incident.objects.get(kind="trial_errored", trial__trial_id=tid,
                                    state=Incident.FIRING)
    assert "loss is NaN" in incident.summary
    assert firing_errors() == QUIET_TRIALS // ERRORED_EVERY


def test_a_new_trial_in_an_old_quiet_experiment_is_found(history: Path) -> None:
    write_trial(history / "search_1", trial_id(1, 999), lines=2)
    poll_trial_logs()
    trial = Trial.objects.get(trial_id=trial_id(1, 999))
    assert trial.experiment.name == "search_1" and trial.iteration == 2


def test_a_new_experiment_among_quiet_ones_is_found(history: Path) -> None:
    write_trial(history / "search_new", trial_id(9, 0), lines=1)
    poll_trial_logs()
    assert Trial.objects.get(trial_id=trial_id(9, 0)).experiment.name == "search_new"


def test_an_old_trial_rewritten_by_tunes_storage_copy_is_read(history: Path) -> None:
    """Tune's snapshot rewrites the trial's result.json and the experiment state in place:
    no directory mtime moves, but the state file's does."""
    tid = trial_id(2, 7)
    result = next((history / "search_2").glob(f"*{tid}*")) / "result.json"
    result.write_text("".join(result_line(tid, i) for i in range(1, LINES + 3)))
    write_state(history / "search_2", [trial_id(2, n) for n in range(TRIALS_PER_EXPERIMENT)])
    poll_trial_logs()
    assert Trial.objects.get(trial_id=tid).iteration == LINES + 2


def test_lines_appended_to_a_quiet_trial_are_read_by_the_slow_rescan(history: Path,
                                                                     settings) -> None:  # type: ignore[no-untyped-def]
    tid = trial_id(3, 5)
    result = next((history / "search_3").glob(f"*{tid}*")) / "result.json"
    with result.open("a") as out:
        out.write(result_line(tid, LINES + 1))
    settings.LOG_RESCAN_S = 1e-6  # the whole rescan falls due at once
    settings.LOG_RESCAN_PER_POLL = QUIET_TRIALS
    poll_trial_logs()
    trial = Trial.objects.get(trial_id=tid)
    assert trial.iteration == LINES + 1
    assert StepResult.objects.filter(trial=trial).count() == LINES + 1


def test_old_failures_read_from_history_open_no_incident(db: None, settings,  # type: ignore[no-untyped-def]
                                                         tmp_path: Path) -> None:
    """A first start on months of searches: their failures show as ERROR, but chat is
    not flooded with critical alerts about last spring; a failure written now is news."""
    root = tmp_path / "ray_results"
    settings.LOG_DIRS = [str(root)]
    write_history(root, failures=True)
    three_days_ago = Path(root).stat().st_mtime - 3 * 86400
    for error in root.glob("*/*/error.txt"):
        os.utime(error, (three_days_ago, three_days_ago))
    poll_trial_logs()
    assert Trial.objects.filter(status="ERROR").count() == QUIET_TRIALS // ERRORED_EVERY
    assert firing_errors() == 0
    fresh = write_trial(root / "search_0", trial_id(0, 500))
    (fresh / "error.txt").write_text("Failure # 1\nRuntimeError: CUDA out of memory\n")
    write_state(root / "search_0", [trial_id(0, 500)], errored=frozenset({trial_id(0, 500)}))
    poll_trial_logs()
    incident = Incident.objects.get(kind="trial_errored", state=Incident.FIRING)
    assert incident.trial.trial_id == trial_id(0, 500)
    assert "CUDA out of memory" in incident.summary
