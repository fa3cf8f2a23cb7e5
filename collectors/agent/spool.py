"""The agent's on-disk spool: one file per batch, sent oldest first, deleted once
raywatch acknowledged it. Bounded: past `max_bytes` the oldest batches are dropped and
counted (the count travels in every report).

A spool is one `stream` (a random id made with it) of batches numbered 1, 2, 3, ...;
raywatch stores each (stream, seq) once, so a batch re-sent after a lost answer is not
stored twice, and a wiped spool starts a new stream rather than colliding with the old.
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


class SpoolBusy(Exception):
    """Another agent process holds this spool directory."""


class Spool:
    def __init__(self, root: Path, max_bytes: int) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self.appended = threading.Event()  # set by every append: the sender waits on it
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._hold = (root / "lock").open("w")
        try:
            fcntl.flock(self._hold, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SpoolBusy(f"another agent is using the spool {root}") from None
        self._sizes = {int(p.name.removesuffix(SUFFIX)): p.stat().st_size
                       for p in root.glob(f"*{SUFFIX}")}
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
            seq = self.next_seq
            body = wire.encode_batch(self.stream, seq, at, records)
            # The seq is taken for good before its batch exists: a crash in between must
            # not hand it to a later batch (raywatch would call that one a duplicate).
            self.next_seq += 1
            if self.next_seq > self.reserved:
                self.reserved = seq + SEQ_BLOCK
                self._save_state()
            _write_atomically(self._path(seq), body)
            self._sizes[seq] = len(body)
            if self._trim():
                self._save_state()
        self.appended.set()
        return seq

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
                raw = self._path(seq).read_bytes()
            except FileNotFoundError:  # dropped meanwhile
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
                    self._path(seq).unlink(missing_ok=True)
                    self.rejected += int(rejected)
            if rejected:
                self._save_state()

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {"batches": len(self._sizes), "bytes": sum(self._sizes.values()),
                    "dropped": self.dropped, "rejected": self.rejected}

    def close(self) -> None:
        """A clean stop gives back the rest of the reserved block."""
        with self._lock:
            self.reserved = self.next_seq
            with contextlib.suppress(OSError):
                self._save_state()
        with contextlib.suppress(OSError):
            self._hold.close()

    def _trim(self) -> bool:
        """Drop the oldest batches past max_bytes; True when some were dropped."""
        total = sum(self._sizes.values())
        dropped = self.dropped
        while total > self.max_bytes and len(self._sizes) > 1:
            seq = min(self._sizes)
            total -= self._sizes.pop(seq)
            self._path(seq).unlink(missing_ok=True)
            self.dropped += 1
        return self.dropped != dropped

    def _path(self, seq: int) -> Path:
        return self.root / f"{seq:012d}{SUFFIX}"

    def _read_state(self) -> dict[str, Any]:
        try:
            state = json.loads((self.root / "state.json").read_text())
        except (OSError, ValueError):
            return {}
        return state if isinstance(state, dict) else {}

    def _save_state(self) -> None:
        state = {"stream": self.stream, "next_seq": self.next_seq, "reserved": self.reserved,
                 "dropped": self.dropped, "rejected": self.rejected}
        _write_atomically(self.root / "state.json", json.dumps(state).encode())


def _write_atomically(path: Path, body: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("wb") as out:
        out.write(body)
    os.replace(tmp, path)
