"""Ingest what the trial-log collector read: experiments, trials, step results, cursors.

Byte offsets live in LogCursor rows, so a restart resumes where it stopped. A poll
looks only at the trial directories the LogScanner hands over (new, or changed, also
what its slow rescan found changed) and loads only their rows, in batches: the cost of a poll grows
with what changed, not with the months of finished searches under ~/ray_results.
Results are de-duplicated on (trial, attempt, iteration), so the live staging copy
and Tune's storage copy of the same file never count twice.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction

from collectors.logscan import LogScanner, TrialDir
from collectors.tunelogs import (
    FileCursor,
    ResultLine,
    TailResult,
    read_error,
    read_experiment_state,
    read_params,
    tail_result_json,
    tail_tb_events,
)
from dashboard.trials.models import Experiment, LogCursor, StepResult, Trial

BATCH = 400  # trial dirs per batch of row loads: IN (...) lists stay under SQLite's limit

# Guesses for a search's objective when Tune's state does not name it.
_OBJECTIVES = (("score", "max"), ("reward", "max"), ("episode_reward_mean", "max"),
               ("accuracy", "max"), ("mean_accuracy", "max"), ("loss", "min"),
               ("mean_loss", "min"), ("val_loss", "min"))


@dataclass
class IngestStats:
    files_read: int = 0
    bytes_read: int = 0
    results: int = 0
    problems: int = 0
    changed_trials: set[int] = field(default_factory=set)
    new_points: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    checked: int = 0  # trial dirs statted by the scan
    known: int = 0  # trial dirs under the roots


class TrialLogIngest:
    """One poll's worth of ingest over the trial dirs it is given; loads only their rows."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        self.stats = IngestStats()
        self.experiments: dict[str, Experiment] = {}
        self.trials: dict[tuple[int, str], Trial] = {}
        self.cursors: dict[str, LogCursor] = {}
        self.tune_states: dict[str, dict[str, Any]] = {}

    def run(self, trial_dirs: Iterable[TrialDir]) -> IngestStats:
        dirs = list(trial_dirs)
        for start in range(0, len(dirs), BATCH):
            batch = dirs[start:start + BATCH]
            self._load(batch)
            for trial_dir in batch:
                self._ingest(trial_dir)
            self.trials.clear()
            self.cursors.clear()
        return self.stats

    def _ingest(self, trial_dir: TrialDir) -> None:
        experiment = self._experiment(trial_dir)
        trial = self._trial(experiment, trial_dir)
        for path in trial_dir.result_files:
            self._tail(trial, Path(path), LogCursor.RESULT_JSON)
        for path in trial_dir.event_files:
            self._tail(trial, Path(path), LogCursor.TB_EVENTS)
        self._side_files(trial, trial_dir)

    def _load(self, batch: Sequence[TrialDir]) -> None:
        """The rows of this batch's trial dirs: experiments, trials and cursors."""
        names = {d.key[0] for d in batch} - set(self.experiments)
        if names:
            self.experiments.update((e.name, e) for e in Experiment.objects.filter(name__in=names))
        by_pk = {e.pk: e for e in self.experiments.values()}
        wanted = {self.experiments[d.key[0]].pk for d in batch if d.key[0] in self.experiments}
        for trial in Trial.objects.filter(experiment_id__in=wanted,
                                          trial_id__in={d.key[1] for d in batch}):
            trial.experiment = by_pk[trial.experiment_id]
            self.trials[(trial.experiment_id, trial.trial_id)] = trial
        paths = [p for d in batch for p in (*d.result_files, *d.event_files)]
        self.cursors.update((c.path, c) for c in LogCursor.objects.filter(path__in=paths))

    def apply_states(self, state_dirs: Iterable[tuple[str, Path]]) -> None:
        """Tune's experiment state changed: bring the trials' tune_status up to date
        (a trial can go RUNNING -> TERMINATED without a new result line)."""
        for name, directory in state_dirs:
            states = tune_state(directory)
            experiment = Experiment.objects.filter(name=name[:255]).first() if states else None
            if experiment is None:
                continue
            changed = []
            for trial in experiment.trials.only("id", "trial_id", "tune_status"):
                tune = states.get(trial.trial_id)
                if tune and tune.status != trial.tune_status:
                    trial.tune_status, trial.updated_at = tune.status, self.now
                    changed.append(trial)
            Trial.objects.bulk_update(changed, ["tune_status", "updated_at"])
            self.stats.changed_trials.update(t.pk for t in changed)

    # --- experiments and trials ---------------------------------------------------------
    def _experiment(self, trial_dir: TrialDir) -> Experiment:
        name = trial_dir.key[0]
        experiment = self.experiments.get(name)
        exp_dir = str(trial_dir.experiment_dir)
        kind = Experiment.TUNE if trial_dir.trial_id else Experiment.TENSORBOARD
        if experiment is None:
            experiment, _ = Experiment.objects.get_or_create(
                name=name, defaults={"kind": kind, "paths": [exp_dir]}
            )
            self.experiments[name] = experiment
        elif exp_dir not in experiment.paths:
            experiment.paths = [*experiment.paths, exp_dir]
            experiment.save(update_fields=["paths", "updated_at"])
        return experiment

    def _trial(self, experiment: Experiment, trial_dir: TrialDir) -> Trial:
        trial_id = trial_dir.key[1]
        trial = self.trials.get((experiment.pk, trial_id))
        if trial is None:
            trial, _ = Trial.objects.get_or_create(
                experiment=experiment, trial_id=trial_id,
                defaults={"directory": str(trial_dir.path), "trainable": trial_dir.trainable[:255]},
            )
            trial.experiment = experiment
            self.trials[(experiment.pk, trial_id)] = trial
        return trial

    # --- tailing ------------------------------------------------------------------------------
    def _tail(self, trial: Trial, path: Path, kind: str) -> None:
        try:
            stat = path.stat()
        except OSError:
            return  # deleted while we looked: nothing to read, nothing lost
        row = self.cursors.get(str(path))
        if row and row.size == stat.st_size and row.mtime_ns == stat.st_mtime_ns:
            return
        cursor = _to_cursor(row) if row else None
        if kind == LogCursor.RESULT_JSON:
            result = tail_result_json(path, cursor, trial.trial_id)
        else:
            result = tail_tb_events(path, cursor, trial.trial_id)
        self.stats.files_read += 1
        start = cursor.offset if cursor and not result.reset else 0
        self.stats.bytes_read += max(0, result.cursor.offset - start)
        with transaction.atomic():
            self._store(trial, result, kind == LogCursor.TB_EVENTS)
            self._save_cursor(row, trial, path, kind, result, stat)

    def _store(self, trial: Trial, result: TailResult, merge: bool) -> None:
        if result.problems:
            trial.parse_errors += len(result.problems)
            last = result.problems[-1]
            where = f"{Path(last.path).name} @ byte {last.byte_offset}"
            trial.last_parse_error = f"{where}: {last.message}"[:2000]
            self.stats.problems += len(result.problems)
        if result.results:
            written = write_results(trial, result.results, self.now, merge)
            self.stats.results += written
            latest = max(result.results, key=lambda r: (r.attempt, r.iteration))
            _apply_latest(trial, latest, self.now)
            self.stats.new_points.setdefault(trial.pk, []).extend(
                point(r) for r in result.results
            )
        if result.results or result.problems:
            trial.save()
            self.stats.changed_trials.add(trial.pk)

    def _save_cursor(self, row: LogCursor | None, trial: Trial, path: Path, kind: str,
                     result: TailResult, stat: os.stat_result) -> None:
        c = result.cursor
        values = {"offset": c.offset, "head_hash": c.head_hash or "", "attempt": c.attempt,
                  "last_iteration": c.last_iteration, "last_pid": c.last_pid,
                  "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "trial": trial, "kind": kind}
        if row is None:
            row = LogCursor.objects.create(path=str(path), **values)
            self.cursors[str(path)] = row
        else:
            for name, value in values.items():
                setattr(row, name, value)
            row.save()

    # --- params.json, error.txt, Tune's experiment state ----------------------------------------
    def _side_files(self, trial: Trial, trial_dir: TrialDir) -> None:
        changed = False
        if trial_dir.params_file and not trial.config:
            params, problem = read_params(Path(trial_dir.params_file))
            if params is not None:
                trial.config, changed = params, True
            elif problem:
                trial.last_parse_error, changed = problem.message[:2000], True
        if trial_dir.error_file:
            text = read_error(Path(trial_dir.error_file))
            if text and text != trial.error_text:
                trial.error_text, trial.error_attempt, changed = text, trial.attempt, True
                trial.error_at = _mtime(Path(trial_dir.error_file))
        tune = self._tune_state(trial_dir).get(trial.trial_id)
        if tune and tune.status != trial.tune_status:
            trial.tune_status, changed = tune.status, True
        if changed:
            trial.save()
            self.stats.changed_trials.add(trial.pk)

    def _tune_state(self, trial_dir: TrialDir) -> dict[str, Any]:
        # Once per experiment directory per poll, not once per trial.
        key = str(trial_dir.experiment_dir)
        if key not in self.tune_states:
            self.tune_states[key] = tune_state(Path(key))
        return self.tune_states[key]


# --- one poll: scan, ingest, settle ----------------------------------------------------------
# One scanner per process, kept between polls: its memory of directory and file mtimes
# is what lets a poll skip quiet history. A restart rebuilds it with one full pass.
_SCANNERS: dict[tuple[Path, ...], LogScanner] = {}  # the one for the current roots
_POLL_LOCK = threading.Lock()


def ingest_logs(roots: Sequence[Path], now: datetime) -> IngestStats:
    with _POLL_LOCK:
        scanner = log_scanner(roots)
        settle(scanner)
        scan = scanner.scan()
        ingest = TrialLogIngest(now)
        try:
            stats = ingest.run(scan.trial_dirs)
            ingest.apply_states(scan.state_dirs)
        except BaseException:
            scanner.retry(scan)  # the scanner already took in the new sizes and mtimes
            raise
        stats.checked, stats.known = scan.checked, scan.known
        return stats


def log_scanner(roots: Sequence[Path]) -> LogScanner:
    key = tuple(Path(r) for r in roots)
    if key not in _SCANNERS:
        _SCANNERS.clear()
        _SCANNERS[key] = LogScanner(key)
    scanner = _SCANNERS[key]
    scanner.quiet_after_s, scanner.rescan_s = settings.LOG_QUIET_S, settings.LOG_RESCAN_S
    return scanner


def settle(scanner: LogScanner) -> None:
    """Trial dirs quiet for a while stop being watched once their trial is finished
    (the slow rescan still visits them); the others are asked about again later."""
    candidates = scanner.candidates()
    finished: set[tuple[str, str]] = set()
    for start in range(0, len(candidates), BATCH):
        batch = candidates[start:start + BATCH]
        finished.update(Trial.objects.filter(
            experiment__name__in={d.key[0] for d in batch},
            trial_id__in={d.key[1] for d in batch}, status__in=Trial.FINISHED,
        ).values_list("experiment__name", "trial_id"))
    scanner.settle([d.path for d in candidates if d.key in finished],
                   [d.path for d in candidates if d.key not in finished])


# Tune rewrites experiment_state-*.json whole every snapshot; read it again only when
# the newest file changed, not at every poll (it can be megabytes for 1,000 trials).
_STATE_CACHE: dict[str, tuple[tuple[str, int], dict[str, Any]]] = {}


def tune_state(exp_dir: Path) -> dict[str, Any]:
    try:
        newest = max(exp_dir.glob("experiment_state-*.json"), key=lambda p: p.name)
        key = (newest.name, newest.stat().st_mtime_ns)
    except (ValueError, OSError):
        return {}
    cached = _STATE_CACHE.get(str(exp_dir))
    if cached and cached[0] == key:
        return cached[1]
    state = read_experiment_state(exp_dir)
    _STATE_CACHE[str(exp_dir)] = (key, state)
    return state


def write_results(trial: Trial, lines: Sequence[ResultLine], now: datetime, merge: bool) -> int:
    """Insert new results; duplicates (the other copy of the same file) are ignored.

    TensorBoard steps may arrive in pieces (a step's later tags in a later read):
    those merge into the step's metrics instead of being dropped.
    """
    rows = {}
    for line in lines:
        key = (line.attempt, line.iteration)
        if key in rows and merge:
            rows[key].metrics.update(line.metrics)
            continue
        rows[key] = StepResult(
            trial=trial, attempt=line.attempt, iteration=line.iteration, at=line.at,
            ingested_at=now, time_this_iter_s=line.time_this_iter_s, metrics=dict(line.metrics),
        )
    if merge:
        existing = {
            (r.attempt, r.iteration): r
            for r in StepResult.objects.filter(
                trial=trial, iteration__in=[k[1] for k in rows]
            )
        }
        updates = []
        for key, new in list(rows.items()):
            old = existing.get(key)
            if old is not None:
                old.metrics = {**old.metrics, **new.metrics}
                updates.append(old)
                del rows[key]
        StepResult.objects.bulk_update(updates, ["metrics"])
    created = StepResult.objects.bulk_create(list(rows.values()), ignore_conflicts=True)
    return len(created)


def _apply_latest(trial: Trial, latest: ResultLine, now: datetime) -> None:
    if (latest.attempt, latest.iteration) < (trial.attempt, trial.iteration or 0):
        return  # an older copy of the log: keep what we have
    trial.attempt = latest.attempt
    trial.iteration = latest.iteration
    trial.last_result_at = latest.at or now
    trial.last_ingested_at = now
    trial.pid = latest.pid if latest.pid is not None else trial.pid
    trial.node_ip = latest.node_ip or trial.node_ip
    trial.hostname = latest.hostname or trial.hostname
    trial.last_metrics = dict(latest.metrics)
    trial.last_step_s = latest.time_this_iter_s
    metric, mode = objective(trial.experiment, latest.metrics)
    value = latest.metrics.get(metric) if metric else None
    if isinstance(value, float | int):
        best = trial.best_value
        if best is None or (value < best if mode == "min" else value > best):
            trial.best_value = float(value)


def objective(experiment: Experiment, metrics: dict[str, Any]) -> tuple[str | None, str]:
    if experiment.metric:
        return experiment.metric, experiment.mode or "max"
    for name, mode in _OBJECTIVES:
        if name in metrics:
            return name, mode
    return None, "max"


def point(line: ResultLine) -> dict[str, Any]:
    return {"attempt": line.attempt, "iteration": line.iteration,
            "at": line.at.isoformat() if line.at else None,
            "time_this_iter_s": line.time_this_iter_s, "metrics": line.metrics}


def _to_cursor(row: LogCursor) -> FileCursor:
    return FileCursor(path=row.path, offset=row.offset, head_hash=row.head_hash or None,
                      attempt=row.attempt, last_iteration=row.last_iteration,
                      last_pid=row.last_pid)


def _mtime(path: Path) -> datetime | None:
    try:
        return datetime.fromtimestamp(path.stat().st_mtime, UTC)
    except OSError:
        return None
