"""Ray state source: the cluster's nodes and their resources, over the
dashboard's HTTP API (the same endpoints `ray.util.state` and `ray status` use).

fetch_cluster() does the I/O; parse_nodes() is pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from collectors.http import SourceError, get_json
from collectors.records import ActorRecord, NodeRecord, ResourceUse

MAX_ROWS = 10_000  # the state API's own ceiling
# Only actors that are not DEAD: dead ones pile up by the thousand in long clusters.
LIVE_ACTORS = "filter_keys=state&filter_predicates=%21%3D&filter_values=DEAD"


@dataclass(frozen=True)
class RayEndpoint:
    dashboard_url: str  # http(s)://host:port, no trailing slash
    token: str | None = None
    timeout_s: float = 10.0

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}


@dataclass(frozen=True)
class ClusterReply:
    """The raw replies one poll needs, kept apart so parsing stays pure."""

    nodes: dict[str, Any]
    status: dict[str, Any]
    summary: dict[str, Any]
    actors: dict[str, Any]


def read_token(token: str | None, token_path: str | None) -> str | None:
    """The token Ray's own clients would use: RAY_AUTH_TOKEN, else the token file."""
    if token:
        return token.strip()
    if token_path:
        path = Path(token_path).expanduser()
        try:
            text = path.read_text().strip()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise SourceError(f"cannot read the Ray token file {path}: {exc.strerror}") from None
        return text or None
    return None


def fetch_json(endpoint: RayEndpoint, path: str) -> dict[str, Any]:
    try:
        reply = get_json(
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
    if not isinstance(reply, dict):
        raise SourceError(f"Ray dashboard {endpoint.dashboard_url}{path}: unexpected reply shape")
    if reply.get("result") is False:
        raise SourceError(f"Ray dashboard {endpoint.dashboard_url}{path}: {reply.get('msg')}")
    return reply


def fetch_cluster(endpoint: RayEndpoint) -> ClusterReply:
    return ClusterReply(
        nodes=fetch_json(endpoint, f"/api/v0/nodes?limit={MAX_ROWS}&detail=1"),
        status=fetch_json(endpoint, "/api/cluster_status"),
        summary=fetch_json(endpoint, "/nodes?view=summary"),
        actors=fetch_json(endpoint, f"/api/v0/actors?limit={MAX_ROWS}&detail=1&{LIVE_ACTORS}"),
    )


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
        )
        for row in rows
        if isinstance(row, dict) and row.get("actor_id")
    ]
    return sorted(records, key=lambda r: r.actor_id)


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
    )


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
