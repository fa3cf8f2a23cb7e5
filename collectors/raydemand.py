"""Jobs, placement groups and the work Ray cannot place yet, parsed from the
replies fetch_cluster() (collectors/raystate.py) already holds. Pure: no I/O.

Where each comes from in Ray 2.60's dashboard:
- jobs: GET /api/jobs/ (the Jobs API's JobDetails list);
- placement groups: GET /api/v0/placement_groups, REMOVED filtered out by Ray;
  `stats.scheduling_state` is Ray's verdict ("INFEASIBLE", "NO_RESOURCES", ...);
- pending actors: the actors reply, state PENDING_CREATION;
- pending task shapes: GET /api/cluster_status,
  data.clusterStatus.loadMetricsReport.resourceDemand = [[shape, count], ...].
  The autoscaler (v1) merges waiting and infeasible requests into that one list,
  so Ray does not say which shapes are infeasible: infeasible stays None there.
  An autoscaler v2 head writes no clusterStatus at all: then there are no shapes.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any
from urllib.parse import urlparse

from collectors.http import SourceError
from collectors.raystate import ClusterReply, _dig, _from_ms, parse_actors
from collectors.records import ActorRecord, DemandRecord, JobRecord, PlacementGroupRecord

# Ray's placement group scheduling states that settle feasibility; the others
# (QUEUED, SCHEDULING_STARTED, ...) say nothing about it.
PG_FEASIBILITY = {"INFEASIBLE": True, "NO_RESOURCES": False}

Bundle = dict[str, float]


def parse_jobs(reply: ClusterReply) -> list[JobRecord]:
    """One record per job, read field by field: the reply also carries each job's
    runtime_env and metadata, which raywatch does not keep."""
    records = [_job(row) for row in reply.jobs if isinstance(row, dict)]
    return sorted(records, key=lambda r: r.key)


def _job(row: dict[str, Any]) -> JobRecord:
    driver = row.get("driver_info") or {}
    return JobRecord(
        job_id=row.get("job_id") or None,
        submission_id=row.get("submission_id") or None,
        type=row.get("type") or "UNKNOWN",
        status=row.get("status") or "UNKNOWN",
        entrypoint=row.get("entrypoint") or "",
        message=row.get("message") or "",
        # driver_info exists only once the entrypoint has called ray.init().
        driver_pid=_int(driver.get("pid")),
        driver_node_id=row.get("driver_node_id") or None,
        # A submitted job whose entrypoint never joins Ray has no driver_info, but
        # Ray still says which node's agent runs it.
        driver_node_ip=driver.get("node_ip_address")
        or urlparse(row.get("driver_agent_http_address") or "").hostname,
        start_time=_from_ms(row.get("start_time")),
        end_time=_from_ms(row.get("end_time")),
    )


def parse_placement_groups(reply: ClusterReply) -> list[PlacementGroupRecord]:
    rows = _dig(reply.placement_groups, "data", "result", "result")
    if not isinstance(rows, list):
        raise SourceError("Ray state API: the placement groups reply has no data.result.result")
    strategies = _pending_pg_strategies(reply)
    records = []
    for row in rows:
        if not isinstance(row, dict) or not row.get("placement_group_id"):
            continue
        bundles = tuple(_bundle(b.get("unit_resources")) for b in row.get("bundles") or [])
        waiting = row.get("state") in ("PENDING", "RESCHEDULING")
        records.append(
            PlacementGroupRecord(
                placement_group_id=row["placement_group_id"],
                name=row.get("name") or "",
                state=row.get("state") or "UNKNOWN",
                # The state API leaves the strategy out (Ray 2.60): only a waiting
                # group's can be read back, from the autoscaler's report. None
                # otherwise, although the record's annotation says str.
                strategy=strategies.get(_signature(bundles)) if waiting else None,
                bundles=bundles,
                creator_job_id=row.get("creator_job_id") or None,
                scheduling_state=_dig(row, "stats", "scheduling_state") or None,
                created_at=_from_ns(_dig(row, "stats", "creation_request_received_ns")),
            )
        )
    return sorted(records, key=lambda r: r.placement_group_id)


def _pending_pg_strategies(reply: ClusterReply) -> dict[tuple, str | None]:
    """Bundle multiset -> strategy, from loadMetricsReport.pgDemand =
    [[{"bundles": [[bundle, n], ...], "strategy": "PACK"}, count], ...]; None where
    groups with the same bundles wait with different strategies."""
    seen: dict[tuple, set[str]] = {}
    for entry, _count in _pairs(_load_report(reply).get("pgDemand")):
        if not isinstance(entry, dict):
            continue
        bundles = [_bundle(b) for b, n in _pairs(entry.get("bundles")) for _ in range(int(n))]
        seen.setdefault(_signature(bundles), set()).add(str(entry.get("strategy")))
    return {sig: next(iter(s)) if len(s) == 1 else None for sig, s in seen.items()}


def parse_demands(reply: ClusterReply) -> list[DemandRecord]:
    actors = [a for a in parse_actors(reply) if a.state == "PENDING_CREATION"]
    groups = [g for g in parse_placement_groups(reply) if g.state == "PENDING"]
    demands = (
        # An actor inside a placement group runs on resources the group reserves:
        # the group is the demand, counting the actor too would count it twice.
        [_actor_demand(a) for a in actors if not a.placement_group_id]
        + [_group_demand(g) for g in groups]
        + _task_demands(reply, [a for a in actors if not a.placement_group_id])
    )
    return sorted(demands, key=lambda d: (d.kind, d.key))


def _actor_demand(actor: ActorRecord) -> DemandRecord:
    return DemandRecord(
        kind="actor",
        key=actor.actor_id,
        name=actor.repr_name or actor.class_name,
        bundles=(_bundle(actor.required_resources),),
        infeasible=None,  # the actors reply has no scheduling verdict
        job_id=actor.job_id,
    )


def _group_demand(group: PlacementGroupRecord) -> DemandRecord:
    return DemandRecord(
        kind="placement_group",
        key=group.placement_group_id,
        name=group.name,
        bundles=group.bundles,
        infeasible=PG_FEASIBILITY.get(group.scheduling_state or ""),
        job_id=group.creator_job_id,
        strategy=group.strategy,
    )


def _task_demands(reply: ClusterReply, pending_actors: list[ActorRecord]) -> list[DemandRecord]:
    """resourceDemand counts task and actor-creation requests together, by shape.
    Pending actors are listed one by one already, so each takes one off the count
    of the shape equal to its required resources (which is its creation shape)."""
    counts: Counter[tuple] = Counter()
    shapes: dict[tuple, Bundle] = {}
    for shape, count in _pairs(_load_report(reply).get("resourceDemand")):
        bundle = _bundle(shape)
        counts[_signature([bundle])] += int(count)
        shapes[_signature([bundle])] = bundle
    for actor in pending_actors:
        counts[_signature([_bundle(actor.required_resources)])] -= 1
    return [
        DemandRecord(
            kind="task", key=_shape_key(shapes[sig]), name="", bundles=(shapes[sig],), count=n
        )
        for sig, n in counts.items()
        if n > 0 and sig in shapes
    ]


def _load_report(reply: ClusterReply) -> dict[str, Any]:
    report = _dig(reply.status, "data", "clusterStatus", "loadMetricsReport")
    return report if isinstance(report, dict) else {}


def _pairs(value: Any) -> list[tuple[Any, Any]]:
    """Ray's [[item, count], ...] lists, skipping anything malformed."""
    if not isinstance(value, list):
        return []
    return [(p[0], p[1]) for p in value if isinstance(p, list | tuple) and len(p) == 2]


def _bundle(resources: Any) -> Bundle:
    if not isinstance(resources, dict):
        return {}
    return {str(k): float(v) for k, v in sorted(resources.items())}


def _signature(bundles: Any) -> tuple:
    """An order-free key for a list of bundles, as Ray's freq_of_dicts groups them."""
    return tuple(sorted(Counter(tuple(sorted(b.items())) for b in bundles).items()))


def _shape_key(bundle: Bundle) -> str:
    return ",".join(f"{name}:{amount:g}" for name, amount in sorted(bundle.items()))


def _int(value: Any) -> int | None:
    try:
        return int(value) or None
    except (TypeError, ValueError):
        return None


def _from_ns(value: Any) -> datetime | None:
    try:
        ns = int(value)
    except (TypeError, ValueError):
        return None
    return _from_ms(ns // 1_000_000)
