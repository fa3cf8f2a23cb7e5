"""Ingest what runs on the cluster besides nodes: actors, workers, jobs, placement
groups, and the demand Ray cannot place yet (explained by dashboard.cluster.demand).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import models, transaction

from collectors.records import (
    ActorRecord,
    DemandRecord,
    JobRecord,
    PlacementGroupRecord,
    WorkerRecord,
)
from dashboard.cluster.demand import Holder, NodeCapacity, judge
from dashboard.cluster.models import (
    Actor,
    Cluster,
    Demand,
    Job,
    Node,
    PlacementGroup,
    Worker,
    settings_cluster_pk,
)
from dashboard.cluster.views_data import demands_payload, jobs_payload
from dashboard.core.bulk import fit_values
from dashboard.core.push import DEMANDS_GROUP, JOBS_GROUP, publish

DEAD_ACTOR_KEEP = timedelta(hours=24)


def mirror(model: type[models.Model], key: str, incoming: dict[str, dict[str, Any]],
           now: datetime, cluster: Cluster | None, *, stamp: tuple[str, ...] = ("updated_at",),
           created: tuple[str, ...] = ("first_seen_at",),
           touched: set[str] | None = None) -> set[str]:
    """Make `model`'s rows of `cluster` (default: the one RAY_ADDRESS points at) match
    `incoming` (key -> field values): create, update what changed (their keys added to
    `touched`). Returns the keys of its stored rows that Ray no longer lists."""
    cluster_pk = _pk(cluster)
    # What Ray sent, as the columns keep it (a job id of 200 characters, an actor repr
    # with a NUL): one such row would fail the whole poll's transaction, every poll.
    fitted: dict[str, dict[str, Any]] = {}
    for name, values in incoming.items():
        fitted.setdefault(fit_values(model, {key: name})[key],  # two cut alike: the first
                          fit_values(model, values))
    incoming = fitted
    existing = {getattr(row, key): row for row in model.objects.filter(cluster_id=cluster_pk)}
    changed = []
    for name, values in incoming.items():
        row = existing.get(name)
        if row is None or not any(getattr(row, f) != v for f, v in values.items()):
            continue
        for field, value in values.items():
            setattr(row, field, value)
        for field in stamp:
            setattr(row, field, now)
        changed.append(row)
    if touched is not None:
        touched.update(getattr(row, key) for row in changed)
        touched.update(name for name in incoming if name not in existing)
    if changed:  # bulk_update refuses an empty field list, which no incoming rows give
        fields = sorted({f for v in incoming.values() for f in v} | set(stamp))
        model.objects.bulk_update(changed, fields, batch_size=500)
    model.objects.bulk_create(
        [model(cluster_id=cluster_pk, **{key: name, **values,
                                         **dict.fromkeys(stamp + created, now)})
         for name, values in incoming.items() if name not in existing],
        batch_size=500,
    )
    return set(existing) - set(incoming)


def _pk(cluster: Cluster | None) -> int:
    return cluster.pk if cluster is not None else settings_cluster_pk()


def ingest_actors(records: Iterable[ActorRecord], now: datetime, cluster: Cluster | None = None,
                  *, complete: bool = True) -> None:
    """Mirror Ray's non-DEAD actors. One Ray stops listing is kept a day as DEAD: a
    process it leaves holding a GPU is then known as a dead actor's leftover. When Ray
    cut its list (`complete` false), an actor missing from it is not taken for gone."""
    incoming = {
        r.actor_id: {
            "state": r.state, "pid": r.pid, "node_id": r.node_id or "",
            "class_name": r.class_name[:500], "repr_name": r.repr_name[:500],
            "name": r.name[:500], "job_id": r.job_id or "",
            "placement_group_id": r.placement_group_id or "",
            "required_resources": r.required_resources, "ended_at": None,
            "death_reason": "", "death_message": "", "ended_on_purpose": None,  # alive again
            # Ray is asked for a start time once; None then means "as stored".
            **({"start_time": r.start_time} if r.start_time else {}),
        }
        for r in records
    }
    with transaction.atomic():
        gone = mirror(Actor, "actor_id", incoming, now, cluster)
        if not complete:  # Ray cut its list: an actor missing from it may well be alive
            gone = set()
        Actor.objects.filter(cluster_id=_pk(cluster), actor_id__in=gone).exclude(
            state="DEAD").update(
            state="DEAD", ended_at=now, updated_at=now)
        Actor.objects.filter(cluster_id=_pk(cluster), state="DEAD",
                             ended_at__lt=now - DEAD_ACTOR_KEEP).delete()


def ingest_workers(records: Iterable[WorkerRecord], now: datetime,
                   cluster: Cluster | None = None, *, complete: bool = True) -> None:
    incoming = {r.worker_id: {"node_id": r.node_id, "pid": r.pid,
                              "worker_type": r.worker_type, "job_id": r.job_id or ""}
                for r in records}
    with transaction.atomic():
        gone = mirror(Worker, "worker_id", incoming, now, cluster, stamp=(), created=())
        if not complete:  # Ray cut its list: a worker missing from it may well be alive
            return
        Worker.objects.filter(cluster_id=_pk(cluster), worker_id__in=gone).delete()


def ingest_jobs(records: Iterable[JobRecord], now: datetime,
                cluster: Cluster | None = None) -> None:
    incoming = {
        r.key: {"job_id": r.job_id or "", "submission_id": r.submission_id or "",
                "type": r.type, "status": r.status, "entrypoint": r.entrypoint,
                "message": r.message[:2000], "driver_pid": r.driver_pid,
                "driver_node_id": r.driver_node_id or "", "driver_node_ip": r.driver_node_ip or "",
                "start_time": r.start_time, "end_time": r.end_time}
        for r in records if r.key
    }
    touched: set[str] = set()
    with transaction.atomic():
        # Finished jobs stay.
        mirror(Job, "key", incoming, now, cluster, created=(), touched=touched)
        if touched:
            publish(JOBS_GROUP, "jobs", jobs_payload())


def ingest_placement_groups(records: Iterable[PlacementGroupRecord], now: datetime,
                            cluster: Cluster | None = None, *, complete: bool = True) -> None:
    incoming = {
        r.placement_group_id: {
            "name": r.name[:500], "state": r.state, "strategy": r.strategy or "",
            "bundles": [dict(b) for b in r.bundles], "creator_job_id": r.creator_job_id or "",
            "scheduling_state": r.scheduling_state or "", "created_at": r.created_at,
        }
        for r in records
    }
    with transaction.atomic():
        gone = mirror(PlacementGroup, "placement_group_id", incoming, now, cluster)
        if not complete:  # Ray cut its list: one missing from it may well be there
            return
        PlacementGroup.objects.filter(cluster_id=_pk(cluster),
                                      placement_group_id__in=gone).delete()


def ingest_demands(records: Iterable[DemandRecord], now: datetime,
                   cluster: Cluster | None = None) -> None:
    """Store pending demand with a verdict: infeasible, or what it waits behind (on the
    same cluster's nodes)."""
    cluster_pk = _pk(cluster)
    nodes = capacities(cluster_pk)
    holders = resource_holders(cluster_pk)
    incoming = {}
    for r in records:
        verdict = judge(r.bundles, r.strategy, r.infeasible, nodes, holders, r.job_id)
        incoming[f"{r.kind}:{r.key}"[:500]] = {
            "kind": r.kind, "key": r.key[:500], "name": r.name[:500],
            "bundles": [dict(b) for b in r.bundles], "count": r.count,
            "strategy": r.strategy or "", "job_id": r.job_id or "",
            "ray_infeasible": r.infeasible, "feasible": verdict.feasible,
            "explanation": verdict.explanation, "blockers": verdict.blockers,
            "queued": verdict.queued, "lead": verdict.lead,
        }
    with transaction.atomic():
        existing = {f"{d.kind}:{d.key}": d for d in Demand.objects.filter(cluster_id=cluster_pk)}
        gone = [d.pk for k, d in existing.items() if k not in incoming]
        Demand.objects.filter(pk__in=gone).delete()
        changed = bool(gone)
        for name, values in incoming.items():
            row = existing.get(name)
            if row is not None and row.queued and not values["queued"]:
                values["queue_left_at"] = now
            if row is None:
                Demand.objects.create(cluster_id=cluster_pk, first_seen_at=now, updated_at=now,
                                      **values)
                changed = True
            elif any(getattr(row, f) != v for f, v in values.items()):
                Demand.objects.filter(pk=row.pk).update(updated_at=now, **values)
                changed = True
        if changed:
            publish(DEMANDS_GROUP, "demands", demands_payload)


def capacities(cluster_pk: int | None = None) -> list[NodeCapacity]:
    out = []
    nodes = Node.objects.filter(state=Node.ALIVE)
    for node in nodes if cluster_pk is None else nodes.filter(cluster_id=cluster_pk):
        total = {k: float(v["total"]) for k, v in node.resources.items()}
        used = {k: float(v["used"]) for k, v in node.resources.items() if v.get("used") is not None}
        out.append(NodeCapacity(node.node_id, node.node_ip, total, used))
    return out


# Who an actor is to a person, by actor id, among the (actor, node IP) pairs asked about:
# registered in AppConfig.ready() by the apps above this one, which it does not import
# (dashboard.trials: "trial T (experiment)"). Names what a pending demand waits behind;
# an actor it names counts as a watched trial (dashboard.cluster.demand: "queued").
ProcessNames = Callable[[Sequence[tuple[Actor, str]]], Mapping[str, str]]
_process_names: list[ProcessNames] = []


def register_process_names(names: ProcessNames) -> None:
    if names not in _process_names:
        _process_names.append(names)


def resource_holders(cluster_pk: int | None = None) -> list[Holder]:
    """Alive actors with the resources they hold, named as a person knows them."""
    actors = Actor.objects.filter(state="ALIVE").exclude(required_resources={})
    nodes = Node.objects.all()
    if cluster_pk is not None:
        actors, nodes = actors.filter(cluster_id=cluster_pk), nodes.filter(cluster_id=cluster_pk)
    actors = list(actors)
    ips = dict(nodes.values_list("node_id", "node_ip"))
    names: dict[str, str] = {}
    for named in _process_names:
        names.update(named([(a, ips.get(a.node_id, "")) for a in actors]))
    holders = []
    for actor in actors:
        name = names.get(actor.actor_id)
        holders.append(Holder(name or f"actor {actor.label} {actor.actor_id[:8]}",
                              actor.node_id, actor.required_resources, actor.job_id,
                              trial=name is not None))
    return holders
