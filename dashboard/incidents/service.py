"""Open, update and resolve incidents from detector findings.

One firing incident per (kind, subject): finding the same thing again updates
it. A firing incident of the evaluated kinds that no detector reports any more
is resolved: incidents resolve themselves when the condition clears.

Every change writes its timeline event in the same transaction; the events that
notify (opened, escalated, resolved) are the alert outbox (dashboard.alerts). After
the commit, `incident_changed` (signals.py) tells whoever subscribed: this module
imports nothing above it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Max, Q

from dashboard.cluster.models import Cluster, settings_cluster_pk
from dashboard.incidents.findings import Finding
from dashboard.incidents.models import Incident, IncidentEvent, severity_rank
from dashboard.incidents.signals import send_after_commit

# A condition that changes every evaluation (an idle counter) records an update on the
# timeline at most this often; a change of severity always does.
UPDATE_EVENT_EVERY = timedelta(minutes=10)


def sync_findings(kinds: Iterable[str], findings: Iterable[Finding], now: datetime,
                  context: dict[str, dict[str, Any]] | None = None,
                  among: Q | None = None, touched: set[str] | None = None) -> dict[str, int]:
    """Make the firing incidents of `kinds` match `findings`. `context` maps a subject
    to extra fields for new incidents (trial, experiment, node_ip). `among` narrows the
    firing incidents this evaluation speaks for (default: all of `kinds`); the others
    are left as they are. `touched` collects the subjects whose incidents opened,
    changed or resolved."""
    kinds = set(kinds)
    context = context or {}
    # Looked up once a call, not once a finding: 200 stalls of one search cost 200
    # queries an evaluation, and the alert tests' 200-incident search 20,100.
    default_cluster = functools.cache(settings_cluster_pk)
    found = {(_cluster_of(f, context.get(f.subject, {}), default_cluster), f.kind, f.subject): f
             for f in findings}
    opened = updated = resolved = 0
    with transaction.atomic():
        query = Incident.objects.select_for_update(of=("self",)).filter(
            state=Incident.FIRING, kind__in=kinds)
        firing = {(i.cluster_id, i.kind, i.subject): i
                  for i in (query if among is None else query.filter(among))}
        changed = [(firing[key], f) for key, f in found.items()
                   if key in firing and (firing[key].summary, firing[key].details,
                                         firing[key].severity)
                   != (f.summary, f.details, f.severity)]
        last_events = _last_update_events([i for i, _ in changed])
        for key, finding in found.items():
            if key not in firing:
                opened += _open(finding, now, key[0], context.get(finding.subject, {}))
        escalated = 0
        for incident, finding in changed:
            escalated += _update(incident, finding, now, last_events.get(incident.pk),
                                 context.get(finding.subject, {}))
            updated += 1
        for key, incident in firing.items():
            if key not in found:
                resolve(incident, now)
                resolved += 1
        if touched is not None:
            touched.update(key[2] for key in found.keys() - firing.keys())
            touched.update(incident.subject for incident, _ in changed)
            touched.update(key[2] for key in firing.keys() - found.keys())
        if opened or resolved or updated:
            send_after_commit(notify=bool(opened or resolved or escalated))
    return {"opened": opened, "updated": updated, "resolved": resolved}


def group_key_of(experiment: str, node_ip: str, subject: str, cluster: str = "") -> str:
    """What an incident goes out with: its experiment, else its node, else itself; of a
    cluster other than the one RAY_ADDRESS points at, prefixed "CLUSTER/" (two clusters
    may run experiments of one name, or reuse an address)."""
    if experiment:
        key = f"experiment:{experiment}"
    elif node_ip:
        key = f"node:{node_ip}"
    else:
        key = f"subject:{subject}"
    prefix = f"{cluster}/" if cluster and cluster != settings.CLUSTER_NAME else ""
    return f"{prefix}{key}"[:300]


def _cluster_of(finding: Finding, extra: dict[str, Any], default: Callable[[], int]) -> int:
    if finding.cluster_id is not None:
        return finding.cluster_id
    trial = extra.get("trial")
    return trial.experiment.cluster_id if trial is not None else default()


def _cluster_name(pk: int) -> str:
    return Cluster.objects.filter(pk=pk).values_list("name", flat=True).first() or ""


def _open(finding: Finding, now: datetime, cluster_id: int, extra: dict[str, Any]) -> int:
    group_key = group_key_of(extra.get("experiment", ""), extra.get("node_ip", ""),
                             finding.subject, _cluster_name(cluster_id))
    extra = {k: v for k, v in extra.items() if k != "cluster_id"}
    try:
        with transaction.atomic():
            incident = Incident.objects.create(
                cluster_id=cluster_id,
                kind=finding.kind, subject=finding.subject, severity=finding.severity,
                summary=finding.summary, details=finding.details, opened_at=now,
                updated_at=now, group_key=group_key, **extra,
            )
            record(incident, IncidentEvent.OPENED, now, finding.summary)
    except IntegrityError:
        return 0  # another worker opened it a moment ago: one incident, not two
    return 1


def _update(incident: Incident, finding: Finding, now: datetime,
            last_event_at: datetime | None, extra: dict[str, Any]) -> bool:
    """True when the incident escalated (which notifies). An incident opened before its
    trial was known (an RL run's overdue call, before the run was tied to its trainer)
    takes its trial now."""
    before = incident.severity
    incident.summary, incident.details = finding.summary, finding.details
    incident.severity, incident.updated_at = finding.severity, now
    fields = ["summary", "details", "severity", "updated_at"]
    if incident.trial_id is None and extra.get("trial") is not None:
        incident.trial, incident.experiment = extra["trial"], extra.get("experiment", "")
        fields += ["trial", "experiment"]
    incident.save(update_fields=fields)
    if severity_rank(finding.severity) > severity_rank(before):
        record(incident, IncidentEvent.ESCALATED, now,
               f"{before} → {finding.severity}: {finding.summary}")
        return True
    if (finding.severity != before or last_event_at is None
            or now - last_event_at >= UPDATE_EVENT_EVERY):
        record(incident, IncidentEvent.UPDATED, now, finding.summary)
    return False


def resolve(incident: Incident, now: datetime) -> None:
    incident.state, incident.resolved_at, incident.updated_at = Incident.RESOLVED, now, now
    incident.save(update_fields=["state", "resolved_at", "updated_at"])
    record(incident, IncidentEvent.RESOLVED, now, "the detector no longer finds it")


def record(incident: Incident, kind: str, now: datetime, text: str = "",
           actor: Any = None) -> IncidentEvent:
    notify = kind in IncidentEvent.NOTIFYING
    return IncidentEvent.objects.create(
        incident=incident, kind=kind, at=now, text=text, actor=actor, notify=notify,
        routed_at=None if notify else now,
    )


def _last_update_events(incidents: list[Incident]) -> dict[int, datetime]:
    if not incidents:
        return {}
    rows = (IncidentEvent.objects.filter(incident__in=incidents,
                                         kind__in=(IncidentEvent.OPENED, IncidentEvent.UPDATED,
                                                   IncidentEvent.ESCALATED))
            .values("incident_id").annotate(last=Max("at")))
    return {row["incident_id"]: row["last"] for row in rows}
