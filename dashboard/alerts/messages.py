"""The neutral message every transport renders: what, where, since when, and links
back to raywatch (RAYWATCH_BASE_URL). The generic webhook sends it as it is."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from django.conf import settings
from django.urls import reverse

from dashboard.cluster.models import Cluster
from dashboard.incidents.models import Incident, severity_rank

# A grouped message lists at most this many incidents; the count says how many more.
MAX_LISTED = 500


def absolute(path: str) -> str:
    return settings.BASE_URL.rstrip("/") + path


def subject_path(incident: Incident) -> str:
    """The page of what the incident is about."""
    kind, _, rest = incident.subject.partition(":")
    if incident.trial_id:
        return reverse("trial", args=[incident.trial_id])
    if kind in ("gpu", "gpu_process") and rest:
        return reverse("gpu", args=[rest.split("/")[0]])
    if kind == "node" and rest:
        return reverse("node", args=[rest])
    if kind == "demand":
        return reverse("demands")
    return reverse("incident", args=[incident.pk])


def gpu_of(incident: Incident) -> str:
    if isinstance(incident.details, dict) and isinstance(incident.details.get("gpu"), str):
        return incident.details["gpu"]
    kind, _, rest = incident.subject.partition(":")
    return rest.split("/")[0] if kind in ("gpu", "gpu_process") else ""


def incident_item(incident: Incident, new: bool) -> dict[str, Any]:
    return {
        "id": incident.pk, "cluster": incident.cluster.name, "kind": incident.kind,
        "severity": incident.severity,
        "state": incident.state, "new": new, "subject": incident.subject,
        "summary": incident.summary, "experiment": incident.experiment,
        "node_ip": incident.node_ip, "trial_id": incident.trial.trial_id if incident.trial else "",
        "gpu": gpu_of(incident), "opened_at": incident.opened_at.isoformat(),
        "resolved_at": incident.resolved_at.isoformat() if incident.resolved_at else None,
        "acknowledged_by": (incident.acknowledged_by.get_username()
                            if incident.acknowledged_by else None),
        "url": absolute(reverse("incident", args=[incident.pk])),
        "subject_url": absolute(subject_path(incident)),
    }


def group_label(key: str) -> str:
    """"experiment asha" for experiment:asha (a cluster's prefix, CLUSTER/, left out: the
    message names its cluster)."""
    kind, _, value = key.partition(":")
    kind = kind.rpartition("/")[2]
    return f"{kind} {value}" if kind in ("experiment", "node") else value


def build_message(group_key: str, firing: list[Incident], resolved: list[Incident],
                  new_ids: set[int], repeat: bool = False) -> dict[str, Any]:
    status = Incident.FIRING if firing else Incident.RESOLVED
    ordered = sorted(firing, key=lambda i: (-severity_rank(i.severity), i.opened_at, i.pk))
    ordered += sorted(resolved, key=lambda i: (i.resolved_at, i.pk))
    label = group_label(group_key)
    cluster = ordered[0].cluster.name if ordered else settings.CLUSTER_NAME
    # Named where it tells something: raywatch watches (or watched) more than one cluster.
    where = f" on cluster {cluster}" if _many_clusters() else ""
    if firing:
        title = f"[FIRING:{len(firing)}] {label}{where}"
        if resolved:
            title += f" ({len(resolved)} resolved)"
    else:
        title = f"[RESOLVED:{len(resolved)}] {label}{where}"
    if repeat:
        title += " (still firing)"
    worst = max((i.severity for i in firing), key=severity_rank, default="info")
    return {
        "version": 1, "status": status, "repeat": repeat, "cluster": cluster,
        "group": {"key": group_key, "label": label},
        "title": title, "severity": worst,
        "url": absolute(reverse("alerts") + "?" + urlencode({"group": group_key},
                                                            quote_via=quote)),
        "firing": len(firing), "resolved": len(resolved),
        "incidents": [incident_item(i, i.pk in new_ids) for i in ordered[:MAX_LISTED]],
        "truncated": max(0, len(ordered) - MAX_LISTED),
    }


def _many_clusters() -> bool:
    return Cluster.objects.count() > 1


def test_message(channel_name: str, by: str) -> dict[str, Any]:
    return {
        "version": 1, "status": "test", "repeat": False,
        "group": {"key": "test", "label": "test"},
        "title": f"raywatch test message for channel {channel_name} (sent by {by})",
        "severity": "info", "url": absolute(reverse("alerts")),
        "firing": 0, "resolved": 0, "incidents": [], "truncated": 0,
    }
