"""Run test files again on the embedded default's database: SQLite, the in-memory
channel layer and the in-process background pool (no DATABASE_URL, no REDIS_URL),
which is what `make run` uses. The suite itself runs on Postgres and Redis.

The rerun is a pytest process of its own that shares nothing with this one (its own
SQLite file, no Redis, its own Ray cluster), so `make test` starts it in the
background when the session begins and the test that owns it waits for it at its
turn: its minutes overlap the rest of the suite instead of adding to it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Rerun:
    process: subprocess.Popen[bytes]
    output: Path  # in a temporary dir of its own, removed when the session ends
    started: float

    def wait(self, timeout_s: float) -> tuple[int, str]:
        """(exit code, output); a run still going after `timeout_s` is killed: (-9, ...)."""
        left = max(1.0, timeout_s - (time.monotonic() - self.started))
        try:
            code = self.process.wait(left)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            code = -9
        return code, self.output.read_text(errors="replace")


_STARTED: dict[tuple[str, ...], Rerun] = {}


def start_on_embedded_default(*targets: str) -> Rerun:
    """Start (once per set of targets) a pytest run of `targets` (files, or a selection such
    as `-m both_backends tests`) on the embedded default."""
    if targets in _STARTED:
        return _STARTED[targets]
    scratch = Path(tempfile.mkdtemp(prefix="raywatch-embedded-rerun-"))
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env["RAYWATCH_DATA_DIR"] = str(scratch / "data")
    output = scratch / "pytest.log"
    with output.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *targets],
            cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT,
        )
    _STARTED[targets] = Rerun(process, output, time.monotonic())
    return _STARTED[targets]


def start_after(first: Rerun, name: str, targets: tuple[str, ...], env: dict[str, str],
                *args: str) -> Rerun:
    """A pytest run of `targets` in the background that starts once `first` has ended,
    so that at most one background run competes with the suite for the CPU."""
    if (name, *targets) in _STARTED:
        return _STARTED[(name, *targets)]
    scratch = Path(tempfile.mkdtemp(prefix=f"raywatch-{name}-"))
    output = scratch / "pytest.log"
    output.write_bytes(b"")
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, *targets]
    started = threading.Event()
    holder: list[subprocess.Popen[bytes]] = []

    def run() -> None:
        first.process.wait()
        if not _stopping.is_set():
            with output.open("wb") as sink:
                holder.append(subprocess.Popen(command, cwd=ROOT, env=env, stdout=sink,
                                               stderr=subprocess.STDOUT))
        started.set()

    threading.Thread(target=run, name=f"background-{name}", daemon=True).start()
    rerun = Rerun(_Deferred(holder, started), output, time.monotonic())  # type: ignore[arg-type]
    _STARTED[(name, *targets)] = rerun
    return rerun


class _Deferred:
    """A Popen-like handle for a process that a thread starts later."""

    def __init__(self, holder: list[subprocess.Popen[bytes]], started: threading.Event) -> None:
        self.holder, self.started = holder, started

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self.started.wait(timeout):
            raise subprocess.TimeoutExpired("background run", timeout or 0)
        if not self.holder:
            return -15  # the session was stopping
        left = None if deadline is None else max(0.1, deadline - time.monotonic())
        return self.holder[0].wait(left)

    def poll(self) -> int | None:
        return self.holder[0].poll() if self.holder else None

    def kill(self) -> None:
        if self.holder:
            self.holder[0].kill()


_stopping = threading.Event()


def stop_all() -> None:
    """End reruns nobody waited for (the session was interrupted), and remove their
    temporary dirs (a pytest run outside `make test` writes them to /tmp itself)."""
    _stopping.set()
    for rerun in _STARTED.values():
        if rerun.process.poll() is None:
            rerun.process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                rerun.process.wait(10)
        shutil.rmtree(rerun.output.parent, ignore_errors=True)
