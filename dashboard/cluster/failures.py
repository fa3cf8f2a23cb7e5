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
run's error (dashboard/trials/runs.py), looked at again as more come.

Ray says a worker that died of a signal or a kill only "died unexpectedly (SYSTEM_ERROR)":
the OOM killer, `ray stop --force` and a SIGSEGV read alike. Its own stderr tells them
apart (a fatal signal leaves a trace, a SIGKILL none): read once through Ray's log API,
by the actor's id Ray lists (note_crash)."""

from __future__ import annotations

import logging
import re
from datetime import datetime, timedelta

from django.db.models import F

from collectors.http import SourceError
from collectors.raylogs import CRASH_LINES, NO_SIGNAL, fatal_signal, fetch_log_tail
from collectors.raystate import (
    RayEndpoint,
    fetch_actor_death,
    fetch_failed_calls,
    parse_actor_death,
    parse_failed_calls,
)
from collectors.records import ActorDeathRecord
from collectors.runformats import TRAINER_CLASSES, entrypoint_framework
from dashboard.cluster.models import Actor, CallFailure, Job, Node, RayCall
from dashboard.cluster.views_data import running_trials_of
from dashboard.cluster.workload import DEAD_ACTOR_KEEP

log = logging.getLogger("raywatch.cluster.failures")
FAILURE_WAIT_S = 30.0  # how long after its trainer ended a job's failures are looked for
DEATHS_PER_POLL = 20  # actors asked why they died, at most, per poll of a cluster
DEATHS_LOOKED_AT = 2000  # the newest actors that just ended, looked at for a bound trial
CRASHES_PER_JOB = 3  # crashed actors of one job whose logs are read, at most
SYSTEM_ERROR = "Worker exit type: SYSTEM_ERROR"  # Ray's words for a worker that crashed
# What of Ray's words for an actor that died under a call may be left after Ray cut the
# message to its tail (Ray 2.60: the exit type, the error's name, or only the end of its
# list of likely causes, "... killed by the OOM killer ... crashed unexpectedly ...").
DIED_WORDS = (SYSTEM_ERROR, "ActorDiedError", "died unexpectedly", "killed by the OOM killer",
              "crashed unexpectedly due to SIGSEGV")
_DEAD_ACTOR = re.compile(r"actor_id: ([0-9a-f]{32})\b")  # an ActorDiedError's own lines
# Ray's words for a call whose owner died (Ray 2.60: "... because its owner has died.
# Owner Id: 03000000ffff… Owner Ip address: …"): a driver's id is its job's, then f's.
JOB_FINISHED = "Worker force exited because its job has finished"  # Ray 2.60's words
OWNER_DIED = "because its owner has died"  # Ray 2.60: "... Owner Id: 03000000fff… Owner Ip …"


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
        if note_job_crash(endpoint, cluster_pk, job):
            # Its runs' errors are described again, though no new failure came.
            CallFailure.objects.filter(cluster_id=cluster_pk, job_id=job).update(seen_at=now)
    CallFailure.objects.filter(cluster_id=cluster_pk,
                               seen_at__lt=now - DEAD_ACTOR_KEEP).delete()
    return stored


def first_failure(cluster_pk: int, job_id: str) -> CallFailure | None:
    """The job's first failed call: what started the cascade. A call that failed only
    because the job's driver ended (its user's Ctrl-C, the driver's exit: Ray ends the
    job's actors with their owner) is no failure of the run: with nothing else failed,
    the job's end says how the run ended."""
    if not job_id:
        return None
    failures = CallFailure.objects.filter(cluster_id=cluster_pk, job_id=job_id).order_by(
        F("failed_at").asc(nulls_last=True), "seen_at", "pk")
    return next((f for f in failures if not driver_ended(f)), None)


def driver_ended(failure: CallFailure) -> bool:
    """Whether Ray says the call failed only because what owned it ended: its owner died
    (the job's driver, whose worker id is the job's id then f's, or an actor its death
    took along: a trainer's worker group dies with the trainer), or its worker was made
    to exit because the job finished. Such a failure is a cascade, never the cause: an
    owner that crashed fails its own call with why."""
    return JOB_FINISHED in failure.message or OWNER_DIED in failure.message


def crashed_actors(failures: list[CallFailure]) -> list[str]:
    """The actors whose worker died of a SYSTEM_ERROR, as these failures say: the failed
    call's own actor, or the one a ray.get on it names ("actor_id: …")."""
    found: list[str] = []
    for failure in failures:
        if SYSTEM_ERROR not in failure.message:
            continue
        own = [failure.actor_id] if failure.actor_id and failure.error_type in (
            "ACTOR_DIED", "WORKER_DIED") else []
        for actor_id in [*own, *_DEAD_ACTOR.findall(failure.message)]:
            if actor_id not in found:
                found.append(actor_id)
    return found


def note_job_crash(endpoint: RayEndpoint, cluster_pk: int, job: str) -> bool:
    """While the job's failures say a worker died of a SYSTEM_ERROR and no crash of its is
    known yet, look for the crashed actor and read how it died; whether one was noted.
    The actor is the one a failure names; else (Ray's cut of the message took that
    line) one of the job's dead workers Ray says died of a SYSTEM_ERROR (DEATHS_PER_POLL
    asked at most). Asked at each poll while the job's trainer ended lately."""
    if Actor.objects.filter(cluster_id=cluster_pk, job_id=job).exclude(crash="").exists():
        return False
    failures = [f for f in CallFailure.objects.filter(cluster_id=cluster_pk, job_id=job)
                if not driver_ended(f)]
    # An actor died under a call (Ray's message may say only "died unexpectedly", if it
    # was raised before the GCS knew why): its workers' deaths are asked.
    if not any(f.error_type in ("ACTOR_DIED", "WORKER_DIED")
               or any(words in f.message for words in DIED_WORDS) for f in failures):
        return False
    # An actor a message names is the job's own or nothing: a failure's text is the job's
    # (its exception's words), never a pointer into another job's logs.
    own = set(Actor.objects.filter(cluster_id=cluster_pk, job_id=job).values_list(
        "actor_id", flat=True))
    crashed = [a for a in crashed_actors(failures) if a in own] or system_error_deaths(
        endpoint, cluster_pk, job)
    for actor_id in crashed[:CRASHES_PER_JOB]:
        note_crash(endpoint, cluster_pk, actor_id)
    return Actor.objects.filter(cluster_id=cluster_pk, job_id=job).exclude(crash="").exists()


def system_error_deaths(endpoint: RayEndpoint, cluster_pk: int, job: str) -> list[str]:
    """The job's dead workers (not its trainer) that Ray says died of a SYSTEM_ERROR."""
    found = []
    for actor in Actor.objects.filter(cluster_id=cluster_pk, job_id=job, state="DEAD").exclude(
            class_name__in=TRAINER_CLASSES).order_by("-ended_at")[:DEATHS_PER_POLL]:
        answered, death = why_died(endpoint, actor.actor_id)
        if answered and death is not None and death.exit_type == "SYSTEM_ERROR":
            found.append(actor.actor_id)
    return found


def why_died(endpoint: RayEndpoint, actor_id: str) -> tuple[bool, ActorDeathRecord | None]:
    """(whether Ray answered, why it says the actor died: None when it says nothing). An
    actor Ray does not answer for costs only itself (logged)."""
    try:
        return True, parse_actor_death(fetch_actor_death(endpoint, actor_id), actor_id)
    except SourceError as exc:
        log.warning("why actor %s died not read: %s", actor_id, exc.message)
        return False, None


def note_crash(endpoint: RayEndpoint, cluster_pk: int, actor_id: str) -> None:
    """Read how a crashed actor's own stderr says it died (once: an actor whose crash is
    known is not asked again): the fatal signal and frame, or that it shows none (a
    SIGKILL). A log Ray cannot give says why instead."""
    actor = Actor.objects.filter(cluster_id=cluster_pk, actor_id=actor_id).first()
    if actor is None or actor.crash:
        return
    try:
        tail = fetch_log_tail(endpoint, "err", CRASH_LINES, actor_id=actor_id)
        crash = fatal_signal(tail) or NO_SIGNAL
    except SourceError as exc:
        crash = f"its log was not read ({exc.message})"
    Actor.objects.filter(pk=actor.pk).update(crash=crash.replace("\x00", "")[:500])


def job_crash(cluster_pk: int, job_id: str) -> str:
    """How the job's first crashed actor died, as its own log says; "" when none did."""
    return (Actor.objects.filter(cluster_id=cluster_pk, job_id=job_id).exclude(crash="")
            .order_by("ended_at", "pk").values_list("crash", flat=True).first() or "")


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
        answered, death = why_died(endpoint, actor.actor_id)
        if not answered:
            continue
        Actor.objects.filter(pk=actor.pk, state="DEAD").update(
            death_reason=death.reason if death else "UNKNOWN",
            death_message=(death.message if death else "").replace("\x00", ""),
            ended_on_purpose=death.on_purpose if death else None)
        answered += 1
    return answered
