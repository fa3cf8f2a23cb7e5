"""The calls Ray runs now, and how long calls of each name usually take.

In an RL framework a step is a chain of Ray actor calls (generate, reward, log-probs,
update) driven by a trainer actor, and its metrics arrive once, at the step's end: while
a call hangs nothing is written, and only Ray knows which call runs and since when. Each
poll mirrors Ray's running calls (GET /api/v0/tasks?state=RUNNING); a call it no longer
lists has ended, and the time raywatch saw it run joins the last CALL_HISTORY durations
of its name in its job (CallTiming), whose median is that name's usual duration there
(the job's first call of a name is not learned: a validation before training, a
warm-up). The detector
(dashboard/incidents/resource_rules.call_overdue) holds each running call against it.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q

from collectors.raylists import dropped_task_events
from collectors.records import CallRecord
from collectors.runformats import TRAINER_CLASSES
from dashboard.cluster.models import CallTiming, Cluster, RayCall
from dashboard.cluster.views_data import calls_payload, jobs_payload
from dashboard.core.bulk import fit_values
from dashboard.core.push import JOBS_GROUP, job_group, publish

# A job's histories no call of it has added to for this long are forgotten (its run
# ended): they would only grow the table, a job and name at a time, over months.
TIMING_KEEP = timedelta(days=7)
# cluster pk -> (Ray's count of dropped task events, the count before it last grew, when)
_dropped: dict[int, tuple[int, int, datetime | None]] = {}
DROPPED_SHOWN_S = 600.0


def ingest_calls(records: Iterable[CallRecord], now: datetime, cluster: Cluster, *,
                 complete: bool = True, new_session: bool = False,
                 previous_poll: datetime | None = None) -> None:
    """Mirror the running calls of `cluster`. Those Ray stopped listing have ended: their
    durations are learned, unless Ray cut its list at its row limit or the head restarted
    (its calls ended with the session, not by finishing). A call missing from a cut list
    may still run, but nothing is known of it: it is dropped, never held as running (it
    would seem to run on, and be called overdue), and counted again when Ray lists it.
    `previous_poll`: when the cluster answered before (a call that ended did so between
    then and now). Nothing is written of the calls that still run."""
    incoming = {(fit_values(RayCall, {"task_id": r.task_id})["task_id"], r.attempt): r
                for r in records}  # keyed as their rows are
    with transaction.atomic():
        rows = RayCall.objects.filter(cluster=cluster)
        # Keys only: 10,000 running calls as model rows cost a poll most of a second.
        existing = {(task, attempt): pk for pk, task, attempt in
                    rows.values_list("pk", "task_id", "attempt")}
        gone = [pk for key, pk in existing.items() if key not in incoming]
        ended: list[RayCall] = []
        if gone:
            ended = list(RayCall.objects.filter(pk__in=gone).only("name", "first_seen_at",
                                                                   "job_id"))
            if complete and not new_session:
                learn(cluster, ended, now, previous_poll or now)
            RayCall.objects.filter(pk__in=gone).delete()
        began = halfway(previous_poll, now) if not new_session else now
        new = [RayCall(cluster=cluster, first_seen_at=began, **fit_values(RayCall, {
                   "task_id": r.task_id, "attempt": r.attempt, "name": r.name,
                   "kind": r.kind, "job_id": r.job_id or "", "actor_id": r.actor_id or "",
                   "node_id": r.node_id or "", "pid": r.pid,
                   "parent_task_id": r.parent_task_id or ""}))
               for key, r in incoming.items() if key not in existing]
        RayCall.objects.bulk_create(new, batch_size=1000)
        placed(cluster, incoming)
        if new or gone:  # the Jobs page lists the calls (their clocks tick there)
            publish(JOBS_GROUP, "jobs", jobs_payload)
        # and the page of the run each job's trainer drives lists its job's calls
        for job_id in {c.job_id for c in (*new, *ended)}:
            if job_id:
                key = (cluster.pk, job_id)
                publish(job_group(*key), "calls", lambda key=key: calls_payload(job=key))


def placed(cluster: Cluster, incoming: dict[tuple[str, int], CallRecord]) -> None:
    """Calls first listed before Ray said where they run (no node, no pid: a call just
    handed to its worker) take their node and pid once Ray says them; the others are
    not written (one query for the few that lack them)."""
    for row in RayCall.objects.filter(Q(node_id="") | Q(pid__isnull=True), cluster=cluster):
        record = incoming.get((row.task_id, row.attempt))
        if record is None:
            continue
        node_id, pid = row.node_id or record.node_id or "", row.pid or record.pid
        if (node_id, pid) != (row.node_id, row.pid):
            RayCall.objects.filter(pk=row.pk).update(node_id=node_id, pid=pid)


def halfway(previous: datetime | None, now: datetime) -> datetime:
    """When something Ray lists now and did not at its answer before happened: halfway
    between the two (unbiased, within half a poll), or now when there was no recent one
    (raywatch's first poll of the cluster, or after an outage)."""
    if previous is None or now - previous > timedelta(seconds=3 * settings.POLL_RAY_S):
        return now
    return previous + (now - previous) / 2


def is_trainer_loop(name: str) -> bool:
    """An RL trainer's run call (`TaskRunner.run`, `Runner.run`, `PPOTrainer.fit`): the
    whole run, as long as training takes, which one run ending sooner says nothing of."""
    return name.split(".", 1)[0] in TRAINER_CLASSES


def learn(cluster: Cluster, ended: list[RayCall], now: datetime, previous: datetime) -> None:
    """Add each ended call's duration to its name's history in its job: from when it began
    (as `halfway` put it) to halfway between the poll that last listed it and this one.
    The first call of a name to end in a job is not learned (verl and EasyR1 validate
    before training with the calls training makes; a first call warms up)."""
    end = halfway(previous, now)
    by_name: dict[tuple[str, str], list[float]] = {}
    for call in sorted(ended, key=lambda c: c.first_seen_at):
        if is_trainer_loop(call.name):
            continue  # a whole run, not a phase of a step: no usual duration to hold it to
        ran = max((end - call.first_seen_at).total_seconds(), 0.0)
        by_name.setdefault((call.job_id, call.name), []).append(ran)
    if not by_name:
        return
    rows = {(t.job_id, t.name): t for t in CallTiming.objects.filter(
        cluster=cluster, job_id__in={j for j, _ in by_name}, name__in={n for _, n in by_name})}
    keep = settings.CALL_HISTORY
    for (job, name), took in by_name.items():
        row = rows.get((job, name)) or CallTiming(cluster=cluster, job_id=job, name=name,
                                                   durations=[])
        learned = took if row.warmed else took[1:]
        row.warmed = True
        row.durations = [*row.durations, *learned][-keep:]
        row.updated_at = now
        row.save()
    CallTiming.objects.filter(cluster=cluster, updated_at__lt=now - TIMING_KEEP).delete()


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
