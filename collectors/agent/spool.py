"""The agent's on-disk spool: one file per batch, sent oldest first, deleted once
raywatch acknowledged it. Bounded: past `max_bytes` the oldest batches are dropped and
counted (the count travels in every report).

A spool is one `stream` (a random id made with it) of batches numbered 1, 2, 3, ...;
raywatch stores each (stream, seq) once, so a batch re-sent after a lost answer is not
stored twice, and a wiped spool starts a new stream rather than colliding with the old.

A spool that cannot be written (its disk full, its directory gone or read-only) does
not stop the agent: batches are held in memory (at most MEMORY_MAX_BYTES, the oldest
dropped and counted past it), sent as any other, and `problem` says what is wrong until
a write succeeds again; the agent reports it, and the Cluster page shows it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import threading
from pathlib import Path
from typing import Any

from collectors.agent import wire

SUFFIX = ".batch.json"
# Seqs are reserved this many at a time: the state file is written once a block, not once
# a batch (it was a tenth of a busy agent's CPU). A crash skips the rest of a block; a gap
# costs nothing (raywatch keeps the highest seq it stored), a reused seq would lose a batch.
SEQ_BLOCK = 256
MEMORY_MAX_BYTES = 32 * 1024 * 1024  # batches held while the spool cannot be written


class SpoolBusy(Exception):
    """Another agent process holds this spool directory."""


class Spool:
    def __init__(self, root: Path, max_bytes: int) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self.appended = threading.Event()  # set by every append: the sender waits on it
        self._held: dict[int, bytes] = {}  # batches that could not be written: in memory
        self._write_problem: str | None = None
        self._state_problem: str | None = None
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._hold = (root / "lock").open("w")
        try:
            fcntl.flock(self._hold, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SpoolBusy(f"another agent is using the spool {root}") from None
        self._sizes = {int(p.name.removesuffix(SUFFIX)): p.stat().st_size
                       for p in root.glob(f"*{SUFFIX}")}  # every batch: on disk or held
        state = self._read_state()
        self.stream: str = state.get("stream") or secrets.token_hex(16)
        self.next_seq = max(int(state.get("next_seq", 1)), int(state.get("reserved", 1)),
                            max(self._sizes, default=0) + 1)
        self.reserved = self.next_seq  # seqs below this were handed out or reserved
        self.dropped = int(state.get("dropped", 0))
        self.rejected = int(state.get("rejected", 0))
        self._save_state()

    def append(self, records: list[dict[str, Any]], at: str) -> int:
        """Write one batch; returns its seq. Drops the oldest batches past the cap."""
        return self.append_encoded([json.dumps(r, separators=(",", ":")) for r in records], at)

    def append_encoded(self, records: list[str], at: str) -> int:
        """append(), for records already encoded as JSON (a caller that measured them)."""
        with self._lock:
            seq = self._take_seq()
            body = wire.encode_batch(self.stream, seq, at, records)
            self._keep(seq, body)
            if self._trim():
                self._save_state()
        self.appended.set()
        return seq

    @property
    def problem(self) -> str | None:
        """What keeps the spool from its disk, in words; None when nothing does."""
        return self._write_problem or self._state_problem

    def _take_seq(self) -> int:
        # The seq is taken for good before its batch exists: a crash in between must not
        # hand it to a later batch (raywatch would call that one a duplicate).
        seq = self.next_seq
        self.next_seq += 1
        if self.next_seq > self.reserved:
            self.reserved = seq + SEQ_BLOCK
            if not self._save_state():
                # The block is not on disk: a restart would hand its seqs out again. A
                # new stream instead, which a restart never continues (it takes the
                # stream last saved, whose seqs in use are all below its saved block).
                self.stream, seq = secrets.token_hex(16), 1
                self.next_seq, self.reserved = 2, 1 + SEQ_BLOCK
        return seq

    def _keep(self, seq: int, body: bytes) -> None:
        """The batch on disk, or held in memory when the disk refuses it."""
        try:
            try:
                _write_atomically(self._path(seq), body)
            except FileNotFoundError:  # the directory was removed under the agent
                self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
                _write_atomically(self._path(seq), body)
            self._write_problem = None
        except OSError as exc:
            self._held[seq] = body
            self._write_problem = (
                f"cannot write its spool {self.root} ({exc.strerror or exc}): holding up "
                f"to {MEMORY_MAX_BYTES >> 20} MiB of batches in memory (a restart loses them)")
        self._sizes[seq] = len(body)

    def oldest(self, limit: int, max_bytes: int) -> list[dict[str, Any]]:
        """Up to `limit` batches, oldest first, together under `max_bytes` (at least one)."""
        return [json.loads(raw) for _, raw in self.oldest_raw(limit, max_bytes)]

    def oldest_raw(self, limit: int, max_bytes: int) -> list[tuple[int, bytes]]:
        """oldest() as (seq, the batch's JSON as stored): what a report body is made of,
        without decoding and encoding every record again."""
        with self._lock:
            seqs = sorted(self._sizes)[:limit]
        batches: list[tuple[int, bytes]] = []
        total = 0
        for seq in seqs:
            try:
                raw = self._held.get(seq) or self._path(seq).read_bytes()
            except OSError:  # dropped meanwhile, or unreadable: left for the trim
                continue
            if batches and total + len(raw) > max_bytes:
                break
            total += len(raw)
            batches.append((seq, raw))
        return batches

    def remove(self, seqs: list[int], rejected: bool = False) -> None:
        with self._lock:
            for seq in seqs:
                if self._sizes.pop(seq, None) is not None:
                    self._drop(seq)
                    self.rejected += int(rejected)
            if rejected:
                self._save_state()

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {"batches": len(self._sizes), "bytes": sum(self._sizes.values()),
                    "dropped": self.dropped, "rejected": self.rejected,
                    "in_memory": len(self._held)}

    def close(self) -> None:
        """A clean stop gives back the rest of the reserved block."""
        with self._lock:
            self.reserved = self.next_seq
            with contextlib.suppress(OSError):
                self._save_state()
        with contextlib.suppress(OSError):
            self._hold.close()

    def _trim(self) -> bool:
        """Drop the oldest batches past max_bytes, and the oldest held in memory past
        MEMORY_MAX_BYTES; True when some were dropped."""
        total = sum(self._sizes.values())
        held = sum(len(body) for body in self._held.values())
        dropped = self.dropped
        while total > self.max_bytes and len(self._sizes) > 1:
            seq = min(self._sizes)
            total -= self._sizes.pop(seq)
            held -= len(self._drop(seq) or b"")
            self.dropped += 1
        while held > MEMORY_MAX_BYTES and len(self._held) > 1:
            seq = min(self._held)
            held -= self._sizes.pop(seq)
            self._drop(seq)
            self.dropped += 1
        return self.dropped != dropped

    def _drop(self, seq: int) -> bytes | None:
        """Forget batch `seq`'s body: from memory, or its file. What was held, if it was."""
        body = self._held.pop(seq, None)
        if body is None:
            with contextlib.suppress(OSError):
                self._path(seq).unlink(missing_ok=True)
        return body

    def _path(self, seq: int) -> Path:
        return self.root / f"{seq:012d}{SUFFIX}"

    def _read_state(self) -> dict[str, Any]:
        try:
            state = json.loads((self.root / "state.json").read_text())
        except (OSError, ValueError):
            return {}
        return state if isinstance(state, dict) else {}

    def _save_state(self) -> bool:
        """The state on disk; False (and `problem` says why) when the disk refused it."""
        state = {"stream": self.stream, "next_seq": self.next_seq, "reserved": self.reserved,
                 "dropped": self.dropped, "rejected": self.rejected}
        try:
            _write_atomically(self.root / "state.json", json.dumps(state).encode())
        except OSError as exc:
            self._state_problem = (f"cannot save its spool's state in {self.root} "
                                   f"({exc.strerror or exc})")
            return False
        self._state_problem = None
        return True


def _write_atomically(path: Path, body: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with tmp.open("wb") as out:
            out.write(body)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)  # a partial file would hold the space it took
        raise
