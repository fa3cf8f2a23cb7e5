"""RL runs read from their trainer's console: what verl, EasyR1 and OpenRLHF print with
their default loggers, read on the trainer's node with nothing configured.

Run as they ship, these frameworks log a step only to the console (and W&B) of the Ray
actor that drives the run (verl's `TaskRunner`, EasyR1's `Runner`, OpenRLHF's
`PPOTrainer`: collectors.runformats.TRAINERS). Ray points that worker's stdout at
`<temp dir>/session_*/logs/worker-<worker id>-<job id>-<pid>.out` (docs/ray-facts.md, "A
trainer's console"). So the run is found from the process, not from anything it prints:

- this node's processes titled `ray::<trainer class>` (Ray's title for an actor's worker),
  rescanned every RESCAN_S;
- the file its fd 1 is, accepted only when Ray's name for that pid's log (`worker-*-<job
  id>-<pid>.out`, in a `logs` directory of a session under the Ray temp dir), opened
  held to that temp dir without following a link;
- its lines parsed per framework (collectors.consolelogs), sent as the run
  `job <job id>` / `<class> <pid>` (collectors.runformats.console_run_key) with the pid as
  its writer: raywatch ties it to the trainer actor Ray lists with that pid on this node,
  and to no other (dashboard/trials/runs.py). A line never names a process.

A Ray Train rank (`ray::RayTrainWorker`) is read the same way from Ray Train's own log of
it, `logs/train/ray-train-app-worker-<worker id>.log` beside its console, <worker id>
the one in its console's name (collectors.consolelogs.read_train_log): the run is the
one that log names in the rank's job (`job <id>` / `<run name>`), rank 0's reports are
its steps, and every rank's update says its rank and last report, with its pid as the
writer (only rank 0's binds the run).

No Django. Cursors are the trial-log collector's (saved once the records are spooled).
"""

from __future__ import annotations

import os
import re
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from collectors.agent.cursors import FileState
from collectors.consolelogs import (
    MAX_RECORD_BYTES,
    ConsoleStep,
    TrainLogLine,
    read_console,
    read_train_log,
)
from collectors.procstat import command_lines
from collectors.records import RAYTRAIN, ResultLine, TrialUpdate
from collectors.rootfiles import Caps, Root, open_file
from collectors.runformats import (
    RANK_WORKER,
    console_run_key,
    console_trainer_framework,
    step_seconds,
    train_run_dir,
)
from collectors.tunelogs import FileCursor


class Pending(Protocol):
    """Where a read's records and cursors go: the trial-log collector's batch on its way to
    the spool (collectors.agent.trial_logs._Pending), which imports this module."""

    keep: bool
    read_bytes: int
    collector: Any  # its `files`: the cursors kept in memory

    def file(self, key: str) -> FileState | None: ...

    def exhausted(self) -> bool: ...

    def add(self, update: TrialUpdate, problems: list[dict[str, Any]],
            files: dict[str, FileState] | None = None) -> None: ...

RESCAN_S = 5.0  # how often this node's processes are looked over for trainers
CHUNK_BYTES = 2 * MAX_RECORD_BYTES  # one read: a whole record always fits
# Ray's name for a worker's stdout: worker-<worker id>-<job id>-<pid>.out
_LOG_NAME = re.compile(r"worker-([0-9a-f]{8,64})-([0-9a-f]{8})-([0-9]{1,10})\.out")
# A worker log is as big as what its process prints (vLLM's progress, warnings): it is
# read from a cursor, a chunk at a time, never whole, so no size refuses it.
_NO_CAP = Caps(1 << 62, 1 << 62)


@dataclass(frozen=True)
class Trainer:
    """A trainer actor's process on this node, and its console as Ray named it."""

    pid: int
    trainer: str  # its class: TaskRunner, Runner, PPOTrainer; RayTrainWorker for a rank
    framework: str
    job_id: str  # Ray's, as it named the log
    log: Path  # its console; a Ray Train rank's: its Ray Train log

    def about(self, run_name: str = "") -> TrialUpdate:
        experiment, trial_id = console_run_key(self.job_id, self.trainer, self.pid)
        if self.framework == RAYTRAIN:  # a rank of the run its log names, in its job
            trial_id = train_run_dir(run_name)
        return TrialUpdate(experiment=experiment, experiment_dir=str(self.log.parent),
                           trial_id=trial_id, trainable=self.trainer,
                           directory=str(self.log), tensorboard=False, console=True,
                           framework=self.framework, writer_pid=self.pid)


def find_trainers(root: Root) -> Iterator[Trainer]:
    """The trainer actors' processes on this host whose console Ray writes under `root`."""
    for pid, cmdline in command_lines():
        if not cmdline.startswith(b"ray::"):
            continue
        title = cmdline.split(b"\0", 1)[0][5:].decode("utf-8", "replace")
        trainer = title.split(".", 1)[0].strip()
        framework = console_trainer_framework(trainer)
        if framework:
            found = console_of(pid, root)
            if found is not None:
                yield Trainer(pid, trainer, framework, found[1], found[0])
        elif trainer == RANK_WORKER:
            rank = train_log_of(pid, root)
            if rank is not None:
                yield Trainer(pid, trainer, RAYTRAIN, rank[1], rank[0])


def console_of(pid: int, root: Root, worker: bool = False) -> tuple[Path, str] | None:
    """The worker log a process's stdout is, and its job id (`worker`: and Ray's worker
    id), when it is Ray's log of that pid under `root`; None otherwise (a process that
    pointed its stdout elsewhere)."""
    try:
        target = os.readlink(f"/proc/{pid}/fd/1")
    except OSError:
        return None
    path = Path(target)
    named = _LOG_NAME.fullmatch(path.name)
    if named is None or int(named.group(3)) != pid or path.parent.name != "logs" \
            or not path.parent.parent.name.startswith("session_"):
        return None
    if not target.startswith(root.real.rstrip(os.sep) + os.sep):
        return None
    return path, named.group(1) + "-" + named.group(2) if worker else named.group(2)


def train_log_of(pid: int, root: Root) -> tuple[Path, str] | None:
    """A Ray Train rank's own log and its job id: `logs/train/ray-train-app-worker-<id>.log`
    beside the console Ray named for that pid, <id> being the worker id in that name
    (Ray Train names the file by the worker's id: docs/ray-facts.md). A plain file there,
    not a link; None until the rank wrote its first line."""
    console = console_of(pid, root, worker=True)
    if console is None:
        return None
    worker_id, job_id = console[1].split("-")
    log = console[0].parent / "train" / f"ray-train-app-worker-{worker_id}.log"
    try:
        if not stat.S_ISREG(os.lstat(log).st_mode):
            return None
    except OSError:
        return None
    return log, job_id


class ConsoleRuns:
    """The consoles of this node's trainers, read on from their cursors each poll."""

    def __init__(self, ray_tmp: Path, clock: Callable[[], float] = time.monotonic,
                 find: Callable[[Root], Iterator[Trainer]] = find_trainers) -> None:
        self.root = Root.of(ray_tmp, _NO_CAP)
        self.clock = clock
        self.find = find
        self.trainers: dict[int, Trainer] = {}
        self.scanned_at: float | None = None

    def poll(self, out: Pending) -> None:
        ended: list[Trainer] = []
        now = self.clock()
        if self.scanned_at is None or now - self.scanned_at >= RESCAN_S:
            found = {t.pid: t for t in self.find(self.root)}
            ended = [t for pid, t in self.trainers.items() if found.get(pid) != t]
            self.trainers, self.scanned_at = found, now
        for trainer in ended:  # its last lines, then it leaves memory
            self._read(trainer, out, at_end=True)
            out.collector.files.pop(str(trainer.log), None)
        for trainer in self.trainers.values():
            self._read(trainer, out, at_end=False)

    def _read(self, trainer: Trainer, out: Pending, at_end: bool) -> None:
        key = str(trainer.log)
        out.keep = not at_end
        while not out.exhausted():
            try:
                stat = os.stat(trainer.log, follow_symlinks=False)
            except OSError:
                return  # gone with its session: nothing more to read
            state = out.file(key)
            if state is not None and (state.size, state.mtime_ns) == (stat.st_size,
                                                                        stat.st_mtime_ns):
                return
            offset = state.cursor.offset if state is not None else 0
            if stat.st_size < offset:
                offset = 0  # the file was replaced: read the new one from its start
            try:
                with open_file(trainer.log, self.root, _NO_CAP.log_bytes) as handle:
                    handle.seek(offset)
                    data = handle.read(CHUNK_BYTES)
            except OSError:
                return
            last = offset + len(data) >= stat.st_size
            if trainer.framework == RAYTRAIN:
                lines, used = read_train_log(data, at_end=at_end and last)
            else:
                steps, used = read_console(trainer.framework, data, at_end=at_end and last)
            if used == 0 and len(data) >= CHUNK_BYTES:
                used = len(data)  # no record is this long: skipped as garbage
            done = offset + used >= stat.st_size or used == 0
            at = datetime.fromtimestamp(stat.st_mtime, UTC) if done else None
            size, mtime = (stat.st_size, stat.st_mtime_ns) if done and last else (-1, -1)
            cursor = FileCursor(key, offset + used)
            out.read_bytes += used
            if trainer.framework == RAYTRAIN:
                updates = list(_rank_updates(trainer, lines))
            else:
                updates = [replace(trainer.about(), results=tuple(_lines(trainer, steps, at)))]
                if not steps:  # noise only: the cursor moves, nothing is sent
                    updates = [replace(updates[0], writer_pid=None)]
            for update in updates[:-1]:
                out.add(update, [])
            out.add(updates[-1] if updates else replace(trainer.about(), writer_pid=None),
                    [], files={key: FileState(cursor, size, mtime)})
            if done:
                return


def _lines(trainer: Trainer, steps: list[ConsoleStep], at: datetime | None
           ) -> Iterator[ResultLine]:
    """The steps as result lines: the last one of a read to the file's end stamped with
    the file's mtime (console lines carry no time), the others when raywatch reads them."""
    _, trial_id = console_run_key(trainer.job_id, trainer.trainer, trainer.pid)
    for index, step in enumerate(steps):
        yield ResultLine(trial_id=trial_id, attempt=1, iteration=step.step,
                         at=at if index == len(steps) - 1 else None,
                         time_this_iter_s=step_seconds(step.metrics), pid=None, node_ip=None,
                         hostname=None, metrics=step.metrics, byte_offset=0)


def _rank_updates(trainer: Trainer, lines: list[TrainLogLine]) -> Iterator[TrialUpdate]:
    """A Ray Train rank's lines as updates of its run (the run its log names, in its job):
    each says the rank and its last report; rank 0's reports are the run's steps (as Ray
    Train's own result is rank 0's). Consecutive lines of one run go together."""
    start = 0
    for end in range(1, len(lines) + 1):
        if end < len(lines) and lines[end].run_name == lines[start].run_name:
            continue
        group = lines[start:end]
        first = group[0]
        reports = [line for line in group if line.step is not None]
        sizes = [line.world_size for line in group if line.world_size]
        results = tuple(
            ResultLine(trial_id=train_run_dir(first.run_name), attempt=1, iteration=line.step,
                       at=_at(line.at_ns), time_this_iter_s=None, pid=None, node_ip=None,
                       hostname=None, metrics=line.metrics, byte_offset=0)
            for line in reports if line.rank == 0 and line.step is not None)
        last = reports[-1] if reports else None
        yield replace(trainer.about(first.run_name), results=results, rank=first.rank,
                      world_size=sizes[-1] if sizes else None,
                      rank_step=last.step if last else None,
                      rank_step_at=_at(last.at_ns) if last else None)
        start = end


def _at(at_ns: int | None) -> datetime | None:
    if at_ns is None:
        return None
    try:
        return datetime.fromtimestamp(at_ns / 1e9, UTC)
    except (OverflowError, OSError, ValueError):
        return None
