"""Group commit of agent reports: the reports that arrive while a group is being stored
are the next group: authenticated with one query, decoded, and stored in one transaction
(`ingest_sent`: one upsert and one COPY of all their GPU polls, one push) instead of a
transaction, a dozen statements and a push each. Each report's request waits for its
own answer; a report refused is refused alone.

No timer: at a report or two a second a report is stored at once, alone; the busier
raywatch is, the larger a group (bench/gpu_reports_bench.py). One group at a time per
event loop (a web process has one), on the shared thread pool, whose threads keep
their database connections: the sync view this replaced ran in a thread of its own
under ASGI, and opened a Postgres connection per report.
"""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from channels.db import database_sync_to_async
from django.utils import timezone

from dashboard.agents.ingest import Sent, ingest_sent

GROUP_MAX = 128  # reports in one transaction at most


@dataclass
class _Queue:
    waiting: list[tuple[Sent, asyncio.Future[dict[str, Any]]]] = field(default_factory=list)
    draining: asyncio.Task[None] | None = None


_queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Queue] = \
    weakref.WeakKeyDictionary()


async def store(report: Sent) -> dict[str, Any]:
    """Store `report` with the others that wait with it: its agent's answer, or the
    exception that refuses it."""
    loop = asyncio.get_running_loop()
    queue = _queues.setdefault(loop, _Queue())
    answer: asyncio.Future[dict[str, Any]] = loop.create_future()
    queue.waiting.append((report, answer))
    if queue.draining is None:
        queue.draining = loop.create_task(_drain(queue))
    return await answer


async def _drain(queue: _Queue) -> None:
    try:
        while queue.waiting:
            group, queue.waiting = queue.waiting[:GROUP_MAX], queue.waiting[GROUP_MAX:]
            await _store_group(group, timezone.now())
    finally:
        queue.draining = None


async def _store_group(group: list[tuple[Sent, asyncio.Future[dict[str, Any]]]],
                       now: datetime) -> None:
    try:
        outcomes: list[Any] = await database_sync_to_async(
            ingest_sent, thread_sensitive=False)([r for r, _ in group], now)
    except Exception as exc:  # the pool itself failed: every report hears it
        outcomes = [exc] * len(group)
    for (_, answer), outcome in zip(group, outcomes, strict=True):
        if answer.done():  # its request went away (the agent sends it again)
            continue
        if isinstance(outcome, BaseException):
            answer.set_exception(outcome)
        else:
            answer.set_result(outcome)
