"""Who holds a GPU: join a GPU process (node, pid) to a Tune trial, an RL run (an actor
of the job its trainer drives: verl's WorkerDict, say), a Ray actor, a Ray job's driver
or another Ray worker. A process that belongs to no live Ray
worker, or to an actor that is dead, is an orphan: it holds memory nobody uses.

Nodes are joined on IP: NVML sees a host, and every Ray node on that host
shares its address.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from django.urls import reverse

from dashboard.cluster.models import Actor, Job, Node, Worker
from dashboard.cluster.state import ray_is_current
from dashboard.trials.models import Trial
from dashboard.trials.runs import runs_by_job

TRIAL, ACTOR, JOB, WORKER, ORPHAN, UNKNOWN = (
    "trial", "actor", "job", "worker", "orphan", "unknown")


@dataclass(frozen=True)
class Owner:
    kind: str
    label: str
    url: str | None = None
    actor_id: str | None = None
    job_id: str | None = None
    trial_id: str | None = None
    reason: str = ""

    @property
    def orphan(self) -> bool:
        return self.kind == ORPHAN

    def as_dict(self) -> dict[str, Any]:
        return dict(vars(self))  # flat strings: asdict's deep copy costs more than the tile


def owners_on_hosts(processes: Mapping[str, Mapping[int, Sequence[int]]], now: datetime
                    ) -> dict[str, dict[int, Owner]]:
    """The owner of each process, per host: node_ip -> pid -> its parent pids (nearest
    first); a child of a Ray worker belongs to that worker's owner. The same few queries
    whatever the number of hosts: the GPU wall, the detectors and /metrics join every
    node's processes on each call."""
    hosts = {ip: family for ip, family in processes.items() if family}
    if not hosts:
        return {}
    if not ray_is_current(now):
        unknown = Owner(UNKNOWN, "unknown", reason="Ray's state is not current")
        return {ip: dict.fromkeys(family, unknown) for ip, family in hosts.items()}
    index = _RayIndex({ip: set(family) | {p for chain in family.values() for p in chain}
                       for ip, family in hosts.items()})
    return {ip: {pid: index.owner_of_family(ip, pid, chain) for pid, chain in family.items()}
            for ip, family in hosts.items()}


class _RayIndex:
    """What Ray says about these pids on these hosts (node_ip -> pids), read in a few
    queries; everything is keyed by (node_ip, pid)."""

    def __init__(self, pids_by_ip: Mapping[str, set[int]]) -> None:
        pids = set().union(*pids_by_ip.values())
        ip_of = dict(Node.objects.filter(node_ip__in=list(pids_by_ip))
                     .values_list("node_id", "node_ip"))
        self.actors: dict[tuple[str, int], Actor] = {}
        actors = Actor.objects.filter(node_id__in=list(ip_of), pid__in=pids).order_by("ended_at")
        for actor in actors:
            # A live actor wins over a dead one that had the same pid earlier.
            key = (ip_of[actor.node_id], actor.pid)
            if actor.state != "DEAD" or key not in self.actors:
                self.actors.setdefault(key, actor)
        # An RL run's workers are the live actors of its trainer's job.
        self.runs = runs_by_job({(a.cluster_id, a.job_id) for a in self.actors.values()
                                 if a.state != "DEAD" and a.job_id})
        self.workers = {(ip_of[w.node_id], w.pid): w for w in Worker.objects.filter(
            node_id__in=list(ip_of), pid__in=pids)}
        self.jobs = {(j.driver_node_ip, j.driver_pid): j for j in Job.objects.filter(
            driver_node_ip__in=list(pids_by_ip), driver_pid__in=pids,
            status__in=Job.RUNNING_STATES)}
        # Only what an Owner says of a trial: its JSON columns (config, metrics) are the
        # bulk of its row, and this runs for every GPU at every scrape and detector run.
        trials = (Trial.objects.select_related("experiment")
                  .only("trial_id", "status", "node_ip", "pid", "experiment__name")
                  .filter(node_ip__in=list(pids_by_ip), pid__in=pids))
        self.trials: dict[tuple[str, int], Trial] = {}
        for trial in trials.order_by("updated_at"):
            self.trials[(trial.node_ip, trial.pid)] = trial  # the latest that had this pid

    def owner_of_family(self, ip: str, pid: int, chain: Sequence[int]) -> Owner:
        own = self.owner(ip, pid)
        if not own.orphan:
            return own
        for parent in chain:
            found = self.owner(ip, parent)
            if not found.orphan:
                return replace(found, label=f"{found.label} (child pid {pid})")
        return own

    def owner(self, ip: str, pid: int) -> Owner:
        actor = self.actors.get((ip, pid))
        trial = self.trials.get((ip, pid))
        if actor is not None and actor.state != "DEAD":
            if trial is None:
                trial = self.runs.get((actor.cluster_id, actor.job_id))
            return _trial_owner(trial, actor) if trial else _actor_owner(actor)
        job = self.jobs.get((ip, pid))
        if job is not None:
            return Owner(JOB, f"job {job.key} driver", url=None, job_id=job.key)
        worker = self.workers.get((ip, pid))
        if worker is not None:
            return Owner(WORKER, _worker_label(worker.worker_type),
                         job_id=worker.job_id or None)
        return _orphan(pid, actor, trial)


def _worker_label(worker_type: str) -> str:
    """Ray's worker type as a person says it: WORKER "Ray worker", DRIVER "Ray driver",
    SPILL_WORKER "Ray spill worker" (it read "Ray worker worker")."""
    return "Ray " + (worker_type or "worker").lower().replace("_", " ")


def _trial_owner(trial: Trial, actor: Actor) -> Owner:
    """A Tune trial's own actor, or an actor of an RL run's job (named with the run)."""
    label = f"trial {trial.trial_id} ({trial.experiment.name})" if trial.pid == actor.pid \
        else f"actor {actor.label} of run {trial.trial_id} ({trial.experiment.name})"
    return Owner(TRIAL, label,
                 url=reverse("trial", args=[trial.pk]), actor_id=actor.actor_id,
                 job_id=actor.job_id or None, trial_id=trial.trial_id)


def _actor_owner(actor: Actor) -> Owner:
    return Owner(ACTOR, f"actor {actor.label} {actor.actor_id[:8]}", actor_id=actor.actor_id,
                 job_id=actor.job_id or None)


def _orphan(pid: int, actor: Actor | None, trial: Trial | None) -> Owner:
    if actor is not None:
        reason = f"left over by dead actor {actor.label} {actor.actor_id[:8]}"
        if trial is not None:
            reason += f" (trial {trial.trial_id}, {trial.status})"
        return Owner(ORPHAN, "orphan", actor_id=actor.actor_id,
                     trial_id=trial.trial_id if trial else None, reason=reason)
    if trial is not None:
        return Owner(ORPHAN, "orphan", trial_id=trial.trial_id,
                     url=reverse("trial", args=[trial.pk]),
                     reason=f"left over by trial {trial.trial_id} ({trial.status}): "
                     "no live Ray worker has this pid")
    return Owner(ORPHAN, "orphan", reason=f"no live Ray worker has pid {pid} on this node")
