"""Processes on this host: is a silent trial busy or idle, who started a GPU process,
and the facts a node's agent reports about its Ray workers.

Only processes on the host this runs on can be read here; other nodes report
their own through their node agent.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import replace

import psutil

from collectors.records import GpuPoll, ProcessFact


def this_host() -> str:
    return socket.gethostname()


def process_cpu_percent(pid: int, sample_s: float = 0.2) -> float | None:
    """CPU percent of `pid` and its children over `sample_s`; None if it cannot be read."""
    try:
        process = psutil.Process(pid)
        family = [process, *process.children(recursive=True)]
        for member in family:
            member.cpu_percent(None)  # the first call only starts the measurement
    except (psutil.Error, OSError):
        return None
    time.sleep(sample_s)
    return round(sum(_cpu(member) for member in family), 1)


def process_state(pid: int) -> tuple[str | None, int | None] | None:
    """(ps's state letter, RSS bytes) of `pid` on this host; None when it is gone."""
    try:
        process = psutil.Process(pid)
        with process.oneshot():
            return STATE_LETTERS.get(process.status()), process.memory_info().rss
    except (psutil.Error, OSError):
        return None


def _cpu(process: psutil.Process) -> float:
    try:
        return float(process.cpu_percent(None))
    except psutil.Error:
        return 0.0


def ancestors(pid: int, depth: int = 8) -> tuple[int, ...]:
    """Parent, grandparent, ... of `pid` on this host, nearest first, without init.

    A GPU is often held by a child of a Ray worker (a vLLM engine, a DataLoader
    worker); the owner join walks up to the worker through these.
    """
    chain: list[int] = []
    try:
        process = psutil.Process(pid)
        for _ in range(depth):
            process = process.parent()
            if process is None or process.pid <= 1:
                break
            chain.append(process.pid)
    except (psutil.Error, OSError):
        pass
    return tuple(chain)


class Ancestry:
    """Parent chains of GPU processes, read once per process and again after `ttl_s`:
    a chain changes only when a parent ends. Walking it costs a few /proc reads per
    parent (psutil checks each for pid reuse), every poll, for every GPU process: most
    of an agent's CPU on a node of 50 trials. A pid whose start time changed (reused)
    is read afresh."""

    def __init__(self, ttl_s: float = 30.0, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        self.ttl_s = ttl_s
        self.clock = clock
        self._known: dict[int, tuple[float, float, tuple[int, ...]]] = {}
        self._lock = threading.Lock()

    def of(self, pid: int) -> tuple[int, ...]:
        try:
            started = psutil.Process(pid).create_time()
        except (psutil.Error, OSError):
            return ()
        now = self.clock()
        with self._lock:
            known = self._known.get(pid)
        if known is not None and known[0] == started and now - known[1] < self.ttl_s:
            return known[2]
        chain = ancestors(pid)
        with self._lock:
            self._known[pid] = (started, now, chain)
        return chain

    def forget_except(self, pids: Iterable[int]) -> None:
        keep = set(pids)
        with self._lock:
            self._known = {pid: v for pid, v in self._known.items() if pid in keep}


_ANCESTRY = Ancestry()  # this process's: the GPU agent polls from one loop


def with_ancestors(poll: GpuPoll) -> GpuPoll:
    """Add each GPU process's parent chain, read here on its own node (the simulated
    source's processes are real ones of this host too)."""
    gpus = tuple(
        replace(g, processes=tuple(replace(p, ancestors=_ANCESTRY.of(p.pid))
                                   for p in g.processes))
        if g.processes else g
        for g in poll.gpus
    )
    _ANCESTRY.forget_except(p.pid for g in gpus for p in g.processes or ())
    return replace(poll, gpus=gpus)


# psutil's status names as `ps` shows them.
STATE_LETTERS = {
    psutil.STATUS_RUNNING: "R", psutil.STATUS_SLEEPING: "S", psutil.STATUS_DISK_SLEEP: "D",
    psutil.STATUS_ZOMBIE: "Z", psutil.STATUS_STOPPED: "T", psutil.STATUS_TRACING_STOP: "t",
    psutil.STATUS_IDLE: "I", psutil.STATUS_DEAD: "X", psutil.STATUS_PARKED: "P",
    psutil.STATUS_WAKING: "W",
}


def is_ray_worker(cmdline: list[str]) -> bool:
    """Ray renames its worker processes "ray::<Class>.<method>" (or "ray::IDLE")."""
    return bool(cmdline) and cmdline[0].startswith("ray::")


class ProcessWatcher:
    """Facts about this node's Ray workers plus some given pids (its GPU processes).

    The process table is scanned for new Ray workers every `rescan_s` only; the
    processes found are kept between readings, so CPU percent covers the time since
    the previous reading and a reading costs a few /proc reads per watched process.
    """

    def __init__(self, rescan_s: float = 5.0, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        self.rescan_s = rescan_s
        self.clock = clock
        self._scanned_at: float | None = None
        self._ray: dict[int, psutil.Process] = {}
        self._extra: dict[int, psutil.Process] = {}

    def read(self, extra_pids: Iterable[int] = ()) -> tuple[ProcessFact, ...]:
        now = self.clock()
        known = set(self._ray) | set(self._extra)
        if self._scanned_at is None or now - self._scanned_at >= self.rescan_s:
            self._scanned_at = now
            self._scan()
        self._extra = {pid: self._extra.get(pid) or _process(pid) for pid in set(extra_pids)
                       if pid not in self._ray}
        facts: dict[int, ProcessFact] = {}
        for table in (self._ray, self._extra):
            for pid, process in list(table.items()):
                fact = _fact(process, measured=pid in known) if process is not None else None
                if fact is None:
                    del table[pid]
                else:
                    facts[pid] = fact
        return tuple(facts[pid] for pid in sorted(facts))

    def _scan(self) -> None:
        for process in psutil.process_iter(["cmdline"]):
            if process.pid not in self._ray and is_ray_worker(process.info["cmdline"] or []):
                process.cpu_percent(None)  # starts the measurement: the next reading has one
                self._ray[process.pid] = process


def _cpu_since(process: psutil.Process, measured: bool) -> float | None:
    cpu = process.cpu_percent(None)
    return round(cpu, 1) if measured else None


def _process(pid: int) -> psutil.Process | None:
    try:
        process = psutil.Process(pid)
        process.cpu_percent(None)
        return process
    except (psutil.Error, OSError):
        return None


def _fact(process: psutil.Process, measured: bool) -> ProcessFact | None:
    """The process's facts now, or None when it is gone (or its pid was reused). CPU
    percent is None until `measured`: a previous reading started its measurement."""
    try:
        # No is_running() first: ppid() checks for a reused pid itself (NoSuchProcess),
        # and each check reads /proc twice more.
        with process.oneshot():
            started, ppid, state = process.create_time(), process.ppid(), process.status()
            if state == psutil.STATUS_ZOMBIE:  # dead, its parent has not reaped it
                return ProcessFact(pid=process.pid, create_time=started, ppid=ppid, title="",
                                   state="Z", cpu_percent=None, rss_bytes=None, threads=None)
            title = (process.cmdline() or [process.name()])[0]
            return ProcessFact(
                pid=process.pid, create_time=started, ppid=ppid, title=title[:200],
                state=STATE_LETTERS.get(state), cpu_percent=_cpu_since(process, measured),
                rss_bytes=process.memory_info().rss, threads=process.num_threads())
    except (psutil.Error, OSError):
        return None
