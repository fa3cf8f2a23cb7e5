"""The tail of a Ray worker's log files (its stdout and stderr: what a trial printed),
through the dashboard's log API, `GET /api/v0/logs/file` (what `ray logs actor` and
`ray.util.state.get_log` call). Ray finds the file on the worker's node through that
node's agent, by the actor's id (its current or past worker) or by pid on a node.

fetch_log_tail() does the I/O; ray_log_refusal() turns Ray's answer into a reason.
"""

from __future__ import annotations

from urllib.parse import urlencode

from collectors.http import SourceError, get_text
from collectors.raystate import RayEndpoint

MAX_LINES = 2000
MAX_BYTES = 1 << 20
SUFFIXES = ("out", "err")


def fetch_log_tail(endpoint: RayEndpoint, suffix: str, lines: int, *, actor_id: str = "",
                   pid: int | None = None, node_id: str = "", node_ip: str = "") -> str:
    """The last `lines` lines of the worker's .out or .err file. An actor id finds the
    file by itself; a pid needs its node (id or address). SourceError with Ray's reason
    when Ray cannot give it."""
    if suffix not in SUFFIXES or not 0 < lines <= MAX_LINES:
        raise ValueError(f"suffix in {SUFFIXES}, lines from 1 to {MAX_LINES}")
    where: dict[str, str | int]
    if actor_id:
        where = {"actor_id": actor_id}
    elif pid is not None and (node_id or node_ip):
        where = {"pid": pid, **({"node_id": node_id} if node_id else {"node_ip": node_ip})}
    else:
        raise ValueError("an actor id, or a pid with its node")
    query = urlencode({**where, "lines": lines, "suffix": suffix, "filter_ansi_code": "true",
                       "timeout": max(1, int(endpoint.timeout_s))})
    try:
        return get_text(f"{endpoint.dashboard_url}/api/v0/logs/file?{query}",
                        headers=endpoint.headers(), timeout=endpoint.timeout_s,
                        max_bytes=MAX_BYTES)
    except SourceError as exc:
        raise SourceError(endpoint.scrub(ray_log_refusal(exc)), status=exc.status) from None


def ray_log_refusal(exc: SourceError) -> str:
    if exc.status == 401 or exc.auth:
        return "Ray's dashboard refused raywatch's token for its log API"
    if exc.status is not None:
        return f"Ray's log API answered {exc.status}: {_first_line(exc.body)}"
    return f"Ray's dashboard: {exc.message}"


def _first_line(body: str) -> str:
    """Ray's reason, e.g. 'Actor ID … not found.' or 'Could not find a log file. …'
    (the options it lists on the lines after are raywatch's own)."""
    lines = [line.strip() for line in body.splitlines() if line.strip()]
    useful = [line for line in lines if not line.startswith(("<", "Traceback", "File "))]
    return (useful[0] if useful else "no reason given")[:300]
