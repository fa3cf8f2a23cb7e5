"""What needs an operator now, as JSON-ready data: the home page, GET /api/triage/ and
its socket carry this. Read-only; each line says where to act."""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import datetime
from typing import Any

from django.urls import reverse
from django.utils import timezone

from dashboard.alerts.models import Silence, silenced_by
from dashboard.cluster.views_data import demands_payload
from dashboard.core.health import health_payload
from dashboard.gpus.views_data import gpu_payload, gpus_in
from dashboard.incidents.models import SEVERITIES, Incident
from dashboard.trials.models import Trial
from dashboard.trials.serializers import HEALTH_NAMES, HEALTH_ORDER

GPU_ATTENTION = ("orphan", "hardware", "idle", "hot", "stale")  # worst first
FIRING_SHOWN = 50


def triage_payload(now: datetime | None = None, cluster: str | None = None) -> dict[str, Any]:
    """What needs an operator now, of every cluster or of the cluster named `cluster`."""
    now = now or timezone.now()
    firing = Incident.objects.filter(state=Incident.FIRING)
    if cluster:
        firing = firing.filter(cluster__name=cluster)
    firing = list(firing.select_related("trial", "trial__experiment").order_by("-opened_at"))
    silences = Silence.active_at(now)
    gpus = gpu_payload(gpus_in(cluster), now)
    return {
        "at": now.isoformat(),
        "incidents": _incidents(firing, silences, now),
        "trials": _unhealthy_trials(firing, now),
        "demands": _demands(cluster),
        "gpus": _gpus(gpus, firing),
        "sources": health_payload(),
        "simulated": any(g["simulated"] for g in gpus),
    }


def _age_s(since: datetime | None, now: datetime) -> float | None:
    return None if since is None else round(max(0.0, (now - since).total_seconds()), 1)


def _incidents(firing: list[Incident], silences: list[Silence], now: datetime
               ) -> dict[str, Any]:
    """Firing incidents, most severe first, then newest; counts per severity."""
    rank = {s: i for i, s in enumerate(reversed(SEVERITIES))}
    ordered = sorted(firing, key=lambda i: (rank.get(i.severity, len(rank)),
                                            -i.opened_at.timestamp()))
    rows = []
    for incident in ordered[:FIRING_SHOWN]:
        silence = silenced_by(incident, silences)
        rows.append({
            "id": incident.pk, "kind": incident.kind, "severity": incident.severity,
            "summary": incident.summary, "subject": incident.subject,
            "experiment": incident.experiment, "node_ip": incident.node_ip,
            "age_s": _age_s(incident.opened_at, now),
            "acknowledged": incident.acknowledged_at is not None,
            "silenced": silence is not None,
            "url": reverse("incident", args=[incident.pk]),
        })
    counts = Counter(i.severity for i in firing)
    return {"rows": rows, "total": len(firing),
            "by_severity": {s: counts.get(s, 0) for s in reversed(SEVERITIES)},
            "url": reverse("alerts") + "?state=firing"}


def _unhealthy_trials(firing: list[Incident], now: datetime) -> list[dict[str, Any]]:
    """One row per trial with a firing trial incident: its problems and since when."""
    by_trial: dict[int, list[Incident]] = defaultdict(list)
    trials: dict[int, Trial] = {}
    for incident in firing:
        if incident.kind in HEALTH_NAMES and incident.trial is not None:
            by_trial[incident.trial.pk].append(incident)
            trials[incident.trial.pk] = incident.trial
    rows = []
    for pk, incidents in by_trial.items():
        trial = trials[pk]
        incidents.sort(key=lambda i: HEALTH_ORDER.index(i.kind))
        since = min(i.opened_at for i in incidents)
        rows.append({
            "trial_id": trial.trial_id, "experiment": trial.experiment.name,
            "status": trial.status, "problems": [HEALTH_NAMES[i.kind] for i in incidents],
            "summary": incidents[0].summary, "since_s": _age_s(since, now),
            "silent_s": _age_s(trial.last_ingested_at, now) if trial.status == "RUNNING"
            else None,
            "node_ip": trial.node_ip, "iteration": trial.iteration,
            "url": reverse("trial", args=[pk]),
            "incident_url": reverse("incident", args=[incidents[0].pk]),
        })
    labels = [HEALTH_NAMES[k] for k in HEALTH_ORDER]
    rows.sort(key=lambda r: (labels.index(r["problems"][0]), -(r["since_s"] or 0)))
    return rows


def _demands(cluster: str | None) -> dict[str, Any]:
    """Pending demand, never-placeable first, then the longest waiting. A search's trials
    queued behind its own running ones need nobody: counted, not listed."""
    demands = [d for d in demands_payload() if not cluster or d["cluster"] == cluster]
    rows = [{"kind": d["kind"], "name": d["label"], "key": d["key"], "bundles": d["bundles"],
             "count": d["count"], "infeasible": d["feasible"] is False or bool(d["ray_infeasible"]),
             "explanation": d["explanation"], "waiting_s": d["waiting_s"]}
            for d in demands if not d["queued"]]
    rows.sort(key=lambda r: (not r["infeasible"], -r["waiting_s"]))
    return {"rows": rows, "queued": len(demands) - len(rows), "url": reverse("demands")}


def _gpus(gpus: list[dict[str, Any]], firing: list[Incident]) -> dict[str, Any]:
    states = Counter(g["state"] for g in gpus)
    idle_in_step = {i.subject for i in firing if i.kind == "gpu_idle_during_step"}
    attention = [g for g in gpus if g["state"] in GPU_ATTENTION]
    attention.sort(key=lambda g: (GPU_ATTENTION.index(g["state"]), g["node"], g["index"]))
    return {
        "total": len(gpus), "states": dict(states),
        "idle_during_step": len(idle_in_step),
        "attention": [{"uuid": g["uuid"], "node": g["node"], "index": g["index"],
                       "state": g["state"], "utilization": g["utilization"],
                       "memory_used": g["memory_used"], "owner": g["owner"],
                       "simulated": g["simulated"], "url": g["url"]}
                      for g in attention],
        "url": reverse("gpus"),
    }
