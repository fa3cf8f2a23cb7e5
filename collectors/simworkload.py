"""Who holds each simulated GPU, and how busy it is: what the simulated NVML module
(collectors/simnvml.py) reports when it follows a Ray cluster (`make demo`).

A simulated GPU is held by the processes that would hold the real one:

- each Ray worker of the cluster on this host that its raylet leased GPU slots to
  (slot i is simulated GPU i), read through Ray (collectors/raygpus.py);
- any other process started with CUDA_VISIBLE_DEVICES in its environment, read from
  /proc/<pid>/environ: a CUDA program someone started by hand, or a child a GPU worker
  spawned (it inherits the variable Ray set).

A GPU's utilization is its holders' CPU percent over the last reading (capped at 100):
a phase that computes shows busy, a phase that sleeps or waits (a hung trial, a call to
a slow service) shows 0 %. Each holder's memory is its resident memory plus what a CUDA
context takes. The simulation runs only where Ray's workers run: it reads their
processes on this host.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from collectors.http import SourceError
from collectors.procstat import is_ray_worker
from collectors.raygpus import fetch_raylets, fetch_worker_gpus

log = logging.getLogger(__name__)

CUDA_CONTEXT_BYTES = 512 * 1024**2  # a CUDA context alone, before any tensor
SNAPSHOT_S = 0.5  # one reading serves every NVML call of a poll
RAYLETS_S = 30.0  # how long the list of this host's raylets is trusted


@dataclass(frozen=True)
class Holder:
    pid: int
    cpu_percent: float
    memory_bytes: int


def visible_devices(value: str | None, count: int) -> tuple[int, ...]:
    """CUDA_VISIBLE_DEVICES as GPU indices below `count`; UUIDs and MIG names are not
    simulated and are left out."""
    if not value:
        return ()
    parts = [p.strip() for p in value.split(",")]
    return tuple(sorted({int(p) for p in parts if p.isdigit() and int(p) < count}))


def environ_of(pid: int) -> dict[str, str]:
    """The environment `pid` started with ({} when it cannot be read)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.decode(errors="replace").partition("=") for item in raw.split(b"\0") if item)
    return {name: value for name, _, value in pairs}


class RayWorkload:
    """Holders of `count` simulated GPUs: the workers of the Ray cluster at `gcs_address`
    on this host and the processes started with CUDA_VISIBLE_DEVICES."""

    def __init__(self, gcs_address: str, token: str | None, count: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.gcs_address, self.token, self.count, self.clock = gcs_address, token, count, clock
        self._lock = threading.Lock()
        self._snapshot: tuple[float, dict[int, list[Holder]], str | None] | None = None
        self._raylets: tuple[float, list[str]] | None = None
        self._started_with: dict[tuple[int, float], tuple[int, ...]] = {}
        self._processes: dict[int, psutil.Process] = {}
        self._said: str | None = ""  # nothing said yet

    def holders(self) -> tuple[dict[int, list[Holder]], str | None]:
        """GPU index -> its holders, and why Ray's workers could not be read (or None)."""
        with self._lock:
            now = self.clock()
            if self._snapshot is None or now - self._snapshot[0] >= SNAPSHOT_S:
                self._snapshot = (now, *self._read())
            return self._snapshot[1], self._snapshot[2]

    def _read(self) -> tuple[dict[int, list[Holder]], str | None]:
        problem = None
        try:
            held = self._ray_workers()
        except SourceError as exc:
            held, problem = {}, exc.message
            self._raylets = None  # ask the GCS again next time
        self._say(problem)
        for pid, gpus in self._started_with_gpus().items():
            held.setdefault(pid, gpus)
        by_gpu: dict[int, list[Holder]] = {i: [] for i in range(self.count)}
        for pid, gpus in sorted(held.items()):
            reading = self._reading(pid)
            for index in gpus:
                if reading is not None and index in by_gpu:
                    by_gpu[index].append(reading)
        self._processes = {pid: p for pid, p in self._processes.items() if pid in held}
        return by_gpu, problem

    def _ray_workers(self) -> dict[int, tuple[int, ...]]:
        now = self.clock()
        if self._raylets is None or now - self._raylets[0] >= RAYLETS_S:
            self._raylets = (now, fetch_raylets(self.gcs_address, self.token, local_ips()))
        held: dict[int, tuple[int, ...]] = {}
        for raylet in self._raylets[1]:
            for pid, slots in fetch_worker_gpus(raylet, self.token).items():
                held[pid] = tuple(s for s in slots if s < self.count)
        return held

    def _started_with_gpus(self) -> dict[int, tuple[int, ...]]:
        """Processes (not Ray workers) whose starting environment names GPUs. The
        environment is read once per (pid, start time); the name each time, since a Ray
        worker starts as python and renames itself ray::IDLE a moment later."""
        seen: dict[tuple[int, float], tuple[int, ...]] = {}
        for process in psutil.process_iter(["create_time"]):
            key = (process.pid, process.info["create_time"] or 0.0)
            if key not in self._started_with:
                self._started_with[key] = visible_devices(
                    environ_of(process.pid).get("CUDA_VISIBLE_DEVICES"), self.count)
            seen[key] = self._started_with[key]
        self._started_with = seen
        return {pid: gpus for (pid, _), gpus in seen.items()
                if gpus and not self._ray_worker(pid)}

    @staticmethod
    def _ray_worker(pid: int) -> bool:
        try:
            return is_ray_worker(psutil.Process(pid).cmdline())
        except psutil.Error:
            return True  # gone: it holds nothing

    def _reading(self, pid: int) -> Holder | None:
        """CPU percent since the previous reading (0 at the first), resident memory."""
        process = self._processes.get(pid)
        try:
            if process is None:
                process = self._processes[pid] = psutil.Process(pid)
            with process.oneshot():
                cpu, rss = process.cpu_percent(None), process.memory_info().rss
        except psutil.Error:
            self._processes.pop(pid, None)
            return None
        return Holder(pid, cpu, rss + CUDA_CONTEXT_BYTES)

    def _say(self, problem: str | None) -> None:
        """Log Ray's side once when it fails, and once when it works again."""
        if problem != self._said:
            if problem:
                log.warning("simulated GPUs: %s; showing only processes started with "
                            "CUDA_VISIBLE_DEVICES", problem)
            else:
                log.info("simulated GPUs follow the Ray workers of %s", self.gcs_address)
        self._said = problem


def local_ips() -> set[str]:
    """This host's IPv4 and IPv6 addresses."""
    return {a.address.split("%")[0] for addrs in psutil.net_if_addrs().values()
            for a in addrs if a.family.name in ("AF_INET", "AF_INET6")}
