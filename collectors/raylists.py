"""Ray's list APIs past their row limit.

Ray 2.60's state API (/api/v0/actors, nodes, workers, placement_groups) cuts a list
twice. Its data source, the GCS, sends at most RAY_MAX_LIMIT_FROM_DATA_SOURCE rows
(10,000 unless the head's environment says otherwise) before the API server's own
filters run; the API server then keeps `limit` rows (at most
RAY_MAX_LIMIT_FROM_API_SERVER, 10,000). Its reply says so in `data.result`: `total`
(every entry the GCS holds, dead ones included), `num_after_truncation` (the entries
the GCS went through before it stopped), `num_filtered` (those that passed the
filters) and `result` (those sent).

The GCS applies only `=` filters on an actor's `state`, `job_id` and `actor_id` before
it cuts; every other filter (`state != DEAD`, `node_id`, ...) runs on what is left.
So raywatch lists the live actors in one request and, only when Ray cut that list,
asks again per live state, then per state and job, within MAX_ACTOR_REQUESTS. The
other lists have no filter that the GCS applies before cutting: a cut there is
reported, not worked around. Pure but for the `get` it is handed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from collectors.records import Truncation

MAX_ROWS = 10_000  # the state API's own ceiling on `limit`
# In the order an actor goes through them (RESTARTING ends ALIVE again), so that an
# actor moving on between two requests is seen twice (kept once) rather than missed.
LIVE_ACTOR_STATES = ("DEPENDENCIES_UNREADY", "PENDING_CREATION", "RESTARTING", "ALIVE")
MAX_ACTOR_REQUESTS = 64  # per poll: 640,000 rows at most, far past any cluster's actors

Filter = tuple[str, str, str]  # key, predicate ("=" or "!="), value


def list_query(*filters: Filter, detail: bool = True) -> str:
    """The query string of a state API list request for as many rows as Ray sends."""
    params: list[tuple[str, Any]] = [("limit", MAX_ROWS)]
    if detail:
        params.append(("detail", 1))
    for key, predicate, value in filters:
        params += [("filter_keys", key), ("filter_predicates", predicate),
                   ("filter_values", value)]
    return urlencode(params)


def rows_of(reply: Any) -> list[dict[str, Any]]:
    rows = _body(reply).get("result")
    return [row for row in rows if isinstance(row, dict)] if isinstance(rows, list) else []


def was_cut(reply: Any) -> bool:
    """Whether Ray left rows out of this reply: its source stopped before the end of
    its table, or more rows passed the filters than it sent."""
    body = _body(reply)
    total, examined, passed = (_int(body.get(k)) for k in
                               ("total", "num_after_truncation", "num_filtered"))
    source_cut = total is not None and examined is not None and examined < total
    limit_cut = passed is not None and passed > len(rows_of(reply))
    return source_cut or limit_cut


def truncation(listing: str, reply: Any) -> Truncation | None:
    if not was_cut(reply):
        return None
    return Truncation(listing, _int(_body(reply).get("total")), len(rows_of(reply)))


def calls_truncation(reply: Any) -> Truncation | None:
    """Ray's running calls cut at the row limit. Its task list's `total` is not a table
    size: Ray adds every task event it ever dropped (GcsTaskManager::HandleGetTaskEvents),
    so `was_cut` would call every list of a busy cluster cut (dropped_task_events says
    what was dropped); only a full page says rows were left out."""
    rows = rows_of(reply)
    return Truncation("running calls", None, len(rows)) if len(rows) >= MAX_ROWS else None


def dropped_task_events(reply: Any) -> int | None:
    """How many task events Ray dropped since its cluster started (its buffers were full:
    a call may be missing from the list), by its reply's count: `total` less the rows."""
    body = _body(reply)
    total, listed = _int(body.get("total")), _int(body.get("num_after_truncation"))
    return None if total is None or listed is None else max(total - listed, 0)


def ray_warnings(reply: Any) -> list[str]:
    """What Ray itself warned about in a list reply (a data source that did not answer)."""
    body = _body(reply)
    said = [body.get("partial_failure_warning"), *(body.get("warnings") or [])]
    return [str(text) for text in said if text]


@dataclass(frozen=True)
class ActorList:
    reply: dict[str, Any]  # shaped like Ray's reply; data.result.result holds every row
    truncation: Truncation | None  # None when raywatch got every live actor
    requests: int


def fetch_live_actors(get: Callable[[str], dict[str, Any]], job_ids: Iterable[str]) -> ActorList:
    """Every actor that is not DEAD. `get(query)` answers /api/v0/actors?query; `job_ids`
    are the cluster's jobs (an actor belongs to one of them)."""
    first = get(list_query(("state", "!=", "DEAD")))
    if not was_cut(first):
        return ActorList(first, None, 1)
    rows: dict[str, dict[str, Any]] = {}
    requests, complete = 1, True
    for state in LIVE_ACTOR_STATES:
        if requests >= MAX_ACTOR_REQUESTS:
            complete = False
            break
        part = get(list_query(("state", "=", state)))
        requests += 1
        _keep(rows, part)
        if was_cut(part):
            done, used = _by_job(get, state, _jobs_seen_first(part, job_ids),
                                 MAX_ACTOR_REQUESTS - requests, rows)
            requests += used
            complete = complete and done
    total = _int(_body(first).get("total"))
    merged = {"result": True, "msg": "", "data": {"result": {
        "total": total, "result": [rows[key] for key in sorted(rows)]}}}
    return ActorList(merged, None if complete else Truncation("actors", total, len(rows)),
                     requests)


def _by_job(get: Callable[[str], dict[str, Any]], state: str, jobs: list[str], budget: int,
            rows: dict[str, dict[str, Any]]) -> tuple[bool, int]:
    """The actors in `state`, one request per job. Returns (all of them fetched, requests)."""
    used = 0
    for job in jobs:
        if used >= budget:
            return False, used
        reply = get(list_query(("state", "=", state), ("job_id", "=", job)))
        used += 1
        _keep(rows, reply)
        if was_cut(reply):  # one job holds more than Ray sends: no finer filter exists
            return False, used
    return True, used


def _jobs_seen_first(reply: Any, job_ids: Iterable[str]) -> list[str]:
    """Jobs with actors in this reply first (they surely have some), then the others."""
    seen = sorted({str(row["job_id"]) for row in rows_of(reply) if row.get("job_id")})
    return seen + sorted(set(job_ids) - set(seen) - {""})


def _keep(rows: dict[str, dict[str, Any]], reply: Any) -> None:
    for row in rows_of(reply):
        if row.get("actor_id"):
            rows[str(row["actor_id"])] = row


def _body(reply: Any) -> dict[str, Any]:
    data = reply.get("data") if isinstance(reply, dict) else None
    body = data.get("result") if isinstance(data, dict) else None
    return body if isinstance(body, dict) else {}


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
