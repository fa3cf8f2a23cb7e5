"""Where the agent's trial-log collector keeps how far it read, in the spool directory:
a file's cursor (offset, head hash, attempt, size and mtime when read) and what was sent
of a trial dir (params.json, error.txt, Tune's status, the search's objective, that it is
a link). SQLite
(stdlib): a poll upserts only the rows it changed, in one transaction, so the cost follows
what changed and a crash leaves the previous state or the new one, never half of each."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from dataclasses import asdict, dataclass
from pathlib import Path

from collectors.tunelogs import FileCursor


@dataclass(frozen=True)
class FileState:
    cursor: FileCursor
    size: int  # the file's size and mtime when read to its end; -1 while more is to read
    mtime_ns: int


@dataclass(frozen=True)
class TrialSent:
    params: str = ""  # "sent", or "problem" (said once; read again until it parses)
    error: tuple[int, int] | None = None  # error.txt's (size, mtime_ns) as sent
    status: str = ""  # Tune's status as sent
    tensorboard: str = ""  # "problem": event files but no tensorboard package, said once
    search: str = ""  # the search's objective as sent ("metric/mode")
    link: str = ""  # "problem": the trial dir is a link, not followed (said once)
    writer: int = 0  # an RL run's: the pid holding its log open, as sent


class CursorStore:
    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        for table in ("files", "trials"):
            self.db.execute(f"CREATE TABLE IF NOT EXISTS {table} "
                            "(path TEXT PRIMARY KEY, state TEXT NOT NULL)")

    def file(self, path: str) -> FileState | None:
        """One file's state: the collector looks up those of the trial dirs it reads, not
        every file it ever read (100,000 finished trials: ~120 MB held for nothing)."""
        row = self.db.execute("SELECT state FROM files WHERE path = ?", (path,)).fetchone()
        return _file_state(json.loads(row[0])) if row else None

    def trial(self, path: str) -> TrialSent | None:
        """What was sent of one trial dir."""
        row = self.db.execute("SELECT state FROM trials WHERE path = ?", (path,)).fetchone()
        return _trial_sent(json.loads(row[0])) if row else None

    def save(self, files: dict[str, FileState], trials: dict[str, TrialSent]) -> None:
        if not files and not trials:
            return
        with self._transaction():
            self.db.executemany("INSERT OR REPLACE INTO files VALUES (?, ?)",
                                [(p, json.dumps(_file_row(s))) for p, s in files.items()])
            self.db.executemany("INSERT OR REPLACE INTO trials VALUES (?, ?)",
                                [(p, json.dumps(asdict(s))) for p, s in trials.items()])

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self.db.close()

    @contextlib.contextmanager
    def _transaction(self):  # type: ignore[no-untyped-def]
        self.db.execute("BEGIN")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")


def _file_row(state: FileState) -> dict:
    c = state.cursor  # by hand: dataclasses.asdict deep-copies, at every poll
    return {"cursor": {"path": c.path, "offset": c.offset, "head_hash": c.head_hash,
                       "attempt": c.attempt, "last_iteration": c.last_iteration,
                       "last_pid": c.last_pid},
            "size": state.size, "mtime_ns": state.mtime_ns}


def _file_state(data: dict) -> FileState:
    return FileState(cursor=FileCursor(**data["cursor"]), size=data["size"],
                     mtime_ns=data["mtime_ns"])


def _trial_sent(data: dict) -> TrialSent:
    error = data.get("error")
    return TrialSent(params=data.get("params", ""),
                     error=(error[0], error[1]) if error else None,
                     status=data.get("status", ""), tensorboard=data.get("tensorboard", ""),
                     search=data.get("search", ""), link=data.get("link", ""),
                     writer=data.get("writer", 0))
