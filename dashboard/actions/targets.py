"""What an action would end, as the confirm dialog shows it and the audit keeps it:
read from the database now, so a target that changed since the page was drawn is
noticed before anything is signalled."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psutil

from collectors.procstat import this_host
from dashboard.cluster.models import Actor, Job, Node
from dashboard.core.errors import ApiError
from dashboard.gpus.models import Agent, GpuProcess
from dashboard.trials.models import Trial


class TargetError(ApiError):
    """A target that cannot be acted on as it is now (gone, finished, not found)."""


def create_time(pid: int | None) -> float | None:
    """The process's start time on this host: a pid reused by another process differs."""
    if not pid:
        return None
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def gpus_held(node_ip: str, pid: int | None) -> list[dict[str, Any]]:
    if not pid or not node_ip:
        return []
    # The process or one it started. JSON containment is not portable (SQLite has none),
    # and a node's GPUs hold few processes: check the ancestors here.
    rows = GpuProcess.objects.select_related("gpu").filter(gpu__node_ip=node_ip)
    return [{"uuid": p.gpu.uuid, "index": p.gpu.index, "pid": p.pid,
             "used_memory": p.used_memory_bytes}
            for p in rows if p.pid == pid or pid in p.ancestors]


def trial_target(trial: Trial, now: datetime) -> dict[str, Any]:
    cluster_id = trial.experiment.cluster_id
    node_ids = list(Node.objects.filter(cluster_id=cluster_id, node_ip=trial.node_ip)
                    .values_list("node_id", flat=True))
    actor = (Actor.objects.filter(cluster_id=cluster_id, node_id__in=node_ids, pid=trial.pid,
                                  state="ALIVE").first()
             if trial.pid else None)
    local = bool(trial.hostname) and trial.hostname == this_host()
    silent = (now - trial.last_result_at).total_seconds() if trial.last_result_at else None
    return {
        "cluster": trial.experiment.cluster.name,
        "trial_pk": trial.pk, "trial_id": trial.trial_id, "experiment": trial.experiment.name,
        "status": trial.status, "attempt": trial.attempt, "pid": trial.pid,
        "node_ip": trial.node_ip, "hostname": trial.hostname, "local": local,
        "create_time": create_time(trial.pid) if local else None,
        "actor_id": actor.actor_id if actor else None,
        "silent_s": round(silent) if silent is not None else None,
        "last_result_at": trial.last_result_at.isoformat() if trial.last_result_at else None,
        "iteration": trial.iteration, "gpus": gpus_held(trial.node_ip, trial.pid),
    }


def check_trial(trial: Trial, target: dict[str, Any], expected: dict[str, Any]) -> None:
    if trial.status in Trial.FINISHED:
        raise TargetError(f"trial {trial.trial_id} has already ended ({trial.status}): "
                          "nothing to terminate", 409)
    if not trial.pid:
        raise TargetError(f"trial {trial.trial_id} has no known process yet", 409)
    _check_expected(target, expected, ("pid", "attempt"), f"trial {trial.trial_id}")
    if target["local"] and target["create_time"] is None:
        raise TargetError(f"trial {trial.trial_id}'s process {trial.pid} is already gone", 409)


def _check_expected(target: dict[str, Any], expected: dict[str, Any], keys: tuple[str, ...],
                    what: str) -> None:
    """Refuse when what the page showed differs from what is there now."""
    for key in keys:
        if expected.get(key) is not None and expected[key] != target.get(key):
            raise TargetError(
                f"{what} changed since the page was drawn: {key} was {expected[key]}, "
                f"now {target.get(key)}. Reload and check before acting.", 409)


def job_target(job: Job) -> dict[str, Any]:
    return {"cluster": job.cluster.name, "key": job.key, "submission_id": job.submission_id,
            "job_id": job.job_id,
            "status": job.status, "entrypoint": job.entrypoint[:500],
            "driver_pid": job.driver_pid, "driver_node_ip": job.driver_node_ip}


def check_job(job: Job, expected: dict[str, Any]) -> None:
    if job.status not in ("PENDING", "RUNNING"):
        raise TargetError(f"job {job.key} is {job.status}: nothing to stop", 409)
    if not job.submission_id:
        raise TargetError(f"job {job.key} was not submitted through the Jobs API (a driver "
                          "started by hand): Ray cannot stop it; end its driver process", 409)
    _check_expected(job_target(job), expected, ("status",), f"job {job.key}")


def check_process(pid: int, owner: Any) -> None:
    if not owner.orphan:
        raise TargetError(f"pid {pid} belongs to {owner.label} ({owner.kind}): end it through "
                          "its trial or job, not by killing the process", 409)


def process_target(proc: GpuProcess, owner: Any) -> dict[str, Any]:
    agent = Agent.objects.filter(node_ip=proc.gpu.node_ip).order_by("-last_poll_at").first()
    local = agent is not None and agent.node == this_host()
    return {"gpu": proc.gpu.uuid, "gpu_index": proc.gpu.index, "node": proc.gpu.node,
            "node_ip": proc.gpu.node_ip, "pid": proc.pid, "used_memory": proc.used_memory_bytes,
            "owner": owner.kind, "owner_label": owner.label, "owner_reason": owner.reason,
            "first_seen_at": proc.first_seen_at.isoformat(), "local": local,
            "create_time": create_time(proc.pid) if local else None}
