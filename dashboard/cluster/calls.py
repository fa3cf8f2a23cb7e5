"""The calls Ray runs now, and how long calls of each name usually take.

In an RL framework a step is a chain of Ray actor calls (generate, reward, log-probs,
update) driven by a trainer actor, and its metrics arrive once, at the step's end: while
a call hangs nothing is written, and only Ray knows which call runs and since when. Each
poll mirrors Ray's running calls (GET /api/v0/tasks?state=RUNNING); a call it no longer
lists has ended, and the time raywatch saw it run joins its name's last CALL_HISTORY
durations (CallTiming), whose median is that name's usual duration. The detector
(dashboard/incidents/resource_rules.call_overdue) holds each running call against it.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.conf import settings
from django.db import transaction

from collectors.raylists import dropped_task_events
from collectors.records import CallRecord
from dashboard.cluster.models import CallTiming, Cluster, RayCall
from dashboard.cluster.views_data import jobs_payload
from dashboard.core.push import JOBS_GROUP, publish

# cluster pk -> (Ray's count of dropped task events, the count before it last grew, when)
_dropped: dict[int, tuple[int, int, datetime | None]] = {}
DROPPED_SHOWN_S = 600.0


def ingest_calls(records: Iterable[CallRecord], now: datetime, cluster: Cluster, *,
                 complete: bool = True, new_session: bool = False) -> None:
    """Mirror the running calls of `cluster`. Those Ray stopped listing have ended: their
    durations are learned, unless Ray cut its list at its row limit or the head restarted
    (its calls ended with the session, not by finishing). A call missing from a cut list
    may still run, but nothing is known of it: it is dropped, never held as running (it
    would seem to run on, and be called overdue), and counted again when Ray lists it."""
    incoming = {(r.task_id, r.attempt): r for r in records}
    with transaction.atomic():
        existing = {(c.task_id, c.attempt): c for c in RayCall.objects.filter(cluster=cluster)}
        RayCall.objects.bulk_create([
            RayCall(cluster=cluster, task_id=r.task_id, attempt=r.attempt, name=r.name,
                    kind=r.kind, job_id=r.job_id or "", actor_id=r.actor_id or "",
                    node_id=r.node_id or "", pid=r.pid, first_seen_at=now, last_seen_at=now)
            for key, r in incoming.items() if key not in existing], batch_size=500)
        still = [c.pk for key, c in existing.items() if key in incoming]
        if still:  # "still running" is one cheap UPDATE, whatever their number
            RayCall.objects.filter(pk__in=still).update(last_seen_at=now)
        started = any(key not in existing for key in incoming)
        ended = [c for key, c in existing.items() if key not in incoming]
        if ended and complete and not new_session:
            learn(cluster, ended, now)
        RayCall.objects.filter(pk__in=[c.pk for c in ended]).delete()
        if started or ended:  # the Jobs page lists the calls (their clocks tick there)
            publish(JOBS_GROUP, "jobs", jobs_payload)


def learn(cluster: Cluster, ended: list[RayCall], now: datetime) -> None:
    """Add each ended call's duration to its name's history: from when raywatch first saw
    it run to halfway between the poll that last did and this one."""
    by_name: dict[str, list[float]] = {}
    for call in ended:
        end = call.last_seen_at + (now - call.last_seen_at) / 2
        by_name.setdefault(call.name, []).append((end - call.first_seen_at).total_seconds())
    if not by_name:
        return
    rows = {t.name: t for t in CallTiming.objects.filter(cluster=cluster, name__in=by_name)}
    keep = settings.CALL_HISTORY
    for name, durations in by_name.items():
        row = rows.get(name) or CallTiming(cluster=cluster, name=name, durations=[])
        row.durations = [*row.durations, *durations][-keep:]
        row.updated_at = now
        row.save()


def dropped_lately(cluster: Cluster, reply: dict, now: datetime) -> list[str]:
    """What the status strip says of task events Ray dropped (its buffers were full: a
    running call may be missing from the list) for DROPPED_SHOWN_S after the count last
    grew. Ray's count is of every event dropped since its cluster started."""
    count = dropped_task_events(reply)
    if count is None:
        return []
    before, since, grew_at = _dropped.get(cluster.pk, (count, count, None))
    shown = grew_at is not None and (now - grew_at).total_seconds() <= DROPPED_SHOWN_S
    if count > before:
        since, grew_at, shown = (since if shown else before), now, True
    elif count < before:  # a new session counts from zero
        since, grew_at, shown = count, None, False
    _dropped[cluster.pk] = (count, since, grew_at)
    if not shown:
        return []
    return [f"Ray dropped {count - since:,} task events lately ({count:,} since its cluster "
            "started; its buffers were full): a running call may be missing from "
            "raywatch's list (docs/ray-facts.md, task events)"]
