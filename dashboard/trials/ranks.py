"""The ranks of a multi-rank run (Ray Train): which processes they are, for a straggler
verdict to take each one's stacks (dashboard/agents/trialprobes.py).

Where Train's state API lists the run, its ranks are Train's (rank, pid, node); else each
rank's own Ray Train log, read on its node by that node's agent, said its rank (RunRank).
Either way a rank counts only while Ray lists its pid as a live RayTrainWorker actor of the
run's job on that node: what a log says labels a process Ray lists, never picks another.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from collectors.hostinfo import node_ip_address
from collectors.runformats import RANK_WORKER
from dashboard.cluster.models import Actor, Node
from dashboard.trials.models import RunRank, Trial
from dashboard.trials.runs import listed_train_runs

MAX_RANKS = 8  # ranks whose stacks one verdict takes: the laggards first, then the others


@dataclass(frozen=True)
class Rank:
    rank: int
    pid: int
    node_ip: str
    hostname: str
    step: int | None  # its last report, where its log said


def run_ranks(trial: Trial) -> tuple[int, list[Rank]]:
    """(world size, the run's live ranks, those that reported least first, at most
    MAX_RANKS of them, rank 0 among them)."""
    cluster = trial.experiment.cluster_id
    nodes = {n.node_id: n for n in Node.objects.filter(cluster_id=cluster)}
    listed = listed_train_runs([trial]).get((cluster, trial.trial_id))
    said: list[tuple[int, int, Node | None, int | None]] = []
    world = 0
    if listed is not None:
        for worker in listed.workers:
            if isinstance(worker.get("rank"), int) and isinstance(worker.get("pid"), int):
                said.append((worker["rank"], worker["pid"],
                             nodes.get(str(worker.get("node_id") or "")), None))
        world = len(listed.workers)
    else:
        rows = list(RunRank.objects.filter(trial=trial))
        where = rank_nodes(list(nodes.values()), rows)
        for row in rows:
            said.append((row.rank, row.pid, where.get(row.rank), row.step))
            world = max(world, row.world_size or 0, row.rank + 1)
    workers = {(a.node_id, a.pid) for a in Actor.objects.filter(
        cluster_id=cluster, class_name=RANK_WORKER, state="ALIVE",
        pid__in={pid for _, pid, _, _ in said})}
    ranks = [Rank(rank, pid, node.node_ip, node.hostname or "", step)
             for rank, pid, node, step in said
             if node is not None and (node.node_id, pid) in workers]
    ranks.sort(key=lambda r: (r.rank != 0, r.step if r.step is not None else -1, r.rank))
    return world, ranks[:MAX_RANKS]


def rank_nodes(nodes: list[Node], rows: list[RunRank]) -> dict[int, Node]:
    """The Ray node of each rank whose log was read there: by its agent's name (the node's
    host name, as agents are matched), or raywatch's own host ("")."""
    by_host = {n.hostname: n for n in nodes if n.hostname}
    here = settings.NODE_IP or node_ip_address()
    at_here = next((n for n in nodes if n.node_ip == here), None)
    found = {r.rank: by_host.get(r.node) if r.node else at_here for r in rows}
    return {rank: node for rank, node in found.items() if node is not None}
