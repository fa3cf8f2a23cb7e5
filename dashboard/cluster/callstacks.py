"""Where an overdue Ray call's process is: asked once per call when call_overdue opens,
taken in the background by its node's agent (dashboard/agents/callstacks.py registers
the taker in AgentsConfig.ready(): this app does not import that one), and shown in the
incident: "hung in compute_reward (reward.py:42), waiting on a sleep".

Asking writes a row and, after the commit, hands the work to a worker (or the embedded
pool): the detector's poll never waits on py-spy or an agent."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from django.db import IntegrityError, transaction

from dashboard.cluster.models import CallStack
from dashboard.core.background import send_soon

log = logging.getLogger(__name__)
TAKE_TASK = "dashboard.agents.tasks.take_call_stack"
_takers: list[Callable[[int], None]] = []


def register_taker(take: Callable[[int], None]) -> None:
    """The function that takes a CallStack row's stacks (by its pk), in a worker."""
    _takers[:] = [take]


def request_stacks(cluster_id: int, calls: list[tuple[str, str, int | None, str]],
                   now: datetime) -> int:
    """Ask for the stacks of these overdue calls of one cluster, each (task id, name, pid,
    its node's address), that have none yet; how many were asked. Without a taker (no
    agents app) nothing is asked."""
    if not _takers or not calls:
        return 0
    have = set(CallStack.objects.filter(cluster_id=cluster_id, task_id__in=[
        task_id for task_id, *_ in calls]).values_list("task_id", flat=True))
    take, asked = _takers[0], 0
    for task_id, name, pid, node_ip in calls:
        if task_id in have or not pid:
            continue
        try:
            with transaction.atomic():
                row = CallStack.objects.create(cluster_id=cluster_id, task_id=task_id,
                                               name=name, pid=pid, node_ip=node_ip,
                                               requested_at=now)
                transaction.on_commit(lambda pk=row.pk: send_soon(TAKE_TASK, take, pk,
                                                                  expires=60))
        except IntegrityError:  # another detector pass asked first
            continue
        log.warning("stacks of overdue call %s (pid %s on %s) asked", name, pid,
                    node_ip or "an unknown node")
        asked += 1
    return asked
