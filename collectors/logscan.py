"""Finding trial directories under the log roots, at a cost that follows what changed.

~/ray_results holds months of finished searches; walking and statting all of them at
every poll costs a core. A LogScanner remembers what it saw:

- Container directories (roots, experiments, Tune's driver_artifacts) are statted every
  poll and listed again only when their mtime moved: a directory's mtime changes when an
  entry is added, removed or renamed into it (a new trial dir, Tune's atomic replace of
  experiment_state-*.json in the staging copy). The newest experiment_state file of each
  is statted too: Tune's storage copy rewrites files in place, which leaves the
  directory's mtime alone.
- A trial directory is checked (its own and its files' size and mtime) while it is hot:
  new, changed within `quiet_after_s`, its experiment changed within `quiet_after_s`, or
  not yet settled as finished by the caller (`candidates()` / `settle()`). Appends do
  not touch a directory's mtime, so a running trial is checked every poll.
- Settled (quiet) trial directories are checked by a slow full rescan, a share of them
  each poll so that all are seen once every `rescan_s`, but never more than
  `rescan_per_poll` a poll: a history too large for that lap takes a longer one
  (100,000 trial dirs at 100 a 2 s poll: 33 minutes) and the poll's cost stays flat.
  What the rescan finds changed (whatever the mtimes missed: lines appended to a trial
  that had settled as finished, with no new Tune snapshot) is handed on and watched
  again. When the caller cannot store what a scan handed on, `retry()` hands it on again
  at the next poll.
- A poll costs in proportion to the containers, the hot trial dirs and the rescan's
  share (at most `rescan_per_poll`): quiet trial dirs are not looked at, not even in
  memory. A quiet one keeps a compact entry (`_Trial`: its path as a str, its files'
  names, its and their mtimes and sizes packed; ~0.4 KB), its TrialDir built again when
  it is needed, so the process's memory stays flat with the history too. A trial dir is
  forgotten when its container, listed again, no longer holds it, or is itself gone.
- Links are not followed below a root (the root itself may be one): a linked directory
  is not entered, and one named as a Tune trial dir is handed on as refused, so that its
  trial shows why nothing of it is read. A file is named whatever it is (a link, a FIFO):
  collectors.rootfiles refuses it when it is opened, as that trial's problem.
- Runs of RL frameworks' file loggers (collectors.runformats) are found as a directory is
  listed: each `*.jsonl` in it is recognised once by its first lines. A directory whose
  `experiment_log.jsonl` is EasyR1's (or verl's) is a run, like a Tune trial dir; any
  other logger's file is a run of its own (verl writes `{experiment}.jsonl` files side
  by side in its project's directory) and is checked like a trial dir, by its size and
  mtime. A JSONL that is no logger's is remembered as such until its directory changes;
  one that cannot be told yet (empty: a logger writes its first line after a step) is
  statted each poll and its directory listed again once it grew.

Nothing here imports Django; time comes from `clock` (monotonic seconds).
"""

from __future__ import annotations

import logging
import math
import os
import re
import struct
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from stat import S_ISLNK

from collectors.procstat import command_lines
from collectors.records import TrialDir
from collectors.rootfiles import DEFAULT_CAPS, Caps, Root, linked_root_refusal
from collectors.runformats import DIR_RUN_FILES, SUFFIX, dir_run_format, recognise_file

log = logging.getLogger(__name__)

RESULT_FILE, PARAMS_FILE, ERROR_FILE = "result.json", "params.json", "error.txt"
EVENTS_PREFIX = "events.out.tfevents."
STATE_PREFIX, STATE_SUFFIX = "experiment_state-", ".json"
EASYR1_CONFIG = "experiment_config.json"  # beside experiment_log.jsonl: the run's config
PARAMS_FILES = (PARAMS_FILE, EASYR1_CONFIG)  # written once: read as the trial's config
SKIP_DIRS = {"working_dirs", "__pycache__"}
MAX_DEPTH = 6
LIVE_PARENT = "driver_artifacts"
# A quiet trial dir costs ~5 us to rescan (a stat of it, its result.json and any
# error.txt): 100 a poll is ~0.5 ms, whatever the history (bench/history_scale_bench.py).
RESCAN_PER_POLL = 100
# A trial dir with no Tune state (a TensorBoard or JSONL run) whose files have not changed
# for this many quiet periods belongs to a program that is gone: settled.
STALE_QUIET = 10
TRIAL_DIR_RE = re.compile(r"^(?P<trainable>.+?)_(?P<trial_id>[0-9a-f]{5}_\d{5})(?:_|$)")


@dataclass(frozen=True)
class Scan:
    trial_dirs: TrialDirs  # new, changed, or visited by the slow rescan
    state_dirs: list[tuple[str, Path]]  # (experiment, directory) whose Tune state changed
    checked: int  # trial directories statted this poll
    known: int  # trial directories known in all
    new: int = 0  # of trial_dirs, those first seen this poll


class _Trial:
    """What the scanner keeps of one trial directory: what a check compares, the names
    of the files its TrialDir reads (a tuple shared by every trial dir of the same
    shape), the directory's mtime and its files' sizes and mtimes packed in one bytes.
    Its TrialDir is built when it is handed on or asked for (trials_in, candidates) and
    kept only while the directory keeps changing (a running trial, handed on every poll)
    and is not quiet. No Path is kept: `path` is the directory's, as a str, the same
    object as the key it is filed under and its container's entry. Eight slots, the
    flags in one int: a quiet trial dir costs ~0.4 KB live
    (docs/benchmarks/history_scale_bench.md), against ~2.4 KB as a TrialDir with its
    Paths and a dict of file stats."""

    __slots__ = ("flags", "framework", "hot_until", "names", "path", "root", "stats",
                 "trial_dir")

    def __init__(self, path: str, root: Root | None, dir_mtime: int, names: tuple[str, ...],
                 hot_until: float, trial_dir: TrialDir | None = None,
                 refused: bool = False, framework: str = "", file_run: bool = False) -> None:
        self.path = path
        self.root = root
        self.names = names  # the files read, in TrialDir's order: results, events, params, error
        # A JSONL run's logger (VERL, EASYR1, RAYTRAIN); "": Tune's or TensorBoard's files.
        self.framework = framework
        # FILE_RUN: `path` is the run's JSONL file, not a directory; REFUSED: a link named
        # as a trial dir, nothing of it is read; ROTATING: in the slow rescan's rotation
        # (once, however often it settles).
        self.flags = (_FILE_RUN if file_run else 0) | (_REFUSED if refused else 0)
        # A directory's mtime, then (size, mtime_ns) of each name, packed (_stats); a file
        # run's (size, mtime_ns) (a tuple); -1s: no stat
        self.stats = _file_stat(path) if file_run else _stats(path, names, dir_mtime)
        self.hot_until: float | None = hot_until  # None: quiet (settled, not watched)
        self.trial_dir = trial_dir  # while watched; None: built again when needed

    @property
    def quiet(self) -> bool:
        return self.hot_until is None

    @property
    def file_run(self) -> bool:
        return bool(self.flags & _FILE_RUN)

    @property
    def refused(self) -> bool:
        return bool(self.flags & _REFUSED)

    @property
    def rotating(self) -> bool:
        return bool(self.flags & _ROTATING)

    @rotating.setter
    def rotating(self, value: bool) -> None:
        self.flags = self.flags | _ROTATING if value else self.flags & ~_ROTATING

    @property
    def dir_mtime(self) -> int:
        """The directory's mtime_ns when last listed; -1: list it again."""
        return _MTIME.unpack_from(self.stats)[0] if len(self.stats) >= _MTIME.size else -1


_FILE_RUN, _REFUSED, _ROTATING = 1, 2, 4


@dataclass
class _Container:
    mtime: int
    children: set[str] = field(default_factory=set)  # every subdirectory listed
    containers: set[str] = field(default_factory=set)  # those not (yet) trial dirs
    state_file: str | None = None  # the newest experiment_state-*.json
    state_stat: tuple[int, int] | None = None
    # JSONL files that cannot be told a run or not yet, with their (size, mtime_ns) then;
    # and the names of those that are no logger's.
    pending: dict[str, tuple[int, int]] = field(default_factory=dict)
    not_runs: frozenset[str] = frozenset()


def default_log_dirs(home: Path, ray_tmp: Path = Path("/tmp/ray")) -> list[Path]:
    """~/ray_results plus the live staging area (artifacts) of the Ray sessions under the
    Ray temp dir that a running Ray process names: a driver may run in a session that is
    no longer the newest, and the sessions of earlier Ray starts stay on disk with Tune
    states a killed driver left at RUNNING (their storage copy is in ~/ray_results).
    When no Ray process is visible here (a container without the host's pids), every
    session. session_latest is a link to one of them: left out, so no trial is seen twice."""
    sessions = [p for p in _subdirs(ray_tmp, "session_") if p.name != "session_latest"]
    live = live_sessions()
    if live:
        sessions = [p for p in sessions if _resolved(p) in live]
    return [home / "ray_results", *sorted(p / "artifacts" for p in sessions)]


_SESSION_ARGS = ("--session-dir=", "--session_dir=")
_LIVE: list[tuple[float, frozenset[Path]]] = []  # (when read, session dirs)
LIVE_TTL_S = 10.0


def live_sessions(clock: Callable[[], float] = time.monotonic) -> frozenset[Path]:
    """The session dirs that running Ray processes (raylet, dashboard agent, log monitor)
    were started with, read at most every LIVE_TTL_S; empty when none is visible."""
    now = clock()
    if _LIVE and now - _LIVE[0][0] < LIVE_TTL_S:
        return _LIVE[0][1]
    found = set()
    for _, cmdline in command_lines():
        if b"-session" not in cmdline:
            continue
        for arg in cmdline.decode("utf-8", "replace").split("\0"):
            if arg.startswith(_SESSION_ARGS):
                found.add(_resolved(Path(arg.split("=", 1)[1])))
    _LIVE[:] = [(now, frozenset(found))]
    return _LIVE[0][1]


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except OSError:
        return path


def _subdirs(directory: Path, prefix: str) -> list[Path]:
    try:
        return [Path(e.path) for e in os.scandir(directory)
                if e.name.startswith(prefix) and _is_dir(e)]
    except OSError:
        return []


def discover(roots: Sequence[Path]) -> list[TrialDir]:
    """Every trial directory under `roots`, walked once."""
    return list(LogScanner(roots).scan().trial_dirs)


class LogScanner:
    def __init__(self, roots: Sequence[Path], quiet_after_s: float = 60.0,
                 rescan_s: float = 300.0, clock: Callable[[], float] = time.monotonic,
                 rescan_per_poll: int = RESCAN_PER_POLL, caps: Caps = DEFAULT_CAPS) -> None:
        self.roots = [Path(r) for r in roots]
        self.caps = caps
        self.quiet_after_s = quiet_after_s
        self.rescan_s = rescan_s
        self.rescan_per_poll = rescan_per_poll
        self.clock = clock
        self.containers: dict[Path, _Container] = {}
        # Trial dirs by path (a str: a Path object costs ~1 KB, 100,000 of them 100 MB).
        self.trials: dict[str, _Trial] = {}
        self.hot: dict[str, None] = {}  # trial dirs checked every poll, in order seen
        self.hot_peak = 0  # the most it held since it was last copied (a dict never shrinks)
        # Quiet trial dirs, next to rescan first. Entries that woke up or were forgotten
        # are dropped lazily when they come round: removing from the middle of a deque
        # costs O(n). An entry says itself whether it is in it (no set of 100,000 paths).
        self.rotation: deque[_Trial] = deque()
        self.last_scan: float | None = None
        # Called at each directory a scan visits or checks: a walk of a vast history on a
        # slow file system stores nothing for minutes, yet it goes on (raywatch's own
        # reader tells its other processes so: dashboard/trials/lag.py). Cheap to call.
        self.on_progress: Callable[[], None] | None = None
        # Roots not read, and why (rootfiles.linked_root_refusal): said in the reader's
        # log (the agent's) once a change.
        self.refused: dict[Path, str] = {}

    # --- one poll: work in proportion to containers, hot trial dirs and the rescan share -----
    def scan(self) -> Scan:
        now = self.clock()
        walk = _Walk(now)
        for root in self.roots:
            refused = linked_root_refusal(root)
            if refused != self.refused.get(root):  # said once a change
                if refused:
                    log.error("%s", refused)
                else:
                    self.refused.pop(root, None)
            if refused:
                self.refused[root] = refused
                continue
            self._visit(root, 0, walk, Root.of(root, self.caps))
        self._forget(walk)
        out = list(walk.new)
        checked = 0
        for path in [p for p in self.hot if p not in walk.new_paths]:
            checked += 1
            self._progress()
            entry = self.trials[path]
            if self._check(entry, now):
                out.append(entry)
        for entry in self._rescan_share(now):
            checked += 1
            self._progress()
            if not self._unchanged(entry) and self._check(entry, now):
                out.append(entry)  # what the mtimes missed: watched again
        self.last_scan = now
        self._shrink_hot()
        return Scan(TrialDirs(out), walk.state_dirs, checked, len(self.trials), len(walk.new))

    def _progress(self) -> None:
        if self.on_progress is not None:
            self.on_progress()

    def _shrink_hot(self) -> None:
        """A first pass makes a whole history hot; once it settled, the hot set's table
        (~47 bytes a trial dir it ever held) is copied to the size of what is left."""
        self.hot_peak = max(self.hot_peak, len(self.hot))
        if self.hot_peak > 1024 and len(self.hot) * 8 < self.hot_peak:
            self.hot = dict(self.hot)
            self.hot_peak = len(self.hot)

    def candidates(self) -> TrialDirs:
        """Hot trial dirs that have been quiet for quiet_after_s: the caller says (settle)
        which belong to finished trials and may stop being watched. Read them a batch at
        a time: a first pass makes a whole history due at once."""
        now = self.clock()
        due = [self.trials[p] for p in self.hot]
        return TrialDirs([entry for entry in due if now >= entry.hot_until])

    def settle(self, finished: Iterable[Path], active: Iterable[Path]) -> None:
        now = self.clock()
        for path in finished:
            if (entry := self.trials.get(os.fspath(path))) is not None and not entry.quiet:
                # Quiet: what the rescan compares is all it keeps.
                entry.trial_dir, entry.hot_until = None, None
                self.hot.pop(entry.path, None)
                if not entry.rotating:
                    self.rotation.append(entry)
                    entry.rotating = True
        for path in active:
            if (entry := self.trials.get(os.fspath(path))) is not None:
                entry.hot_until = now + self.quiet_after_s  # ask again later

    def trial_dir(self, path: Path | str) -> TrialDir | None:
        """The trial dir known at `path`, as it is now; None once it is forgotten."""
        entry = self.trials.get(os.fspath(path))
        return None if entry is None else _dir(entry)

    def changing(self, path: Path | str) -> bool:
        """Whether the trial dir at `path` changed since it was first seen (a running
        trial): its TrialDir is kept while it changes, and so are its callers' cursors."""
        entry = self.trials.get(os.fspath(path))
        return entry is not None and entry.trial_dir is not None

    def trials_in(self, directory: Path) -> list[TrialDir]:
        """The trial dirs known in one experiment (container) directory."""
        container = self.containers.get(directory)
        return [_dir(self.trials[c]) for c in sorted(container.children)
                if c in self.trials] if container else []

    def retry(self, scan: Scan) -> None:
        """The caller could not store what `scan` handed over: hand it over again at the
        next poll (this scanner already remembers the new sizes and mtimes)."""
        self.again(d.path for d in scan.trial_dirs)
        for _, directory in scan.state_dirs:
            if (container := self.containers.get(directory)) is not None:
                container.state_stat = None

    def again(self, paths: Iterable[Path]) -> None:
        """Hand these trial dirs over at the next poll too (more to read than a read
        takes, or what was read could not be stored)."""
        now = self.clock()
        for path in paths:
            if (entry := self.trials.get(os.fspath(path))) is not None:
                entry.stats = b""  # no directory mtime: listed again
                self._warm(entry, now)

    # --- containers -------------------------------------------------------------------------
    def _visit(self, directory: Path, depth: int, walk: _Walk, root: Root,
               key: str | None = None) -> None:
        """`key`: str(directory), the object its container files it under (shared)."""
        key = key or str(directory)
        if key in self.trials:  # a root that is itself a trial dir
            return
        self._progress()
        try:
            stat = os.stat(directory, follow_symlinks=depth == 0)
        except OSError:
            return  # gone: forgotten below
        if S_ISLNK(stat.st_mode):
            return  # became a link since it was listed: not followed
        if (stat.st_dev, stat.st_ino) in walk.seen:
            return  # a symlink loop or a directory reached twice
        walk.seen.add((stat.st_dev, stat.st_ino))
        known = self.containers.get(directory)
        if known is None or known.mtime != stat.st_mtime_ns or _grew(known):
            if self._list(directory, key, stat.st_mtime_ns, depth, walk, root):
                return  # it holds results: a trial directory, not a container
            known = self.containers[directory]
            self._warm_children(known, walk.now)
        walk.containers.add(directory)
        self._check_state(directory, known, walk)
        subs = sorted(known.containers)  # a copy: a sub may turn out a trial dir
        for sub in subs:
            self._visit(Path(sub), depth + 1, walk, root, sub)
        if len(known.containers) * 4 < len(subs):
            # They were trial dirs: a set keeps its table when emptied (~32 bytes each).
            known.containers = set(known.containers)

    def _list(self, directory: Path, key: str, mtime: int, depth: int, walk: _Walk,
              root: Root) -> bool:
        """List a new or changed directory; True when it turned out to be a trial dir."""
        try:
            entries = list(os.scandir(directory))
        except OSError:
            return True  # unreadable: neither
        previous = self.containers.get(directory)
        files = {e.name for e in entries if not _is_dir(e)}
        # A Tune trial dir's files are Tune's: no JSONL in it is looked at.
        runs = _Runs() if RESULT_FILE in files else self._runs(entries, previous, root)
        run_file = next((name for name in DIR_RUN_FILES.values()
                         if os.path.join(key, name) in runs.found), "")
        logger = runs.found[os.path.join(key, run_file)] if run_file else ""
        names = _names(files, run_file)
        if names is not None:
            self._drop_container(directory)
            if (parent := self.containers.get(directory.parent)) is not None:
                parent.containers.discard(key)
            self._add_trial(_Trial(key, root, mtime, names, walk.now + self.quiet_after_s,
                                   framework=logger), walk)
            return True
        states = sorted(e.name for e in entries if not _is_dir(e)
                        and e.name.startswith(STATE_PREFIX) and e.name.endswith(STATE_SUFFIX))
        # The paths of the trial dirs known already, not copies: each is kept once.
        subdirs = {self._shared(e.path) for e in entries if e.name not in SKIP_DIRS
                   and not e.name.startswith(".") and _is_dir(e)} if depth < MAX_DEPTH else set()
        children = subdirs | self._file_runs(runs.found, root, walk)
        links = self._links(entries, walk, root)
        for gone in previous.children - children - links if previous else ():
            self._drop_trial(gone)  # a container among them is forgotten once unreached
        for path in subdirs:
            if (known := self.trials.get(path)) is not None and known.refused:
                self._drop_trial(path)  # a link no more: read what it is now
        self.containers[directory] = _Container(
            mtime=mtime, children=children | links,
            containers={c for c in subdirs if c not in self.trials},
            state_file=states[-1] if states else None,
            state_stat=previous.state_stat if previous else None,
            pending=runs.pending, not_runs=runs.not_runs,
        )
        return False

    def _runs(self, entries: list[os.DirEntry], previous: _Container | None,
              root: Root) -> _Runs:
        """The JSONL files of a directory being listed: runs by path (their logger), those
        that cannot be told yet, and the names of those that are no logger's. A file is
        read (its head) when it is new, or grew while it could not be told."""
        runs = _Runs()
        not_runs: set[str] = set()
        for entry in entries:
            if not entry.name.endswith(SUFFIX) or entry.name.startswith(".") or _is_dir(entry):
                continue
            if (known := self.trials.get(entry.path)) is not None and known.file_run:
                runs.found[known.path] = known.framework
                continue
            if previous is not None and entry.name in previous.not_runs:
                not_runs.add(entry.name)
                continue
            stat = _file_stat(entry.path)
            verdict = (None if previous is not None and previous.pending.get(entry.path) == stat
                       else recognise_file(entry.path, root))
            if verdict is None:
                runs.pending[entry.path] = stat
            elif verdict:
                runs.found[entry.path] = verdict
            else:
                not_runs.add(entry.name)
        runs.not_runs = frozenset(not_runs)
        return runs

    def _file_runs(self, found: dict[str, str], root: Root, walk: _Walk) -> set[str]:
        """The paths of a container's runs of one file each, new ones added (handed on)."""
        for path, framework in found.items():
            if not dir_run_format(os.path.basename(path)) and path not in self.trials:
                self._add_trial(_Trial(path, root, 0, (), walk.now + self.quiet_after_s,
                                       framework=framework, file_run=True), walk)
        return {self.trials[p].path for p in found if p in self.trials}

    def _shared(self, path: str) -> str:
        entry = self.trials.get(path)
        return entry.path if entry is not None else path

    def _links(self, entries: list[os.DirEntry], walk: _Walk, root: Root) -> set[str]:
        """Links named as Tune trial dirs: not followed, handed on once as refused."""
        links = set()
        for entry in entries:
            if entry.is_symlink() and TRIAL_DIR_RE.match(entry.name):
                path = self._shared(entry.path)
                links.add(path)
                known = self.trials.get(path)
                if known is None or not known.refused:
                    self._drop_trial(path)
                    self._add_trial(_Trial(path, root, 0, (), walk.now + self.quiet_after_s,
                                           refused=True), walk)
        return links

    def _check_state(self, directory: Path, container: _Container, walk: _Walk) -> None:
        if container.state_file is None:
            return
        try:
            stat = os.stat(directory / container.state_file, follow_symlinks=False)
        except OSError:
            return
        now_stat = (stat.st_size, stat.st_mtime_ns)
        if now_stat != container.state_stat:
            container.state_stat = now_stat
            walk.state_dirs.append((experiment_name(directory), directory))
            self._warm_children(container, walk.now)

    def _warm_children(self, container: _Container, now: float) -> None:
        """Something changed in an experiment: watch its trials for a while (Tune's
        storage copy rewrites their files at the same snapshot)."""
        for sub in container.children:
            if (entry := self.trials.get(sub)) is not None:
                self._warm(entry, now)

    def _warm(self, entry: _Trial, now: float) -> None:
        entry.hot_until = now + self.quiet_after_s
        self.hot[entry.path] = None

    # --- trial directories ----------------------------------------------------------------------
    def _add_trial(self, entry: _Trial, walk: _Walk) -> None:
        self.trials[entry.path] = entry
        self.hot[entry.path] = None
        walk.new.append(entry)  # its TrialDir built when it is read: a history is all new
        walk.new_paths.add(entry.path)

    def _check(self, entry: _Trial, now: float) -> bool:
        """Stat a trial dir and its files; True (and hot again) when something changed.
        A new file (error.txt, an event file) moves the directory's mtime."""
        if entry.refused:
            return False  # a link: its container, listed again, says what it became
        if entry.file_run:
            return self._check_file(entry, now)
        try:
            mtime = os.stat(entry.path).st_mtime_ns  # a root may be a link to a trial dir
        except OSError:
            return False  # gone: forgotten once its container is listed again
        listed = mtime != entry.dir_mtime
        if listed:
            try:
                names = _names({e.name for e in os.scandir(entry.path) if not _is_dir(e)},
                               entry.names[0] if entry.framework and entry.names else "")
            except OSError:
                return False
            if names is not None and names != entry.names:
                entry.names, entry.trial_dir = names, None
        stats = _stats(entry.path, entry.names, mtime)
        if not listed and stats == entry.stats:
            return False
        entry.stats = stats
        self._warm(entry, now)
        if entry.trial_dir is None:  # changing (a running trial): handed on every poll
            entry.trial_dir = _dir(entry)
        return True

    def _check_file(self, entry: _Trial, now: float) -> bool:
        """A run of one file: changed when its size or mtime did (a restart that truncates
        it too); gone, it is forgotten once its directory is listed again."""
        stats = _file_stat(entry.path)
        if stats == entry.stats or stats[0] < 0:
            return False
        entry.stats = stats
        self._warm(entry, now)
        if entry.trial_dir is None:
            entry.trial_dir = _dir(entry)
        return True

    def _unchanged(self, entry: _Trial) -> bool:
        """A quiet trial dir at a glance: its own mtime (a file added or removed) and the
        files that change after the fact (result.json, or a TensorBoard run's event
        files, and error.txt: a retry that fails before its first result rewrites only
        that) as they were. params.json, written once, is looked at again only once one
        of these moved."""
        if entry.refused:
            return True
        if entry.file_run:
            return _file_stat(entry.path) == entry.stats
        try:
            if os.stat(entry.path).st_mtime_ns != entry.dir_mtime:
                return False
            for n, name in enumerate(entry.names):
                if name in PARAMS_FILES:
                    continue
                stat = os.stat(os.path.join(entry.path, name), follow_symlinks=False)
                at = _MTIME.size + _STAT.size * n
                if _STAT.pack(stat.st_size, stat.st_mtime_ns) != entry.stats[
                        at:at + _STAT.size]:
                    return False
        except OSError:
            return False  # _check says what became of it
        return True

    def _rescan_share(self, now: float) -> list[_Trial]:
        """The quiet trial dirs due this poll: all of them once every rescan_s, at most
        rescan_per_poll of them."""
        if not self.rotation or self.last_scan is None:
            return []
        share = min(math.ceil(len(self.rotation) * (now - self.last_scan) / self.rescan_s),
                    self.rescan_per_poll)
        picked: list[_Trial] = []
        for _ in range(len(self.rotation)):
            if len(picked) >= share:
                break
            entry = self.rotation.popleft()
            if not entry.quiet or self.trials.get(entry.path) is not entry:
                entry.rotating = False  # woke up (it joins again when it settles), or gone
                continue
            self.rotation.append(entry)
            picked.append(entry)
        return picked

    # --- forgetting -----------------------------------------------------------------------------
    def _forget(self, walk: _Walk) -> None:
        """Drop the containers no longer reached from the roots, with their trial dirs
        (a trial dir that went away was dropped when its container was listed again)."""
        for path in [p for p in self.containers if p not in walk.containers]:
            self._drop_container(path)

    def _drop_container(self, path: Path) -> None:
        container = self.containers.pop(path, None)
        for child in container.children if container else ():
            self._drop_trial(child)

    def _drop_trial(self, path: str) -> None:
        self.trials.pop(path, None)
        self.hot.pop(path, None)  # the rotation drops it when it comes round


@dataclass
class _Runs:
    found: dict[str, str] = field(default_factory=dict)  # path -> VERL or EASYR1
    pending: dict[str, tuple[int, int]] = field(default_factory=dict)
    not_runs: frozenset[str] = frozenset()


def _grew(container: _Container) -> bool:
    """Whether a JSONL file of the container that could not be told yet has changed (a
    logger's first line): the container is then listed again, which tells."""
    return any(_file_stat(path) != stat for path, stat in container.pending.items())


@dataclass
class _Walk:
    now: float
    seen: set[tuple[int, int]] = field(default_factory=set)
    containers: set[Path] = field(default_factory=set)
    new: list[_Trial] = field(default_factory=list)
    new_paths: set[str] = field(default_factory=set)
    state_dirs: list[tuple[str, Path]] = field(default_factory=list)


def experiment_name(directory: Path) -> str:
    """An experiment's name from the directory that holds its trials."""
    return directory.parent.name if directory.name == LIVE_PARENT else directory.name


# The names tuples of Tune trial dirs, one per shape (result.json, params.json, error.txt
# or not): shared by every entry of that shape rather than a tuple each.
_SHAPES: dict[tuple[str, ...], tuple[str, ...]] = {}


def _names(files: set[str], run_file: str = "") -> tuple[str, ...] | None:
    """The files of a directory that its TrialDir reads, in its order (results, events,
    params, error); None: it holds no results, so it is no trial dir. `run_file`: the
    logger's file (EasyR1's experiment_log.jsonl) that makes the directory a
    run (collectors.runformats), if any."""
    results = (RESULT_FILE,) if RESULT_FILE in files else ()
    if not results and run_file and run_file in files:
        names = (run_file, *(n for n in (EASYR1_CONFIG,) if n in files))
        return _SHAPES.setdefault(names, names)
    # A Tune trial's event files repeat its result.json: read them only without one.
    events = () if results else tuple(sorted(n for n in files if n.startswith(EVENTS_PREFIX)))
    if not results and not events:
        return None
    names = (*results, *events, *(n for n in (PARAMS_FILE, ERROR_FILE) if n in files))
    return names if events else _SHAPES.setdefault(names, names)


def _trial_dir_of(path: Path, names: tuple[str, ...], root: Root | None,
                  framework: str = "") -> TrialDir:
    parent = path.parent
    match = TRIAL_DIR_RE.match(path.name)
    base = str(path)
    params = next((n for n in names if n in PARAMS_FILES), None)
    results = tuple(os.path.join(base, n) for n in names if n == RESULT_FILE)
    return TrialDir(
        experiment=experiment_name(parent), experiment_dir=parent, path=path, name=path.name,
        trial_id=match["trial_id"] if match and not framework else None,
        trainable=match["trainable"] if match and not framework else "",
        live=parent.name == LIVE_PARENT,
        result_files=results,
        # A Tune trial's event files (its TBXLogger) hold the scalars of its result.json:
        # read from result.json alone (reading both cost a second parse of every step,
        # and TensorBoard's reader ~30 MB of imports that nothing else needs).
        event_files=() if results else tuple(os.path.join(base, n) for n in names
                                             if n.startswith(EVENTS_PREFIX)),
        params_file=os.path.join(base, params) if params else None,
        error_file=os.path.join(base, ERROR_FILE) if ERROR_FILE in names else None, root=root,
        run_files=tuple(os.path.join(base, n) for n in names if n.endswith(SUFFIX)),
        run_format=framework,
    )


def _file_run_dir(path: Path, root: Root | None, framework: str) -> TrialDir:
    """A run of one JSONL file (verl's {project}/{experiment}.jsonl): its directory is
    its experiment's, its name the file's stem."""
    parent = path.parent
    return TrialDir(
        experiment=experiment_name(parent), experiment_dir=parent, path=path,
        name=path.name.removesuffix(SUFFIX), trial_id=None, trainable="",
        live=parent.name == LIVE_PARENT, root=root, run_files=(str(path),),
        run_format=framework)


def _linked_dir(path: Path, root: Root | None) -> TrialDir:
    match = TRIAL_DIR_RE.match(path.name)
    assert match is not None
    return TrialDir(
        experiment=experiment_name(path.parent), experiment_dir=path.parent, path=path,
        name=path.name, trial_id=match["trial_id"], trainable=match["trainable"],
        live=path.parent.name == LIVE_PARENT, root=root,
        refused="is a symbolic link: not followed")


def _dir(entry: _Trial) -> TrialDir:
    """The entry's TrialDir: the one kept while it changes, or built again (~8 us)."""
    if entry.trial_dir is not None:
        return entry.trial_dir
    path = Path(entry.path)
    if entry.refused:
        return _linked_dir(path, entry.root)
    if entry.file_run:
        return _file_run_dir(path, entry.root, entry.framework)
    return _trial_dir_of(path, entry.names, entry.root, entry.framework)


class TrialDirs(Sequence[TrialDir]):
    """Trial dirs handed on by a scan (or due to settle), each TrialDir built as it is
    read and not kept: a first pass hands on a whole history, which as TrialDirs at once
    would cost ~2 KB a trial dir (100,000: 200 MB, a high-water mark the process keeps).
    Read a batch at a time (a slice), it costs a batch's."""

    __slots__ = ("_entries",)

    def __init__(self, entries: list[_Trial]) -> None:
        self._entries = entries

    def __len__(self) -> int:
        return len(self._entries)

    def __getitem__(self, index):  # type: ignore[no-untyped-def, override]
        if isinstance(index, slice):
            return [_dir(entry) for entry in self._entries[index]]
        return _dir(self._entries[index])

    def __iter__(self) -> Iterable[TrialDir]:  # type: ignore[override]
        return map(_dir, self._entries)

    def paths(self) -> list[str]:
        """Their paths, without building their TrialDirs (LogScanner.trial_dir builds one)."""
        return [entry.path for entry in self._entries]

    def __repr__(self) -> str:
        return f"TrialDirs({len(self)} trial dirs)"


_MTIME = struct.Struct("=q")  # a directory's mtime_ns
_STAT = struct.Struct("=qq")  # one file's (size, mtime_ns)


def _stats(path: str, names: tuple[str, ...], dir_mtime: int) -> bytes:
    """The directory's mtime, then (size, mtime_ns) of each file, packed one after the
    other; (-1, -1) for one that could not be statted. One bytes object (8 bytes, 16 a
    file and ~33 of its own) is what a quiet trial dir keeps of its files: a tuple of
    ints cost ~230 bytes for a Tune trial dir's 2-3 files, and the mtime as an int ~48
    more (docs/benchmarks/history_scale_bench.md)."""
    stats = bytearray(_MTIME.pack(dir_mtime))
    for name in names:
        try:
            stat = os.stat(os.path.join(path, name), follow_symlinks=False)
        except OSError:
            stats += _STAT.pack(-1, -1)
            continue
        stats += _STAT.pack(stat.st_size, stat.st_mtime_ns)
    return bytes(stats)


def _file_stat(path: str) -> tuple[int, int]:
    """(size, mtime_ns) of one file; (-1, -1) when it cannot be statted."""
    try:
        stat = os.stat(path, follow_symlinks=False)
    except OSError:
        return -1, -1
    return stat.st_size, stat.st_mtime_ns


def newest_mtime(trial_dir: TrialDir) -> float:
    """When its files or its directory last changed (epoch seconds); 0.0: not known."""
    newest = 0.0
    for name in (*trial_dir.result_files, *trial_dir.event_files, *trial_dir.run_files,
                 str(trial_dir.path)):
        try:
            newest = max(newest, os.stat(name, follow_symlinks=False).st_mtime)
        except OSError:
            continue
    return newest


def stale(trial_dir: TrialDir, now: float, quiet_after_s: float) -> bool:
    """A trial dir with no Tune state (a TensorBoard or JSONL run) whose files went
    unchanged for STALE_QUIET quiet periods: its program is gone, so it may settle
    (the slow rescan still visits it). `now`: epoch seconds."""
    return now - newest_mtime(trial_dir) > quiet_after_s * STALE_QUIET


def _is_dir(entry: os.DirEntry) -> bool:
    """A directory itself, not a link to one (from the listing: no system call)."""
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False
