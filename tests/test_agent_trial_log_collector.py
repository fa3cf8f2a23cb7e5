"""The agent's trial-log collector on its own (no raywatch, no database): finished
history costs a poll almost nothing once settled by Tune's state or error.txt alone;
a trial Tune says is running stays watched until its driver is plainly gone; a long
history goes out in batches a request can carry, over several polls, resumed after a
restart without a line lost or sent twice, and never overflows the spool."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from collectors.agent import trial_logs, wire
from collectors.agent.cursors import CursorStore
from collectors.agent.spool import Spool
from collectors.agent.trial_logs import TrialLogCollector
from collectors.agent.trialwire import decode_trial_log
from tests.test_quiet_history import (
    EXPERIMENTS,
    QUIET_TRIALS,
    counting,
    result_line,
    trial_id,
    write_history,
    write_state,
    write_trial,
)


class Node:
    """A node's disk: its log root and the agent's spool dir, and a wall clock to move."""

    def __init__(self, tmp_path: Path, spool_bytes: int = 256 << 20) -> None:
        self.root = tmp_path / "ray_results"
        self.root.mkdir()
        self.spool_dir = tmp_path / "spool"
        self.spool = Spool(self.spool_dir, spool_bytes)
        self.now = time.time()
        self.collector = self.start()

    def start(self, quiet_after_s: float = 0.0) -> TrialLogCollector:
        store = CursorStore(self.spool_dir / "trial-logs.sqlite3")
        return TrialLogCollector(lambda: [self.root], self.spool, store, quiet_after_s,
                                 rescan_s=3600.0, wall=lambda: self.now)

    def sent(self) -> list[dict]:
        """Every trial_log record spooled so far, oldest first; the spool is then empty
        (as after raywatch acknowledged it)."""
        batches = self.spool.oldest(10**6, 1 << 40)
        self.spool.remove([b["seq"] for b in batches])
        return [r for b in batches for r in b["records"] if r["kind"] == wire.TRIAL_LOG]


def results(records: list[dict]) -> list[tuple[str, int]]:
    return [(r["trial_id"], x["iteration"]) for r in records for x in r["results"]]


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path)


def test_settled_history_costs_a_poll_almost_nothing(node: Node) -> None:
    write_history(node.root, failures=True)  # Tune's state: TERMINATED, or ERROR + error.txt
    node.collector.poll()
    first = node.sent()
    assert len(set(results(first))) == QUIET_TRIALS * 3
    assert sum(r["tune_status"] is not None for r in first) == QUIET_TRIALS
    assert sum(r["error"] is not None for r in first) == QUIET_TRIALS // 2
    node.collector.poll()  # quiet and finished: settled
    with counting(node.root) as counts:
        stats = node.collector.poll()
    # The root, the experiments and their state files, a share for the slow rescan.
    assert counts["fs"] < QUIET_TRIALS // 4, counts
    assert stats.checked <= 1 and node.sent() == []

    # What is new among them is still found: a trial added to an old experiment.
    write_trial(node.root / "search_1", trial_id(1, 900), lines=2)
    node.collector.poll()
    assert results(node.sent()) == [(trial_id(1, 900), 1), (trial_id(1, 900), 2)]


def test_a_trial_tune_calls_running_is_watched_until_its_driver_is_gone(node: Node) -> None:
    tids = [trial_id(0, n) for n in range(3)]
    for tid in tids:
        write_trial(node.root / "search_0", tid)
    write_state(node.root / "search_0", tids, status="RUNNING")
    for _ in range(3):
        node.collector.poll()
    assert node.collector.poll().checked >= len(tids)  # still watched every poll
    node.sent()

    # A driver killed for good leaves its state file unchanged: after a long while the
    # trials are settled too (the slow rescan still visits them).
    node.now += trial_logs.STALE_QUIET * 60 + 1
    node.collector.scanner.quiet_after_s = 60.0
    node.collector.scanner.clock = lambda: 10**9  # every trial dir long quiet
    node.collector.poll()
    assert node.collector.poll().checked <= 1


def test_a_long_history_goes_in_request_sized_batches_over_polls_and_restarts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trial_logs, "POLL_BYTES", 1 << 20)
    node = Node(tmp_path, spool_bytes=16 << 20)
    tid = trial_id(0, 1)
    path = write_trial(node.root / "search_0", tid, lines=0)
    with (path / "result.json").open("w") as out:
        for i in range(1, 12001):
            out.write(result_line(tid, i))  # about 3 MB
    # And one line longer than a read (256 KiB), with more metrics than are kept.
    huge = json.loads(result_line(tid, 12001))
    huge.update({f"m/{'k' * 190}/{n}": float(n) for n in range(1500)})
    with (path / "result.json").open("a") as out:
        out.write(json.dumps(huge) + "\n")

    sent: list[dict] = []
    first = node.collector.poll()
    assert first.backlog == 1 and first.bytes_read <= (1 << 20) + (256 << 10)
    for batch in node.spool.oldest(10**6, 1 << 40):
        size = len(json.dumps(batch, separators=(",", ":")))
        assert size < wire.MAX_BODY_BYTES // 2, size  # several fit one request
    sent += node.sent()

    node.collector.store.close()  # the agent restarts halfway
    node.collector = node.start()
    for _ in range(6):
        node.collector.poll()
        sent += node.sent()
    assert results(sent) == [(tid, i) for i in range(1, 12002)]
    last = decode_trial_log(sent[-1], "gpu-a").results[-1]
    assert last.iteration == 12001 and len(last.metrics) == 500


def test_history_waits_for_the_spool_instead_of_overflowing_it(tmp_path: Path) -> None:
    """raywatch down or behind: the agent reads no further while its spool is filling,
    so a long history never pushes batches out of it."""
    node = Node(tmp_path, spool_bytes=2 << 20)
    for exp in range(EXPERIMENTS):
        for n in range(40):
            write_trial(node.root / f"search_{exp}", trial_id(exp, n), lines=40)
    node.collector.poll()
    assert node.collector.backlog, "the spool's quarter is full before the history is read"
    assert node.spool.stats()["dropped"] == 0
    sent = node.sent()  # raywatch catches up
    for _ in range(20):
        node.collector.poll()
        sent += node.sent()
    assert len(results(sent)) == len(set(results(sent))) == EXPERIMENTS * 40 * 40
    assert node.spool.stats()["dropped"] == 0


def test_a_restart_over_a_read_history_keeps_no_cursor_in_memory(node: Node) -> None:
    # A history read once, then the reader restarts (its cursors are in the store): its
    # first pass looks at every trial dir, and reads nothing again.
    write_history(node.root, failures=True)
    node.collector.poll()
    node.sent()
    node.collector.store.close()
    node.collector = node.start(quiet_after_s=3600.0)  # none settles during the test
    node.collector.poll()
    assert node.sent() == []
    # Seen once and unchanged: their cursors stay in the store, not in memory (a restart
    # over 100,000 trial dirs held ~1 KB each until they settled).
    assert node.collector.files == {} and node.collector.sent == {}

    # A trial that changes is watched: its cursors are kept while it runs, and what it
    # writes is read once.
    running = node.root / "search_0" / next(p.name for p in (node.root / "search_0").iterdir()
                                            if p.is_dir())
    tid = running.name.split("_")[2] + "_" + running.name.split("_")[3]
    for step in (101, 102):
        with (running / "result.json").open("a") as out:
            out.write(result_line(tid, step))
        node.collector.poll()
        assert results(node.sent()) == [(tid, step)]
    assert str(running / "result.json") in node.collector.files


def test_a_settled_experiments_tune_state_leaves_memory_until_it_is_asked_again(
        tmp_path: Path) -> None:
    from collectors.tunelogs import TuneStates

    now = [0.0]
    states = TuneStates(clock=lambda: now[0])
    tids = [trial_id(0, n) for n in range(3)]
    write_state(tmp_path, tids)
    assert states.get(tmp_path)[tids[0]].status == "TERMINATED"
    now[0] = 30.0
    states.forget_idle(60.0)
    assert str(tmp_path) in states._cache  # asked within the minute: still held
    now[0] = 100.0
    states.forget_idle(60.0)  # asked last at 30 s
    assert states._cache == {}
    write_state(tmp_path, tids, status="ERROR")  # read again when asked: as it is now
    assert {s.status for s in states.get(tmp_path).values()} == {"ERROR"}


def test_once_a_long_first_pass_settled_its_tables_give_their_room_back(node: Node) -> None:
    tids = [trial_id(0, n) for n in range(1100)]
    for tid in tids:
        write_trial(node.root / "search_0", tid, lines=1)
    write_state(node.root / "search_0", tids)
    first = node.collector.poll()  # all new: all hot
    held = sys.getsizeof(node.collector.scanner.hot)
    polls = [node.collector.poll() for _ in range(3)]  # settled, the next scan shrinks
    assert node.collector.scanner.hot == {}
    # A dict keeps its table when emptied: ~36 KB for 1,100 paths here, ~4.7 MB at
    # 100,000, for the process's life. So does the experiment's set of the subdirectories
    # it had not yet told trial dirs or not, when it was first listed.
    assert sys.getsizeof(node.collector.scanner.hot) < held // 10
    experiment = node.collector.scanner.containers[node.root / "search_0"]
    assert experiment.containers == set() and sys.getsizeof(experiment.containers) < 1024
    # The polls that went over every trial dir say so, and only they: what they freed is
    # handed back (collectors.memory), not at every quiet poll after.
    assert [first.dirs, *(p.dirs for p in polls)] == [1100, 1100, 0, 0]

    node.collector.store.close()
    node.collector = node.start()  # a restart: every dir seen, then settled, once more
    assert [node.collector.poll().dirs for _ in range(3)] == [1100, 1100, 0]
