"""Where an overdue Ray call's process is: asked once per call when call_overdue opens,
taken in the background by its node's agent (dashboard/agents/callstacks.py registers
the taker in AgentsConfig.ready(): this app does not import that one), and shown in the
incident: "hung in compute_reward (reward.py:42), waiting on a sleep".

Asking writes a row and, after the commit, hands the work to a worker (or the embedded
pool): the detector's poll never waits on py-spy or an agent."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Count

from dashboard.cluster.models import CallStack, RayCall
from dashboard.core.background import send_soon

log = logging.getLogger(__name__)
TAKE_TASK = "dashboard.agents.tasks.take_call_stack"
_takers: list[Callable[[int], None]] = []


def register_taker(take: Callable[[int], None]) -> None:
    """The function that takes a CallStack row's stacks (by its pk), in a worker."""
    _takers[:] = [take]


def request_stacks(cluster_id: int, calls: list[tuple[str, str, int | None, str, str]],
                   now: datetime) -> int:
    """Ask for the stacks of these overdue calls of one cluster, each (task id, name, pid,
    its node's address, its job), that have none yet and whose node is known (a stack is
    taken once a call); how many were asked. A node's agent is asked for at most
    CALL_STACKS_PER_NODE_MIN calls' stacks a minute: the others wait for a later pass,
    each job's first call before any job's second. Without a taker (no agents app)
    nothing is asked."""
    if not _takers or not calls:
        return 0
    have = set(CallStack.objects.filter(cluster_id=cluster_id, task_id__in=[
        task_id for task_id, *_ in calls]).values_list("task_id", flat=True))
    wanted = [c for c in calls if c[0] not in have and c[2] and c[3]]
    if not wanted:  # a call Ray lists before its node: asked once it says where
        return 0
    left = budget_left({node_ip for *_, node_ip, _ in wanted}, now)
    take, asked = _takers[0], 0
    for task_id, name, pid, node_ip, _ in by_job_in_turn(wanted):
        if left[node_ip] <= 0:
            continue
        try:
            with transaction.atomic():
                row = CallStack.objects.create(cluster_id=cluster_id, task_id=task_id,
                                               name=name, pid=pid, node_ip=node_ip,
                                               requested_at=now)
                transaction.on_commit(lambda pk=row.pk: send_soon(
                    TAKE_TASK, take, pk, expires=60, queue=settings.STACKS_QUEUE))
        except IntegrityError:  # another detector pass asked first
            continue
        log.warning("stacks of overdue call %s (pid %s on %s) asked", name, pid, node_ip)
        left[node_ip] -= 1
        asked += 1
    return asked


def budget_left(node_ips: set[str], now: datetime) -> Counter[str]:
    """How many more calls' stacks each node's agent may be asked for this minute (any
    cluster's: one agent takes them)."""
    spent = Counter(dict(CallStack.objects.filter(
        node_ip__in=node_ips, requested_at__gt=now - timedelta(seconds=60))
        .values("node_ip").annotate(n=Count("id")).values_list("node_ip", "n")))
    return Counter({ip: settings.CALL_STACKS_PER_NODE_MIN - spent[ip] for ip in node_ips})


def by_job_in_turn(calls: list[tuple[str, str, int | None, str, str]]
                   ) -> list[tuple[str, str, int | None, str, str]]:
    """The calls with each job's first before any job's second, then the seconds, ...
    (in their order within a job): a budget spent on one run's many calls leaves none
    without evidence."""
    nth: Counter[str] = Counter()
    turns = []
    for call in calls:
        turns.append(nth[call[4]])
        nth[call[4]] += 1
    return [call for _, _, call in sorted(zip(turns, range(len(calls)), calls, strict=True))]


def awaited_calls(cluster_id: int, task_ids: list[str]) -> dict[str, RayCall]:
    """The call each of these calls waits for in `ray.get`, by task id: of its job's
    calls running now, the one that began after it (a call waits on calls it started,
    or that started after it) and has run longest. A guess Ray's lists cannot confirm
    (they do not say who waits on which object), said as such where it is shown."""
    calls = list(RayCall.objects.filter(cluster_id=cluster_id, task_id__in=task_ids))
    if not calls:
        return {}
    jobs = {c.job_id for c in calls if c.job_id}
    running = list(RayCall.objects.filter(cluster_id=cluster_id, job_id__in=jobs)
                   .order_by("first_seen_at", "id"))
    found = {}
    for call in calls:
        after = next((r for r in running if r.job_id == call.job_id and r.pk != call.pk
                      and r.first_seen_at >= call.first_seen_at
                      and (r.pid, r.node_id) != (call.pid, call.node_id)), None)
        if after is not None:
            found[call.task_id] = after
    return found
