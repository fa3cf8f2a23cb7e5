"""Ray state source: the cluster's nodes, actors, jobs and placement groups, over
the dashboard's HTTP API (the same endpoints `ray.util.state`, `ray status` and
`ray job` use), so that a Django process never imports ray.

fetch_cluster() does the I/O (past Ray's 10,000-row cap: collectors/raylists.py);
parse_nodes() and parse_actors() here, parse_jobs(), parse_placement_groups() and
parse_demands() in collectors/raydemand.py, and parse_train_runs() in
collectors/raytrain.py (Ray Train V2 runs) are pure.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from collectors.http import SourceError, get_json
from collectors.raylists import (
    calls_truncation,
    fetch_live_actors,
    list_query,
    ray_warnings,
    truncation,
)
from collectors.raytrain import TrainListing, fetch_train_runs
from collectors.records import (
    ActorDeathRecord,
    ActorRecord,
    CallRecord,
    FailedCallRecord,
    NodeRecord,
    RaySession,
    ResourceUse,
    Truncation,
    WorkerRecord,
)

# Live placement groups only: removed ones stay in the GCS table.
LIVE_PLACEMENT_GROUPS = ("state", "!=", "REMOVED")
# Live workers only. Lower-case on purpose: Ray hands the GCS only "True", so this one
# runs after the GCS's cut, and the reply's counts then say exactly whether it cut.
LIVE_WORKERS = ("is_alive", "=", "true")
# Running calls only, filtered in the GCS before its cut (Ray 2.60 pushes `state` down),
# without the detail columns (events, profiling data: kilobytes a row). Ray's driver task
# is left out by default.
RUNNING_CALLS = ("state", "=", "RUNNING")
# Actor ids per /logical/actors?ids= request: keeps the URL under aiohttp's 8 KiB line limit.
START_TIME_BATCH = 100


@dataclass(frozen=True)
class RayEndpoint:
    dashboard_url: str  # http(s)://host:port, no trailing slash
    token: str | None = None
    timeout_s: float = 10.0

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def scrub(self, text: str) -> str:
        """`text` (what the dashboard said) without the token, should it repeat it."""
        return text.replace(self.token, "***") if self.token else text


@dataclass(frozen=True)
class ClusterReply:
    """The raw replies one poll needs, kept apart so parsing stays pure."""

    nodes: dict[str, Any]
    status: dict[str, Any]
    summary: dict[str, Any]
    actors: dict[str, Any]
    placement_groups: dict[str, Any] = field(default_factory=dict)
    jobs: list[Any] = field(default_factory=list)  # /api/jobs/ answers a bare list
    workers: dict[str, Any] = field(default_factory=dict)
    # actor id -> the dashboard's actor table entry (it has startTime; the state API does not)
    actor_entries: dict[str, Any] = field(default_factory=dict)
    # The lists Ray cut at its row limit that raywatch could not complete.
    truncations: tuple[Truncation, ...] = ()
    warnings: tuple[str, ...] = ()  # what Ray's list replies warned about
    version: dict[str, Any] = field(default_factory=dict)  # GET /api/version
    calls: dict[str, Any] = field(default_factory=dict)  # /api/v0/tasks, the running ones
    train: TrainListing = field(default_factory=TrainListing)  # Ray Train V2 runs

    def complete(self, listing: str) -> bool:
        """Whether raywatch holds all of this list: what it lacks may still exist."""
        return all(cut.listing != listing for cut in self.truncations)


def fetch_json(endpoint: RayEndpoint, path: str) -> dict[str, Any]:
    reply = _fetch(endpoint, path)
    if not isinstance(reply, dict):
        raise SourceError(f"Ray dashboard {endpoint.dashboard_url}{path}: unexpected reply shape")
    if reply.get("result") is False:
        said = endpoint.scrub(str(reply.get("msg")))
        raise SourceError(f"Ray dashboard {endpoint.dashboard_url}{path}: {said}")
    return reply


def fetch_list(endpoint: RayEndpoint, path: str) -> list[Any]:
    reply = _fetch(endpoint, path)
    if not isinstance(reply, list):
        raise SourceError(f"Ray dashboard {endpoint.dashboard_url}{path}: unexpected reply shape")
    return reply


def _fetch(endpoint: RayEndpoint, path: str) -> Any:
    try:
        return get_json(
            endpoint.dashboard_url + path, headers=endpoint.headers(), timeout=endpoint.timeout_s
        )
    except SourceError as exc:
        if exc.auth:
            hint = (
                "the token raywatch sent was rejected: set RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH) "
                "to the cluster's token, the head node's ~/.ray/auth_token"
                if endpoint.token
                else "the cluster requires a token: set RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH "
                "(the head node's ~/.ray/auth_token)"
            )
            where = endpoint.dashboard_url
            raise SourceError(f"Ray dashboard {where}: {hint}", auth=True) from None
        raise


def fetch_cluster(
    endpoint: RayEndpoint, *, start_times_known: Collection[str] | None = None,
    train: bool = True,
) -> ClusterReply:
    """One poll's replies. Actor start times cost a second lookup of about 5 KB an
    actor (Ray 2.60's state API has none), so they are opt-in: pass the ids whose
    start time the caller already holds (it never changes while an actor is
    ALIVE), possibly none, and the other ALIVE actors' are fetched. parse_actors()
    gives start_time None to every actor not looked up."""
    # The Jobs API rather than the state API's /api/v0/jobs: both answer the same
    # JobDetails (driver_info.pid, driver_node_id), both load every job ever run
    # before filtering, but the state API then truncates at `limit` after sorting
    # by job id, so at scale it would drop arbitrary jobs.
    # First: a reply from a restarted head must not be taken for the session before it.
    version = fetch_json(endpoint, "/api/version")
    jobs = fetch_list(endpoint, "/api/jobs/")
    actors = fetch_live_actors(lambda query: fetch_json(endpoint, f"/api/v0/actors?{query}"),
                               _job_ids(jobs))
    lists = {
        "nodes": fetch_json(endpoint, f"/api/v0/nodes?{list_query()}"),
        "placement groups": fetch_json(
            endpoint, f"/api/v0/placement_groups?{list_query(LIVE_PLACEMENT_GROUPS)}"),
        "workers": fetch_json(endpoint,
                              f"/api/v0/workers?{list_query(LIVE_WORKERS, detail=False)}"),
    }
    calls = fetch_json(endpoint, f"/api/v0/tasks?{list_query(RUNNING_CALLS, detail=False)}")
    cuts = [actors.truncation, calls_truncation(calls)] + [
        truncation(name, reply) for name, reply in lists.items()]
    return ClusterReply(
        nodes=lists["nodes"],
        status=fetch_json(endpoint, "/api/cluster_status"),
        summary=fetch_json(endpoint, "/nodes?view=summary"),
        actors=actors.reply,
        placement_groups=lists["placement groups"],
        jobs=jobs,
        workers=lists["workers"],
        calls=calls,
        actor_entries=(
            {}
            if start_times_known is None
            else _fetch_actor_entries(endpoint, actors.reply, set(start_times_known))
        ),
        train=fetch_train_runs(lambda path: fetch_json(endpoint, path)) if train
        else TrainListing(skipped=True),
        truncations=tuple(cut for cut in cuts if cut is not None),
        # The calls' reply is left out: Ray's warnings there repeat, poll after poll, task
        # events dropped once; dashboard/cluster/calls.py says when more were.
        warnings=tuple(w for reply in (actors.reply, *lists.values()) for w in ray_warnings(reply)),
        version=version,
    )


def _job_ids(jobs: list[Any]) -> list[str]:
    return [str(job["job_id"]) for job in jobs if isinstance(job, dict) and job.get("job_id")]


def _fetch_actor_entries(
    endpoint: RayEndpoint, actors: dict[str, Any], known: set[str]
) -> dict[str, Any]:
    """The dashboard's actor table entries of the ALIVE actors not in `known`, a
    batch of ids per request: the unfiltered /logical/actors would also send every
    cached DEAD actor."""
    rows = _dig(actors, "data", "result", "result") or []
    alive = {
        row.get("actor_id") for row in rows if isinstance(row, dict) and row.get("state") == "ALIVE"
    }
    wanted = sorted(alive - known - {None})
    entries: dict[str, Any] = {}
    for start in range(0, len(wanted), START_TIME_BATCH):
        ids = ",".join(wanted[start : start + START_TIME_BATCH])
        reply = fetch_json(endpoint, f"/logical/actors?ids={ids}")
        entries.update(_dig(reply, "data", "actors") or {})
    return entries


def parse_workers(reply: ClusterReply) -> list[WorkerRecord]:
    """Live worker processes: who a GPU process belongs to when it is no actor."""
    rows = _dig(reply.workers, "data", "result", "result") or []
    records = [
        WorkerRecord(worker_id=row["worker_id"], node_id=row.get("node_id") or "",
                     pid=int(row["pid"]), worker_type=row.get("worker_type") or "WORKER",
                     job_id=row.get("job_id") or None)
        for row in rows
        if isinstance(row, dict) and row.get("worker_id") and row.get("pid")
    ]
    return sorted(records, key=lambda r: r.worker_id)


def parse_calls(reply: ClusterReply) -> list[CallRecord]:
    """The tasks and actor calls running now (none when Ray sent no such list)."""
    rows = _dig(reply.calls, "data", "result", "result") or []
    records = [
        CallRecord(task_id=str(row["task_id"])[:64], attempt=_whole(row.get("attempt_number")),
                   name=str(row.get("name") or row.get("func_or_class_name") or "?")[:200],
                   kind=str(row.get("type") or "")[:32],
                   job_id=str(row.get("job_id") or "")[:64] or None,
                   actor_id=str(row.get("actor_id") or "")[:64] or None,
                   node_id=str(row.get("node_id") or "")[:64] or None,
                   pid=_whole(row.get("worker_pid")) or None,
                   parent_task_id=str(row.get("parent_task_id") or "")[:64] or None)
        for row in rows
        if isinstance(row, dict) and row.get("task_id") and row.get("state") == "RUNNING"
        and row.get("type") != "DRIVER_TASK"
    ]
    return sorted(records, key=lambda r: (r.task_id, r.attempt))


# A failed call's message as kept: the traceback's end, where the exception is named.
FAILURE_MESSAGE_CHARS = 8000


def fetch_failed_calls(endpoint: RayEndpoint, job_id: str) -> dict[str, Any]:
    """The calls of one job that Ray lists as FAILED, with the detail columns (their end
    time, error type and message): few rows, asked when a run's trainer ended."""
    query = list_query(("job_id", "=", job_id), ("state", "=", "FAILED"))
    return fetch_json(endpoint, f"/api/v0/tasks?{query}")


def parse_failed_calls(reply: dict[str, Any], job_id: str) -> list[FailedCallRecord]:
    """The failed calls of `job_id` in a fetch_failed_calls reply, the first to fail
    first; a row of another job or state (whatever Ray sent) is left out."""
    rows = _dig(reply, "data", "result", "result") or []
    records = [
        FailedCallRecord(
            task_id=str(row["task_id"])[:64], attempt=_whole(row.get("attempt_number")),
            name=str(row.get("name") or row.get("func_or_class_name") or "?")[:200],
            job_id=job_id, actor_id=str(row.get("actor_id") or "")[:64] or None,
            node_id=str(row.get("node_id") or "")[:64] or None,
            pid=_whole(row.get("worker_pid")) or None,
            error_type=str(row.get("error_type") or "")[:64],
            message=str(row.get("error_message") or "")[-FAILURE_MESSAGE_CHARS:],
            failed_at=_from_ms(row.get("end_time_ms")))
        for row in rows
        if isinstance(row, dict) and row.get("task_id") and row.get("state") == "FAILED"
        and str(row.get("job_id") or "") == job_id and row.get("type") != "DRIVER_TASK"
    ]
    never = datetime.max.replace(tzinfo=UTC)
    return sorted(records, key=lambda r: (r.failed_at or never, r.task_id))


# Why an actor died, as Ray's death_cause says: ended on purpose (by its owner or a user),
# or not. A worker that exits through exit_actor() / __ray_terminate__ is WORKER_DIED with
# "Worker exit type: INTENDED_USER_EXIT" in the message (seen on Ray 2.60).
DEATH_ON_PURPOSE = frozenset({"RAY_KILL", "OUT_OF_SCOPE", "REF_DELETED"})
INTENDED_EXITS = frozenset({"INTENDED_USER_EXIT", "INTENDED_SYSTEM_EXIT"})
_EXIT_TYPE = re.compile(r"Worker exit type: ([A-Z_]{1,40})")
_DEATH_CONTEXTS = {"oom_context": "OUT_OF_MEMORY", "actor_unschedulable_context":
                   "UNSCHEDULABLE", "creation_task_failure_context": "CREATION_FAILED",
                   "runtime_env_failed_context": "RUNTIME_ENV_FAILED"}


def death_words(reason: str, message: str, crash: str = "") -> str:
    """Why an actor's process is gone, in words, from Ray's reason and its message's
    first `Worker exit type:` (Ray's own, before any text it quotes), and `crash`: how
    its own log says it died (collectors.raylogs.fatal_signal), when it was read."""
    found = _EXIT_TYPE.search(message)
    exit_type = found.group(1) if found else ""
    if crash and reason == "WORKER_DIED" and exit_type == "SYSTEM_ERROR":
        return f"its process died: {crash} (Ray: WORKER_DIED, SYSTEM_ERROR)"
    if reason == "NODE_DIED":
        return "its node died (Ray: NODE_DIED)"
    if reason == "OWNER_DIED":
        return "its owner died first (Ray: OWNER_DIED)"
    if reason == "OUT_OF_MEMORY":
        return "Ray's memory monitor killed it (Ray: OUT_OF_MEMORY)"
    if reason == "WORKER_DIED" and exit_type == "SYSTEM_ERROR":
        return ("its process died unexpectedly: the OOM killer, a signal such as SIGSEGV, "
                "or a crash (Ray: WORKER_DIED, SYSTEM_ERROR)")
    if reason == "WORKER_DIED" and exit_type == "USER_ERROR":
        return "its process exited with an error (Ray: WORKER_DIED, USER_ERROR)"
    return f"Ray: {reason}" + (f", {exit_type}" if exit_type else "")


def fetch_actor_death(endpoint: RayEndpoint, actor_id: str) -> dict[str, Any]:
    """One actor's row with the detail columns (its death_cause): asked once for an actor
    that ended while a trial was bound to its process."""
    return fetch_json(endpoint, f"/api/v0/actors?{list_query(('actor_id', '=', actor_id))}")


def parse_actor_death(reply: dict[str, Any], actor_id: str) -> ActorDeathRecord | None:
    """Why `actor_id` died, from a fetch_actor_death reply; None when Ray no longer lists
    it, or lists it alive, or says nothing of why."""
    rows = _dig(reply, "data", "result", "result") or []
    row = next((r for r in rows if isinstance(r, dict) and r.get("actor_id") == actor_id
                and r.get("state") == "DEAD"), None)
    cause = row.get("death_cause") if row else None
    if not isinstance(cause, dict):
        return None
    died = cause.get("actor_died_error_context")
    if isinstance(died, dict):
        message = str(died.get("error_message") or "")
        reason = str(died.get("reason") or "UNSPECIFIED")[:32]
        found = _EXIT_TYPE.search(message)
        exit_type = found.group(1) if found else ""
        return ActorDeathRecord(actor_id, reason, exit_type, message[:FAILURE_MESSAGE_CHARS],
                                reason in DEATH_ON_PURPOSE or exit_type in INTENDED_EXITS)
    for key, reason in _DEATH_CONTEXTS.items():
        context = cause.get(key)
        if isinstance(context, dict):
            message = str(context.get("error_message")
                          or context.get("formatted_exception_string") or "")
            return ActorDeathRecord(actor_id, reason, "", message[:FAILURE_MESSAGE_CHARS],
                                    False)
    return None


def _whole(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def parse_actors(reply: ClusterReply) -> list[ActorRecord]:
    rows = _dig(reply.actors, "data", "result", "result")
    if not isinstance(rows, list):
        raise SourceError("Ray state API: the actors reply has no data.result.result")
    records = [
        ActorRecord(
            actor_id=row["actor_id"],
            state=row.get("state") or "UNKNOWN",
            pid=int(row["pid"]) if row.get("pid") else None,
            node_id=row.get("node_id") or None,
            class_name=row.get("class_name") or "",
            repr_name=row.get("repr_name") or "",
            name=row.get("name") or "",
            job_id=row.get("job_id") or None,
            placement_group_id=row.get("placement_group_id") or None,
            required_resources={
                str(k): float(v) for k, v in (row.get("required_resources") or {}).items()
            },
            start_time=_from_ms(_dig(reply.actor_entries, row["actor_id"], "startTime")),
        )
        for row in rows
        if isinstance(row, dict) and row.get("actor_id")
    ]
    return sorted(records, key=lambda r: r.actor_id)


def parse_session(reply: ClusterReply) -> RaySession | None:
    """The session that answered (GET /api/version: {"version": "4", "ray_version":
    "2.60.0", "ray_commit": ..., "session_name": "session_2026-11-24_21-58-11_830629_15535"});
    None when the reply names none (a Ray older than raywatch knows)."""
    name = reply.version.get("session_name")
    if not isinstance(name, str) or not name:
        return None
    return RaySession(session_name=name[:200], ray_version=_text(reply.version, "ray_version"),
                      ray_commit=_text(reply.version, "ray_commit"))


def _text(data: dict[str, Any], key: str) -> str | None:
    value = data.get(key)
    return value[:64] if isinstance(value, str) and value else None


def parse_nodes(reply: ClusterReply) -> list[NodeRecord]:
    try:
        rows = reply.nodes["data"]["result"]["result"]
    except (KeyError, TypeError):
        raise SourceError("Ray state API: the nodes reply has no data.result.result") from None
    usage_by_node = _dig(reply.status, "data", "clusterStatus", "loadMetricsReport", "usageByNode")
    summary_rows = _dig(reply.summary, "data", "summary") or []
    summaries = {_dig(item, "raylet", "nodeId"): item for item in summary_rows}
    records = [
        _node_record(row, (usage_by_node or {}).get(row["node_id"]), summaries.get(row["node_id"]))
        for row in rows
    ]
    return sorted(records, key=lambda r: (not r.is_head, r.state != "ALIVE", r.node_ip, r.node_id))


def _node_record(row: dict[str, Any], usage: dict | None, summary: dict | None) -> NodeRecord:
    alive = row.get("state") == "ALIVE"
    resources = {
        name: ResourceUse(total=float(total), used=_used(name, usage) if alive else None)
        for name, total in (row.get("resources_total") or {}).items()
        if not name.startswith("node:")
    }
    mem = (summary or {}).get("mem") or []
    store_used = _dig(summary, "raylet", "objectStoreUsedMemory")
    store_total = resources.get("object_store_memory")
    store_stats = _dig(summary, "raylet", "storeStats") if alive else None
    return NodeRecord(
        node_id=row["node_id"],
        node_ip=row.get("node_ip") or "",
        hostname=(summary or {}).get("hostname") or row.get("node_name"),
        is_head=bool(row.get("is_head_node")),
        state=row.get("state") or "UNKNOWN",
        state_message=row.get("state_message"),
        started_at=_from_ms(row.get("start_time_ms")),
        ended_at=_from_ms(row.get("end_time_ms")),
        resources=resources,
        labels={str(k): str(v) for k, v in (row.get("labels") or {}).items()},
        cpu_percent=_float(summary.get("cpu")) if alive and summary else None,
        mem_total_bytes=int(mem[0]) if alive and len(mem) >= 4 else None,
        mem_used_bytes=int(mem[3]) if alive and len(mem) >= 4 else None,
        object_store_used_bytes=int(store_used) if alive and store_used is not None else None,
        object_store_total_bytes=int(store_total.total) if store_total else None,
        object_store_spilled_bytes=_store_counter(store_stats, "spilledBytesTotal"),
        object_store_restored_bytes=_store_counter(store_stats, "restoredBytesTotal"),
    )


def _store_counter(store_stats: Any, key: str) -> int | None:
    """A raylet ObjectStoreStats counter. The dashboard turns the protobuf into JSON
    without default values, so a counter still at zero is left out of a storeStats
    that is there: absent key means 0. No storeStats (stats not fetched yet, or a
    dead node) means unknown."""
    if not isinstance(store_stats, dict):
        return None
    try:
        return int(store_stats.get(key, 0))
    except (TypeError, ValueError):
        return None


def _used(name: str, usage: dict | None) -> float | None:
    """usageByNode maps a camelCased resource name to [used, total]."""
    if not usage:
        return None
    pair = usage.get(name) or usage.get(_camel(name))
    if not pair:
        return None
    return float(pair[0])


def _camel(name: str) -> str:
    return re.sub(r"_([a-z])", lambda m: m.group(1).upper(), name)


def _from_ms(value: Any) -> datetime | None:
    try:
        ms = int(value)
    except (TypeError, ValueError):
        return None
    return datetime.fromtimestamp(ms / 1000, tz=UTC) if ms > 0 else None


def _float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _dig(obj: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj
