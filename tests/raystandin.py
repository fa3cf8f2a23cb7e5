"""A stand-in for a Ray 2.60 dashboard with more actors than this machine can run: it
answers what raywatch's Ray poll asks, the way Ray does, its row limits included.

Ray's state API (dashboard/state_aggregator.py, state_manager.py, state_api_utils.py in
Ray 2.60; the GCS's GcsActorManager::HandleGetAllActorInfo): the GCS goes through its
table (actors: the live ones first, in hash order, then the dead it keeps), skips
those that fail an `=` filter it understands (actors: state, job_id, actor_id; workers:
is_alive=True) and stops after `source_limit` rows; the API server then applies every
filter, sorts by id and keeps `limit` (a `limit` over `api_limit` is a 400). The reply
carries `total`, `num_after_truncation`, `num_filtered`, `result`,
`partial_failure_warning` and `warnings`. tests/test_ray_standin_format.py checks this
against a real cluster whose head has RAY_MAX_LIMIT_FROM_DATA_SOURCE lowered, so that
its GCS cuts the same way at a few rows.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.receivers import JsonHandler, serve

RAY_LIMIT = 10_000  # RAY_MAX_LIMIT_FROM_DATA_SOURCE and RAY_MAX_LIMIT_FROM_API_SERVER
HEAD_NODE = "ab" * 28
STARTED_MS = 1_763_900_000_000


@dataclass(frozen=True)
class Listing:
    rows: list[dict[str, Any]]
    id_key: str
    source_filters: frozenset[tuple[str, str]] = frozenset()  # (key, value or "*")
    # Actors: skipped rows count in num_after_truncation (Ray adds the GCS's num_filtered).
    count_skipped: bool = False


@dataclass
class Cluster:
    """What the stand-in's Ray holds."""

    actors: list[dict[str, Any]] = field(default_factory=list)
    workers: list[dict[str, Any]] = field(default_factory=list)
    jobs: list[dict[str, Any]] = field(default_factory=list)
    nodes: list[dict[str, Any]] = field(default_factory=list)
    placement_groups: list[dict[str, Any]] = field(default_factory=list)
    tasks: list[dict[str, Any]] = field(default_factory=list)  # running calls, as listed


def hex_id(kind: str, n: int, width: int) -> str:
    """A deterministic id of Ray's width (actor 32 hex digits, job 8, node/worker 56)."""
    return hashlib.blake2b(f"{kind}:{n}".encode(), digest_size=width // 2).hexdigest()


def actor_row(n: int, job_id: str, state: str = "ALIVE",
              node_id: str = HEAD_NODE) -> dict[str, Any]:
    """An actor as Ray 2.60's /api/v0/actors?detail=1 lists it."""
    return {
        "actor_id": hex_id("actor", n, 32), "class_name": "Worker", "state": state,
        "job_id": job_id, "name": "", "node_id": node_id if state == "ALIVE" else None,
        "pid": 100_000 + n if state == "ALIVE" else 0, "ray_namespace": "standin",
        "serialized_runtime_env": "{}", "required_resources": {"CPU": 0.001},
        "death_cause": None, "is_detached": False, "placement_group_id": None,
        "repr_name": "", "num_restarts": "0",
        "num_restarts_due_to_lineage_reconstruction": "0",
        "num_restarts_due_to_node_preemption": "0",
        "call_site": None, "label_selector": {}, "fallback_strategy": None,
    }


def worker_row(actor: dict[str, Any]) -> dict[str, Any]:
    """An actor's worker process as /api/v0/workers (no detail) lists it: Ray 2.60's
    worker rows carry no job_id."""
    return {"worker_id": hex_id("worker", int(actor["pid"] or 0), 56), "is_alive": True,
            "worker_type": "WORKER", "exit_type": None, "node_id": actor["node_id"],
            "ip": "10.0.0.1", "pid": actor["pid"]}


def task_row(n: int, name: str, actor: dict[str, Any]) -> dict[str, Any]:
    """A call running on `actor` as Ray 2.60's /api/v0/tasks?detail=1 lists it (the
    state pushed down to the GCS: RUNNING)."""
    return {"task_id": hex_id("task", n, 48), "attempt_number": 0, "name": name,
            "func_or_class_name": name, "state": "RUNNING", "type": "ACTOR_TASK",
            "job_id": actor["job_id"], "actor_id": actor["actor_id"],
            "node_id": actor["node_id"], "worker_pid": actor["pid"],
            "worker_id": hex_id("worker", int(actor["pid"] or 0), 56),
            "parent_task_id": "ff" * 24, "error_type": None}


def placement_group_row(n: int, job_id: str, state: str = "CREATED") -> dict[str, Any]:
    """A placement group of one bundle as /api/v0/placement_groups?detail=1 lists it."""
    pg_id = hex_id("pg", n, 28) + job_id
    return {
        "placement_group_id": pg_id, "name": "", "creator_job_id": job_id, "state": state,
        "bundles": [{"bundle_id": {"placement_group_id": pg_id, "bundle_index": 0},
                     "unit_resources": {"CPU": 0.01}, "node_id": HEAD_NODE,
                     "label_selector": {}}],
        "is_detached": False, "stats": {"scheduling_state": "FINISHED"},
        "topology_strategy": {}, "topology_assignments": {},
    }


def job_row(job_id: str) -> dict[str, Any]:
    return {"type": "DRIVER", "job_id": job_id, "submission_id": None, "status": "RUNNING",
            "entrypoint": "python search.py", "message": "", "start_time": STARTED_MS,
            "end_time": None, "driver_info": {"id": job_id, "node_ip_address": "10.0.0.1",
                                              "pid": "4242"}}


def node_row() -> dict[str, Any]:
    return {"node_id": HEAD_NODE, "node_ip": "10.0.0.1", "is_head_node": True,
            "state": "ALIVE", "state_message": None, "node_name": "10.0.0.1",
            "resources_total": {"CPU": 64.0}, "labels": {}, "start_time_ms": STARTED_MS,
            "end_time_ms": 0}


def cluster_of(live_actors: int, jobs: int, dead_actors: int = 0) -> Cluster:
    """`live_actors` ALIVE actors spread over `jobs` jobs, one worker each."""
    job_ids = [hex_id("job", j + 1, 8) for j in range(jobs)]
    actors = [actor_row(n, job_ids[n % jobs]) for n in range(live_actors)]
    actors += [actor_row(live_actors + n, job_ids[n % jobs], "DEAD") for n in range(dead_actors)]
    return Cluster(actors=actors, workers=[worker_row(a) for a in actors if a["pid"]],
                   jobs=[job_row(j) for j in job_ids], nodes=[node_row()])


class RayStandIn:
    """Serves a Cluster on a free localhost port while in `running()`."""

    def __init__(self, cluster: Cluster, source_limit: int = RAY_LIMIT,
                 api_limit: int = RAY_LIMIT) -> None:
        self.cluster = cluster
        self.source_limit, self.api_limit = source_limit, api_limit
        self.requests: Counter[str] = Counter()  # path -> how many times asked
        # A restarted head is a new session: set this to play one.
        self.session_name = "session_2026-11-24_09-00-00_000001_4242"
        self.on_request: Callable[[str], None] | None = None  # called with each path first

    def listing(self, resource: str) -> Listing:
        c = self.cluster
        if resource == "actors":
            live = [a for a in c.actors if a["state"] != "DEAD"]
            dead = [a for a in c.actors if a["state"] == "DEAD"]
            random.Random(7).shuffle(live)  # the GCS's hash order: arbitrary, stable
            return Listing(live + dead, "actor_id", frozenset(
                {("state", "*"), ("job_id", "*"), ("actor_id", "*")}), count_skipped=True)
        if resource == "workers":
            return Listing(list(c.workers), "worker_id", frozenset({("is_alive", "True")}))
        if resource == "nodes":
            return Listing(list(c.nodes), "node_id")
        if resource == "tasks":  # Ray 2.60 pushes `state` down to the GCS
            return Listing(list(c.tasks), "task_id", frozenset({("state", "*")}))
        return Listing(list(c.placement_groups), "placement_group_id")

    def answer(self, path: str, query: dict[str, list[str]]) -> tuple[int, Any]:
        self.requests[path] += 1
        if self.on_request is not None:
            self.on_request(path)
        if path.startswith("/api/v0/"):
            return self.list_reply(self.listing(path.removeprefix("/api/v0/")), query)
        if path == "/api/jobs/":
            return 200, self.cluster.jobs
        if path == "/api/version":  # a bare object, as Ray sends it
            return 200, {"version": "4", "ray_version": "2.60.0",
                         "ray_commit": "b7f4259e944bf6959f721b106adc366ddfa0c356",
                         "session_name": self.session_name}
        if path == "/logical/actors":
            ids = (query.get("ids") or [""])[0].split(",")
            return 200, rest({"actors": {i: {"actorId": i, "startTime": STARTED_MS}
                                         for i in ids if i}})
        if path == "/api/cluster_status":
            usage = {n["node_id"]: {"CPU": [1.0, 64.0]} for n in self.cluster.nodes}
            return 200, rest({"clusterStatus": {"loadMetricsReport": {"usageByNode": usage}}})
        if path == "/nodes":
            return 200, rest({"summary": []})
        return 404, rest({}, ok=False, msg=f"no route {path}")

    def list_reply(self, listing: Listing, query: dict[str, list[str]]) -> tuple[int, Any]:
        limit = int((query.get("limit") or ["100"])[0])
        if limit > self.api_limit:
            return 400, rest({"result": None}, ok=False, msg=(
                f"Given limit {limit} exceeds the supported limit {self.api_limit}. Use a "
                "lower limit, or set the `RAY_MAX_LIMIT_FROM_API_SERVER` environment "
                "variable to a larger value."))
        filters = list(zip(query.get("filter_keys", []), query.get("filter_predicates", []),
                           query.get("filter_values", []), strict=True))
        at_source = [(k, v) for k, p, v in filters if p == "=" and (
            (k, "*") in listing.source_filters or (k, v) in listing.source_filters)]
        sent, skipped = [], 0
        for row in listing.rows:
            if len(sent) >= self.source_limit:
                break
            if all(matches(row, k, "=", v) for k, v in at_source):
                sent.append(row)
            else:
                skipped += 1
        kept = sorted((r for r in sent if all(matches(r, *f) for f in filters)),
                      key=lambda r: str(r[listing.id_key]))
        return 200, rest({"result": {
            "total": len(listing.rows),
            "num_after_truncation": len(sent) + (skipped if listing.count_skipped else 0),
            "num_filtered": len(kept), "result": kept[:limit],
            "partial_failure_warning": "", "warnings": None}})

    @contextmanager
    def running(self) -> Iterator[str]:
        """The stand-in's URL, serving until the block ends."""
        stand_in = self

        class Handler(JsonHandler):
            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                status, body = stand_in.answer(parts.path, parse_qs(parts.query))
                self.answer(body, status)

        server = serve(Handler)
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}"
        finally:
            server.shutdown()
            server.server_close()


def matches(row: dict[str, Any], key: str, predicate: str, value: str) -> bool:
    """Ray's do_filter: strings compare without case, booleans from their text."""
    if key not in row:
        return False
    equal = str(row[key]).lower() == value.lower()
    return equal if predicate == "=" else not equal


def rest(data: dict[str, Any], ok: bool = True, msg: str = "") -> dict[str, Any]:
    """Ray's dashboard envelope (dashboard/routes.py rest_response)."""
    return {"result": ok, "msg": msg, "data": data}
