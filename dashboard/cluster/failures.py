"""Why an RL run ended: the failed calls of its Ray job, as Ray's state API says.

A run's trainer that raised is, to Ray, a FAILED `TaskRunner.run` whose message is the
traceback; a worker actor killed by the OOM killer is a FAILED call of that actor
(`OUT_OF_MEMORY`, `ACTOR_DIED`, `WORKER_DIED`), and everything after it (the trainer's
`ray.get` raising, its driver exiting, the other actors dying with their owner, a hand-
started driver ending SUCCEEDED) is the cascade (docs/ray-facts.md, "Why a run ended").
When a trainer actor Ray listed is gone, its job's failed calls are asked for (one small
request, the detail columns of a few rows), at each poll for FAILURE_WAIT_S: Ray's task
events come a second or so after the fact, each worker's on its own, so the trainer's
own failure may be listed before the worker's that caused it. The first to fail is the
run's error (dashboard/trials/runs.py), looked at again as more come."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db.models import F

from collectors.http import SourceError
from collectors.raystate import (
    RayEndpoint,
    fetch_actor_death,
    fetch_failed_calls,
    parse_actor_death,
    parse_failed_calls,
)
from collectors.runformats import TRAINER_CLASSES, entrypoint_framework
from dashboard.cluster.models import Actor, CallFailure, Job, Node, RayCall
from dashboard.cluster.views_data import running_trials_of
from dashboard.cluster.workload import DEAD_ACTOR_KEEP

log = logging.getLogger("raywatch.cluster.failures")
FAILURE_WAIT_S = 30.0  # how long after its trainer ended a job's failures are looked for
DEATHS_PER_POLL = 20  # actors asked why they died, at most, per poll of a cluster
DEATHS_LOOKED_AT = 2000  # the newest actors that just ended, looked at for a bound trial


def note_failures(endpoint: RayEndpoint, cluster_pk: int, now: datetime) -> int:
    """Ask Ray for the failed calls of each job whose trainer ended within FAILURE_WAIT_S;
    how many new ones were stored. A job Ray does not answer for costs only itself
    (logged; asked again next poll)."""
    since = now - timedelta(seconds=FAILURE_WAIT_S)
    jobs = set(Actor.objects.filter(cluster_id=cluster_pk, state="DEAD", ended_at__gte=since,
                                    class_name__in=TRAINER_CLASSES)
               .exclude(job_id="").values_list("job_id", flat=True))
    # A framework's job that ended, its trainer perhaps never seen alive (it failed before
    # raywatch's first poll of it): the run found from the job ends with its failures.
    jobs |= {job_id for job_id, entrypoint in Job.objects.filter(
        cluster_id=cluster_pk, updated_at__gte=since).exclude(status="RUNNING").exclude(
        job_id="").values_list("job_id", "entrypoint") if entrypoint_framework(entrypoint)}
    stored = 0
    for job in sorted(jobs):
        try:
            records = parse_failed_calls(fetch_failed_calls(endpoint, job), job)
        except SourceError as exc:
            log.warning("failed calls of job %s not read: %s", job, exc.message)
            continue
        rows = [CallFailure(cluster_id=cluster_pk, job_id=r.job_id, task_id=r.task_id,
                            attempt=r.attempt, name=r.name, actor_id=r.actor_id or "",
                            node_id=r.node_id or "", pid=r.pid, error_type=r.error_type,
                            message=r.message.replace("\x00", ""), failed_at=r.failed_at,
                            seen_at=now) for r in records]
        known = set(CallFailure.objects.filter(cluster_id=cluster_pk, job_id=job)
                    .values_list("task_id", "attempt"))
        new = [row for row in rows if (row.task_id, row.attempt) not in known]
        stored += len(CallFailure.objects.bulk_create(new, ignore_conflicts=True))
    CallFailure.objects.filter(cluster_id=cluster_pk,
                               seen_at__lt=now - DEAD_ACTOR_KEEP).delete()
    return stored


def first_failure(cluster_pk: int, job_id: str) -> CallFailure | None:
    """The job's first failed call: what started the cascade."""
    if not job_id:
        return None
    return (CallFailure.objects.filter(cluster_id=cluster_pk, job_id=job_id)
            .order_by(F("failed_at").asc(nulls_last=True), "seen_at", "pk").first())


def job_call_names(cluster_pk: int, job_id: str) -> set[str]:
    """The names Ray gave the job's calls and its actors' classes, as raywatch saw them:
    what completes a failed call's header that Ray's cut of the message left partial
    (CallFailure.first_call)."""
    names = set(RayCall.objects.filter(cluster_id=cluster_pk, job_id=job_id)
                .values_list("name", flat=True).distinct())
    names |= set(CallFailure.objects.filter(cluster_id=cluster_pk, job_id=job_id)
                 .values_list("name", flat=True))
    return names | set(Actor.objects.filter(cluster_id=cluster_pk, job_id=job_id)
                       .values_list("class_name", flat=True).distinct())


def failed_jobs_since(since: datetime | None) -> set[tuple[int, str]]:
    """The (cluster pk, job id) whose failures were stored since `since`: their runs'
    errors are looked at again, ended or not."""
    if since is None:
        return set()
    return set(CallFailure.objects.filter(seen_at__gte=since)
               .values_list("cluster_id", "job_id"))




def note_deaths(endpoint: RayEndpoint, cluster_pk: int, now: datetime) -> int:
    """Ask Ray why each actor died that ended within FAILURE_WAIT_S with a trial bound to
    its process (DEATHS_PER_POLL at most, once each): ended on purpose (Tune pausing or
    stopping a trial, ray.kill) or not (a crash, the OOM killer, its node). How many were
    answered. An actor Ray does not answer for costs only itself."""
    since = now - timedelta(seconds=FAILURE_WAIT_S)
    ended = list(Actor.objects.filter(cluster_id=cluster_pk, state="DEAD", ended_at__gte=since,
                                      death_reason="", pid__isnull=False)
                 .order_by("-ended_at")[:DEATHS_LOOKED_AT])
    if not ended:
        return 0
    nodes = dict(Node.objects.filter(cluster_id=cluster_pk, node_id__in={
        a.node_id for a in ended}).values_list("node_id", "node_ip"))
    bound = running_trials_of({a.pid for a in ended if a.pid})
    ended = [a for a in ended
             if (cluster_pk, nodes.get(a.node_id, ""), a.pid) in bound][:DEATHS_PER_POLL]
    answered = 0
    for actor in ended:
        try:
            death = parse_actor_death(fetch_actor_death(endpoint, actor.actor_id),
                                      actor.actor_id)
        except SourceError as exc:
            log.warning("why actor %s died not read: %s", actor.actor_id, exc.message)
            continue
        Actor.objects.filter(pk=actor.pk, state="DEAD").update(
            death_reason=death.reason if death else "UNKNOWN",
            death_message=(death.message if death else "").replace("\x00", ""),
            ended_on_purpose=death.on_purpose if death else None)
        answered += 1
    return answered
