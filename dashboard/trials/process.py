"""Which process runs a trial, as Ray knows it: the one thing an action or a stack may
be aimed at.

A result line says `pid`, `hostname` and `node_ip`, but a result line is written by the
job's author and read from a shared disk: it is shown, never obeyed. Here it only picks
among Ray's own facts. The process is a live actor that Ray (the GCS, polled into the
Actor and Node tables) lists in the trial's cluster, with that pid, on a live node of that
cluster, running the trial's trainable (Tune's actors carry the trainable's name as their
`repr_name`: docs/ray-facts.md); and no other running trial names the same process. Its
node, address and host are Ray's: the node's agent (or Ray) is asked about it there, on
raywatch's own host as on any other; raywatch never looks the pid up itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from dashboard.cluster.models import Actor, Node
from dashboard.trials.models import Trial
from dashboard.trials.runs import is_run, run_classes, trainer_class


@dataclass(frozen=True)
class TrialProcess:
    """A trial's process as Ray describes it."""

    pid: int
    actor_id: str
    actor: str  # its label: the trainable's name as Ray shows it
    job_id: str
    since: datetime | None  # when Ray started the actor
    node_id: str
    node_ip: str
    hostname: str  # Ray's name of the node's host


def trial_process(trial: Trial) -> TrialProcess | str:
    """The trial's process, or why raywatch cannot tie the trial to one."""
    if not trial.pid:
        return f"trial {trial.trial_id} has reported no process yet"
    cluster_id = trial.experiment.cluster_id
    actors = [a for a in Actor.objects.filter(cluster_id=cluster_id, pid=trial.pid,
                                              state="ALIVE")
              if runs(a, trial)]
    nodes = {n.node_id: n for n in Node.objects.filter(
        cluster_id=cluster_id, state=Node.ALIVE, node_id__in=[a.node_id for a in actors])}
    found = [(a, nodes[a.node_id]) for a in actors if a.node_id in nodes]
    if len(found) > 1 and trial.node_ip:  # the line's address picks among Ray's nodes
        found = [(a, n) for a, n in found if n.node_ip == trial.node_ip]
    if not found:
        return (f"Ray lists no live {trial.trainable or 'Tune'} actor with pid {trial.pid} "
                f"(the pid trial {trial.trial_id}'s results name) in cluster "
                f"{trial.experiment.cluster.name}: raywatch acts only on a process Ray "
                "runs for the trial")
    if len(found) > 1:
        return (f"pid {trial.pid} is a live actor on {len(found)} of Ray's nodes and the "
                "trial's results do not say which: raywatch will not guess")
    actor, node = found[0]
    if rival := claimed_by_another(trial, node):
        return (f"trial {rival} also names pid {trial.pid} on {node.node_ip}: raywatch "
                "will not guess which trial that process runs")
    return TrialProcess(
        pid=trial.pid, actor_id=actor.actor_id, actor=actor.label, job_id=actor.job_id,
        since=actor.start_time, node_id=node.node_id, node_ip=node.node_ip,
        hostname=node.hostname)


def runs(actor: Actor, trial: Trial) -> bool:
    """Whether the actor runs this trial: Tune's trainable (Tune names a trial's dir after
    it), or an RL run's trainer actor (a Ray Train run's rank: dashboard/trials/runs.py)."""
    if is_run(trial):
        return trainer_class(actor) in run_classes(trial.framework)
    if not trial.trainable:
        return False
    return trial.trainable in (actor.repr_name, trainer_class(actor))


def trial_names_by_actor(actors: Sequence[tuple[Actor, str]]) -> dict[str, str]:
    """The trials these live actors (with their nodes' addresses) run, by actor id, named
    as a person knows them: what a pending demand waits behind (dashboard.cluster.
    workload). Tied as the terminate action ties them: the trial's results name the
    actor's pid and node, in the actor's cluster, and the actor runs the trial's
    trainable (or is its run's trainer); a result line alone makes no actor a trial's."""
    trials: dict[int, list[Trial]] = {}
    for trial in Trial.objects.select_related("experiment").filter(
            pid__in={actor.pid for actor, _ in actors if actor.pid}):
        trials.setdefault(trial.pid or 0, []).append(trial)
    names = {}
    for actor, node_ip in actors:
        for trial in trials.get(actor.pid or 0, []):
            if (trial.node_ip == node_ip and trial.experiment.cluster_id == actor.cluster_id
                    and runs(actor, trial)):
                names[actor.actor_id] = f"trial {trial.trial_id} ({trial.experiment.name})"
                break
    return names


def claimed_by_another(trial: Trial, node: Node) -> str | None:
    """Another unfinished trial that names the same process there."""
    rivals = (Trial.objects.filter(experiment__cluster_id=trial.experiment.cluster_id,
                                   pid=trial.pid, node_ip=node.node_ip)
              .exclude(pk=trial.pk).exclude(status__in=Trial.FINISHED))
    rival = rivals.select_related("experiment").first()
    return str(rival) if rival else None
