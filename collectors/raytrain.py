"""Ray Train V2 runs, from Train's state API on the dashboard (docs/ray-facts.md, "Ray
Train V2 runs"): `GET /api/train/v2/runs/v1` answers `{"train_runs": [...]}`, newest
first, each run with its status and its attempts, each attempt with its workers (world
rank, node, pid, GPU ids). Ray keeps these only where a run's driver had
RAY_TRAIN_ENABLE_STATE_TRACKING=1 (off by default): until such a run has started on the
cluster, the dashboard answers HTTP 500 "Train state data is not available…".

fetch_train_runs() does the I/O through the fetch it is given (collectors.raystate's,
with the cluster's token); parse_train_runs() is pure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from collectors.http import SourceError
from collectors.records import TrainRunRecord, TrainWorkerRecord

TRAIN_RUNS = "/api/train/v2/runs/v1"
# What the dashboard says while no Train state actor exists (ray/dashboard/modules/train/
# train_head.py): tracking is off, or no tracked run has started since the head did.
NOT_TRACKED = "Train state data is not available"


@dataclass(frozen=True)
class TrainListing:
    """What one poll learnt from Train's state API: its reply, or that it keeps no runs
    (`tracked` False), or why it could not be read (`problem`)."""

    reply: dict[str, Any] | None = None
    tracked: bool = True
    problem: str | None = None
    skipped: bool = False  # not asked this poll (dashboard/cluster/trainruns.train_due)


def fetch_train_runs(fetch: Callable[[str], dict[str, Any]]) -> TrainListing:
    """Ask the dashboard. A failure is this listing's, never the whole Ray poll's; a
    dashboard without the route (404: a Ray before Train V2's API) keeps no runs either."""
    try:
        return TrainListing(reply=fetch(TRAIN_RUNS))
    except SourceError as exc:
        if exc.status == 404 or (exc.status == 500 and NOT_TRACKED in exc.body):
            return TrainListing(tracked=False)
        return TrainListing(problem=exc.message)


def parse_train_runs(listing: TrainListing) -> list[TrainRunRecord]:
    """The runs the reply lists (none when it listed none), oldest first."""
    rows = (listing.reply or {}).get("train_runs")
    runs = [_run(row) for row in rows if isinstance(row, dict) and row.get("id")] \
        if isinstance(rows, list) else []
    return sorted(runs, key=lambda r: (r.started_at or datetime.min.replace(tzinfo=UTC),
                                       r.run_id))


def _run(row: dict[str, Any]) -> TrainRunRecord:
    attempts = [a for a in row.get("attempts") or [] if isinstance(a, dict)]
    workers = attempts[-1].get("workers") if attempts else None  # Ray keeps them in order
    return TrainRunRecord(
        run_id=str(row["id"])[:64], name=_text(row.get("name"), 255),
        status=_text(row.get("status"), 16), status_detail=_text(row.get("status_detail"), 2000),
        job_id=_text(row.get("job_id"), 64),
        controller_actor_id=_text(row.get("controller_actor_id"), 64),
        started_at=_from_ns(row.get("start_time_ns")), ended_at=_from_ns(row.get("end_time_ns")),
        attempts=len(attempts),
        workers=tuple(sorted((_worker(w) for w in workers or [] if isinstance(w, dict)),
                             key=lambda w: w.rank)))


def _worker(row: dict[str, Any]) -> TrainWorkerRecord:
    return TrainWorkerRecord(
        rank=_whole(row.get("world_rank")) or 0, local_rank=_whole(row.get("local_rank")),
        actor_id=_text(row.get("actor_id"), 64), node_id=_text(row.get("node_id"), 64),
        node_ip=_text(row.get("node_ip"), 64), pid=_whole(row.get("pid")) or None,
        gpu_ids=tuple(g for g in map(_whole, row.get("gpu_ids") or []) if g is not None),
        state=_text(row.get("status"), 16) or None)


def _text(value: Any, limit: int) -> str:
    return value[:limit] if isinstance(value, str) else ""


def _whole(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _from_ns(value: Any) -> datetime | None:
    ns = _whole(value)
    return datetime.fromtimestamp(ns / 1e9, tz=UTC) if ns and ns > 0 else None
