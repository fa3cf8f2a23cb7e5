"""Ray Train V2 runs, as Train's state API lists them (collectors/raytrain.py): mirrored
at each Ray poll, with each run's status and the workers of its latest attempt (rank,
node, pid, GPU ids). A run read from its ranks' own Ray Train logs is tied to its listed
run by its job and name (dashboard/trials/runs.py): its status and process (rank 0's)
come from here.

Ray keeps these only for runs whose driver had RAY_TRAIN_ENABLE_STATE_TRACKING=1. A run
without it is read all the same, from its ranks' own Ray Train logs
(collectors/agent/console_runs.py): tracking adds Train's status and attempts.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime, timedelta

from django.db import transaction

from collectors.raytrain import TrainListing, parse_train_runs
from collectors.records import TrainRunRecord
from collectors.runformats import train_run_dir
from dashboard.cluster.models import Cluster, TrainRun
from dashboard.cluster.workload import mirror
from dashboard.core.push import jsonable, publish, train_group

# Train's state API is asked every TRAIN_EVERY_S, not every Ray poll: its state actor keeps
# every run since the head started, and the dashboard looks up actors for each of them on
# every request, so its cost grows with the cluster's history.
TRAIN_EVERY_S = 10.0
_asked_at: dict[str, datetime] = {}  # cluster name -> when its Train runs were last asked
_said: dict[int, list[str]] = {}  # cluster pk -> what the strip said of them then


def train_due(cluster: str, now: datetime) -> bool:
    """Whether this poll of `cluster` asks Train's state API (and then it is asked)."""
    last = _asked_at.get(cluster)
    if last is not None and timedelta(0) <= now - last < timedelta(seconds=TRAIN_EVERY_S):
        return False
    _asked_at[cluster] = now
    return True


def ingest_train_runs(listing: TrainListing, now: datetime, cluster: Cluster) -> list[str]:
    """Mirror the runs the API lists (none while it keeps none); what the status strip
    should say of them. A listing that failed, or was not asked this poll, leaves the rows
    as they were (and the strip says what it said)."""
    if listing.skipped:
        return _said.get(cluster.pk, [])
    _said[cluster.pk] = said = _ingest(listing, now, cluster)
    return said


def _ingest(listing: TrainListing, now: datetime, cluster: Cluster) -> list[str]:
    if listing.problem is not None:
        return [f"Ray Train's state API: {listing.problem}"]
    records = parse_train_runs(listing)
    incoming = {r.run_id: _fields(r) for r in records}
    touched: set[str] = set()
    with transaction.atomic():
        gone = mirror(TrainRun, "run_id", incoming, now, cluster, created=(),
                      touched=touched)
        TrainRun.objects.filter(cluster=cluster, run_id__in=gone).delete()
        # A run's page shows its workers as they change (a restart's new attempt).
        runs = set(TrainRun.objects.filter(cluster=cluster, run_id__in=touched)
                   .values_list("job_id", "name"))
        for job, name in runs:
            publish(train_group(cluster.pk, job, train_run_dir(name)), "train",
                    lambda job=job, name=name: train_payload(newest_run(cluster.pk, job,
                                                                        name)))
    return []


def newest_run(cluster_pk: int, job_id: str, name: str) -> TrainRun | None:
    """The run of this name in this job a page shows: the newest (a name run again lists
    twice)."""
    return TrainRun.objects.filter(cluster_id=cluster_pk, job_id=job_id, name=name
                                   ).order_by("started_at", "pk").last()


def train_payload(row: TrainRun | None) -> dict[str, object] | None:
    """A run as its page shows it: status, attempts and its latest attempt's workers
    (rank, node, pid, GPU ids)."""
    if row is None:
        return None
    return jsonable({"run_id": row.run_id, "status": row.status,
                     "status_detail": row.status_detail, "attempts": row.attempts,
                     "started_at": row.started_at, "ended_at": row.ended_at,
                     "workers": row.workers})


def _fields(run: TrainRunRecord) -> dict[str, object]:
    return {"name": run.name, "status": run.status, "status_detail": run.status_detail,
            "job_id": run.job_id, "controller_actor_id": run.controller_actor_id,
            "started_at": run.started_at, "ended_at": run.ended_at, "attempts": run.attempts,
            "workers": [{**asdict(w), "gpu_ids": list(w.gpu_ids)} for w in run.workers]}
