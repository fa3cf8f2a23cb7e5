"""Processes on this host, read by the node's agent there: who started a GPU process, and
the facts it reports about its Ray workers (busy or idle, state, memory).

Only processes on the host this runs on can be read here; other nodes report
their own through their node agent.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace

import psutil

from collectors.records import GpuPoll, ProcessFact

log = logging.getLogger("raywatch.procstat")


def ancestors(pid: int, depth: int = 8) -> tuple[int, ...]:
    """Parent, grandparent, ... of `pid` on this host, nearest first, without init.

    A GPU is often held by a child of a Ray worker (a vLLM engine, a DataLoader
    worker); the owner join walks up to the worker through these. A parent that started
    after its child is a reused pid: the chain stops there.
    """
    if not HAVE_PROC:
        return _psutil_ancestors(pid, depth)
    chain: list[int] = []
    stat = read_stat(pid)
    while stat is not None and len(chain) < depth and stat.ppid > 1:
        parent = read_stat(stat.ppid)
        if parent is None or parent.start_ticks > stat.start_ticks:
            break
        chain.append(stat.ppid)
        stat = parent
    return tuple(chain)


def _psutil_ancestors(pid: int, depth: int) -> tuple[int, ...]:
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
        started = start_ticks(pid)
        if started is None:
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


def is_ray_worker(cmdline: list[str]) -> bool:
    """Ray renames its worker processes "ray::<Class>.<method>" (or "ray::IDLE")."""
    return bool(cmdline) and cmdline[0].startswith("ray::")


# --- /proc, read directly ------------------------------------------------------------------
# The agent reads its node's processes every few seconds; psutil re-reads /proc/<pid>/stat
# and /proc/stat for a pid-reuse check on most calls (a fact cost it a dozen reads, most of
# a busy agent's CPU). Two reads a process here: stat and cmdline. Linux only, as Ray's GPU
# nodes are; where there is no /proc the watcher says so once and reports nothing.
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
LETTERS = frozenset("RSDZTtWXxKPI")  # ps's state letters
HAVE_PROC = os.path.isdir("/proc/self")


@dataclass(frozen=True)
class ProcStat:
    """What one read of /proc/<pid>/stat says (proc(5))."""

    state: str
    ppid: int
    cpu_ticks: int  # utime + stime
    threads: int
    start_ticks: int  # since boot
    rss_bytes: int
    comm: str

    @property
    def create_time(self) -> float:
        """Seconds since the epoch, as psutil.Process.create_time() gives it."""
        return self.start_ticks / CLOCK_TICKS + boot_time()


@functools.cache
def boot_time() -> float:
    """psutil reads /proc/stat for it at every call; it changes only with a reboot."""
    return float(psutil.boot_time())


def read_stat(pid: int) -> ProcStat | None:
    """/proc/<pid>/stat of this host; None when the process is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read()
    except OSError:
        return None
    close = raw.rfind(b")")
    fields = raw[close + 2:].split()
    if len(fields) < 22:
        return None
    state = fields[0].decode("ascii", "replace")
    return ProcStat(state=state, ppid=int(fields[1]), cpu_ticks=int(fields[11]) + int(fields[12]),
                    threads=int(fields[17]), start_ticks=int(fields[19]),
                    rss_bytes=int(fields[21]) * PAGE_SIZE,
                    comm=raw[raw.find(b"(") + 1:close].decode("utf-8", "replace"))


def start_ticks(pid: int) -> float | None:
    """When `pid` started (an opaque number: only for telling one process from a later one
    with the same pid); None when it is gone."""
    if HAVE_PROC:
        stat = read_stat(pid)
        return float(stat.start_ticks) if stat is not None else None
    try:
        return psutil.Process(pid).create_time()
    except (psutil.Error, OSError):
        return None


def title_of(pid: int) -> str | None:
    """The command line's first word (Ray's "ray::<Class>.<method>" title), as psutil reads
    it: a process that rewrote its command line without NULs is split on spaces."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            data = handle.read(4096)
    except OSError:
        return None
    data = data.rstrip(b"\0")
    first = data.split(b"\0", 1)[0] if b"\0" in data else data.split(b" ", 1)[0]
    return first.decode("utf-8", "replace")


def ray_worker_pids(exclude: Iterable[int] = ()) -> Iterator[int]:
    """Pids of this host's Ray workers (not in `exclude`), by their command lines."""
    skip = set(exclude)
    for pid, cmdline in command_lines():
        if pid not in skip and cmdline.startswith(b"ray::"):
            yield pid


def open_files_of(pids: Iterable[int]) -> dict[str, list[int]]:
    """Every file (real path) that one of `pids` holds open, with the pids holding it:
    Linux's /proc/<pid>/fd; elsewhere, or for a process this user may not look into, none."""
    held: dict[str, list[int]] = {}
    for pid in pids:
        try:
            entries = list(os.scandir(f"/proc/{pid}/fd"))
        except OSError:
            continue
        targets = set()
        for entry in entries:
            with contextlib.suppress(OSError):
                targets.add(os.readlink(entry.path))
        for target in targets:
            held.setdefault(target, []).append(pid)
    return held


def command_lines() -> Iterator[tuple[int, bytes]]:
    """(pid, raw command line: arguments separated by NUL) of every process on this host:
    one read a process (psutil.process_iter reads each process's stat as well)."""
    if not HAVE_PROC:
        for process in psutil.process_iter(["cmdline"]):
            yield process.pid, "\0".join(process.info["cmdline"] or ()).encode()
        return
    try:
        pids = [int(e.name) for e in os.scandir("/proc") if e.name.isdigit()]
    except OSError:
        return
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                yield pid, handle.read()
        except OSError:
            continue



@dataclass(frozen=True)
class _Seen:
    start_ticks: int
    cpu_ticks: int
    at: float


class ProcessWatcher:
    """Facts about this node's Ray workers plus some given pids (its GPU processes).

    The process table is scanned for new Ray workers every `rescan_s` only; the
    processes found are kept between readings, so CPU percent covers the time since
    the previous reading and a reading costs two /proc reads per watched process.
    """

    def __init__(self, rescan_s: float = 5.0, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        self.rescan_s = rescan_s
        self.clock = clock
        self._scanned_at: float | None = None
        self._ray: dict[int, _Seen | None] = {}
        self._extra: dict[int, _Seen | None] = {}
        if not HAVE_PROC:
            log.warning("no /proc on this host: the agent reports no process facts")

    def read(self, extra_pids: Iterable[int] = ()) -> tuple[ProcessFact, ...]:
        if not HAVE_PROC:
            return ()
        now = self.clock()
        if self._scanned_at is None or now - self._scanned_at >= self.rescan_s:
            self._scanned_at = now
            self._ray.update(dict.fromkeys(ray_worker_pids(exclude=self._ray)))
        self._extra = {pid: self._extra.get(pid) for pid in set(extra_pids)
                       if pid not in self._ray}
        facts: dict[int, ProcessFact] = {}
        for table in (self._ray, self._extra):
            for pid, seen in list(table.items()):
                read = _fact(pid, seen)
                if read is None:  # gone, or its pid was reused
                    del table[pid]
                else:
                    facts[pid], table[pid] = read
        return tuple(facts[pid] for pid in sorted(facts))


def _fact(pid: int, seen: _Seen | None) -> tuple[ProcessFact, _Seen] | None:
    """The process's facts now and this reading, or None when it is gone (or its pid was
    reused since `seen`). CPU percent is None until a previous reading started its
    measurement."""
    stat = read_stat(pid)
    if stat is None or (seen is not None and seen.start_ticks != stat.start_ticks):
        return None
    now = time.monotonic()
    reading = _Seen(stat.start_ticks, stat.cpu_ticks, now)
    if stat.state == "Z":  # dead, its parent has not reaped it
        return ProcessFact(pid=pid, create_time=stat.create_time, ppid=stat.ppid, title="",
                           state="Z", cpu_percent=None, rss_bytes=None, threads=None), reading
    title = title_of(pid)
    if title is None:
        return None
    cpu = None
    if seen is not None and now > seen.at:
        cpu = round(100 * (stat.cpu_ticks - seen.cpu_ticks) / CLOCK_TICKS / (now - seen.at), 1)
    return ProcessFact(
        pid=pid, create_time=stat.create_time, ppid=stat.ppid, title=(title or stat.comm)[:200],
        state=stat.state if stat.state in LETTERS else None, cpu_percent=cpu,
        rss_bytes=stat.rss_bytes, threads=stat.threads), reading
