"""Automatic stacks are bounded and kept out of an operator's way (issue 43, L5): many calls
overdue at once ask a node's agent for a bounded number of stacks a minute, each job's
first call before any job's second; a signal waiting beside a pile of stack commands is
handed out first; and stacks are taken on threads of their own, so an action sent while
every stack thread waits on an agent still runs at once."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.utils import timezone

from dashboard.agents import tokens
from dashboard.agents.commands import create_signal, create_stack, hand_out
from dashboard.cluster import callstacks
from dashboard.cluster.models import CallStack, settings_cluster_pk
from dashboard.core.background import run_soon, send_soon
from tests.patience import patient

pytestmark = [pytest.mark.both_backends, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def no_taking(monkeypatch):  # type: ignore[no-untyped-def]
    """A taker that takes nothing: what is asked is the rows, not the stacks."""
    monkeypatch.setattr(callstacks, "_takers", [lambda pk: None])


def test_overdue_calls_ask_a_bounded_number_of_stacks_a_minute_each_job_in_turn(
        settings, no_taking) -> None:  # type: ignore[no-untyped-def]
    settings.CALL_STACKS_PER_NODE_MIN = 5
    now = timezone.now()
    # One run's 40 calls overdue at once on 10.0.0.1, then two other runs' one call each,
    # and one call on another node.
    calls = [(f"big-{i}", "WorkerDict.generate", 1000 + i, "10.0.0.1", "job-big")
             for i in range(40)]
    calls += [("small-a", "Reward.compute", 2001, "10.0.0.1", "job-a"),
              ("small-b", "Reward.compute", 2002, "10.0.0.1", "job-b"),
              ("other-node", "WorkerDict.generate", 3001, "10.0.0.2", "job-big")]
    cluster = settings_cluster_pk()
    assert callstacks.request_stacks(cluster, calls, now) == 6
    asked = set(CallStack.objects.filter(node_ip="10.0.0.1").values_list("task_id", flat=True))
    # Each job's first call before any job's second: the small runs are not starved.
    assert {"small-a", "small-b", "big-0"} <= asked and len(asked) == 5
    assert CallStack.objects.filter(node_ip="10.0.0.2").count() == 1  # its own budget
    # Within the minute: nothing more of that node; a minute on, the next five.
    assert callstacks.request_stacks(cluster, calls, now + timedelta(seconds=30)) == 0
    assert callstacks.request_stacks(cluster, calls, now + timedelta(seconds=61)) == 5
    assert CallStack.objects.filter(node_ip="10.0.0.1").count() == 10


def test_a_signal_is_handed_out_before_the_stacks_that_wait() -> None:
    now = timezone.now()
    token = tokens.issue("gpu-1", None, now, "10.0.0.1")[0]
    for i in range(30):  # a burst: more than one fetch hands out
        create_stack("gpu-1", 5000 + i, 1.0, now)
    signal = create_signal(None, "gpu-1", 4242, "SIGTERM", 1234.5, now + timedelta(seconds=1))
    given = hand_out(token, now + timedelta(seconds=2))
    assert given[0]["id"] == signal.pk and given[0]["kind"] == "signal"
    assert all(g["kind"] == "stack" for g in given[1:])


def test_an_action_runs_at_once_while_every_stack_thread_waits(settings) -> None:  # type: ignore[no-untyped-def]
    settings.EMBEDDED, settings.STACK_THREADS = True, 2
    release = threading.Event()
    ran = threading.Event()
    from dashboard.core import background
    background._pool.cache_clear()
    try:
        for _ in range(settings.NOTIFY_THREADS * 2):  # more stacks than any pool's threads
            send_soon("take", lambda: release.wait(patient(30)), queue=settings.STACKS_QUEUE)
        run_soon(_Task(ran.set), queue=settings.NOTIFY_QUEUE)
        assert ran.wait(patient(5)), "the action waited behind the stacks"
    finally:
        release.set()
        background.finish()
        background.stopping.winding_down.clear()


class _Task:
    """What run_soon runs on the embedded default: a task's `run` and `name`."""

    name = "dashboard.actions.tasks.run_action"

    def __init__(self, fn) -> None:  # type: ignore[no-untyped-def]
        self.run = fn
