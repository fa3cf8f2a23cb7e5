"""Carry an action out, step by step, recording each step as it happens.

Every signal travels one way: through the agent of the process's node (raywatch's own
host runs one too: `serve` starts it), which signals only a process it reported itself.
Terminate a trial: SIGTERM through its node's agent, or, on a node without one, the GCS's
graceful kill of its actor; wait RAYWATCH_TERMINATE_GRACE_S, then force (SIGKILL through
the agent, or the GCS's forced kill of the actor's worker), confirm the process or actor
is gone, and note what Tune made of it (errored or retried). Stop a job: the Jobs API,
then wait for Ray to report it stopped. Kill a GPU process: SIGTERM, grace, SIGKILL,
through the agent of its node (which reported it).
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.utils import timezone

from collectors import raykill
from collectors.http import SourceError
from collectors.raykill import GcsActor
from dashboard.actions.audit import advance, step
from dashboard.actions.models import AuditEntry
from dashboard.actions.remote import RemoteProcess
from dashboard.actions.settle import queue_limit, settle
from dashboard.cluster.endpoint import actor_of, endpoint_of
from dashboard.cluster.models import Actor, Cluster, Job
from dashboard.cluster.state import current_clusters
from dashboard.core import stopping
from dashboard.trials.models import Trial

log = logging.getLogger(__name__)
POLL_S = 0.25
# The Celery task (tasks.py) that runs this module's work, named so that the request
# sends it without importing its module.
RUN_ACTION = "dashboard.actions.tasks.run_action"


def run(entry_id: int) -> None:
    # One runner per action, even if its task is delivered twice: the claim is a
    # conditional update.
    now = timezone.now()
    # Taken late (a worker that was down, a queue drained after a restart): the target
    # has moved on since it was confirmed, so the action is not run (settle.py).
    if not AuditEntry.objects.filter(pk=entry_id, state=AuditEntry.REQUESTED, started_at=None,
                                     requested_at__gte=now - queue_limit()).update(
                                         started_at=now):
        settle(now, AuditEntry.objects.filter(pk=entry_id).values_list(
            "target_key", flat=True).first())
        return
    entry = AuditEntry.objects.get(pk=entry_id)
    try:
        RUNNERS[entry.kind](entry)
    except (SourceError, OSError) as exc:
        message = exc.message if isinstance(exc, SourceError) else str(exc)
        advance(entry, AuditEntry.FAILED, timezone.now(), f"could not act: {message}")
    except Exception as exc:
        log.exception("action #%s failed", entry.pk)
        advance(entry, AuditEntry.FAILED, timezone.now(), f"raywatch error: {exc}")


def wait_until(gone: Callable[[], bool], seconds: float) -> float | None:
    """Seconds it took for `gone()` to become true, or None if it did not."""
    started = time.monotonic()
    while True:
        if gone():
            return time.monotonic() - started
        if time.monotonic() - started >= seconds:
            return None
        time.sleep(POLL_S)


def through_agent(entry: AuditEntry, t: dict[str, Any]) -> RemoteProcess | None:
    """The process's node runs an HTTP agent (docs/agent-protocol.md): it signals there,
    the process that started when the operator confirmed (the target's create_time).
    An audit target stored before there was one route may say "local": it is not read."""
    node = t.get("agent_node")
    return RemoteProcess(entry, node, t["pid"], t.get("create_time")) if node else None


# --- terminate a trial ---------------------------------------------------------------------
def terminate_trial(entry: AuditEntry) -> None:
    t = entry.target
    where = f"pid {t['pid']} on {t['hostname'] or t['node_ip']}"
    actor = actor_of(t.get("cluster"), t.get("actor_id"))  # asked of its cluster's GCS
    remote = through_agent(entry, t)
    if remote:
        # The agent's word alone does not end a trial: a token that took the node's
        # address could answer "gone" for a process it never saw. Ray confirms it.
        gone, how = confirmed_by_ray(remote.gone, t, actor), remote.send(signal.SIGTERM)
    elif actor:
        actor.kill(force=False)
        gone, how = (lambda: actor.state() == "DEAD"), (
            f"graceful kill of actor {actor.actor_id} ({where}) asked of the GCS")
    else:
        raise SourceError("no agent of the trial's node answers and no GCS address or "
                          "actor is known: set RAY_GCS_ADDRESS (or the cluster's --gcs)")
    advance(entry, AuditEntry.SIGNALLED, timezone.now(), how)
    # Tune records this kill as the attempt's error: the operator's doing, not an alarm.
    Trial.objects.filter(pk=t["trial_pk"], attempt=t["attempt"]).update(
        terminated_by=entry.username, terminated_attempt=t["attempt"],
        updated_at=timezone.now())  # the detectors look at it again
    took = wait_until(gone, settings.TERMINATE_GRACE_S)
    if took is None:
        step(entry, "forced", timezone.now(),
             f"still alive after {settings.TERMINATE_GRACE_S:g} s: forcing")
        if remote:
            remote.send(signal.SIGKILL)
        elif actor:  # the GCS's forced kill of the actor's worker
            actor.kill(force=True)
        took = wait_until(gone, settings.FORCE_WAIT_S)
        if took is None:
            advance(entry, AuditEntry.FAILED, timezone.now(),
                    f"the agent of {remote.node} says {where} is gone, but Ray still lists "
                    f"its actor {t['actor_id']} alive: the trial may run on; check the node "
                    "and its agent's token" if remote and remote.ended else
                    f"{where} survived the forced kill for {settings.FORCE_WAIT_S:g} s")
            return
    step(entry, "gone", timezone.now(), f"{where} is gone")
    advance(entry, AuditEntry.SUCCEEDED, timezone.now(), f"{where} is gone")
    name, detail = tune_outcome(t)
    step(entry, name, timezone.now(), detail)


def confirmed_by_ray(agent_says: Callable[[], bool], t: dict[str, Any],
                     actor: GcsActor | None) -> Callable[[], bool]:
    """Gone when the agent says so and Ray no longer lists the trial's actor alive (asked
    of the GCS when its address is known, else as the Ray poll last stored it, when that
    is current). With no current word from Ray, the agent's answer stands."""

    def gone() -> bool:
        if not agent_says():
            return False
        if actor:
            try:
                return actor.state() != "ALIVE"
            except SourceError:
                pass
        cluster = Cluster.objects.filter(name=t.get("cluster")).first()
        if cluster is None or cluster.pk not in current_clusters(timezone.now()):
            return True
        return not Actor.objects.filter(cluster=cluster, actor_id=t.get("actor_id"),
                                        state="ALIVE").exists()
    return gone


def tune_outcome(t: dict[str, Any], wait_s: float = 20.0) -> tuple[str, str]:
    """What Tune made of it once the trial logs say: retried (a new attempt), or
    errored. Tune writes error.txt before it decides whether to retry, so an errored trial
    may still be retried until Tune's experiment state says ERROR or TERMINATED (it
    writes those only for a trial it will not retry: docs/ray-facts.md). Otherwise that
    is only final at the end, or when raywatch stops (a Ctrl-C does not wait 20 s on
    this last step)."""
    deadline = time.monotonic() + wait_s
    status = ""
    while trial := Trial.objects.filter(pk=t["trial_pk"]).first():
        if trial.attempt > t["attempt"]:
            return "retried", f"Tune retried the trial: attempt {trial.attempt}"
        status = trial.status
        if trial.tune_status in Trial.FINISHED:
            status = trial.tune_status
            break
        if stopping.winding_down.is_set() or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    if status in Trial.FINISHED:
        return "errored" if status == Trial.ERROR else "ended", f"Tune marked the trial {status}"
    if stopping.winding_down.is_set():
        return "unknown", "raywatch stopped before Tune reported the trial's new state"
    return "unknown", "Tune has not reported the trial's new state yet"


# --- stop a job ----------------------------------------------------------------------------
def stop_job(entry: AuditEntry) -> None:
    t = entry.target
    endpoint = endpoint_of(t.get("cluster"))
    stopped = raykill.stop_job(endpoint, t["submission_id"])
    advance(entry, AuditEntry.SIGNALLED, timezone.now(),
            "Ray's Jobs API accepted the stop" if stopped else "Ray says the job had ended")
    status: dict[str, str] = {}

    def ended() -> bool:
        from collectors.http import get_json

        reply = get_json(raykill.job_url(endpoint, t["submission_id"]),
                         headers=endpoint.headers(), timeout=endpoint.timeout_s)
        status["now"] = str(reply.get("status", "")) if isinstance(reply, dict) else ""
        return status["now"] in ("STOPPED", "SUCCEEDED", "FAILED")

    if wait_until(ended, settings.TERMINATE_GRACE_S + settings.FORCE_WAIT_S) is None:
        advance(entry, AuditEntry.FAILED, timezone.now(),
                f"the job is still {status.get('now') or 'running'} after the stop")
        return
    jobs = Job.objects.filter(key=t["key"])
    if t.get("cluster"):
        jobs = jobs.filter(cluster__name=t["cluster"])
    jobs.update(status=status["now"])
    advance(entry, AuditEntry.SUCCEEDED, timezone.now(), f"Ray reports the job {status['now']}")


# --- kill a GPU process --------------------------------------------------------------------
def kill_process(entry: AuditEntry) -> None:
    t = entry.target
    where = f"pid {t['pid']} on {t['node']} (GPU {t['gpu_index']})"
    remote = through_agent(entry, t)
    if remote is None:  # the agent that reported it was gone when the operator confirmed
        raise SourceError(f"no agent of node {t['node']} answers: only it can signal there")
    gone, send = remote.gone, remote.send
    send(signal.SIGTERM)
    advance(entry, AuditEntry.SIGNALLED, timezone.now(), f"SIGTERM sent to {where}")
    if wait_until(gone, settings.TERMINATE_GRACE_S) is None:
        step(entry, "forced", timezone.now(),
             f"still alive after {settings.TERMINATE_GRACE_S:g} s: SIGKILL")
        send(signal.SIGKILL)
        if wait_until(gone, settings.FORCE_WAIT_S) is None:
            advance(entry, AuditEntry.FAILED, timezone.now(), f"{where} survived SIGKILL")
            return
    advance(entry, AuditEntry.SUCCEEDED, timezone.now(), f"{where} is gone; its GPU memory "
                                                          "is freed when the driver notices")


RUNNERS: dict[str, Callable[[AuditEntry], None]] = {
    AuditEntry.TERMINATE_TRIAL: terminate_trial,
    AuditEntry.STOP_JOB: stop_job,
    AuditEntry.KILL_PROCESS: kill_process,
}
