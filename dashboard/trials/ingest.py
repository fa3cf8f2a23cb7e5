"""Ingest what raywatch's own trial-log collector reads from this host's files:
cursors (LogCursor rows, so a restart resumes where it stopped), then the shared store
path (store.py) that node agents' trial_log records take too.

A poll looks only at the trial directories the LogScanner hands over (new, or changed,
also what its slow rescan found changed) and loads only their rows, in batches: the cost
of a poll grows with what changed, not with the months of finished searches under
~/ray_results. Results are de-duplicated on (trial, attempt, iteration), so the live
staging copy and Tune's storage copy of the same file never count twice. Files are held
to their log root and its caps (collectors.rootfiles): what is refused is the trial's
problem (parse_errors, last_parse_error), as a line that is not JSON is.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from collectors.logscan import LogScanner, stale
from collectors.records import TrialDir, TrialUpdate
from collectors.rootfiles import Caps, Root
from collectors.runlogs import tail_log
from collectors.tunelogs import (
    FileCursor,
    ParseProblem,
    SearchObjective,
    TailResult,
    TuneStates,
    TuneTrialState,
    read_error,
    read_params,
)
from dashboard.cluster.models import settings_cluster_pk
from dashboard.trials import planner
from dashboard.trials.bulkwrite import update_rows
from dashboard.trials.models import LogCursor, Trial
from dashboard.trials.store import BATCH, IngestStats, TrialStore

__all__ = ["IngestStats", "TrialLogIngest", "ingest_logs"]


# Lines read before what was read so far is stored: a batch of trials with long files
# (a finished search's whole history) is written in pieces of about this size.
FLUSH_LINES = 50_000
CURSOR_FIELDS = ("offset", "head_hash", "attempt", "last_iteration", "last_pid", "size",
                 "mtime_ns", "trial", "kind", "updated_at")


@dataclass
class Read:
    """What a poll read and has not stored yet: updates in order, and the cursors that
    say how far the files were read (stored with them, or not at all)."""

    updates: list[TrialUpdate] = field(default_factory=list)
    cursors: list[LogCursor] = field(default_factory=list)
    lines: int = 0


class TrialLogIngest:
    """One poll's worth of ingest over the trial dirs it is given; loads only their rows."""

    def __init__(self, now: datetime, scanner: LogScanner | None = None,
                 on_stored: Callable[[IngestStats], None] | None = None) -> None:
        self.now = now
        self.on_stored = on_stored  # after each stored batch (push.push_points)
        self.store = TrialStore(now)
        self.stats = self.store.stats
        self.scanner = scanner
        self.cursors: dict[str, LogCursor] = {}
        self.tune_states: dict[Path, dict[str, TuneTrialState]] = {}
        self.objectives: dict[Path, SearchObjective | None] = {}
        self.unfinished: list[Path] = []  # trial dirs with more to read than a read takes

    def run(self, trial_dirs: Iterable[TrialDir]) -> IngestStats:
        # A scan's TrialDirs are built a batch at a time (a slice): a first pass hands
        # on the whole history, which all at once would set the process's high-water mark.
        dirs = trial_dirs if isinstance(trial_dirs, Sequence) else list(trial_dirs)
        for start in range(0, len(dirs), BATCH):
            batch = dirs[start:start + BATCH]
            self.store.load(d.key for d in batch)
            self.store.ensure(TrialUpdate.about(d) for d in batch)
            paths = [p for d in batch for _, p in d.logs()]
            self.cursors.update((c.path, c) for c in LogCursor.objects.filter(path__in=paths))
            read = Read()
            for trial_dir in batch:
                self._read(trial_dir, read)
                if read.lines >= FLUSH_LINES:
                    read = self._store(read)
            self._store(read)
            self.store.forget()
            self.cursors.clear()
        return self.stats

    def _read(self, trial_dir: TrialDir, read: Read) -> None:
        base = TrialUpdate.about(trial_dir)
        trial = self.store.trial(base)
        if trial_dir.refused:  # a link to a directory: nothing of it is read
            read.updates.append(replace(base, problem_count=1, last_problem=said(
                ParseProblem(trial_dir.name, 0, trial_dir.refused))))
            return
        done = [self._tail(trial, base, Path(path), kind, read, trial_dir)
                for kind, path in trial_dir.logs()]
        if not all(done):
            self.unfinished.append(trial_dir.path)
        read.updates.append(self._side_facts(trial, base, trial_dir))

    def _store(self, read: Read) -> Read:
        """What was read so far, with the cursors that say so, in one transaction."""
        with transaction.atomic():
            self.store.apply_many(read.updates)
            self._save_cursors(read.cursors)
        if self.on_stored is not None:
            self.on_stored(self.stats)
        return Read()

    def apply_states(self, state_dirs: Iterable[tuple[str, Path]]) -> None:
        """Tune's experiment state changed: bring the trials' tune_status (a trial can go
        RUNNING -> TERMINATED without a new result line) and the search's objective up
        to date."""
        for _, directory in state_dirs:
            known = self.scanner.trials_in(directory) if self.scanner else []
            if not known or not self._tune_state(directory, known[0].root):
                continue
            for start in range(0, len(known), BATCH):
                batch = known[start:start + BATCH]
                self.store.load(d.key for d in batch)
                self.store.apply_many([
                    replace(TrialUpdate.about(d), **facts)  # type: ignore[arg-type]
                    for d in batch if (facts := self._state_facts(d))])
                self.store.forget()

    # --- tailing ------------------------------------------------------------------------------
    def _tail(self, trial: Trial, base: TrialUpdate, path: Path, kind: str,
              read: Read, trial_dir: TrialDir) -> bool:
        """Read on from the file's cursor; False when more is left than one read takes
        (read on at the next poll: a long history, a line too long to read at once)."""
        try:
            stat = os.stat(path, follow_symlinks=False)
        except OSError:
            return True  # deleted while we looked: nothing to read, nothing lost
        row = self.cursors.get(str(path))
        if row and row.size == stat.st_size and row.mtime_ns == stat.st_mtime_ns:
            return True
        cursor = _to_cursor(row) if row else None
        result = tail_log(kind, path, cursor, trial.trial_id, run_format=trial_dir.run_format,
                          root=trial_dir.root)
        self.stats.files_read += 1
        start = cursor.offset if cursor and not result.reset else 0
        self.stats.bytes_read += max(0, result.cursor.offset - start)
        read.updates.append(replace(
            base, results=tuple(result.results), problem_count=len(result.problems),
            last_problem=said(result.problems[-1]) if result.problems else None))
        # At the end, or nothing more to read (a partial last line): the stat says so.
        done = result.cursor.offset >= stat.st_size or (
            result.cursor.offset == (cursor.offset if cursor else 0) and not result.reset)
        read.cursors.append(_cursor_row(row, trial, path, kind, result,
                                        stat if done else None))
        read.lines += len(result.results)
        return done

    def _save_cursors(self, rows: list[LogCursor]) -> None:
        now = timezone.now()
        for row in rows:
            row.updated_at = now
        LogCursor.objects.bulk_create([r for r in rows if r.pk is None])
        update_rows(LogCursor, [r for r in rows if r.pk is not None], CURSOR_FIELDS)

    # --- params.json, error.txt, Tune's experiment state ----------------------------------------
    def _side_facts(self, trial: Trial, base: TrialUpdate, trial_dir: TrialDir) -> TrialUpdate:
        facts: dict[str, object] = {}
        problems: list[ParseProblem] = []
        if trial_dir.params_file and not trial.config:
            params, problem = read_params(Path(trial_dir.params_file), trial_dir.root)
            if params is not None:
                facts["params"] = params
            problems += [problem] if problem else []
        if trial_dir.error_file:
            text, problem = read_error(Path(trial_dir.error_file), root=trial_dir.root)
            if text:
                facts["error_text"] = text
                facts["error_at"] = _mtime(Path(trial_dir.error_file))
            problems += [problem] if problem else []
        # These are read again whenever the trial dir changes: a refusal the trial shows
        # already is not counted again.
        new = [text for text in map(said, problems) if text != trial.last_parse_error]
        if new:
            facts["problem_count"], facts["last_problem"] = len(new), new[-1]
        return replace(base, **facts, **self._state_facts(trial_dir))  # type: ignore[arg-type]

    def _state_facts(self, trial_dir: TrialDir) -> dict[str, str | None]:
        """Tune's status of the trial and the search's objective, as its experiment's
        state says (the store keeps what changed)."""
        facts: dict[str, str | None] = {}
        if trial_dir.run_files:
            return facts  # a verl or EasyR1 run: no Tune state
        directory, root = trial_dir.experiment_dir, trial_dir.root
        tune = self._tune_state(directory, root).get(trial_dir.key[1])
        if tune and tune.status:
            facts["tune_status"] = tune.status
        search = self._objective(directory, root)
        if search:
            facts["search_metric"], facts["search_mode"] = search.metric, search.mode
        return facts

    def _objective(self, directory: Path, root: Root | None) -> SearchObjective | None:
        # Once per experiment directory per poll too: it globs for the state files.
        if directory not in self.objectives:
            self.objectives[directory] = _TUNE_STATES.objective(directory, root)
        return self.objectives[directory]

    def _tune_state(self, directory: Path, root: Root | None) -> dict[str, TuneTrialState]:
        # Once per experiment directory per poll, not once per trial.
        if directory not in self.tune_states:
            self.tune_states[directory] = _TUNE_STATES.get(directory, root)
        return self.tune_states[directory]


# --- one poll: scan, ingest, settle ----------------------------------------------------------
# One scanner per process, kept between polls: its memory of directory and file mtimes
# is what lets a poll skip quiet history. A restart rebuilds it with one full pass.
_SCANNERS: dict[tuple[Path, ...], LogScanner] = {}  # the one for the current roots
_POLL_LOCK = threading.Lock()


# One reader of the log dirs at a time across processes too: a Celery worker's children
# each take the next poll, and a first ingest of months of searches outlasts many polls;
# two children reading the same history would each store it.
READER_LOCK = 7_261_002  # pg advisory lock id: "raywatch trial-log reader"


@contextmanager
def the_only_reader() -> Iterator[bool]:
    """True when this process may read the log dirs now (on Postgres a session advisory
    lock, let go at the end or with the connection; one process only on SQLite)."""
    if connection.vendor != "postgresql":
        yield True
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [READER_LOCK])
        mine = bool(cursor.fetchone()[0])
    try:
        yield mine
    finally:
        if mine:
            with contextlib.suppress(DatabaseError), connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [READER_LOCK])


def ingest_logs(roots: Sequence[Path], now: datetime,
                on_stored: Callable[[IngestStats], None] | None = None) -> IngestStats:
    """One poll of the log dirs; IngestStats(busy=True) when another process is still
    reading them (its poll continues; this one reads nothing). `on_stored(stats)` after
    each batch stored (the poll sends its new points on that way, push.push_points)."""
    with _POLL_LOCK, the_only_reader() as mine:
        if not mine:
            return IngestStats(busy=True)
        scanner = log_scanner(roots)
        settle(scanner)
        scan = scanner.scan()
        ingest = TrialLogIngest(now, scanner, on_stored)
        try:
            stats = ingest.run(scan.trial_dirs)
            ingest.apply_states(scan.state_dirs)
        except BaseException:
            scanner.retry(scan)  # the scanner already took in the new sizes and mtimes
            raise
        scanner.again(ingest.unfinished)
        stats.checked, stats.known = scan.checked, scan.known
    planner.stored(stats.results)  # after the poll's transactions
    return stats


def log_scanner(roots: Sequence[Path]) -> LogScanner:
    key = tuple(Path(r) for r in roots)
    if key not in _SCANNERS:
        _SCANNERS.clear()
        _SCANNERS[key] = LogScanner(key)
    scanner = _SCANNERS[key]
    scanner.quiet_after_s, scanner.rescan_s = settings.LOG_QUIET_S, settings.LOG_RESCAN_S
    scanner.rescan_per_poll = settings.LOG_RESCAN_PER_POLL
    scanner.caps = Caps.mb(settings.LOG_FILE_MAX_MB, settings.LOG_JSON_FILE_MAX_MB)
    return scanner


def settle(scanner: LogScanner) -> None:
    """Trial dirs quiet for a while stop being watched once their trial is finished, or,
    with no Tune state to say so (TensorBoard and JSONL runs), once their files went
    unchanged for long (logscan.stale); the slow rescan still visits them. The others
    are asked about again later."""
    candidates = scanner.candidates()  # a batch at a time: a first pass's are all due at once
    wall = time.time()
    for start in range(0, len(candidates), BATCH):
        batch = candidates[start:start + BATCH]
        finished = set(Trial.objects.filter(
            experiment__cluster_id=settings_cluster_pk(),
            experiment__name__in={d.key[0] for d in batch},
            trial_id__in={d.key[1] for d in batch}, status__in=Trial.FINISHED,
        ).values_list("experiment__name", "trial_id"))
        done = {d.path for d in batch if d.key in finished or (
            d.trial_id is None and stale(d, wall, scanner.quiet_after_s))}
        scanner.settle(done, [d.path for d in batch if d.path not in done])


# Tune rewrites experiment_state-*.json whole every snapshot; read it again only when
# the newest file changed, not at every poll (it can be megabytes for 1,000 trials).
_TUNE_STATES = TuneStates()


def _cursor_row(row: LogCursor | None, trial: Trial, path: Path, kind: str,
                result: TailResult, stat: os.stat_result | None) -> LogCursor:
    """`stat`: the file's when read to its end; None: more to read (-1: not the file's)."""
    c = result.cursor
    row = row or LogCursor(path=str(path))
    row.offset, row.head_hash, row.attempt = c.offset, c.head_hash or "", c.attempt
    row.last_iteration, row.last_pid = c.last_iteration, c.last_pid
    row.size, row.mtime_ns = (stat.st_size, stat.st_mtime_ns) if stat else (-1, -1)
    row.trial, row.kind = trial, kind
    return row


def said(problem: ParseProblem) -> str:
    """A problem as the trial shows it: "result.json @ byte 812: line is not JSON"."""
    return f"{Path(problem.path).name} @ byte {problem.byte_offset}: {problem.message}"


def _to_cursor(row: LogCursor) -> FileCursor:
    return FileCursor(path=row.path, offset=row.offset, head_hash=row.head_hash or None,
                      attempt=row.attempt, last_iteration=row.last_iteration,
                      last_pid=row.last_pid)


def _mtime(path: Path) -> datetime | None:
    try:
        return datetime.fromtimestamp(os.stat(path, follow_symlinks=False).st_mtime, UTC)
    except OSError:
        return None
