"""From a request's target to a Plan: the target as it is now (refused when it changed
or ended), the role it needs, and how to tell whether Ray or the node is reachable."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import Q

from collectors.http import SourceError, get_json
from collectors.raykill import job_url
from dashboard.actions import targets
from dashboard.actions.models import AuditEntry
from dashboard.actions.service import Plan
from dashboard.actions.targets import TargetError
from dashboard.cluster.endpoint import actor_of, endpoint_of
from dashboard.cluster.models import Job
from dashboard.core.roles import ADMIN, OPERATOR
from dashboard.gpus.models import GpuProcess
from dashboard.gpus.views_data import owner_maps_for
from dashboard.trials.models import Trial


def trial_plan(pk: int, now: datetime) -> Plan:
    """The trial of this primary key: a trial id alone may be claimed by any cluster's
    logs, so actions name the row, which belongs to one cluster."""
    trial = Trial.objects.select_related("experiment__cluster").filter(pk=pk).first()
    if trial is None:
        raise TargetError(f"no trial #{pk}", 404)
    target = targets.trial_target(trial, now)
    return Plan(AuditEntry.TERMINATE_TRIAL,
                f"trial:{target['cluster']}/{trial.experiment.name}/{trial.trial_id}",
                target, OPERATOR, lambda: trial_unreachable(target),
                lambda expected: targets.check_trial(trial, target, expected))


def trial_unreachable(target: dict[str, Any]) -> str | None:
    if target["agent_node"]:
        return None  # signalled by the node's agent
    actor = actor_of(target.get("cluster"), target.get("actor_id"))
    if not actor:
        where = target.get("hostname") or target.get("node_ip") or "the trial's node"
        return (f"no raywatch agent of {where} has answered lately and raywatch knows no "
                "GCS address, or no actor, to kill it through (start the node's agent, set "
                f"RAY_GCS_ADDRESS, or give cluster {target.get('cluster')}'s with "
                "`manage.py cluster add --gcs`)")
    try:
        actor.state()
    except SourceError as exc:
        return exc.message
    return None


def job_plan(job_id: str, now: datetime, cluster: str = "") -> Plan:
    """The job of this id (key, job id or submission id); `cluster` names its cluster
    when more than one has a job of that id (job ids restart at 01000000 on every cluster)."""
    jobs = Job.objects.select_related("cluster").filter(
        Q(key=job_id) | Q(job_id=job_id) | Q(submission_id=job_id))
    if cluster:
        jobs = jobs.filter(cluster__name=cluster)
    found = list(jobs[:20])
    if not found:
        raise TargetError(f"no job {job_id!r}" + (f" on cluster {cluster}" if cluster else ""),
                          404)
    clusters = sorted({j.cluster.name for j in found})
    if len(clusters) > 1:
        raise TargetError(f"clusters {', '.join(clusters)} each have a job {job_id!r}: name "
                          "the one to stop (?cluster=NAME)", 409)
    job = found[0]
    return Plan(AuditEntry.STOP_JOB, f"job:{job.key}", targets.job_target(job), OPERATOR,
                lambda: job_unreachable(job.submission_id, job.cluster.name),
                lambda expected: targets.check_job(job, expected))


def job_unreachable(submission_id: str, cluster: str = "") -> str | None:
    try:
        endpoint = endpoint_of(cluster)
        get_json(job_url(endpoint, submission_id),
                 headers=endpoint.headers(), timeout=endpoint.timeout_s)
    except SourceError as exc:
        return exc.message
    return None


def process_plan(uuid: str, pid: int, now: datetime) -> Plan:
    proc = GpuProcess.objects.select_related("gpu").filter(gpu__uuid=uuid, pid=pid).first()
    if proc is None:
        raise TargetError(f"no process {pid} on GPU {uuid} (gone, or not seen yet)", 404)
    owner = owner_maps_for([proc.gpu], {proc.gpu.pk: [proc]}, now)[proc.gpu.node_ip][pid]
    target = targets.process_target(proc, owner)
    return Plan(AuditEntry.KILL_PROCESS, f"process:{uuid}/{pid}", target, ADMIN,
                lambda: process_unreachable(target),
                lambda expected: targets.check_process(pid, owner))


def process_unreachable(target: dict[str, Any]) -> str | None:
    if target["agent_node"]:
        return None
    return (f"no agent of node {target['node']} has answered lately: only the node's own "
            "agent can signal its processes (see the Cluster page's Agent column)")

