"""CPU use of one process on this host: is a silent trial busy or idle?

Only processes on the host raywatch runs on can be read here; GPU nodes report
their own through their node agent.
"""

from __future__ import annotations

import socket
import time

import psutil


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
