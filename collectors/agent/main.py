"""The agent's loops: collect GPUs and processes (every RAYWATCH_POLL_GPU_S, into the
spool), trial logs (every RAYWATCH_POLL_LOGS_S, into the same spool), send (oldest batch
first, backing off as raywatch says) and commands (a long-poll)."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import math
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

from collectors.agent import AGENT_VERSION, wire
from collectors.agent.client import Reply, Unreachable, call
from collectors.agent.commands import CommandGuard, Outcome, Watched, carry_out
from collectors.agent.config import BACKOFF_CAP_S, MAX_SEND_S, AgentConfig, ConfigError
from collectors.agent.cursors import CursorStore
from collectors.agent.headinfo import HeadWatch
from collectors.agent.spool import Spool, SpoolBusy
from collectors.agent.trial_logs import TrialLogCollector
from collectors.hostinfo import host_name, node_ip_address
from collectors.http import SourceError
from collectors.logscan import default_log_dirs
from collectors.memory import give_back_after
from collectors.nvml import NvmlSource, load_nvml_module
from collectors.procstat import ProcessWatcher, with_ancestors
from collectors.records import GpuPoll

log = logging.getLogger("raywatch.agent")
WAIT_S = 25  # the commands long-poll; the server holds it at most this long
TOKEN_REFUSED_WAIT_S = 60.0
FAST_FOR_S = 30.0  # process snapshots at every poll this long after a signal
GZIP_OVER_BYTES = 1024  # smaller reports go as they are
IDLE_CHECK_S = 5.0  # an empty spool's sender also looks this often (stop, missed wake-up)
# The GPU and trial-log loops tick on one clock (Agent.epoch) and the sender, once woken,
# waits this long for the other loop's batch: one report a second instead of two.
LINGER_S = 0.2
STACKS_AT_ONCE = 2  # py-spy dumps run beside the command loop: a signal never waits on one
FIRST_SNAPSHOT_WAIT_S = 10.0  # a command that comes before the first process snapshot
MAX_PROBLEMS = 10  # reported in agent.problems, each cut to PROBLEM_CHARS
PROBLEM_CHARS = 500


class GpuSource(Protocol):
    def poll(self, now: datetime) -> GpuPoll: ...


class Backoff:
    """Exponential, with jitter, from 1 s to `cap_s` (RAYWATCH_AGENT_BACKOFF_CAP_S);
    Retry-After wins when given."""

    def __init__(self, cap_s: float = BACKOFF_CAP_S) -> None:
        self.failures, self.cap_s = 0, cap_s

    def next(self, retry_after: float | None = None) -> float:
        self.failures += 1
        if retry_after is not None:
            return retry_after
        return min(self.cap_s, 2 ** (self.failures - 1)) * random.uniform(0.8, 1.2)

    def reset(self) -> None:
        self.failures = 0


class Agent:
    def __init__(self, config: AgentConfig, spool: Spool) -> None:
        self.config = config
        self.spool = spool
        self.stop = threading.Event()
        self.node: str | None = None  # the token's node, as raywatch says (hello)
        self.node_ip = config.node_ip or node_ip_address()
        self.per_request = wire.MAX_BATCHES
        self.gpu_error: str | None = None
        self.stack_slots = threading.BoundedSemaphore(STACKS_AT_ONCE)
        self.trial_log_error: str | None = None
        self.gzip = False  # reports go gzipped once raywatch's hello offers it
        self.processes_at = -math.inf  # when the last process snapshot was taken
        self.fast_until = -math.inf  # process snapshots at every poll until then
        self.epoch = time.monotonic()  # the collecting loops' common first tick
        self.head = HeadWatch(config.ray_tmp_dir)  # this node's Ray head, if it runs one
        self.advised_send_s = 0.0  # how long raywatch's last answer asked to gather
        self.watched = Watched()  # what commands may act on: the latest snapshot's processes
        self.guard: CommandGuard | None = None
        # A loop's last failure that it lived through (name -> what), until it succeeds.
        self.failures: dict[str, str] = {}

    # --- collect --------------------------------------------------------------------------
    def collect_forever(self) -> None:
        source = self._gpu_source()
        watcher = ProcessWatcher()
        due = self.epoch
        while not self.stop.is_set():
            with self.surviving("collecting"):
                # The spool holds batches in memory when its disk refuses them: collecting
                # never stops while the command loop keeps the node looking connected.
                self.spool.append(self.collect(source, watcher), wire.timestamp(_now()))
            due = next_tick(due, self.config.poll_s, time.monotonic())
            self.stop.wait(due - time.monotonic())

    @contextlib.contextmanager
    def surviving(self, loop: str) -> Iterator[None]:
        """One turn of a loop: a failure no code foresaw is logged (once while it
        repeats) and reported in agent.problems, and the loop goes on."""
        try:
            yield
        except Exception as exc:
            message = f"{loop} failed: {type(exc).__name__}: {exc}"
            if self.failures.get(loop) != message:
                log.exception("%s", message)
            self.failures[loop] = message
        else:
            self.failures.pop(loop, None)

    def problems(self) -> list[str]:
        """What this agent cannot do now, in words (agent.problems of a report)."""
        found = [self.spool.problem, self.guard.problem if self.guard else None,
                 f"trial logs: {self.trial_log_error}" if self.trial_log_error else None,
                 *self.failures.values()]
        return [p[:PROBLEM_CHARS] for p in found if p][:MAX_PROBLEMS]

    def processes_due(self) -> bool:
        """A process snapshot every RAYWATCH_AGENT_PROCESSES_S (5 s), or at every poll
        for FAST_FOR_S after a signal: raywatch then sees its process leave at once."""
        now = time.monotonic()
        if now < self.fast_until or now - self.processes_at >= self.config.processes_s:
            self.processes_at = now
            return True
        return False

    def collect(self, source: GpuSource | None, watcher: ProcessWatcher) -> list[dict]:
        at = _now()
        records: list[dict[str, Any]] = []
        gpu_pids: list[int] = []
        if source is not None:
            try:
                poll = with_ancestors(source.poll(at))
                records.append(wire.encode_gpu_poll(poll, at))
                gpu_pids = [p.pid for g in poll.gpus for p in g.processes or ()]
                self.gpu_error = None
            except SourceError as exc:
                if exc.message != self.gpu_error:
                    log.warning("GPUs: %s", exc.message)
                self.gpu_error = exc.message
                records.append(wire.encode_gpu_poll(None, at, exc.message))
        if self.processes_due():
            facts = watcher.read(gpu_pids)
            self.watched.saw(facts)
            records.append(wire.encode_processes(facts, at))
        return records

    def _gpu_source(self) -> GpuSource | None:
        if self.config.gpu_source == "off":
            return None
        node = self.config.node_name or host_name()
        try:
            module = load_nvml_module(self.config.nvml_module)
        except SourceError as exc:  # nvidia-ml-py not installed: report that, keep going
            return _Missing(exc.message)
        return NvmlSource(module, node=node, simulated=self.config.gpu_source == "simulated")

    # --- trial logs -----------------------------------------------------------------------
    def trial_logs_forever(self) -> None:
        collector: TrialLogCollector | None = None
        due = self.epoch
        try:
            while not self.stop.is_set():
                try:
                    collector = collector or self.trial_log_collector()
                    stats = collector.poll()
                    give_back_after(max(stats.records, stats.dirs))  # a first read of history
                    self.trial_log_error = None
                except Exception as exc:  # the loop goes on; the next poll retries
                    message = f"{type(exc).__name__}: {exc}"
                    if message != self.trial_log_error:
                        log.warning("trial logs: %s", message)
                    self.trial_log_error = message
                due = next_tick(due, self.config.poll_logs_s, time.monotonic())
                self.stop.wait(due - time.monotonic())
        finally:
            if collector is not None:
                collector.store.close()

    def trial_log_collector(self) -> TrialLogCollector:
        store = CursorStore(self.config.spool_dir / "trial-logs.sqlite3")
        return TrialLogCollector(self.log_roots, self.spool, store, self.config.log_quiet_s,
                                 self.config.log_rescan_s,
                                 rescan_per_poll=self.config.log_rescan_per_poll,
                                 caps=self.config.log_caps,
                                 ray_tmp=self.config.ray_tmp_dir)

    def log_roots(self) -> list[Path]:
        roots = default_log_dirs(Path.home(), self.config.ray_tmp_dir)
        return [*roots, *(d for d in self.config.log_dirs if d not in roots)]

    # --- send -----------------------------------------------------------------------------
    def send_forever(self) -> None:
        backoff = Backoff(self.config.backoff_cap_s)
        while not self.stop.is_set():
            self.spool.appended.clear()  # cleared before looking: no append is missed
            wait: float | None = IDLE_CHECK_S
            with self.surviving("sending"):
                wait = self.send_once(backoff)
            if wait is None:  # nothing spooled: sleep until something is
                if self.spool.appended.wait(IDLE_CHECK_S):
                    self.stop.wait(self.send_s or min(LINGER_S, self.config.poll_s / 4))
            else:
                self.stop.wait(wait)

    def send_once(self, backoff: Backoff) -> float | None:
        """Send the oldest batches; how long to wait before the next try (None: the
        spool is empty)."""
        batches = self.spool.oldest_raw(self.per_request, wire.MAX_BODY_BYTES // 2)
        if not batches:
            return None
        try:
            reply = self._post_report([raw for _, raw in batches])
        except Unreachable as exc:
            wait = backoff.next()
            log.warning("%s; %d batches spooled, next try in %.0f s", exc,
                        self.spool.stats()["batches"], wait)
            return wait
        return self._after_report(reply, batches, backoff)

    def _post_report(self, batches: list[bytes]) -> Reply:
        agent = {"version": AGENT_VERSION, "node": self.config.node_name,
                 "node_ip": self.node_ip, "hostname": host_name(), "spool": self.spool.stats(),
                 "sent_at": wire.timestamp(_now()),  # with each batch's `at`: how old it is
                 "problems": self.problems()}
        if head := self.head.current():
            agent["head"] = head  # this node runs a Ray head: its cluster, announced
        return call("POST", f"{self.config.api}report", self.config.token,
                    wire.encode_report(batches, agent),
                    self.config.timeout_s, GZIP_OVER_BYTES if self.gzip else None)

    def _after_report(self, reply: Reply, batches: list[tuple[int, bytes]],
                      backoff: Backoff) -> float:
        if reply.status == 200:
            backoff.reset()
            body = reply.body or {}
            self.spool.remove([*body.get("stored", []), *body.get("duplicate", [])])
            if body.get("skipped"):
                log.warning("raywatch skipped records it does not know: %s (upgrade it)",
                            body["skipped"])
            self._take_advice(body.get("send_s"))
            if self.send_s and self.spool.stats()["batches"] < self.per_request:
                # Gather the next report's polls; a backlog (a full report's worth
                # spooled) goes out report after report.
                return self.send_s
            return 0.0
        if reply.status == 413:
            self.per_request = max(1, len(batches) // 2)
            return 0.0
        seq = (reply.body or {}).get("seq") if isinstance(reply.body, dict) else None
        if reply.status in (400, 403) and seq is not None:  # never storable: drop it, say so
            log.error("raywatch refused batch %s (%s): %s; dropped", seq, reply.status,
                      reply.detail)
            self.spool.remove([seq], rejected=True)
            return 0.0
        if reply.status in (400, 401, 403):  # the token or this agent's identity: keep all
            log.error("raywatch refused this agent (%s): %s; spooling, retrying in %.0f s",
                      reply.status, reply.detail, TOKEN_REFUSED_WAIT_S)
            return TOKEN_REFUSED_WAIT_S
        wait = backoff.next(reply.retry_after)
        log.warning("raywatch answered %s (%s); next try in %.1f s", reply.status,
                    reply.detail, wait)
        return wait

    @property
    def send_s(self) -> float:
        """How long to gather before a report: RAYWATCH_AGENT_SEND_S, else raywatch's
        advice."""
        return self.config.send_s if self.config.send_s is not None else self.advised_send_s

    def _take_advice(self, advice: object) -> None:
        """raywatch's `send_s` (an older raywatch sends none: send at once)."""
        value = float(advice) if isinstance(advice, int | float) and not isinstance(
            advice, bool) and math.isfinite(advice) else 0.0
        value = min(max(value, 0.0), MAX_SEND_S)
        if value != self.advised_send_s and self.config.send_s is None:
            log.info("raywatch asks for a report every %.1f s (0: as polls come)", value)
        self.advised_send_s = value

    # --- commands -------------------------------------------------------------------------
    def commands_forever(self) -> None:
        backoff = Backoff(self.config.backoff_cap_s)
        while not self.stop.is_set():
            wait = self.config.backoff_cap_s
            with self.surviving("taking commands"):
                try:
                    self.guard = self.guard or self._guard()
                    wait = self.fetch_commands(self.guard, backoff)
                except Unreachable as exc:
                    wait = backoff.next()
                    log.debug("commands: %s", exc)
            self.stop.wait(wait)

    def _guard(self) -> CommandGuard:
        """Learn which node the token is for (hello) before taking any command."""
        reply = call("GET", f"{self.config.api}hello", self.config.token,
                     timeout=self.config.timeout_s)
        if reply.status != 200:
            raise Unreachable(f"hello answered {reply.status}: {reply.detail}")
        self.node = str(reply.body["node"])
        self.gzip = "gzip" in (reply.body.get("encodings") or ())
        if self.config.node_name and self.config.node_name != self.node:
            log.error("RAYWATCH_NODE_NAME=%s but the token is for node %s: stopping",
                      self.config.node_name, self.node)
            self.stop.set()
        log.info("agent %s for node %s, reporting to %s", AGENT_VERSION, self.node,
                 self.config.url)
        return CommandGuard(self.node, wire.command_key(self.config.token),
                            self.config.spool_dir / "commands-seen.json")

    def fetch_commands(self, guard: CommandGuard, backoff: Backoff) -> float:
        reply = call("GET", f"{self.config.api}commands?wait={WAIT_S}", self.config.token,
                     timeout=WAIT_S + self.config.timeout_s)
        if reply.status == 401:
            return TOKEN_REFUSED_WAIT_S
        if reply.status != 200:
            return backoff.next(reply.retry_after)
        backoff.reset()
        for command in (reply.body or {}).get("commands", []):
            if command.get("kind") == wire.STACK:
                self.handle_beside(guard, command)
            else:
                self.handle(guard, command)
        return 0.0

    def handle(self, guard: CommandGuard, command: dict) -> Outcome:
        refused = guard.check(command, _now())
        if not refused:  # just started: what it watches is known from its first snapshot
            self.watched.taken.wait(FIRST_SNAPSHOT_WAIT_S)
        outcome = (Outcome("refused", refused) if refused
                   else carry_out(command, self.watched, self.config.py_spy))
        if command.get("kind") == wire.SIGNAL and outcome.outcome != "refused":
            self.fast_until = time.monotonic() + FAST_FOR_S
        shown = outcome.detail if outcome.outcome != "taken" else \
            f"{len(outcome.detail)} characters"
        log.warning("command %s (%s %s): %s: %s", command.get("id"), command.get("kind"),
                    command.get("payload"), outcome.outcome, shown)
        self._post_result(command, outcome)
        return outcome

    def handle_beside(self, guard: CommandGuard, command: dict) -> None:
        """A stack takes py-spy up to its timeout: in a thread of its own, a few at once."""
        if not self.stack_slots.acquire(blocking=False):
            refused = guard.check(command, _now()) or (
                f"the agent is taking {STACKS_AT_ONCE} stacks already; ask again shortly")
            self._post_result(command, Outcome("refused", refused))
            return

        def run() -> None:
            try:
                self.handle(guard, command)
            finally:
                self.stack_slots.release()

        threading.Thread(target=run, name=f"stack-{command.get('id')}", daemon=True).start()

    def _post_result(self, command: dict, outcome: Outcome) -> None:
        """A result matters (an action waits for it): retried while the command lives."""
        body = {"version": wire.VERSION, "nonce": command.get("nonce"),
                "outcome": outcome.outcome, "detail": outcome.detail,
                "at": wire.timestamp(_now())}
        url = f"{self.config.api}commands/{command.get('id')}/result"
        for attempt in range(5):
            try:
                reply = call("POST", url, self.config.token, body, self.config.timeout_s)
                if reply.status < 500 and reply.status != 429:
                    return
            except Unreachable:
                pass
            self.stop.wait(2**attempt)

    # --- run ------------------------------------------------------------------------------
    def run(self) -> None:
        sender = threading.Thread(target=self.send_forever, name="send_forever", daemon=True)
        sender.start()
        threading.Thread(target=self.commands_forever, name="commands_forever",
                         daemon=True).start()
        # Not a daemon: a poll in progress ends with its records spooled and its cursors
        # saved, so a stopped agent resends nothing.
        trial_logs = threading.Thread(target=self.trial_logs_forever, name="trial_logs")
        if self.config.trial_logs:
            trial_logs.start()
        try:
            self.collect_forever()
        finally:  # never half an agent: one that stops collecting stops taking commands
            self.stop.set()
            if trial_logs.is_alive():
                trial_logs.join()
            # A report on its way ends with its answer: the batches raywatch stored leave
            # the spool, so a stop resends none of them (bounded: raywatch may be down).
            self.spool.appended.set()  # an idle sender wakes to see the stop
            sender.join(self.config.timeout_s + 1)


def next_tick(due: float, period: float, now: float) -> float:
    """The next tick after `now` on the grid `due + k * period`: a poll that overran skips
    the ticks it missed and stays in step with the other loop (see LINGER_S)."""
    due += period
    if due <= now:
        due += math.ceil((now - due) / period + 1e-9) * period
    return due


class _Missing:
    """A GPU source that says why there is none (no nvidia-ml-py on this node)."""

    def __init__(self, message: str) -> None:
        self.message = message

    def poll(self, now: datetime) -> GpuPoll:
        raise SourceError(self.message)


def _now() -> datetime:
    return datetime.now(UTC)


PR_SET_DUMPABLE = 4  # <linux/prctl.h>
TOKEN_VARIABLES = ("RAYWATCH_AGENT_TOKEN",)


def keep_secrets() -> str | None:
    """Make the agent's token its own (issue 43, M4): the process is made non-dumpable, so
    its /proc/<pid>/environ, mem and fds are root's and a Ray worker of the same uid on
    the node cannot read the token there or ptrace the agent; and the token leaves the
    environment its children (py-spy) inherit. What could not be done, or None."""
    for name in TOKEN_VARIABLES:
        os.environ.pop(name, None)
    if not sys.platform.startswith("linux"):
        return "not Linux: the process stays dumpable"
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
            return f"prctl(PR_SET_DUMPABLE, 0) failed: errno {ctypes.get_errno()}"
    except (OSError, AttributeError) as exc:
        return f"prctl unavailable: {exc}"
    return None


def main() -> None:
    logging.basicConfig(level=os.environ.get("RAYWATCH_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = AgentConfig.from_env()
        spool = Spool(config.spool_dir, config.spool_max_bytes)
    except (ConfigError, SpoolBusy) as exc:
        sys.exit(f"raywatch agent: {exc}")
    if (kept := keep_secrets()) is not None:
        log.warning("the agent's token may be readable by processes of its uid: %s", kept)
    agent = Agent(config, spool)

    def stop(signum: int, frame: FrameType | None) -> None:
        agent.stop.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info("raywatch agent %s: spool %s (stream %s, %d batches waiting)", AGENT_VERSION,
             config.spool_dir, spool.stream, spool.stats()["batches"])
    agent.run()
    spool.close()
