"""This host's trial logs (RAYWATCH_CENTRAL_LOGS, on by default), read by the node
agent's own collector in raywatch's process: one reader of Tune, TensorBoard, verl, EasyR1
and Ray Train logs (collectors/agent/trial_logs.py), one cursor store (its SQLite, here
in DATA_DIR), one decoder of what it read (collectors/agent/trialwire.py, the checks
every agent report goes through) and one writer (store.py). What differs from another
node's agent is only the last hop: the records are stored here instead of sent, and
their directories are this host's paths as they are (an agent's read "node:path").

A poll costs what changed, not the months of finished searches under ~/ray_results: the
collector's scanner hands over only new or changed trial dirs, and settled dirs keep no
cursor in memory. A first read of a long history is stored a batch at a time as it is
read (the collector's batches, about 256 KB of records each), within one poll. Results
are de-duplicated on (trial, attempt, iteration) when stored, so the live staging copy
and Tune's storage copy of the same file never count twice, and a crash between storing
and saving the cursors reads one batch again without doubling it. Files are held to
their log root and its caps (collectors.rootfiles): what is refused is the trial's
problem (parse_errors, last_parse_error), as a line that is not JSON is.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from collectors.agent.cursors import CursorStore
from collectors.agent.trial_logs import TrialLogCollector
from collectors.agent.trialwire import decode_trial_log
from collectors.agent.wire import WireError
from collectors.logscan import LogScanner
from collectors.rootfiles import Caps
from dashboard.cluster.models import settings_cluster_pk
from dashboard.core.locks import first_in
from dashboard.trials import lag, planner
from dashboard.trials.store import IngestStats, store_updates

__all__ = ["READER_LOCK", "IngestStats", "ingest_logs", "the_only_reader"]

log = logging.getLogger("raywatch.trials.ingest")
STATE_DIR = "trial-log-reader"  # in DATA_DIR: the cursors, and who read last
MAX_POLLS = 10_000  # a first read of a long history: collector polls (8 MB each) at most


def state_dir() -> Path:
    return Path(settings.DATA_DIR) / STATE_DIR


class StoreSink:
    """Where this host's collector puts its records instead of an agent's spool: each
    decoded as raywatch decodes an agent's, then stored, before the collector saves the
    cursors that cover them."""

    max_bytes = 1 << 62  # never full: what is read is stored at once
    # Bigger than an agent's report (256 KiB): a batch of thousands of results is stored by
    # COPY (under bulkwrite.COPY_MIN_ROWS rows, a row at a time in INSERTs: 4x slower a
    # first ingest). Not bigger: a batch is held whole, decoded, while it is stored, and a
    # first start keeps that high-water mark (8 MiB: +11 MB RSS, no faster;
    # docs/benchmarks/quiet_history_bench.md).
    batch_bytes = 1 << 20

    def __init__(self) -> None:
        self.now: datetime | None = None
        self.totals = IngestStats()
        self.on_stored: Callable[[IngestStats], None] | None = None

    def stats(self) -> dict[str, int]:
        return {"bytes": 0}

    def append_encoded(self, records: list[str], at: str) -> int:
        updates = []
        for raw in records:
            try:
                updates.append(decode_trial_log(json.loads(raw), None))
            except (WireError, ValueError, TypeError) as exc:
                # The agent's own encoder wrote it: a record past the wire's checks is a
                # bug to see in the log, and the poll's other records are stored.
                self.totals.problems += 1
                log.warning("a trial_log record of this host was refused: %s", exc)
        with transaction.atomic():
            store_updates(updates, self.now or timezone.now(), settings_cluster_pk(),
                          self.totals)
        if self.on_stored is not None:
            self.on_stored(self.totals)
        return 0


@dataclass
class _Reader:
    key: tuple[Path, tuple[Path, ...], Path]  # its state dir, roots and Ray temp dir
    collector: TrialLogCollector
    sink: StoreSink
    ident: str  # written to state_dir()/reader after each poll: who read last

    def close(self) -> None:
        self.collector.store.close()


_HELD: dict[str, _Reader] = {}  # "reader": this process's, kept between polls
_POLL_LOCK = threading.Lock()

# One reader of the log dirs at a time across processes too: a Celery worker's children
# each take the next poll, and a first ingest of months of searches outlasts many polls;
# two children reading the same history would each store it.
READER_LOCK = 7_261_002  # pg advisory lock id: "raywatch trial-log reader"


def the_only_reader() -> contextlib.AbstractContextManager[bool]:
    """True when this process may read the log dirs now (one process only on SQLite)."""
    return first_in(READER_LOCK)


def ingest_logs(roots: Sequence[Path], now: datetime,
                on_stored: Callable[[IngestStats], None] | None = None) -> IngestStats:
    """One poll of the log dirs; IngestStats(busy=True) when another process is still
    reading them (its poll continues; this one reads nothing). `on_stored(stats)` after
    each batch stored (the poll sends its new points on that way, push.push_points)."""
    with _POLL_LOCK, the_only_reader() as mine:
        if not mine:
            return IngestStats(busy=True)
        with lag.reading(now) as progress:
            reader = _reader([Path(r) for r in roots])
            stats = reader.sink.totals = IngestStats()
            reader.sink.now = now
            # Signs of life for the other processes, as the read goes: each batch stored,
            # each directory walked (a first walk of a vast history stores nothing yet).
            reader.sink.on_stored = _stored_then(progress, on_stored)
            reader.collector.scanner.on_progress = progress
            try:
                for turn in range(MAX_POLLS):
                    poll = reader.collector.poll()
                    stats.bytes_read += poll.bytes_read
                    stats.dirs += poll.dirs
                    if turn == 0:
                        stats.checked, stats.known = poll.checked, poll.known
                    if not poll.backlog or not poll.bytes_read:
                        break
            finally:
                reader.collector.scanner.on_progress = None
            _note_reader(reader)
    planner.stored(stats.results)  # after the poll's transactions
    return stats


def _stored_then(progress: Callable[[], None], on_stored: Callable[[IngestStats], None] | None
                 ) -> Callable[[IngestStats], None]:
    def stored(stats: IngestStats) -> None:
        progress()  # a batch stored: the read goes on (lag.reader_lag waits for it)
        if on_stored is not None:
            on_stored(stats)
    return stored


def _reader(roots: list[Path]) -> _Reader:
    """This process's collector, kept between polls (its memory of directory and file
    mtimes is what lets a poll skip quiet history); built afresh when the roots or the
    state dir changed. When another process read since (a Celery worker's children take
    turns), the cursors it holds are forgotten and read again from the store as needed:
    its scanner still sees what changed since it last looked, theirs included."""
    where = state_dir()
    key = (where, tuple(roots), settings.RAY_TMP_DIR)
    held = _HELD.get("reader")
    if held is not None and held.key != key:
        _HELD.pop("reader").close()
        held = None
    if held is not None and _last_reader(where) != held.ident:
        held.collector.files.clear()
        held.collector.sent.clear()
    if held is None:
        where.mkdir(parents=True, exist_ok=True)
        sink = StoreSink()
        collector = TrialLogCollector(
            lambda: roots, sink, CursorStore(where / "cursors.sqlite3"),  # type: ignore[arg-type]
            settings.LOG_QUIET_S, settings.LOG_RESCAN_S,
            rescan_per_poll=settings.LOG_RESCAN_PER_POLL,
            caps=Caps.mb(settings.LOG_FILE_MAX_MB, settings.LOG_JSON_FILE_MAX_MB),
            ray_tmp=settings.RAY_TMP_DIR)
        held = _HELD["reader"] = _Reader(key, collector, sink, uuid.uuid4().hex)
    scanner = held.collector.scanner
    scanner.quiet_after_s, scanner.rescan_s = settings.LOG_QUIET_S, settings.LOG_RESCAN_S
    scanner.rescan_per_poll = settings.LOG_RESCAN_PER_POLL
    scanner.caps = Caps.mb(settings.LOG_FILE_MAX_MB, settings.LOG_JSON_FILE_MAX_MB)
    return held


def _last_reader(where: Path) -> str | None:
    try:
        return (where / "reader").read_text().strip()
    except OSError:
        return None


def _note_reader(reader: _Reader) -> None:
    if _last_reader(reader.key[0]) != reader.ident:
        (reader.key[0] / "reader").write_text(reader.ident)


def log_scanner(roots: Sequence[Path]) -> LogScanner:
    """The scanner of this process's reader (the benches look at what it holds)."""
    with _POLL_LOCK:
        return _reader([Path(r) for r in roots]).collector.scanner


def forget_reader() -> None:
    """Drop this process's collector (tests: each starts with a state dir of its own)."""
    with _POLL_LOCK:
        if (held := _HELD.pop("reader", None)) is not None:
            held.close()
