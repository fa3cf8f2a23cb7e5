"""Commands from raywatch, checked before anything is done: for this node, signed with
this token's command key, not expired, never seen before (ids kept on disk, so a replay
after a restart is refused too), a kind the protocol allows (a signal it allows, or a
py-spy dump of a stack), a process that is still the one raywatch meant (same pid AND
same start time: a reused pid is left alone), and one this agent watches: a process of
its own latest snapshot (its Ray workers and GPU processes), whatever raywatch asks."""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil

from collectors import pystack
from collectors.agent import wire
from collectors.records import ProcessFact

SIGNALLED, GONE, REFUSED = "signalled", "gone", "refused"
TAKEN, FAILED = "taken", "failed"  # a stack: dumped, or py-spy could not (and why)
# psutil's create_time is boot time + start ticks: two readings of one process agree
# to the tick; a different process started in the same tick is all this lets through.
SAME_START_S = 0.02
KEEP_SEEN_S = 3600.0  # an id is remembered this long after its command expired


@dataclass(frozen=True)
class Outcome:
    outcome: str  # SIGNALLED, GONE or REFUSED; a stack: TAKEN, FAILED, GONE or REFUSED
    detail: str


class Watched:
    """The processes of this agent's latest snapshot, by pid and start time: the only
    ones a command may signal or take a stack of. kubelet acts only on the pods bound to
    its node; an agent acts only on what it reported itself, so a raywatch (or its
    database) turned hostile reaches no other process of the node."""

    def __init__(self) -> None:
        self._started: dict[int, float] = {}
        self._lock = threading.Lock()
        self.taken = threading.Event()  # set by the first snapshot

    def saw(self, facts: Iterable[ProcessFact]) -> None:
        with self._lock:
            self._started = {f.pid: f.create_time for f in facts}
        self.taken.set()

    def refusal(self, pid: int, started: float) -> Outcome | None:
        """None when `pid`, started at `started`, is one of the processes watched."""
        with self._lock:
            known = self._started.get(pid)
        if known is None or abs(known - started) > SAME_START_S:
            return Outcome(REFUSED, f"pid {pid} is not a process this agent watches (its "
                                    "Ray workers and GPU processes): left alone")
        return None


class CommandGuard:
    def __init__(self, node: str, key: str, seen_path: Path) -> None:
        self.node = node
        self.key = key
        self.seen_path = seen_path
        self._lock = threading.Lock()
        self._seen = _load(seen_path)  # command id -> epoch seconds it expires
        self.problem: str | None = None  # the ids could not be kept on disk, and why

    def check(self, command: dict[str, Any], now: datetime) -> str | None:
        """Why the command must not be carried out, or None. Every command that passes
        is remembered, so it passes once."""
        if not wire.signature_ok(self.key, command):
            return "the signature does not match this token: not from raywatch, or altered"
        if command.get("node") != self.node:
            return f"the command is for node {command.get('node')!r}, this is {self.node!r}"
        try:
            expires = wire.decode_time(command.get("expires_at"), "expires_at")
        except wire.WireError as exc:
            return str(exc)
        if now >= expires:
            return f"the command expired at {expires.isoformat()}"
        ident = str(command.get("id"))
        with self._lock:
            if ident in self._seen:
                return f"command {ident} was already received: a replay"
            self._seen = {k: t for k, t in self._seen.items()
                          if t + KEEP_SEEN_S > now.timestamp()}
            self._seen[ident] = expires.timestamp()
            self._keep()
        return None

    def _keep(self) -> None:
        """The ids on disk; a full disk keeps them in memory (a replay is refused all the
        same, until a restart) and says so: a node whose disk filled is no time to stop
        taking signals."""
        try:
            _save(self.seen_path, self._seen)
            self.problem = None
        except OSError as exc:
            self.problem = (f"cannot keep the ids of commands seen in {self.seen_path} "
                            f"({exc.strerror or exc}): a restart forgets them")


def carry_out(command: dict[str, Any], watched: Watched, py_spy: str | None = None
              ) -> Outcome:
    """Do what a checked command asks (a signal, or a stack dump) to the process it names,
    if that process is still the one raywatch meant and one this agent watches."""
    kind = command.get("kind")
    if kind not in wire.COMMAND_KINDS:
        return Outcome(REFUSED, f"unknown command kind {kind!r}")
    payload = command.get("payload") or {}
    if kind == wire.SIGNAL and payload.get("signal") not in wire.SIGNALS:
        return Outcome(REFUSED, f"signal {payload.get('signal')!r} is not one an agent sends")
    pid = payload.get("pid")
    refused = same_process(pid, payload.get("create_time")) or watched.refusal(
        pid, payload["create_time"])
    if refused is not None:
        return refused
    if kind == wire.STACK:
        return take_stack(pid, py_spy)
    return send_signal(pid, payload["signal"])


def same_process(pid: Any, started: Any) -> Outcome | None:
    """None when `pid` is still the process that started at `started`; else what to say."""
    if not isinstance(pid, int) or pid <= 1 or not isinstance(started, (int, float)):
        return Outcome(REFUSED, "the command names no pid and start time")
    try:
        now_started = psutil.Process(pid).create_time()
    except psutil.NoSuchProcess:
        return Outcome(GONE, f"no process {pid} on this node: it has ended")
    except psutil.Error as exc:
        return Outcome(REFUSED, f"cannot read process {pid}: {exc}")
    if abs(now_started - started) > SAME_START_S:
        return Outcome(GONE, f"pid {pid} now belongs to another process (started "
                             f"{now_started:.2f}, not {started:.2f}): left alone")
    return None


def send_signal(pid: int, name: str) -> Outcome:
    try:
        os.kill(pid, getattr(signal, name))
    except ProcessLookupError:
        return Outcome(GONE, f"process {pid} ended before the signal")
    except PermissionError:
        return Outcome(REFUSED, f"the agent (uid {os.getuid()}) may not signal process {pid}")
    return Outcome(SIGNALLED, f"{name} sent to pid {pid} (start time verified)")


def take_stack(pid: int, py_spy: str | None) -> Outcome:
    dump = pystack.dump_stack(pid, py_spy)
    if dump.text is None:
        return Outcome(FAILED, dump.reason or "py-spy gave no stack")
    return Outcome(TAKEN, dump.text)


def _load(path: Path) -> dict[str, float]:
    try:
        seen = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in seen.items()} if isinstance(seen, dict) else {}


def _save(path: Path, seen: dict[str, float]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(seen))
    os.replace(tmp, path)
