"""What an action would end, as the confirm dialog shows it and the audit keeps it:
read from the database now, so a target that changed since the page was drawn is
noticed before anything is signalled."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from dashboard.agents.remote import node_with_agent, reported_start
from dashboard.cluster.models import Job
from dashboard.core.errors import ApiError
from dashboard.gpus.models import GpuNode, GpuProcess
from dashboard.trials.models import Trial
from dashboard.trials.process import trial_process


class TargetError(ApiError):
    """A target that cannot be acted on as it is now (gone, finished, not found)."""


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
    """The trial and the process Ray ties it to (dashboard.trials.process): a result line's
    pid, host or address never decides what is signalled, or where. Signalled through
    its node's agent (`agent_node`), raywatch's own host's as any other's; with none, Ray's
    GCS kills its actor."""
    bound = trial_process(trial)
    silent = (now - trial.last_result_at).total_seconds() if trial.last_result_at else None
    target: dict[str, Any] = {
        "cluster": trial.experiment.cluster.name,
        "trial_pk": trial.pk, "trial_id": trial.trial_id, "experiment": trial.experiment.name,
        "status": trial.status, "attempt": trial.attempt, "pid": trial.pid,
        "silent_s": round(silent) if silent is not None else None,
        "last_result_at": trial.last_result_at.isoformat() if trial.last_result_at else None,
        "iteration": trial.iteration,
    }
    if isinstance(bound, str):
        return {**target, "unbound": bound, "node_ip": trial.node_ip,
                "hostname": trial.hostname, "agent_node": None,
                "create_time": None, "actor_id": None, "gpus": []}
    agent = node_with_agent(bound.node_ip, bound.hostname, target["cluster"])
    return {**target, "unbound": None, "node_ip": bound.node_ip, "hostname": bound.hostname,
            "node_id": bound.node_id, "agent_node": agent,
            "create_time": process_started(bound.pid, agent, target["cluster"]),
            "actor_id": bound.actor_id, "actor": bound.actor, "job_id": bound.job_id,
            "actor_since": bound.since.isoformat() if bound.since else None,
            "gpus": gpus_held(bound.node_ip, bound.pid)}


def process_started(pid: int, agent: str | None, cluster: str = "") -> float | None:
    """The start time of the process the operator is about to confirm, as the node's agent
    last reported it. The signal is pinned to it, so a pid reused before the signal goes
    is left alone."""
    return reported_start(agent, pid, cluster) if agent else None


def check_trial(trial: Trial, target: dict[str, Any], expected: dict[str, Any]) -> None:
    what = f"trial {trial.trial_id}"
    if trial.status in Trial.FINISHED:
        raise TargetError(f"{what} has already ended ({trial.status}): nothing to terminate",
                          409)
    if not trial.pid:
        raise TargetError(f"{what} has no known process yet", 409)
    _check_expected(target, expected, ("pid", "attempt"), what)
    if target["unbound"]:
        raise TargetError(f"{target['unbound']}. Stop its Ray job instead, or wait for "
                          "Ray's next poll.", 409)
    if target["agent_node"] and target["create_time"] is None:
        raise TargetError(f"the agent of {target['agent_node']} does not list pid "
                          f"{trial.pid}: it ended, or is not a process the agent watches", 409)


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
    # The agent that reported the GPU signals its processes (raywatch's own host runs
    # one too): the start time it reported pins the signal to this process. Its command
    # goes to that node of the cluster the agent's token is of (issue 43, L3): a node of
    # the same name in another cluster never gets it.
    cluster = GpuNode.objects.filter(node=proc.gpu.node).values_list(
        "cluster__name", flat=True).first() or ""
    remote = node_with_agent(proc.gpu.node_ip, proc.gpu.node, cluster)
    return {"gpu": proc.gpu.uuid, "cluster": cluster, "gpu_index": proc.gpu.index,
            "node": proc.gpu.node, "node_ip": proc.gpu.node_ip, "pid": proc.pid,
            "used_memory": proc.used_memory_bytes,
            "owner": owner.kind, "owner_label": owner.label, "owner_reason": owner.reason,
            "first_seen_at": proc.first_seen_at.isoformat(),
            "agent_node": remote, "create_time": process_started(proc.pid, remote, cluster)}
