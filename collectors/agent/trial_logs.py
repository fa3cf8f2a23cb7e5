"""The agent's trial-log collector: the Tune trials on this node, and its TensorBoard, verl
and EasyR1 runs, read as raywatch's own collector reads them (collectors.logscan,
collectors.runlogs), sent as `trial_log` records through the spool.

- Roots: ~/ray_results, every Ray session's live staging area under the Ray temp dir
  (collectors.logscan.default_log_dirs), and RAYWATCH_LOG_DIRS.
- Cursors live in the spool dir (cursors.py) and advance only once the records that
  carry the lines are in the spool, so a restart neither loses nor resends lines (a
  crash between the two resends one poll's lines; raywatch stores a result once).
- A first read of a long history goes out in batches of about BATCH_BYTES, at most
  POLL_BYTES a poll, and waits while the spool is filling (raywatch is behind or down):
  the files keep what is not read yet, the spool is for what is.
- Settling: a trial dir quiet for a while stops being watched once it is finished by
  Tune's experiment state or its error.txt (no database here); the LogScanner's slow
  rescan still visits it. A poll costs what changed, not the history on disk.
- The agent runs as root: files are held to their root and its caps
  (collectors.rootfiles, RAYWATCH_LOG_FILE_MAX_MB, RAYWATCH_LOG_JSON_FILE_MAX_MB). A
  link, a FIFO or a file over its cap is sent as that trial's problem, once a change.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from collectors.agent import wire
from collectors.agent.console_runs import ConsoleRuns
from collectors.agent.cursors import CursorStore, FileState, TrialSent
from collectors.agent.spool import Spool
from collectors.agent.trialwire import MAX_TEXT, encode_trial_log
from collectors.logscan import RESCAN_PER_POLL, STALE_QUIET, LogScanner, stale
from collectors.procstat import command_lines, open_files_of, ray_worker_pids
from collectors.records import TB_EVENTS, TENSORBOARD, VERL, TrialDir, TrialUpdate
from collectors.rootfiles import DEFAULT_CAPS, Caps, Root
from collectors.runformats import TRAINER_CLASSES
from collectors.runlogs import tail_log
from collectors.tunelogs import (
    MAX_LINE_BYTES,
    ParseProblem,
    TuneStates,
    TuneTrialState,
    read_error,
    read_params,
)
from collectors.tunesearch import SearchObjective

log = logging.getLogger("raywatch.agent.trial_logs")
CHUNK_BYTES = 256 << 10  # one read of one file
BATCH_BYTES = 256 << 10  # a spooled batch of trial_log records, about
MAX_RECORD_BYTES = wire.MAX_BODY_BYTES * 3 // 4  # split a record's results past this
MAX_PARAMS_BYTES = 256 << 10
POLL_BYTES = 8 << 20  # read a poll at most: a long history takes several polls
SPOOL_SHARE = 4  # read nothing more while the spool is over a quarter full
STATES_IDLE_S = 60.0  # the least a settled experiment's Tune state stays in memory unasked
SETTLE_BATCH = 400  # trial dirs asked about at once (their TrialDirs built for it)
FINISHED = ("TERMINATED", "ERROR")
HOLD_THEIR_LOG = (VERL, TENSORBOARD)  # writers that keep the log file open (ray-facts.md)
NO_TENSORBOARD = ("TensorBoard event files here, but the tensorboard package is not "
                  "installed for the agent (pip install tensorboard): not read")


@dataclass
class PollStats:
    records: int = 0
    batches: int = 0
    bytes_read: int = 0
    checked: int = 0  # trial dirs statted by the scan
    known: int = 0
    backlog: int = 0  # trial dirs with more to read at the next poll
    # Trial dirs first seen or settled this poll: a restart over a long history reads no
    # record but goes over every dir, twice (collectors.memory).
    dirs: int = 0


class TrialLogCollector:
    def __init__(self, roots: Callable[[], list[Path]], spool: Spool, store: CursorStore,
                 quiet_after_s: float = 60.0, rescan_s: float = 300.0,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time,
                 rescan_per_poll: int = RESCAN_PER_POLL, caps: Caps = DEFAULT_CAPS,
                 ray_tmp: Path | None = None) -> None:
        self.roots = roots
        # The RL trainers' consoles, under the Ray temp dir (None: not read).
        self.consoles = ConsoleRuns(ray_tmp) if ray_tmp is not None else None
        self.spool = spool
        self.store = store
        self.scanner = LogScanner(roots(), quiet_after_s, rescan_s, clock, rescan_per_poll,
                                  caps)
        self.wall = wall
        # The cursors and what was sent of the trial dirs being read, looked up in the
        # store when first needed and forgotten when they settle (None: none stored):
        # memory follows what is watched, not the history.
        self.files: dict[str, FileState | None] = {}
        self.sent: dict[str, TrialSent | None] = {}
        # Trial dirs with more to read than a poll reads, by path (a str): a first pass
        # hands on a whole history; each TrialDir is built (the scanner's) when its turn comes.
        self.backlog: dict[str, None] = {}
        self.states = TuneStates(clock)
        self.poll_states: dict[Path, dict[str, TuneTrialState]] = {}  # this poll's reads
        self.poll_searches: dict[Path, SearchObjective | None] = {}
        # Which Ray worker holds which file open, looked up at most once a poll, and only
        # when a run's writer is not its known one: the cost stays one walk of the workers'
        # open files a poll, however many runs no worker writes.
        self.poll_writers: dict[str, list[int]] | None = None
        self.poll_dirs: dict[int, str] | None = None  # trainer pid -> its working dir
        self.tensorboard = importlib.util.find_spec("tensorboard") is not None

    # --- one poll --------------------------------------------------------------------------
    def poll(self) -> PollStats:
        self.poll_states, self.poll_searches, self.poll_writers = {}, {}, None
        self.poll_dirs: dict[int, str] | None = None
        self.scanner.roots = self.roots()
        settled = self._settle()
        scan = self.scanner.scan()
        work = {**self.backlog, **dict.fromkeys(scan.trial_dirs.paths())}
        self.backlog = {}
        out = _Pending(self)
        try:
            for path in work:
                if out.exhausted():
                    self.backlog[path] = None
                elif (trial_dir := self.scanner.trial_dir(path)) is not None:
                    out.keep = self.scanner.changing(path)
                    self._read(trial_dir, out)  # else forgotten: gone, or no longer a root's
            self._statuses(scan.state_dirs, set(work), out)
            if self.consoles is not None:
                self.consoles.poll(out)
            out.flush()
            # An experiment not asked about for two quiet periods has settled: its Tune
            # state leaves memory until one of its trials wakes up.
            self.states.forget_idle(max(2 * self.scanner.quiet_after_s, STATES_IDLE_S))
        except BaseException:
            self.backlog.update(work)  # what was spooled is skipped by its cursors
            self.scanner.retry(scan)
            raise
        return PollStats(out.records_total, out.batches, out.read_bytes, scan.checked,
                         scan.known, len(self.backlog), scan.new + settled)

    def file(self, key: str, keep: bool = True) -> FileState | None:
        """A file's cursor; kept in memory (`keep`) while its trial dir changes."""
        return _looked_up(self.files, key, self.store.file, keep)

    def trial_sent(self, key: str, keep: bool = True) -> TrialSent | None:
        return _looked_up(self.sent, key, self.store.trial, keep)

    def spool_full(self) -> bool:
        return self.spool.stats()["bytes"] > self.spool.max_bytes // SPOOL_SHARE

    # --- one trial dir ---------------------------------------------------------------------
    def _read(self, trial_dir: TrialDir, out: _Pending) -> None:
        base = TrialUpdate.about(trial_dir)
        if trial_dir.refused:  # a link to a directory: nothing of it is read
            self._say_once(trial_dir, base, out, "link", trial_dir.refused)
            return
        if trial_dir.event_files and not self.tensorboard:
            self._say_once(trial_dir, base, out, "tensorboard", NO_TENSORBOARD)
        for kind, name in trial_dir.logs():
            if kind != TB_EVENTS or self.tensorboard:
                self._tail(trial_dir, base, kind, Path(name), out)
        self._side_facts(trial_dir, base, out)

    def _tail(self, trial_dir: TrialDir, base: TrialUpdate, kind: str, path: Path,
              out: _Pending) -> None:
        """Read on from the file's cursor, a chunk at a time, to its end or the budget."""
        while True:
            try:
                stat = os.stat(path, follow_symlinks=False)
            except OSError:
                return  # gone: nothing to read, nothing lost
            state = out.file(str(path))
            if state is not None and (state.size, state.mtime_ns) == (stat.st_size,
                                                                        stat.st_mtime_ns):
                return
            if out.exhausted():
                self.backlog[str(trial_dir.path)] = None
                return
            cursor = state.cursor if state else None
            before = 0 if cursor is None else cursor.offset
            result = tail_log(kind, path, cursor, base.trial_id, root=trial_dir.root,
                              run_format=trial_dir.run_format, max_bytes=CHUNK_BYTES,
                              max_line=MAX_LINE_BYTES)
            after = result.cursor.offset
            out.read_bytes += max(0, after - (0 if result.reset else before))
            # At the end, or only a partial last line left: the file's stat says so.
            done = after >= stat.st_size or (after == before and not result.reset)
            size, mtime = (stat.st_size, stat.st_mtime_ns) if done else (-1, -1)
            problems = [_problem(p) for p in result.problems]
            out.add(replace(base, results=tuple(result.results), problem_count=len(problems)),
                    problems, files={str(path): FileState(result.cursor, size, mtime)})
            if done:
                return

    def _side_facts(self, trial_dir: TrialDir, base: TrialUpdate, out: _Pending) -> None:
        """params.json once, error.txt when it changed, Tune's status and the search's
        objective when they changed."""
        key = str(trial_dir.path)
        sent = new = out.trial(key)
        facts: dict[str, Any] = {}
        problems: list[dict[str, Any]] = []
        if trial_dir.params_file and sent.params != "sent":
            params, problem = read_params(Path(trial_dir.params_file), trial_dir.root)
            if params is not None and len(json.dumps(params)) <= MAX_PARAMS_BYTES:
                facts["params"], new = params, replace(new, params="sent")
            elif (params is not None or problem) and sent.params != "problem":
                message = problem.message if problem else (
                    f"params.json is over {MAX_PARAMS_BYTES} bytes: not sent")
                problems.append({"file": "params.json", "byte_offset": 0, "message": message})
                new = replace(new, params="problem")
        if trial_dir.error_file:
            error = _error_file(Path(trial_dir.error_file), trial_dir.root)
            if error is not None and error[0] != sent.error:
                new = replace(new, error=error[0])
                if error[1]:
                    facts["error_text"], facts["error_at"] = error[1], error[2]
                problems += [_problem(error[3])] if error[3] else []
        new = self._state_facts(trial_dir, new, facts)
        writer = self._writer(trial_dir, sent.writer)
        if writer and writer != sent.writer:
            facts["writer_pid"], new = writer, replace(new, writer=writer)
        if new != sent:
            out.add(replace(base, problem_count=len(problems), **facts), problems,
                    sent={key: new})

    def _writer(self, trial_dir: TrialDir, known: int) -> int:
        """An RL run's writer: the one Ray worker of this node holding its log open
        (verl's file logger and TensorBoard's writer keep theirs open), else the one
        trainer actor whose working directory holds it (where verl's and EasyR1's file
        loggers write by default; EasyR1's opens its file per line); 0 when none or
        several do. Looked for when its files changed, the known one first. The only
        evidence that binds a file-logged run to a trainer (issue 43, M2)."""
        if trial_dir.trial_id is not None:
            return 0
        files = [os.path.realpath(path) for _, path in trial_dir.logs()]
        if trial_dir.framework in HOLD_THEIR_LOG:
            if known:  # from this poll's map of the workers' files when another run made it
                held = (open_files_of([known]) if self.poll_writers is None
                        else self.poll_writers)
                if any(known in held.get(path, ()) for path in files):
                    return known
            if self.poll_writers is None:
                self.poll_writers = open_files_of(ray_worker_pids())
            found = {pid for path in files for pid in self.poll_writers.get(path, ())}
            if found:
                return found.pop() if len(found) == 1 else 0
        if self.poll_dirs is None:
            self.poll_dirs = trainer_dirs()
        working = {pid for pid, cwd in self.poll_dirs.items() if cwd != "/"  # not all
                   and any(path.startswith(cwd + "/") for path in files)}
        return working.pop() if len(working) == 1 else 0

    def _say_once(self, trial_dir: TrialDir, base: TrialUpdate, out: _Pending, what: str,
                  message: str) -> None:
        key = str(trial_dir.path)
        sent = out.trial(key)
        if getattr(sent, what) != "problem":
            out.add(replace(base, problem_count=1),
                    [{"file": trial_dir.name, "byte_offset": 0, "message": message}],
                    sent={key: replace(sent, **{what: "problem"})})

    def _status(self, trial_dir: TrialDir) -> str | None:
        if trial_dir.run_files:
            return None  # a verl or EasyR1 run: no Tune state
        directory = trial_dir.experiment_dir
        if directory not in self.poll_states:  # once per experiment a poll, not per trial
            self.poll_states[directory] = self.states.get(directory, trial_dir.root)
        tune = self.poll_states[directory].get(trial_dir.trial_id or "")
        return tune.status if tune else None

    def _search(self, trial_dir: TrialDir) -> SearchObjective | None:
        if trial_dir.run_files:
            return None
        directory = trial_dir.experiment_dir
        if directory not in self.poll_searches:  # once per experiment a poll
            self.poll_searches[directory] = self.states.objective(directory, trial_dir.root)
        return self.poll_searches[directory]

    def _statuses(self, state_dirs: list[tuple[str, Path]], done: set[str],
                  out: _Pending) -> None:
        """Tune's experiment state changed: a trial may have ended without a new line (or
        the search's objective become known)."""
        for _, directory in state_dirs:
            for trial_dir in self.scanner.trials_in(directory):
                key = str(trial_dir.path)
                if key in done:
                    continue
                out.keep = self.scanner.changing(key)
                facts: dict[str, Any] = {}
                sent = out.trial(key)
                new = self._state_facts(trial_dir, sent, facts)
                if new != sent:
                    out.add(replace(TrialUpdate.about(trial_dir), **facts), [],
                            sent={key: new})

    def _state_facts(self, trial_dir: TrialDir, sent: TrialSent,
                     facts: dict[str, Any]) -> TrialSent:
        """What the experiment's state says that was not sent yet: Tune's status of the
        trial and the search's objective, added to `facts`; what is then sent."""
        status = self._status(trial_dir)
        if status and status != sent.status:
            facts["tune_status"], sent = status, replace(sent, status=status)
        search = self._search(trial_dir)
        if search and search.key() != sent.search:
            facts["search_metric"], facts["search_mode"] = search.metric, search.mode
            sent = replace(sent, search=search.key())
        return sent

    # --- settling quiet trial dirs -----------------------------------------------------------
    def _settle(self) -> int:
        """Settle the finished trial dirs among the scanner's candidates; how many."""
        candidates = self.scanner.candidates()  # a batch at a time: a first pass's are all due
        settled = 0
        for start in range(0, len(candidates), SETTLE_BATCH):
            batch = candidates[start:start + SETTLE_BATCH]
            finished = [d for d in batch if self._finished(d)]
            done = {d.path for d in finished}
            self.scanner.settle(done, [d.path for d in batch if d.path not in done])
            for trial_dir in finished:
                self._forget(trial_dir)
            settled += len(finished)
        return settled

    def _forget(self, trial_dir: TrialDir) -> None:
        """A settled trial dir's cursors leave memory (the store keeps them)."""
        self.sent.pop(str(trial_dir.path), None)
        for _, name in trial_dir.logs():
            self.files.pop(str(Path(name)), None)

    def _finished(self, trial_dir: TrialDir) -> bool:
        """Finished by Tune's state, or by error.txt where Tune says nothing; a trial dir
        whose experiment state (or, without one, whose files) went unchanged for
        STALE_QUIET quiet periods belongs to a driver that is gone."""
        if str(trial_dir.path) in self.backlog:
            return False
        stale_s = self.scanner.quiet_after_s * STALE_QUIET
        status = self._status(trial_dir)
        if status in FINISHED:
            return True
        if status:
            changed = self.states.changed_at(trial_dir.experiment_dir)
            return changed is not None and self.wall() - changed > stale_s
        return bool(trial_dir.error_file) or stale(trial_dir, self.wall(),
                                                   self.scanner.quiet_after_s)


class _Pending:
    """Records on their way to the spool, and the cursors that advance once they are in
    it: a batch is spooled first, then its cursors are saved."""

    def __init__(self, collector: TrialLogCollector) -> None:
        self.collector = collector
        self.records: list[str] = []  # encoded: measured once, written as they are
        self.size = 0
        self.files: dict[str, FileState] = {}
        self.sent: dict[str, TrialSent] = {}
        # Whether the collector keeps the cursors of the trial dir being read in memory:
        # while it changes (a running trial), not when it is seen once (a first pass hands
        # on a whole history; their cursors in memory until they settle were a restart's
        # high-water mark, ~1 KB a trial dir, that the process kept). The store has them.
        self.keep = True
        self.unkept: set[str] = set()
        self.read_bytes = self.records_total = self.batches = 0
        self.full = collector.spool_full()
        # A sink may take bigger batches than a report's worth (raywatch's own reader
        # stores in-process: a bigger batch goes to the database by COPY).
        self.batch_bytes = getattr(collector.spool, "batch_bytes", BATCH_BYTES)

    def file(self, key: str) -> FileState | None:
        return self.files.get(key) or self.collector.file(key, self.keep)

    def trial(self, key: str) -> TrialSent:
        return self.sent.get(key) or self.collector.trial_sent(key, self.keep) or TrialSent()

    def exhausted(self) -> bool:
        return self.full or self.read_bytes >= POLL_BYTES

    def add(self, update: TrialUpdate, problems: list[dict[str, Any]],
            files: dict[str, FileState] | None = None,
            sent: dict[str, TrialSent] | None = None) -> None:
        if update.results or problems or _has_facts(update):
            for record in _encode(update, problems, datetime.now(UTC)):
                if self.records and self.size + len(record) > self.batch_bytes:
                    self.flush()
                self.records.append(record)
                self.size += len(record)
        # After the flush above: these cursors cover records not yet in the spool.
        self.files.update(files or {})
        self.sent.update(sent or {})
        if not self.keep:
            self.unkept.update(files or (), sent or ())

    def flush(self) -> None:
        if self.records:
            self.collector.spool.append_encoded(self.records,
                                                wire.timestamp(datetime.now(UTC)))
            self.batches += 1
            self.records_total += len(self.records)
        self.collector.store.save(self.files, self.sent)
        _keep(self.collector.files, self.files, self.unkept)
        _keep(self.collector.sent, self.sent, self.unkept)
        self.records, self.size, self.files, self.sent = [], 0, {}, {}
        self.unkept = set()
        self.full = self.collector.spool_full()


def _looked_up(kept: dict[str, Any], key: str, load: Callable[[str], Any], keep: bool) -> Any:
    """kept[key], else load(key) from the store, kept if `keep`."""
    if key in kept:
        return kept[key]
    value = load(key)
    if keep:
        kept[key] = value
    return value


def _keep(kept: dict[str, Any], stored: dict[str, Any], unkept: set[str]) -> None:
    """What was just stored, into the collector's memory unless it is not to be kept."""
    for key, state in stored.items():
        if key in unkept:
            kept.pop(key, None)
        else:
            kept[key] = state


def _encode(update: TrialUpdate, problems: list[dict[str, Any]], at: datetime) -> list[str]:
    """One record as JSON, or several when its results are too many for one request."""
    record = json.dumps(encode_trial_log(update, at, problems), separators=(",", ":"))
    if len(record) <= MAX_RECORD_BYTES or len(update.results) < 2:
        return [record]
    half = len(update.results) // 2
    return [*_encode(replace(update, results=update.results[:half], problem_count=0,
                             params=None, error_text=None, tune_status=None,
                             search_metric=None, search_mode=None, writer_pid=None), [], at),
            *_encode(replace(update, results=update.results[half:]), problems, at)]


def _has_facts(update: TrialUpdate) -> bool:
    return bool(update.params is not None or update.error_text or update.tune_status
                or update.search_metric or update.search_mode or update.writer_pid)


def _problem(problem: ParseProblem) -> dict[str, Any]:
    return {"file": Path(problem.path).name, "byte_offset": problem.byte_offset,
            "message": problem.message[:MAX_TEXT]}


def _error_file(path: Path, root: Root | None
                ) -> tuple[tuple[int, int], str | None, datetime, ParseProblem | None] | None:
    """error.txt's (size, mtime_ns), its first lines, its mtime, and why it was not read."""
    try:
        stat = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    text, problem = read_error(path, root=root)
    return ((stat.st_size, stat.st_mtime_ns), text,
            datetime.fromtimestamp(stat.st_mtime, UTC), problem)


def trainer_dirs() -> dict[int, str]:
    """The working directory (real path) of each RL trainer actor's process on this host
    (`ray::TaskRunner.run`, `ray::Runner.run`, ...: TRAINER_CLASSES), where a framework's
    file logger writes by default (verl's `./{project}/{experiment}.jsonl`, EasyR1's
    `checkpoints/...`): a worker's is its driver's, or the job's working_dir."""
    found = {}
    for pid, cmdline in command_lines():
        if not cmdline.startswith(b"ray::"):
            continue
        title = cmdline.split(b"\0", 1)[0][5:].decode("utf-8", "replace")
        if title.split(".", 1)[0].strip() in TRAINER_CLASSES:
            with contextlib.suppress(OSError):
                found[pid] = os.path.realpath(os.readlink(f"/proc/{pid}/cwd"))
    return found
