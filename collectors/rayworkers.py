"""What Ray's per-node reporter knows about a worker process, over the dashboard's HTTP
API (docs/ray-facts.md, "Worker processes and their stacks"): CPU and memory from
`GET /nodes/{node_id}`, and a py-spy dump from `GET /worker/traceback`.

fetch_*() do the I/O; parse_worker_stats() is pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from collectors.http import SourceError, get_text
from collectors.pystack import explain
from collectors.raystate import RayEndpoint, fetch_json

PROFILING_OFF = ("Ray's dashboard answered 403 to /worker/traceback: profiling is off; start "
                 "the Ray head with RAY_DASHBOARD_ENABLE_PROFILING=1 to allow it")


@dataclass(frozen=True)
class WorkerStats:
    pid: int
    create_time: float | None
    cpu_percent: float | None
    rss_bytes: int | None
    title: str


def fetch_worker_stats(endpoint: RayEndpoint, node_id: str) -> dict[int, WorkerStats]:
    return parse_worker_stats(fetch_json(endpoint, f"/nodes/{node_id}"))


def parse_worker_stats(reply: dict[str, Any]) -> dict[int, WorkerStats]:
    """pid -> the reporter's last reading of that worker process on the node."""
    detail = (reply.get("data") or {}).get("detail") or {}
    found: dict[int, WorkerStats] = {}
    for row in detail.get("workers") or []:
        if not isinstance(row, dict) or not isinstance(row.get("pid"), int):
            continue
        rss = (row.get("memoryInfo") or {}).get("rss")
        cmdline = [part for part in row.get("cmdline") or [] if part]
        found[row["pid"]] = WorkerStats(
            pid=row["pid"], create_time=_number(row.get("createTime")),
            cpu_percent=_number(row.get("cpuPercent")),
            rss_bytes=int(rss) if isinstance(rss, int | float) else None,
            title=str(cmdline[0])[:200] if cmdline else "")
    return found


def fetch_traceback(endpoint: RayEndpoint, pid: int, node_id: str = "", ip: str = "",
                    timeout_s: float = 15.0) -> str:
    """py-spy's dump of `pid` on its node, taken by that node's Ray reporter agent.
    SourceError with the reason when Ray cannot give it (profiling off: 403)."""
    query = urlencode({"pid": pid, **({"node_id": node_id} if node_id else {"ip": ip})})
    try:
        return get_text(f"{endpoint.dashboard_url}/worker/traceback?{query}",
                        headers=endpoint.headers(), timeout=timeout_s)
    except SourceError as exc:
        raise SourceError(endpoint.scrub(traceback_refusal(exc, pid)), status=exc.status) from None


def traceback_refusal(exc: SourceError, pid: int) -> str:
    if exc.status == 403 and "RAY_DASHBOARD_ENABLE_PROFILING" in exc.body:
        return PROFILING_OFF
    if exc.status == 401 or exc.auth:
        return "Ray's dashboard refused raywatch's token for /worker/traceback"
    if exc.status is not None:  # Ray's own words: py-spy's error, or a node it cannot reach
        return f"Ray's dashboard answered {exc.status} to /worker/traceback: " \
               f"{ray_said(exc.body, pid)}"
    return f"Ray's dashboard: {exc.message}"


def ray_said(body: str, pid: int) -> str:
    """Why, from Ray's answer: py-spy's stderr when it ran (Ray quotes it), else Ray's
    first line ("Failed to execute: py-spy is not installed", "Failed to get agent
    address for node at IP ...")."""
    _, marker, rest = body.partition("=== stderr ===")
    if marker:
        return explain(rest.partition("=== stdout ===")[0], pid)
    first = next((line.strip() for line in body.splitlines() if line.strip()), "")
    return first[:300] or "no reason given"


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        else None
